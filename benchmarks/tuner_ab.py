"""The tuner's cost to a trial it watches, inside the trial: the tuner process (its monitor
thread and the loop that reads the trial's events) alternately running and stopped (SIGSTOP on
the tuner alone; the trial goes on), and the trainer's steps per second in each phase, counted
by ``_counted.py``. Each round runs both phases (which first alternates); a round's figure is
running over stopped. Prints the rounds, their geometric mean and its 95% bootstrap interval
(``production.geometric_mean_ci``), and the tuner's CPU per second of its running phases, by
thread (``/proc/<tuner>/task/*/stat``); writes nothing.

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


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of each of ``pid``'s threads, by name and thread id."""
    found = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            data = Path(f"/proc/{pid}/task/{tid}/stat").read_bytes()
        except OSError:
            continue
        name = data[data.index(b"(") + 1 : data.rindex(b")")].decode(errors="replace")
        fields = data[data.rindex(b")") + 2 :].split()
        found[f"{name} {tid}"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return found


def rounds_of(
    case: int, kind: str, phase_s: float, wanted: list[float], rounds: int, threads: dict[str, float]
) -> float:
    """One trial process: its rounds appended to ``wanted`` until it returns or ``rounds`` are
    in; the tuner's CPU seconds in its running phases added to ``threads`` (by thread), and
    those phases' seconds returned."""
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
            seconds = 0.0
            for r in range(10_000):
                rates = {}
                for phase in ("running", "stopped") if r % 2 == 0 else ("stopped", "running"):
                    os.kill(proc.pid, signal.SIGSTOP if phase == "stopped" else signal.SIGCONT)
                    time.sleep(SETTLE_S)
                    steps0, ns0 = interleaved.steady_read(counter)
                    cpu0, t0 = thread_cpu(proc.pid), time.monotonic()
                    time.sleep(phase_s)
                    steps1, ns1 = interleaved.steady_read(counter)
                    cpu1, t1 = thread_cpu(proc.pid), time.monotonic()
                    rates[phase] = (steps1 - steps0) / ((ns1 - ns0) / 1e9) if steps1 - steps0 > 1 else 0.0
                    if phase == "running" and rates[phase]:
                        seconds += t1 - t0
                        for name, used in cpu1.items():
                            threads[name] = threads.get(name, 0.0) + used - cpu0.get(name, used)
                os.kill(proc.pid, signal.SIGCONT)
                if not all(rates.values()) or len(wanted) >= rounds:
                    return seconds  # the function returned (or is about to)
                wanted.append(rates["running"] / rates["stopped"])
                print(
                    f"round {len(wanted)}: running {rates['running']:.1f}, stopped {rates['stopped']:.1f} "
                    f"steps/s: {wanted[-1]:.3f}",
                    flush=True,
                )
            return seconds
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
    threads: dict[str, float] = {}
    seconds = 0.0
    for _ in range(8):
        if len(ratios) >= args.rounds:
            break
        seconds += rounds_of(args.case, args.kind, args.phase, ratios, args.rounds, threads)
    mean, low, high = geometric_mean_ci(ratios)
    print(
        f"{len(ratios)} rounds: running over stopped, geometric mean {mean:.1%} (95% CI {low:.1%}..{high:.1%}), "
        f"median {statistics.median(ratios):.1%}, SD {statistics.stdev(ratios):.3f}; running faster in "
        f"{sum(x > 1 for x in ratios)}"
    )
    busiest = sorted(threads.items(), key=lambda kv: -kv[1])[:4]
    print(
        f"the tuner's CPU over {seconds:.0f} s running: {sum(threads.values()) / seconds * 1e3:.1f} ms/s; "
        + ", ".join(f"{name} {used / seconds * 1e3:.1f}" for name, used in busiest)
    )


if __name__ == "__main__":
    main()
