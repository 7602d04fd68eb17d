"""The load other processes put on the machine while a benchmark measures, and when it makes the
figures provisional.

The 1-minute load average counts everything runnable, the benchmark's own processes included: a
plain loop with 64 DataLoader workers, or a study's trials, load a 2-CPU host past 2 by
themselves (benchmarks/results/sweep.md, the 12:05 run: "loaded" at 1-minute averages the
benchmark made). What disturbs a figure is the CPU time of processes *outside* the benchmark's
own process tree: the busy time of the usable CPUs (every process's, steal included) less the
CPU time of the benchmark process and its descendants, as a study's monitor reads a trial's
(``autotune.machine._monitor.foreign_cpu``, ``autotune.machine._proctree.read_tree``). Over
the study's own limit for a trial (``autotune.machine._noise.FOREIGN_LOAD_MAX``), a figure is
provisional. Both numbers go on the page.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Reading:
    """Cumulative CPU seconds at one moment: ``busy`` of the usable CPUs (every process's) and
    ``own`` of this process's tree (live processes and what they reaped)."""

    wall: float
    busy: float
    own: float


def reading() -> Reading:
    """Now, for this process's tree."""
    from autotune.machine._monitor import cpus_busy
    from autotune.machine._proctree import read_tree

    return Reading(time.monotonic(), cpus_busy(tuple(sorted(os.sched_getaffinity(0)))), read_tree(os.getpid()).cpu)


def foreign_since(start: Reading, end: Reading | None = None) -> float:
    """Share of the usable CPUs that processes outside this process's tree used from ``start``
    to ``end`` (default: now)."""
    from autotune.machine._monitor import CpuReading, foreign_cpu

    end = end or reading()
    return foreign_cpu(
        CpuReading(start.busy, start.own, 0.0),
        CpuReading(end.busy, end.own, 0.0),
        end.wall - start.wall,
        len(os.sched_getaffinity(0)),
    )


def load_average() -> float:
    """The host's 1-minute load average (the benchmark's own processes included)."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def provisional(foreign: Mapping[str, Iterable[float]], limit: float | None = None) -> str | None:
    """Why a run's figures are provisional, or None: the highest foreign share of any of its
    measures (``foreign``: a part's name to the shares its measures and the part itself saw)
    over ``limit`` (default: the study's own for a trial).

    >>> provisional({"sweep": [0.02, 0.31], "turns": [0.05]}, 0.2)
    'other processes used up to 31% of the CPUs during the sweep (over 20%)'
    >>> provisional({"sweep": [0.02, 0.18]}, 0.2) is None
    True
    """
    if limit is None:
        from autotune.machine._noise import FOREIGN_LOAD_MAX

        limit = FOREIGN_LOAD_MAX
    worst = [(max(shares), part) for part, shares in foreign.items() if list(shares)]
    if not worst:
        return None
    share, part = max(worst)
    if share <= limit:
        return None
    return f"other processes used up to {share:.0%} of the CPUs during the {part} (over {limit:.0%})"


def timed(run: Any) -> tuple[Any, float, float]:
    """``run()``'s result, the 1-minute load average before it, and the foreign share during it."""
    before, start = load_average(), reading()
    result = run()
    return result, before, foreign_since(start)
