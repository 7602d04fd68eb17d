"""The warm worker (autotune.worker._warm): trials forked from a process with torch imported
behave as trials spawned cold: outcome, exit status, environment, leftovers, seeds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import tagged

from autotune import Config, Outcome
from autotune.machine._launch import TRIAL_TAG_ENV, Budget, TrialSpec, new_tag
from autotune.tuner._watch import run_trial
from autotune.worker._warm import WarmWorker
from helpers import FIXTURES

FAST = Budget(warmup_s=0.2, window_s=0.3, windows=2, ceiling_windows=0)


@pytest.fixture
def warm(monkeypatch):
    # what a Recipe elsewhere in this process may have set (autotune.load applies cuda_alloc_conf)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    worker = WarmWorker(os.environ, new_tag())
    yield worker
    worker.close()


class Watch:
    def __init__(self) -> None:
        self.events: list[dict] = []

    def __call__(self, event: dict) -> None:
        self.events.append(event)

    @property
    def pid(self) -> int:
        return next(e["pid"] for e in self.events if e["event"] == "spawned")


def trial(
    tmp_path: Path,
    func: str,
    warm: WarmWorker | None,
    config: Config = Config(),
    name: str = "",  # noqa: B008
    fixture: str = "pool_train.py",
):
    watch = Watch()
    spec = TrialSpec(target=f"{FIXTURES / fixture}:{func}", config=config, budget=FAST)
    result = run_trial(spec, tmp_path / f"{name or func}.log", on_event=watch, warm=warm)
    return result, watch


def seen(result) -> dict:
    line = next(line for line in result.log_path.read_text().splitlines() if line.startswith("seen "))
    return json.loads(line[5:])


def test_a_forked_trial_sees_what_a_cold_one_sees(tmp_path: Path, warm: WarmWorker, monkeypatch) -> None:
    monkeypatch.setenv("POOL_TEST_MARKER", "set after the warm worker started")
    monkeypatch.chdir(tmp_path)
    results = [trial(tmp_path, "train_reports", warm, name=f"warm{i}") for i in range(2)]
    cold, _ = trial(tmp_path, "train_reports", None, name="cold")
    for result, watch in results:
        assert result.outcome is Outcome.COMPLETE, result.reason
        report = seen(result)
        assert report["ppid"] == warm.pid  # forked from it, not spawned
        assert report["pid"] == report["sid"] == watch.pid  # a session (and group) of its own
        assert report["tag"] == warm.tag  # the tag its /proc environment shows too
        assert report["cwd"] == str(tmp_path) and not report["stdin_tty"]
        assert report["marker"] == "set after the warm worker started"  # the tuner's environment now
        assert int(report["fd"]) >= 3
        # the same windows and figures as a cold trial's
        assert len(result.windows) == len(cold.windows) == FAST.windows
        assert result.resolved == cold.resolved
        assert {"spawn_s", "import_s", "setup_s", "overhead_s"} <= result.metrics.keys()
    assert seen(cold)["marker"] == "set after the warm worker started"
    # each trial draws its own random numbers, as a new interpreter would
    assert len({seen(r)["random"] for r, _ in results} | {seen(cold)["random"]}) == 3


def test_a_forked_trial_that_raises_is_crashed_with_its_traceback(tmp_path: Path, warm: WarmWorker) -> None:
    result, _ = trial(tmp_path, "train_raises", warm, fixture="tiny_train.py")
    assert result.outcome is Outcome.CRASHED
    assert result.reason.startswith("ValueError: boom from the user's loop")
    assert "Traceback" in result.log_path.read_text()


def test_a_forked_trial_that_segfaults_is_killed_by_sigsegv(tmp_path: Path, warm: WarmWorker) -> None:
    result, watch = trial(tmp_path, "train_segfaults", warm)
    assert result.outcome is Outcome.CRASHED
    assert result.reason.startswith("killed by SIGSEGV"), result.reason
    assert "train_segfaults" in result.reason  # faulthandler's stack points at the user's line
    # the warm worker lives on and forks the next trial
    again, watch2 = trial(tmp_path, "train", warm, fixture="tiny_train.py")
    assert again.outcome is Outcome.COMPLETE and watch2.pid != watch.pid


@pytest.mark.parametrize("func", ["train_forks_away", "train_escapes"])
def test_what_a_forked_trial_leaves_dies_with_it_and_the_warm_worker_does_not(
    tmp_path: Path, warm: WarmWorker, func: str
) -> None:
    fixture = "escaping_train.py" if func == "train_escapes" else "pool_train.py"
    result, watch = trial(tmp_path, func, warm, fixture=fixture)
    assert result.outcome is Outcome.COMPLETE, result.reason
    escaped = next(
        int(line.split()[1]) for line in result.log_path.read_text().splitlines() if line.startswith("escaped ")
    )
    assert not psutil.pid_exists(escaped) or psutil.Process(escaped).status() == psutil.STATUS_ZOMBIE
    assert [p.pid for p in tagged(warm.tag, TRIAL_TAG_ENV)] == [warm.pid]  # only the warm worker is left
    assert trial(tmp_path, "train", warm, fixture="tiny_train.py", name="next")[0].outcome is Outcome.COMPLETE


def test_dataloader_workers_of_a_forked_trial_leave_no_orphans(tmp_path: Path, warm: WarmWorker) -> None:
    result, watch = trial(tmp_path, "train_workers", warm, fixture="tiny_train.py")
    assert result.outcome is Outcome.COMPLETE, result.reason
    assert result.resolved["num_workers"] == 2
    assert [p.pid for p in tagged(warm.tag, TRIAL_TAG_ENV)] == [warm.pid]


def test_a_trial_with_an_environment_knob_read_at_startup_is_spawned_cold(tmp_path: Path, warm: WarmWorker) -> None:
    # PYTORCH_CUDA_ALLOC_CONF must be in place before torch starts: the warm worker's torch has
    config = Config(cuda_alloc_conf="expandable_segments:True")
    result, _ = trial(tmp_path, "train_reports", warm, config)
    assert result.outcome is Outcome.COMPLETE, result.reason
    assert seen(result)["ppid"] == os.getpid()  # spawned by this process, not forked
    assert seen(trial(tmp_path, "train_reports", warm, name="plain")[0])["ppid"] == warm.pid


def test_a_dead_warm_worker_means_cold_trials(tmp_path: Path, warm: WarmWorker) -> None:
    assert trial(tmp_path, "train", warm, fixture="tiny_train.py", name="first")[0].outcome is Outcome.COMPLETE
    os.kill(warm.pid, signal.SIGKILL)
    warm._proc.wait()
    result, watch = trial(tmp_path, "train_reports", warm)
    assert result.outcome is Outcome.COMPLETE, result.reason
    assert seen(result)["ppid"] == os.getpid()  # spawned by this process (cold)


def test_the_warm_worker_ends_with_its_tuner(tmp_path: Path) -> None:
    # a tuner (this script) that starts a warm worker, waits until it is ready, then is killed
    script = (
        "import os, sys, time\nfrom autotune.worker._warm import WarmWorker\nfrom autotune.machine._launch import new_tag\n"
        "w = WarmWorker(os.environ, new_tag())\nassert w._wait_ready()\nprint(w.pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    tuner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(tuner.stdout.readline())
        assert psutil.pid_exists(pid)
    finally:
        tuner.kill()
        tuner.wait()
    # end of file on its socket: it exits (and its parent, gone, left it to PID 1 to reap)
    deadline = time.monotonic() + 10
    while (
        time.monotonic() < deadline and psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    ):
        time.sleep(0.05)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
