"""The watchdogs on real processes: the machine's memory floor, and a trial's whole process group killed."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import psutil

from autotune import Config, Outcome
from autotune.machine._launch import Budget, TrialSpec
from autotune.machine._reap import kill_orphans
from autotune.tuner._watch import run_trial
from helpers import FIXTURES

FIXTURE = FIXTURES / "faulty_train.py"
TARGET = f"{FIXTURE}:train"


def test_the_floor_of_available_memory_stops_a_hog(tmp_path: Path, warm) -> None:
    # A floor 600 MiB under what is available now: the hog (64 MiB a step) crosses it
    # long before the generous budget; the machine itself keeps its default 10% floor.
    floor = psutil.virtual_memory().available - 600 * 2**20
    spec = TrialSpec(TARGET, Config(num_workers=4), budget=Budget(warmup_s=0.2, window_s=0.3, windows=3))
    result = run_trial(spec, tmp_path / "hog.log", ram_budget=64 * 2**30, floor=floor, warm=warm)
    assert result.outcome is Outcome.OOM_HOST
    assert "the machine's available memory fell to" in result.reason
    assert floor - result.metrics["available_min"] < 2**30  # caught soon after crossing it


def test_the_default_floor_is_a_tenth_of_the_machine() -> None:
    from autotune.machine._monitor import AVAILABLE_FLOOR, Monitor

    assert AVAILABLE_FLOOR == 0.10
    assert Monitor(os.getpid()).floor == int(psutil.virtual_memory().total * 0.10)


def test_kill_orphans_kills_the_whole_group() -> None:
    leader = subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300 & wait"], start_new_session=True)
    time.sleep(0.5)
    started = psutil.Process(leader.pid).create_time()
    assert kill_orphans(leader.pid, started) == 3  # the shell and its two sleeps
    leader.wait(timeout=5)
    assert kill_orphans(leader.pid, started) == 0
