"""Real studies on a stream (tests/fixtures/stream_train.py): one that every DataLoader worker
yields whole never shows as a win, one sharded by get_worker_info() is tuned to a speedup."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from helpers import FIXTURES, SHORT_TRIALS, autotune, mlflow_runs

FIXTURE = FIXTURES / "stream_train.py"


def study(tmp_path: Path, func: str):
    space = tmp_path / "workers.yaml"
    # every draw has several workers, kept across epochs: started anew, an epoch of 1,024 rows
    # costs about as much in start-up as it saves (a loaded CI host measured 1.01x so)
    space.write_text("knobs:\n  num_workers: [2, 4]\n  persistent_workers: [true]\n")
    done = autotune(
        "run", f"{FIXTURE}:{func}", "--trials", "2", "--store", "st", "--space", str(space), *SHORT_TRIALS, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    shown = autotune("show", "--store", "st", "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    return done, json.loads(shown.stdout)


def test_a_stream_every_worker_yields_whole_is_never_shown_as_a_win(tmp_path: Path) -> None:
    done, shown = study(tmp_path, "train_duplicated")
    base, drawn = shown["trials"]
    workers = drawn["config"]["num_workers"]
    assert drawn["outcome"] == "distorted" and drawn["speedup"] is None and not drawn["winner"], drawn
    assert drawn["reason"].startswith("distorted: ") and "get_worker_info()" in drawn["reason"]
    assert f"its {workers} DataLoader workers deliver the same rows more than once" in drawn["reason"]
    assert drawn["samples_per_s"] > 1.5 * base["samples_per_s"]  # the figure it would have faked
    assert shown["winner"] == 0 and shown["config"].get("num_workers", 0) < 2
    said = " ".join(done.stderr.split())
    assert "distorted" in said and "not ranked, another training: trial 1: distorted: " in " ".join(done.stdout.split())
    export = yaml.safe_load((tmp_path / "st" / "exports" / "stream_train.train_duplicated.yaml").read_text())
    assert export["dataloader"].get("num_workers", 0) < 2
    _, runs = mlflow_runs(tmp_path / "st", "stream_train.train_duplicated")
    child = next(r for r in runs if r.data.tags.get("autotune.outcome") == "distorted")
    assert child.info.status == "FAILED"


def test_a_stream_sharded_by_get_worker_info_is_tuned_to_a_speedup(tmp_path: Path) -> None:
    _, shown = study(tmp_path, "train_split")
    base, drawn = shown["trials"]
    assert drawn["outcome"] == "complete" and drawn["winner"], drawn
    assert drawn["speedup"] > 1.5  # (2 or 4 workers reading a 1 ms-per-row stream)
    assert base["outcome"] == "complete"
