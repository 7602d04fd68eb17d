"""The two ceilings of a config, and what they say about a trial: efficiency and bottleneck.

A trial measures them in its own process after its windows (``autotune.training._handles``):

- **compute**: the same training loop fed a few of its own batches, cached on the
  device and replayed: no loading, no copy. Nothing with these compute knobs
  (batch size, precision, optimizer, backends) runs faster.
- **loader**: the same DataLoader and transfer iterated alone, no model.

No config beats ``min(compute, loader)``; one that reaches it overlaps loading
and compute perfectly. A ceiling depends only on the knobs that act on its part
(``Knob.acts_on``), so a study measures each once per distinct value of those.

Perfect overlap needs each part to have its own hardware. Where both run on the
same CPUs (training on the CPU; a GPU host whose loader decodes on every core)
they add up instead: each ceiling also records the CPU seconds a sample costs
its part, and the two give a third bound, the **CPU roof** (``cpu_roof``).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from autotune.core._knobs import KNOBS, Part

#: A compute-bound trial at this share of its compute ceiling or more runs at
#: "high efficiency": loading costs it under 10%, so a study stops sampling
#: loader knobs once its best trial is there.
HIGH_EFFICIENCY = 0.9
#: Share of a loop's time spent waiting for the next batch from which the loop
#: is data-bound (a trace of waiting is normal: each epoch's first batch).
DATA_WAIT_HIGH = 0.1
#: How far past a bound a trial may run and the bound still count as right: the
#: two are measured seconds apart, each with its own noise. A trial further past
#: it than this (and than half their spreads) shows the bound was wrong (measured
#: while others loaded the machine, or too briefly): it is not used.
CEILING_NOISE = 0.1
#: Bound names as people read them.
BOUND_NAMES = {
    "compute": "data-on-device ceiling",
    "loader": "loader ceiling",
    "cpu": "CPU roof",
    "main": "main-thread roof",
}
#: Batches a trial keeps on its device to replay for the compute ceiling: enough
#: that a loop which looks at its batch sees more than one, few enough to be free.
CACHED_BATCHES = 4


def ceiling_key(part: Part, resolved: Mapping[str, Any]) -> str:
    """The knob values a ceiling of ``part`` depends on, as a canonical string.

    >>> ceiling_key(Part.COMPUTE, {"batch_size": 64, "num_workers": 2, "amp": "bf16"})
    '{"amp": "bf16", "batch_size": 64}'
    """
    picked = {k: v for k, v in resolved.items() if k in KNOBS and part in KNOBS[k].acts_on}
    return json.dumps(picked, sort_keys=True)


def loader_only(name: str) -> bool:
    """Whether a knob acts on the loader alone (batch size also acts on compute)."""
    return KNOBS[name].acts_on == {Part.LOADER}


def cpu_roof(compute_cpu: float | None, loader_cpu: float | None, cpus: int | None) -> float | None:
    """Samples/s the CPUs allow when loading and compute share them.

    Each part alone costs its CPU seconds per sample (its process tree's CPU time
    over its ceiling's windows, DataLoader workers included); together they cannot
    make more than ``cpus`` CPU seconds a second. None when either is unmeasured.

    >>> cpu_roof(0.001, 0.0005, 2)  # 1.5 ms of CPU a sample on 2 CPUs
    1333.3333333333333
    """
    if compute_cpu is None or loader_cpu is None or not cpus or compute_cpu + loader_cpu <= 0:
        return None
    return cpus / (compute_cpu + loader_cpu)


class Ceilings:
    """A study's measured ceilings by part and key; repeated measurements give their median."""

    def __init__(self, measured: Iterable[Mapping[str, Any]] = ()) -> None:
        self._seen: dict[tuple[str, str], list[float]] = {}
        self._cpu: dict[tuple[str, str], list[float]] = {}
        self.cpus: int | None = None
        for entry in measured:
            self.add(entry)

    def add(self, entry: Mapping[str, Any]) -> None:
        """Add one measurement: ``{"part", "key", "samples_per_s", "cpu_per_sample"?, "cpus"?}``.

        One with a ``doubt`` (measured under load, or beaten by its own trial) is left
        out; a ``distrust`` entry (a later trial ran past the study's figure for that
        key) drops the measurements so far, so that the next trial measures it again.
        """
        where = (entry["part"], entry["key"])
        if entry.get("distrust"):
            self._seen.pop(where, None)
            self._cpu.pop(where, None)
            return
        if entry.get("doubt"):
            return
        self._seen.setdefault(where, []).append(entry["samples_per_s"])
        if entry.get("cpu_per_sample") is not None:
            self._cpu.setdefault(where, []).append(entry["cpu_per_sample"])
            self.cpus = entry.get("cpus") or self.cpus

    def get(self, part: Part, resolved: Mapping[str, Any]) -> float | None:
        """The ceiling of ``part`` for a config's resolved knobs, if measured."""
        values = self._seen.get((part.value, ceiling_key(part, resolved)))
        return statistics.median(values) if values else None

    def cpu(self, part: Part, resolved: Mapping[str, Any]) -> float | None:
        """CPU seconds per sample of ``part`` alone for a config's resolved knobs, if measured."""
        values = self._cpu.get((part.value, ceiling_key(part, resolved)))
        return statistics.median(values) if values else None

    def table(self) -> list[dict[str, Any]]:
        """One row per part and key: its median samples/s and how many measurements."""
        return [
            {"part": part, "key": key, "samples_per_s": statistics.median(values), "measurements": len(values)}
            for (part, key), values in self._seen.items()
        ]

    def known(self) -> dict[str, list[str]]:
        """The keys measured so far per part (a worker skips those)."""
        known: dict[str, list[str]] = {}
        for part, key in self._seen:
            known.setdefault(part, []).append(key)
        return known


class Verdict(enum.Enum):
    """What limits a trial (``Bottleneck.verdict`` holds the value)."""

    COMPUTE = "compute-bound"
    DATA = "data-bound"


@dataclasses.dataclass(frozen=True)
class Bottleneck:
    """What limits a trial.

    Attributes:
        verdict: ``compute-bound`` or ``data-bound``.
        efficiency: samples/s over the compute ceiling (None when unmeasured).
        compute: The compute ceiling (samples/s), if measured.
        loader: The loader ceiling (samples/s), if measured.
        why: One line for people, e.g. "94% of the data-on-device ceiling
            (6,170 samples/s): compute-bound, waits on data 1% of the time".
        cpu: The CPU roof (samples/s, see ``cpu_roof``), if both parts' CPU costs
            were measured.
        of_roof: samples/s over the lowest bound (None without a ceiling).
        unreliable: The bounds not used (``compute``, ``loader``, ``cpu``, ``main``):
            those known wrong before (``doubted``), and those in :attr:`ran_past`.
        main: The main-thread roof (samples/s), measured on a GPU.
        ran_past: The bounds the trial ran past beyond the noise: measured (a value
            was compared), and shown wrong by this trial.
    """

    verdict: str
    efficiency: float | None
    compute: float | None
    loader: float | None
    why: str
    cpu: float | None = None
    of_roof: float | None = None
    unreliable: tuple[str, ...] = ()
    main: float | None = None
    ran_past: tuple[str, ...] = ()

    @property
    def limit(self) -> str | None:
        """Which bound is lowest: ``compute``, ``loader`` or ``cpu`` (None when none is measured)."""
        lowest = lowest_bound(self.compute, self.loader, self.cpu, self.main)
        return lowest[0] if lowest else None

    @property
    def settled(self) -> bool:
        """Compute-bound at high efficiency: loader knobs cannot buy much more."""
        return self.verdict == Verdict.COMPUTE.value and (self.efficiency or 0.0) >= HIGH_EFFICIENCY


def lowest_bound(
    compute: float | None, loader: float | None, cpu: float | None, main: float | None = None
) -> tuple[str, float] | None:
    """The lowest of the measured bounds (samples/s), by name; a tie goes to a ceiling.

    >>> lowest_bound(1000.0, 400.0, 850.0)
    ('loader', 400.0)
    """
    bounds = [(name, v) for name, v in (("compute", compute), ("loader", loader), ("cpu", cpu), ("main", main)) if v]
    return min(bounds, key=lambda bound: bound[1]) if bounds else None


def bottleneck(
    samples_per_s: float,
    data_wait: float,
    compute: float | None,
    loader: float | None,
    cpu: float | None = None,
    noise: float = CEILING_NOISE,
    doubted: Mapping[str, str] | None = None,
    main: float | None = None,
) -> Bottleneck:
    """Name what limits a trial: its data-wait share decides, its ceilings explain.

    The data wait is measured step by step in the trial's own windows, so noise
    between the trial and its ceilings (measured seconds apart) cannot flip the
    verdict. A trial waiting on data ``DATA_WAIT_HIGH`` of the time or more is
    data-bound: because the loader alone is slower than the model (loader ceiling
    under the compute ceiling), or, when it is not, because loading and compute
    do not overlap. Otherwise it is compute-bound. The efficiency (samples/s over
    the compute ceiling) says how much loading still costs either way. When the CPU
    roof (``cpu``) is under both ceilings, the line ends with it: loading and
    compute share the CPUs, and no overlap can beat their sum. When the main-thread
    roof (``main``: samples over the CPU time of the thread running the loop, in the
    trial's own windows; on a GPU, where that thread only launches) is the lowest,
    the line says so: collating, unpickling, pinning and each step's Python on that
    one thread are the limit, which no worker count lifts.

    No config beats its bounds, so a trial past one by more than ``noise`` shows
    that bound was measured wrong: it is named unreliable and not used. Past it by
    less, the trial is at the bound (100%), within the noise. ``doubted`` names
    bounds already known to be wrong (unmeasured here) and why.

    >>> bottleneck(940.0, 0.01, 1000.0, 5000.0).why
    '94% of the data-on-device ceiling (1,000 samples/s): compute-bound, waits on data 1% of the time'
    >>> bottleneck(400.0, 0.6, 1000.0, 420.0).why
    '40% of the data-on-device ceiling (1,000 samples/s): data-bound, waits on data 60% of the time: the loader alone makes 420 samples/s'
    >>> bottleneck(700.0, 0.02, 1000.0, 5000.0, main=720.0).why
    "70% of the data-on-device ceiling (1,000 samples/s): compute-bound, waits on data 2% of the time; the loop's main thread is busy 97% of the time, which allows 720 samples/s: it is the limit (each step's Python, collating, unpickling and pinning on that one thread)"
    >>> bottleneck(615.0, 0.0, 255.0, 5000.0).why
    'no compute ceiling measured: compute-bound, waits on data 0% of the time; unreliable, not used: the data-on-device ceiling (255 samples/s, the trial ran at 241% of it)'
    """
    bounds = {"compute": compute, "loader": loader, "cpu": cpu, "main": main}
    notes = {name: f"the {BOUND_NAMES[name]} ({why})" for name, why in (doubted or {}).items()}
    past = {
        name: f"the {BOUND_NAMES[name]} ({v:,.0f} samples/s, the trial ran at {samples_per_s / v:.0%} of it)"
        for name, v in bounds.items()
        if v and samples_per_s > v * (1 + noise)
    }
    notes.update(past)
    unreliable = tuple(notes)
    wrong = "; unreliable, not used: " + ", ".join(notes.values()) if notes else ""
    compute, loader, cpu, main = (None if name in unreliable else v for name, v in bounds.items())
    efficiency = min(1.0, samples_per_s / compute) if compute else None
    # Without a ceiling there is no loop to bound: the CPU roof alone says nothing.
    lowest = lowest_bound(compute, loader, cpu, main) if compute or loader else None
    of_roof = min(1.0, samples_per_s / lowest[1]) if lowest else None
    head = (
        f"{efficiency:.0%} of the data-on-device ceiling ({compute:,.0f} samples/s)"
        if efficiency is not None
        else "no compute ceiling measured"
    )
    waits = f"waits on data {data_wait:.0%} of the time"
    shared = ""
    if lowest and lowest[0] == "cpu" and cpu:  # (lowest_bound names only a measured bound)
        shared = (
            f"; loading and compute share the CPUs, which allow {cpu:,.0f} samples/s for both: "
            f"{min(1.0, samples_per_s / cpu):.0%} of that"
        )
    elif lowest and lowest[0] == "main" and main:
        shared = (
            f"; the loop's main thread is busy {min(1.0, samples_per_s / main):.0%} of the time, which allows "
            f"{main:,.0f} samples/s: it is the limit (each step's Python, collating, unpickling and pinning "
            "on that one thread)"
        )
    if data_wait < DATA_WAIT_HIGH:
        return Bottleneck(
            Verdict.COMPUTE.value,
            efficiency,
            compute,
            loader,
            f"{head}: compute-bound, {waits}{shared}{wrong}",
            cpu,
            of_roof,
            unreliable,
            main,
            tuple(past),
        )
    why = f"{head}: data-bound, {waits}"
    if loader is not None and compute is not None and loader < compute:
        why += f": the loader alone makes {loader:,.0f} samples/s"
    elif loader is not None:
        why += f", though the loader alone makes {loader:,.0f} samples/s: loading and compute do not overlap"
    return Bottleneck(
        Verdict.DATA.value,
        efficiency,
        compute,
        loader,
        why + shared + wrong,
        cpu,
        of_roof,
        unreliable,
        main,
        tuple(past),
    )
