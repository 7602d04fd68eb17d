"""The tuner stopped and started again: killed (SIGKILL) and resumed, or interrupted (Ctrl-C, SIGTERM) with the running trial recorded."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

import forked_cli
from helpers import (
    FAULTY,
    SHORT_TRIALS,
    autotune,
    cli,
    cli_env,
    enqueue_workers,
    faults_space,
    load_study,
    mlflow_runs,
)


def wait_for_running_worker(
    store: Path, name: str, timeout: float = 90, url: str | None = None, measured: bool = False
):
    """The RUNNING trial once its worker has printed that it hangs (fault 3), or, with
    `measured`, once it has reported its first window. A fixed sleep races a loaded machine:
    a tuner killed before its worker's first batch takes the worker with it (its next event
    meets a broken pipe), and there is no orphan left to find."""
    import optuna

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = load_study(store, name, url).get_trials(states=(optuna.trial.TrialState.RUNNING,))
        if running and measured and running[0].intermediate_values:
            return running[0]
        log = store / "trials" / name / f"trial-{running[0].number}.log" if running else None
        if log is not None and not measured and log.exists() and "fault 3: the main loop blocks now" in log.read_text():
            return running[0]
        time.sleep(0.3)
    raise AssertionError("no trial " + ("measured a window" if measured else "reached its hang"))


def start_tuner(cwd: Path, *args: str):
    return forked_cli.popen(
        cli("run", FAULTY, *args), cwd=cwd, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.parametrize("rdb", [False, True], ids=["journal", "sqlite-rdb"])
def test_sigkill_of_the_tuner_then_resume(tmp_path: Path, rdb: bool) -> None:
    store = tmp_path / "mlflow"
    url = f"sqlite:///{tmp_path}/optuna.db" if rdb else None  # many-host setups use an RDB
    args = [
        "--study",
        "s",
        "--space",
        str(faults_space(tmp_path, [1, 3])),
        *SHORT_TRIALS,
        "--prune",
        "0",
        *(["--storage", url] if url else []),
    ]
    assert autotune("run", FAULTY, "--trials", "1", *args, cwd=tmp_path).returncode == 0
    baseline = load_study(store, "s", url).get_trials()[0]
    enqueue_workers(store, "s", 3, url=url)  # hangs at step 3, and the stall timeout is long: still running
    tuner = start_tuner(tmp_path, "--trials", "1", "--stall-timeout", "300", *args)
    stale = wait_for_running_worker(store, "s", url=url)
    tuner.kill()  # SIGKILL: no handler runs, nothing is closed
    tuner.communicate()
    worker = psutil.Process(stale.user_attrs["worker"]["pid"])
    assert worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE  # orphaned, alive

    enqueue_workers(store, "s", 1, url=url)
    out = autotune("run", FAULTY, "--trials", "1", *args, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"trial {stale.number}: left RUNNING" in out.stderr

    assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE
    trials = load_study(store, "s", url).get_trials()
    assert [t.number for t in trials] == [0, 1, 2]  # numbers continue, none counted twice
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL", "COMPLETE"]
    assert trials[1].user_attrs["outcome"] == "interrupted"
    assert "is gone" in trials[1].user_attrs["reason"]
    # This tuner kills them (the worker and its 3 loader workers), unless a tuner that a test
    # running beside this one started meanwhile swept them first: every tuner sweeps the host's
    # orphans at start (sweep_orphans; the suite runs on two processes). kill_orphans' own count
    # is checked in test_kill_orphans_kills_the_whole_group.
    killed = re.search(r"which killed (\d+) orphaned worker process\(es\)", trials[1].user_attrs["reason"])
    assert killed is None or killed.group(1) == "4", trials[1].user_attrs["reason"]
    assert trials[0].value == baseline.value and trials[0].user_attrs == baseline.user_attrs
    assert trials[2].params == {"num_workers": 1} and trials[2].user_attrs["outcome"] == "complete"

    client, runs = mlflow_runs(store, "s")
    by_trial = {int(r.data.tags["autotune.trial"]): r for r in runs if "autotune.trial" in r.data.tags}
    assert sorted(by_trial) == [0, 1, 2]
    assert [by_trial[n].info.status for n in (0, 1, 2)] == ["FINISHED", "KILLED", "FINISHED"]
    assert by_trial[1].data.tags["autotune.outcome"] == "interrupted"
    assert by_trial[0].data.metrics["samples_per_s"] == pytest.approx(baseline.value)
    parents = [r for r in runs if "autotune.trial" not in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_records_the_trial_prints_the_summary_and_exits_130(tmp_path: Path, sig, status) -> None:
    store = tmp_path / "mlflow"
    # Pruning off: on a loaded machine the enqueued trial could be pruned before the signal.
    args = [
        "--study",
        "c",
        "--space",
        str(faults_space(tmp_path, [1, 3])),
        *SHORT_TRIALS[:4],
        "--prune",
        "0",
        "--confirm",
        "0",
        "--ceiling-windows",
        "0",
    ]
    assert autotune("run", FAULTY, "--trials", "1", *args, "--windows", "3", cwd=tmp_path).returncode == 0
    enqueue_workers(store, "c", 1)
    tuner = start_tuner(tmp_path, "--trials", "3", "--windows", "1000", *args)  # a long trial
    wait_for_running_worker(store, "c", measured=True)  # so that it has something to keep
    pressed = time.monotonic()
    tuner.send_signal(sig)
    stdout, stderr = tuner.communicate(timeout=60)
    assert tuner.returncode == status, stderr  # 128 + the signal, as shells report it
    assert time.monotonic() - pressed < 30
    assert "best: trial 0" in stdout  # the summary, over what was done
    assert f"stopped by {sig.name}" in stderr

    trials = load_study(store, "c").get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL"]  # no further trial started
    assert trials[1].user_attrs["outcome"] == "interrupted"
    assert trials[1].user_attrs["metrics"]["samples_per_s"] > 0  # what it measured is kept
    client, runs = mlflow_runs(store, "c")
    by_trial = {int(r.data.tags["autotune.trial"]): r for r in runs if "autotune.trial" in r.data.tags}
    assert by_trial[1].info.status == "KILLED"
    assert by_trial[1].data.tags["autotune.outcome"] == "interrupted"
    parent = next(r for r in runs if "autotune.trial" not in r.data.tags)
    assert parent.info.status == "KILLED"
    assert (store / "exports" / "c.yaml").is_file()  # the best so far is exported
