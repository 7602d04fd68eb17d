"""A real study beside CPU hogs: its noisy figure is measured again once the machine is quiet, and only believed figures rank."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from autotune.core._kinds import Kind
from autotune.machine._noise import FOREIGN_LOAD_MAX
from autotune.tuner._standing import read_standing
from helpers import ROOT, cli, cli_env, load_study

#: Burns a CPU for at most 120 s (the test kills it sooner).
HOG = """
import time
began = time.time()
while time.time() - began < 120:
    pass
"""


TRAIN = "tests/fixtures/cli_train.py:train"
#: The others' share of the tuner's CPU past which a figure is noisy, here: the hog shares that CPU
#: with every runnable process of the trial (its loop and its DataLoader workers), and in a suite
#: run on a slower host it read as 18% of it, under the default (FOREIGN_LOAD_MAX, 20%).
MAX_LOAD = FOREIGN_LOAD_MAX / 2


def stop_hogs(hogs: list[subprocess.Popen]) -> None:
    for hog in hogs:
        if hog.poll() is None:
            hog.kill()
            hog.wait()


def test_a_study_measures_again_the_trial_hogs_slowed_and_ranks_only_believed_figures(tmp_path) -> None:
    """A CPU hog on the tuner's one CPU while the baseline measures: it is noisy, measured again
    once the hog ends, and the winner's figures come from believed runs only. (The tuner is
    pinned to one CPU, as a --jobs slot is, so that one hog loads all of its CPUs.)

    On a machine that stays busy after the hogs (the suite run beside a hog of its own, or
    beside another test of its own run), it never quiets: the baseline's figure then stays noisy,
    said, and the study still ends with its summary."""
    cpu = str(max(os.sched_getaffinity(0)))
    hogs = [subprocess.Popen(["taskset", "-c", cpu, sys.executable, "-c", HOG])]
    # The hogs burn until the tuner has judged the baseline: a time limit would also count the
    # worker's start, which a loaded machine (CI, the suite's other process beside it) stretches
    # past any limit (it once outlasted 8 s, and the baseline measured on a quiet machine).
    tuner = subprocess.Popen(
        [
            "taskset",
            "-c",
            cpu,
            *cli(
                "run",
                TRAIN,
                "--trials",
                "2",
                "--store",
                str(tmp_path / "st"),
                "--warmup",
                "0.2",
                "--window",
                "0.3",
                "--windows",
                "3",
                "--confirm",
                "0",
                "--space",
                "loader",
                "--seed",
                "0",
                "--max-load",
                str(MAX_LOAD),
                "--quiet-wait",
                "12",
                "--remeasure",
                "1",
            ),
        ],
        cwd=ROOT,
        env=cli_env({"PYTHONUNBUFFERED": "1"}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out: list[str] = []
    drain = threading.Thread(target=lambda: out.append(tuner.stdout.read()), daemon=True)
    drain.start()
    err: list[str] = []
    watchdog = threading.Timer(240, tuner.kill)  # a hung tuner fails the test, never hangs it
    watchdog.start()
    try:
        for line in tuner.stderr:  # the baseline's result line comes before the tuner waits for quiet
            err.append(line)
            if "not ranked" in line or "[2/2]" in line:
                stop_hogs(hogs)
        tuner.wait(timeout=240)
        drain.join(timeout=30)
    finally:
        watchdog.cancel()
        stop_hogs(hogs)
        if tuner.poll() is None:
            tuner.kill()
    done = subprocess.CompletedProcess(tuner.args, tuner.returncode, "".join(out), "".join(err))
    assert done.returncode == 0, done.stderr
    standing = read_standing(load_study(tmp_path / "st", "cli_train"))
    first = standing.rows[0]
    assert first.baseline and first.metrics["foreign_cpu"] > MAX_LOAD  # the hog took its share of the CPU
    assert first.doubt.startswith("noisy: other processes used")
    trials = load_study(tmp_path / "st", "cli_train").trials
    assert trials[first.number].state.name == "FAIL"  # the sampler is not told a noisy figure
    assert "trial 0: noisy: other processes used" in done.stderr
    assert all(r.metrics.get("foreign_cpu") is not None for r in standing.rows if r.measured)
    again = [r for r in standing.rows if r.kind is Kind.REMEASURE and r.of == 0 and r.remeasure >= 1]
    if not again:  # the machine stayed busy for the whole --quiet-wait: said, and never ranked
        assert "trial 0: noisy: other processes used" in done.stderr and "the machine is still busy" in done.stderr
        assert not standing.base.rates
        assert "no speedup: unreliable baseline" in done.stdout or "unreliable" in done.stdout
        return
    assert "measuring it again" in done.stderr, standing.rows
    believed = [r for r in again if r.reliable]
    if not believed:  # others loaded the machine again while it measured: said, and never ranked
        assert "its figure is not ranked" in done.stderr and not standing.base.rates
        return
    assert standing.base.rates and standing.best.reliable
    assert standing.base.lead.number == believed[0].number  # the believed run speaks for the baseline
    assert trials[believed[0].number].state.name == "COMPLETE"
    assert trials[believed[0].number].value == believed[0].metrics["samples_per_s"]
