"""How quickly the watchdogs act: RAM overshoot past the budget and the floor, and the
time a hang takes to be killed. Writes the "Watchdogs" section of ``benchmarks/results/watchdogs.md``.

Each figure is the median over ``--repeats`` real trials of the fault-injection
function in tests/fixtures (a RAM hog that touches 256 MiB per step; a main loop
that blocks forever after step 3), with min..max.

    python benchmarks/watchdogs.py
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import psutil

from _results import ROOT, machine, spread, write_section
from autotune import Config
from autotune.machine._launch import Budget, TrialSpec
from autotune.machine._monitor import INTERVAL, PSS_EVERY
from autotune.tuner._watch import run_trial

TARGET = f"{ROOT / 'tests' / 'fixtures' / 'faulty_train.py'}:train"
HOG, HANG = Config(num_workers=4), Config(num_workers=3)
BUDGET = Budget(warmup_s=0.2, window_s=0.3, windows=3, ceiling_windows=0, stall_s=3.0)
GIB = 2**30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    budget_over, floor_under, stall_late, outcomes = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        for i in range(args.repeats):
            # RAM budget of 1.5 GiB: how far past it the tree's PSS got before the kill
            result = run_trial(TrialSpec(TARGET, HOG, budget=BUDGET), logs / f"b{i}.log", ram_budget=int(1.5 * GIB))
            budget_over.append((result.metrics["ram_peak"] - 1.5 * GIB) / 2**20)
            outcomes.append(result.outcome.value)
            # a floor 1.5 GiB under what is available now: how far under it the machine went
            floor = psutil.virtual_memory().available - int(1.5 * GIB)
            result = run_trial(
                TrialSpec(TARGET, HOG, budget=BUDGET), logs / f"f{i}.log", ram_budget=64 * GIB, floor=floor
            )
            floor_under.append((floor - result.metrics["available_min"]) / 2**20)
            outcomes.append(result.outcome.value)
            # a hang: seconds from its last sign of life to the end of run_trial, past stall_s
            last = {}

            def watch(event, last=last):
                if event["event"] in ("resolved", "progress", "warmup", "window"):
                    last["at"] = time.monotonic()

            result = run_trial(TrialSpec(TARGET, HANG, budget=BUDGET), logs / f"h{i}.log", on_event=watch)
            stall_late.append(time.monotonic() - last["at"] - BUDGET.stall_s)
            outcomes.append(result.outcome.value)
            print(budget_over[-1], floor_under[-1], stall_late[-1], outcomes[-3:], file=sys.stderr)
    body = "\n".join(
        [
            f"Machine: {machine()}. {args.repeats} repeats of each; median (min..max). The monitor "
            f"samples RSS and available memory every {INTERVAL} s and PSS every {PSS_EVERY} s "
            "(or at once when RSS crosses the budget or the floor is crossed); the hog adds "
            "256 MiB per step.",
            "",
            "Regenerate with `python benchmarks/watchdogs.py`.",
            "",
            "| figure | value |",
            "|---|---|",
            f"| PSS past a 1.5 GiB RAM budget when killed | {spread(budget_over, ',.0f')} MiB |",
            f"| available memory under the floor when killed | {spread(floor_under, ',.0f')} MiB |",
            f"| hang killed this long after stall_s (3 s) of silence | {spread(stall_late, '.2f')} s |",
            f"| outcomes | {', '.join(sorted(set(outcomes)))} |",
        ]
    )
    write_section("watchdogs", "Watchdogs", body)
    print(body)


if __name__ == "__main__":
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    main()
