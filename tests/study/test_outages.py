"""The stores restart mid-study: a tracking server down for 20 s mid-trial, PostgreSQL restarted; nothing is lost."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from helpers import FIXTURES
from servers import PrivateCluster, _without_test_tag
from tuners import Tuner, study_exists, study_of, wait_until

#: A space whose every config trains the same way: these tests are about records, not verdicts.
LOADER_ONLY = FIXTURES / "loader_only.yaml"
#: Trials long enough to take an outage in the middle of one (about 3 s of measuring: the outage
#: starts after a trial's first window, and its end, the next trials and the finish meet it).
SLOW = [
    "--warmup",
    "0.4",
    "--window",
    "0.8",
    "--windows",
    "3",
    "--ceiling-windows",
    "0",
    "--prune",
    "0",
    "--seed",
    "0",
    "--confirm",
    "0",
    "--space",
    str(LOADER_ONLY),
]


def test_a_tracking_server_down_for_20_s_mid_trial_loses_nothing(
    postgres: str, own_mlflow_server, tmp_path: Path
) -> None:
    name = f"outage-{uuid.uuid4().hex[:6]}"
    # (short windows: measured at the baseline's samples, its loader-knob trials run at a tenth of its
    # speed, and their measure would take 10x the time of the outage's point)
    tuner = Tuner(
        tmp_path,
        "--study",
        name,
        "--storage",
        postgres,
        "--tracking-uri",
        own_mlflow_server.url,
        "--trials",
        "3",
        *SLOW,
        "--window",
        "0.3",
    )
    # down while trial 1 measures: its end, and trial 2's start, meet a dead server
    wait_until(
        lambda: (
            study_exists(postgres, name)
            and any(t.number == 1 and t.intermediate_values for t in study_of(postgres, name).get_trials())
        ),
        what="trial 1 to measure a window",
    )
    own_mlflow_server.stop()
    time.sleep(20)
    own_mlflow_server.start()
    out = tuner.wait()
    assert tuner.proc.returncode == 0, out
    assert "Traceback" not in out
    assert "does not answer" in out and "answers again after" in out
    from mlflow import MlflowClient

    study = study_of(postgres, name)
    client = MlflowClient(own_mlflow_server.url)
    for t in study.get_trials():
        assert t.user_attrs["outcome"] == "complete"
        run = client.get_run(t.user_attrs["mlflow_run_id"])
        assert run.info.status == "FINISHED"
        assert run.data.metrics["samples_per_s"] == pytest.approx(t.value)
    assert not list((tmp_path / "mlflow" / "pending").rglob("*.json"))  # all delivered


def test_postgres_restarted_mid_study_loses_nothing(tmp_path: Path) -> None:
    cluster = PrivateCluster(_without_test_tag(os.environ))
    problem = cluster.problem()
    if problem is not None:
        pytest.skip(f"no private PostgreSQL cluster to restart here: {problem}")
    server = cluster.start()
    try:
        url = server.create_database()
        name = "restart"
        # one short window a trial: measured at the baseline's samples, its loader-knob trials run at
        # a tenth of its speed, and a longer one would outlast the 8 s restart without a write
        tuner = Tuner(
            tmp_path, "--study", name, "--storage", url, "--trials", "3", *SLOW, "--windows", "1", "--window", "0.2"
        )
        wait_until(
            lambda: (
                study_exists(url, name)
                and any(t.number == 1 and t.intermediate_values for t in study_of(url, name).get_trials())
            ),
            what="trial 1 to measure a window",
        )
        cluster.restart(down_s=8)
        out = tuner.wait()
        assert tuner.proc.returncode == 0, out
        assert "Traceback" not in out
        assert "the study storage" in out and "does not answer" in out and "answers again after" in out
        trials = study_of(url, name).get_trials()
        assert [t.user_attrs["outcome"] for t in trials] == ["complete"] * 3
    finally:
        cluster.stop()
