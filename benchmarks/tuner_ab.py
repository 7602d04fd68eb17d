"""The tuner's cost to a trial it watches, inside the trial: the tuner process (its monitor
thread and the loop that reads the trial's events) alternately running and stopped (SIGSTOP on
the tuner alone; the trial goes on), and the trainer's steps per second in each phase, counted
by ``_counted.py``. Each round runs both phases (which first alternates); a round's figure is
running over stopped. Prints the rounds, their geometric mean and its 95% bootstrap interval
(``production.geometric_mean_ci``); writes nothing.

Unlike ``interleaved.py`` the trial is never stopped, so a loader that waits on a timer (the
jpeg runner's storage latency) is measured as it runs. A runner that returns (jpeg's 100
epochs last about 77 s on a 2-core host) is started again until ``--rounds`` are in.

    python benchmarks/tuner_ab.py --case 5 --rounds 24 --phase 4
    python benchmarks/tuner_ab.py --case 5 --kind monitor-slowed   # the monitor at 0.2 Hz
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path

import interleaved
from _counted import read_counter
from production import geometric_mean_ci

#: After the tuner is stopped or let run, this long before a phase's first step is read.
SETTLE_S = 0.2


def rounds_of(case: int, kind: str, phase_s: float, wanted: list[float], rounds: int) -> None:
    """One trial process: its rounds appended to ``wanted`` until it returns or ``rounds`` are in."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        counter = folder / "trial.count"
        proc = interleaved.start(kind, case, counter, folder, folder / "unused.yaml")
        try:
            deadline = time.monotonic() + 300
            while read_counter(counter)[0] < interleaved.WARM_STEPS:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the trial did not make {interleaved.WARM_STEPS} steps; logs in {folder}")
                time.sleep(0.1)
            for r in range(10_000):
                rates = {}
                for phase in ("running", "stopped") if r % 2 == 0 else ("stopped", "running"):
                    os.kill(proc.pid, signal.SIGSTOP if phase == "stopped" else signal.SIGCONT)
                    time.sleep(SETTLE_S)
                    steps0, ns0 = interleaved.steady_read(counter)
                    time.sleep(phase_s)
                    steps1, ns1 = interleaved.steady_read(counter)
                    rates[phase] = (steps1 - steps0) / ((ns1 - ns0) / 1e9) if steps1 - steps0 > 1 else 0.0
                os.kill(proc.pid, signal.SIGCONT)
                if not all(rates.values()) or len(wanted) >= rounds:
                    return  # the function returned (or is about to)
                wanted.append(rates["running"] / rates["stopped"])
                print(f"round {len(wanted)}: running {rates['running']:.1f}, stopped {rates['stopped']:.1f} "
                      f"steps/s: {wanted[-1]:.3f}", flush=True)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
            interleaved.kill_descendants(set())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", type=int, default=5, help="index into production.CASES")
    parser.add_argument("--kind", default="trial", choices=["trial", "monitor-slowed"])
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--phase", type=float, default=4.0, help="seconds in each phase")
    args = parser.parse_args()
    interleaved.become_subreaper()
    ratios: list[float] = []
    for _ in range(8):
        if len(ratios) >= args.rounds:
            break
        rounds_of(args.case, args.kind, args.phase, ratios, args.rounds)
    mean, low, high = geometric_mean_ci(ratios)
    print(f"{len(ratios)} rounds: running over stopped, geometric mean {mean:.1%} (95% CI {low:.1%}..{high:.1%}), "
          f"median {statistics.median(ratios):.1%}, SD {statistics.stdev(ratios):.3f}; running faster in "
          f"{sum(x > 1 for x in ratios)}")


if __name__ == "__main__":
    main()
