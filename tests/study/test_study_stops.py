"""What stops a study before its trials: a study storage that cannot be reached, a baseline that never gets a batch."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import FAULTY, FIXTURES, SHORT_TRIALS, autotune, load_study


@pytest.mark.parametrize("url", ["sqlite:////nonexistent-dir/optuna.db", "postgresql://autotune@127.0.0.1:9/optuna"])
def test_unreachable_study_storage_fails_before_any_trial(tmp_path: Path, url: str) -> None:
    out = autotune("run", FAULTY, "--storage", url, "--trials", "1", *SHORT_TRIALS, cwd=tmp_path)
    assert out.returncode == 2
    assert f"--storage {url!r}: cannot be opened" in out.stderr
    assert not (tmp_path / "mlflow" / "trials").exists()  # no trial ran


def test_a_baseline_that_never_gets_a_batch_stops_the_study(tmp_path: Path) -> None:
    hangs = f"{FIXTURES / 'tiny_train.py'}:train_hangs_in_setup"
    out = autotune("run", hangs, "--trials", "3", "--startup-timeout", "3", *SHORT_TRIALS, cwd=tmp_path)
    assert out.returncode == 1
    assert "ended as timeout" in out.stderr and "startup: no batch after 3 s" in out.stderr
    assert len(load_study(tmp_path / "mlflow", "tiny_train.train_hangs_in_setup").get_trials()) == 1
