"""The monitor from outside a real trial: foreign load beside a CPU hog, and a watchdog that
cannot die quietly."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from autotune.core._config import Config
from autotune.core._outcome import Outcome
from autotune.machine._launch import Budget, TrialSpec
from autotune.machine._monitor import Monitor
from autotune.tuner._watch import run_trial
from helpers import FIXTURES

TINY = str(FIXTURES / "tiny_train.py")
BUDGET = Budget(warmup_steps=2, warmup_s=0.2, window_s=0.3, windows=3, ceiling_windows=1)


def test_foreign_load_of_a_hog_on_each_core_is_in_every_window_ceiling_and_the_metrics(tmp_path, warm) -> None:
    # A hog per core, pinned: whatever else runs, others then take a large share of the trial's CPUs
    # (each hog gets about its fair share of a core beside the trial's threads).
    hogs = [
        subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", "while True: pass"])
        for cpu in sorted(os.sched_getaffinity(0))[:2]
    ]
    try:
        result = run_trial(TrialSpec(f"{TINY}:train", Config(), "cpu", BUDGET), tmp_path / "t.log", warm=warm)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert result.outcome == Outcome.COMPLETE, result.reason
    assert all(w["foreign_cpu"] > 0.25 for w in result.windows)
    assert all(c.get("foreign_cpu", 0) > 0.25 for c in result.ceilings)
    assert result.metrics["foreign_cpu"] > 0.25
    assert len(result.series["window_foreign_cpu"]) == len(result.windows)


def test_a_monitor_that_fails_says_why_and_ends_the_trial_through_on_error() -> None:
    errors: list[str] = []

    def broken(reason: str) -> None:  # a bug in what the monitor calls: the guard is gone
        raise RuntimeError("boom")

    with Monitor(os.getpid(), ram_budget=1, on_limit=broken, on_error=errors.append) as monitor:
        deadline = time.monotonic() + 10
        while not errors and time.monotonic() < deadline:
            time.sleep(0.05)
    assert errors == ["the trial's monitor (RAM guard) failed: RuntimeError: boom"]
    assert monitor.problems == errors


def test_gpu_readings_that_fail_stop_and_are_said_while_the_ram_guard_goes_on() -> None:
    import pynvml

    fired: list[str] = []
    # No GPU here: every NVML call raises an NVMLError, as a driver that went away does.
    with Monitor(os.getpid(), ram_budget=1, on_limit=fired.append, gpu=object()) as monitor:
        deadline = time.monotonic() + 10
        while not fired and time.monotonic() < deadline:
            time.sleep(0.05)
    assert fired and "over the RAM budget" in fired[0]
    assert monitor.problems and monitor.problems[0].startswith("GPU readings stopped: NVML:")
    assert issubclass(pynvml.NVMLError_Uninitialized, pynvml.NVMLError)


def said(proc: subprocess.Popen, line: str) -> float:
    """When ``proc`` printed ``line``, its next one."""
    assert proc.stdout.readline() == line + "\n"
    return time.time()


def test_pss_is_read_again_when_memory_climbs_not_when_it_swings(monkeypatch) -> None:
    """PSS readings walk the tree's page tables (20 ms for a 0.9 GB trial): past the first,
    only a climb above the highest RSS seen reads it again before its share allows, and RSS
    that swings with each step's allocations does not."""
    from autotune.machine import _monitor

    monkeypatch.setattr(_monitor, "PSS_EVERY", 0.3)
    monkeypatch.setattr(_monitor, "PSS_SHARE", 1e-9)  # no reading for the record alone
    code = (
        "import time\n"
        "print('ready', flush=True)\n"
        "t0 = time.monotonic()\n"
        "while time.monotonic() - t0 < 3.0:\n"  # swings by 100 MiB every 0.2 s
        "    x = b'1' * (100 << 20); time.sleep(0.1); del x; time.sleep(0.1)\n"
        "print('climbs', flush=True)\n"
        "y = b'1' * (400 << 20)\n"  # then climbs to 400 MiB (over a second or more on a busy host) and holds
        "print('up', flush=True)\n"
        "time.sleep(30)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        said(proc, "ready")
        with Monitor(proc.pid) as monitor:
            swinging = time.time()
            climbs, climbed = said(proc, "climbs"), said(proc, "up")
            time.sleep(1.0)
    finally:
        proc.kill()
        proc.wait()
    readings = [(s.wall, s.ram) for s in monitor.samples if s.ram is not None]
    assert len(monitor.samples) > 25  # the RSS readings went on at 10 Hz
    # once the swing's top was seen (its first second), the swings read no PSS: about 7
    # readings would fall in these 1.5 s if each swing up counted as a climb
    assert len([w for w, _ in readings if swinging + 1.5 <= w < climbs]) <= 1, readings
    assert readings[-1][0] >= climbed - 0.2 and readings[-1][1] > 380 * 2**20, readings


def test_between_walks_the_known_processes_are_read_and_a_gone_or_new_one_is_found(monkeypatch) -> None:
    """A reading walks the tree (each thread's children file) at most every ``WALK_EVERY``;
    between walks it reads the processes it knows. One that is gone makes the next reading
    a walk, and a child born meanwhile counts from the next walk."""
    from autotune.machine import _monitor

    monkeypatch.setattr(_monitor, "WALK_EVERY", 60.0)  # while the first child lives: no walk but for it
    monkeypatch.setattr(_monitor, "PSS_SHARE", 1e-9)  # PSS at PSS_EVERY only, out of the way
    hold = "'x = b\"1\" * (300 << 20); print(1, flush=True); import time; time.sleep(1.5)'"
    code = (
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', {hold}], stdout=subprocess.PIPE)\n"
        "child.stdout.readline()\n"
        "print('ready', flush=True)\n"
        "child.wait()\n"
        "print('gone', flush=True)\n"
        "sys.stdin.readline()\n"
        f"child = subprocess.Popen([sys.executable, '-c', {hold}], stdout=subprocess.PIPE)\n"
        "child.stdout.readline()\n"
        "print('born', flush=True)\n"
        "time.sleep(30)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        ready = said(proc, "ready")
        with Monitor(proc.pid) as monitor:
            gone = said(proc, "gone")
            time.sleep(0.5)
            walks_then = [s for s in monitor.samples if s.cpu is not None]
            monkeypatch.setattr(_monitor, "WALK_EVERY", 0.6)
            proc.stdin.write("go\n")
            proc.stdin.flush()
            born = said(proc, "born")
            time.sleep(1.0)
    finally:
        proc.kill()
        proc.wait()
    # the first reading walked and found the child; its exit made the next reading a walk,
    # which no longer holds it, and there was no other
    assert len(walks_then) == 2, [s.wall - gone for s in walks_then]
    assert walks_then[0].rss > 250 * 2**20 and walks_then[1].rss < 250 * 2**20
    assert walks_then[1].wall - gone < 0.25  # (the line is read after the exit: later under load)
    # between walks, the readings read the child they knew, alive: it holds its memory 1.5 s
    # after it said so, before "ready" (a reader slowed by load reads "gone" later than the exit)
    before = [s for s in monitor.samples if s.wall < min(gone - 0.15, ready + 1.3)]
    assert len(before) > 5 and all(s.rss > 250 * 2**20 for s in before)  # read between walks
    # the second child is in the readings no later than a walk after its birth
    counted = next(s.wall for s in monitor.samples if s.wall > gone + 0.3 and s.rss > 250 * 2**20)
    assert counted - born < 0.6 + 0.3, (counted, born)
    assert monitor.foreign_cpu(born) is not None
