"""Noise: when a figure is doubted, waiting for a quiet machine, and a real study that
measures again a trial that ran beside a CPU hog."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import autotune, cli, cli_env, load_study, mlflow_runs

from autotune._kinds import Kind
from autotune._noise import (
    FOREIGN_LOAD_MAX,
    SPREAD_MAX,
    doubt,
    is_noisy,
    wait_for_quiet,
)
from autotune._standing import standing

ROOT = Path(__file__).resolve().parent.parent
#: Burns a CPU for at most 120 s (the test kills it sooner).
HOG = """
import time
began = time.time()
while time.time() - began < 120:
    pass
"""
TRAIN = "tests/fixtures/cli_train.py:train"


SHORT_REASON = ("short measure: the training function returned after 2 of 4 windows, so no ceiling was "
                "measured; give it more steps")


@pytest.mark.parametrize("metrics, reason, kind", [
    ({"foreign_cpu": 0.01, "samples_per_s_spread": 0.2}, "", None),  # a quiet machine
    ({"foreign_cpu": FOREIGN_LOAD_MAX}, "", None),                  # at the limit: believed
    ({"foreign_cpu": 0.48}, "", "noisy: other processes used 48% of its CPUs"),
    ({"foreign_cpu": 0.0, "foreign_gpu": 0.6}, "", "noisy: other processes used 60% of its GPU"),
    # window rates 545, 122, 166, 2,293 (one real trial): median 355.5, spread (2293 - 122) / 355.5 = 6.1
    ({"samples_per_s_spread": 6.1}, "", "noisy: its windows disagree, from lowest to highest 610%"),
    ({"samples_per_s_spread": SPREAD_MAX}, "", None),
    ({"foreign_cpu": 0.0}, SHORT_REASON, "short measure: the training function returned after 2 of 4 windows"),
])
def test_doubt(metrics, reason, kind) -> None:
    why = doubt(metrics, reason)
    assert (why is None) if kind is None else why.startswith(kind)
    assert is_noisy(why) is bool(kind and kind.startswith("noisy"))


def test_a_lower_max_load_doubts_more() -> None:
    assert doubt({"foreign_cpu": 0.1}, "", max_load=0.05).startswith("noisy")
    assert doubt({"foreign_cpu": 0.9}, "", max_load=1.0) is None


def test_max_spread_moves_the_spread_limit() -> None:
    assert doubt({"samples_per_s_spread": 0.5}, "", max_spread=0.4).startswith("noisy: its windows disagree")
    assert doubt({"samples_per_s_spread": 6.1}, "", max_spread=1000) is None


def test_wait_for_quiet_returns_once_the_load_drops_and_gives_up_after_its_patience() -> None:
    loads = iter([0.6, 0.5, 0.1])
    quiet, seen, _ = wait_for_quiet((0,), 0.2, 60.0, threading.Event(), load=lambda cpus: next(loads))
    assert (quiet, seen) == (True, 0.1)
    quiet, seen, waited = wait_for_quiet((0,), 0.2, 0.0, threading.Event(), load=lambda cpus: 0.5)
    assert (quiet, seen) == (False, 0.5) and waited < 1.0


def stop_hogs(hogs: list[subprocess.Popen]) -> None:
    for hog in hogs:
        if hog.poll() is None:
            hog.kill()
            hog.wait()


def test_a_study_measures_again_the_trial_hogs_slowed_and_ranks_only_believed_figures(tmp_path) -> None:
    """A CPU hog on each core while the baseline measures: it is noisy, measured again once the
    hogs end, and the winner's figures come from believed runs only.

    On a machine that stays busy after the hogs (the suite run beside a hog of its own, or
    beside another test of its own run), it never quiets: the baseline's figure then stays noisy,
    said, and the study still ends with its summary."""
    hogs = [subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", HOG]) for cpu in (0, 1)]
    # The hogs burn until the tuner has judged the baseline: a time limit would also count the
    # worker's start, which a loaded machine (CI, the suite's other process beside it) stretches
    # past any limit (it once outlasted 8 s, and the baseline measured on a quiet machine).
    tuner = subprocess.Popen(cli("run", TRAIN, "--trials", "2", "--store", str(tmp_path / "st"), "--warmup", "0.2",
                                 "--window", "0.3", "--windows", "3", "--confirm", "0", "--space", "loader",
                                 "--seed", "0", "--max-load", str(FOREIGN_LOAD_MAX), "--quiet-wait", "25"),
                             cwd=ROOT, env=cli_env({"PYTHONUNBUFFERED": "1"}), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
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
    found = standing(load_study(tmp_path / "st", "cli_train"))
    first = found.rows[0]
    assert first.baseline and first.metrics["foreign_cpu"] > 0.3  # each hog takes its share of a core
    assert first.doubt.startswith("noisy: other processes used")
    trials = load_study(tmp_path / "st", "cli_train").trials
    assert trials[first.number].state.name == "FAIL"  # the sampler is not told a noisy figure
    assert "trial 0: noisy: other processes used" in done.stderr
    assert all(r.metrics.get("foreign_cpu") is not None for r in found.rows if r.measured)
    again = [r for r in found.rows if r.kind is Kind.REMEASURE and r.of == 0 and r.remeasure >= 1]
    if not again:  # the machine stayed busy for the whole --quiet-wait: said, and never ranked
        assert "trial 0: noisy: other processes used" in done.stderr and "the machine is still busy" in done.stderr
        assert not found.base.rates
        assert "no speedup: unreliable baseline" in done.stdout or "unreliable" in done.stdout
        return
    assert "measuring it again" in done.stderr, found.rows
    believed = [r for r in again if r.reliable]
    if not believed:  # others loaded the machine again while it measured: said, and never ranked
        assert "its figure is not ranked" in done.stderr and not found.base.rates
        return
    assert found.base.rates and found.best.reliable
    assert found.base.lead.number == believed[0].number  # the believed run speaks for the baseline
    assert trials[believed[0].number].state.name == "COMPLETE"
    assert trials[believed[0].number].value == believed[0].metrics["samples_per_s"]


#: Burns a CPU until the file argv[1] appears (the next trial's log: the baseline has ended).
HOG_UNTIL = """
import os, sys, time
began = time.time()
while time.time() - began < 120 and not os.path.exists(sys.argv[1]):
    pass
"""


def test_a_study_whose_baseline_is_never_believed_still_ends_with_its_summary(tmp_path) -> None:
    """Two hogs on each core for the whole baseline, and no measuring again (``--remeasure 0``):
    no baseline figure is believed, while the next trial may be. The study still ends with its
    summary, and its parent run carries the winner's figures and no speedup (it once crashed
    at its end reading the median of the baseline's believed runs: none)."""
    store = tmp_path / "st"
    # two hogs a CPU leave the baseline about a third of each (others' load near 70%, over the
    # 60% allowed here), while one busy neighbour after them (a test beside this one) takes half
    hogs = [subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", HOG_UNTIL,
                              str(store / "trials" / "cli_train" / "trial-1.log")])
            for cpu in sorted(os.sched_getaffinity(0)) for _ in range(2)]
    try:
        done = autotune("run", TRAIN, "--trials", "2", "--store", str(store), "--warmup", "0.2",
                        "--window", "0.3", "--windows", "3", "--confirm", "0", "--space", "loader", "--seed", "0",
                        "--remeasure", "0", "--max-load", "0.6", "--max-spread", "1000", cwd=ROOT)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    found = standing(load_study(store, "cli_train"))
    assert found.rows[0].baseline and found.rows[0].doubt.startswith("noisy: other processes used")
    assert not found.base.rates
    _, runs = mlflow_runs(store, "cli_train")
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert parent.info.status == "FINISHED"
    assert "baseline_samples_per_s" not in parent.data.metrics and "best_speedup" not in parent.data.metrics
    if found.best is None:  # the machine stayed busy (other tests beside this one): no figure believed
        assert "unreliable: no figure to rank" in done.stdout, done.stdout
        pytest.skip("the machine stayed busy after the hogs: no trial was believed, so no winner "
                    "stood without a baseline (the study still ended with its summary)")
    assert parent.data.metrics["best_samples_per_s"] == found.decision.winner.median
    assert (store / "exports" / "cli_train.yaml").exists()
    assert f"trial {found.best.number}, " in done.stdout
    assert "no speedup: unreliable baseline, every run of it was noisy" in done.stdout, done.stdout
