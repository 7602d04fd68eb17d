"""How many DataLoader workers can help, from what the loaders measured (``num_workers: {high: auto}``).

A loader ceiling (``autotune._ceilings``) times the loader alone and the CPU
seconds it cost. Workers that use few of the CPUs they could are waiting (on
storage, the network, a sleep): more of them help past the core count, and by
Little's law as many as the rate wanted times a batch's latency, that is the
model's rate (its compute ceiling) over one worker's. Workers that keep the CPUs
busy are CPU-bound: more than the cores cannot help, and the range stays.

The range only widens, and it comes from the study's records, so every tuner on a
study agrees on it. It is bounded by the RAM budget (at the PSS one worker was
seen to add) and by the process and open-file limits, and by the batches of an
epoch: a worker makes whole batches, so past one per batch the rest sit idle
(``Run.dataloader`` clamps them). At each trial's batch size the search draws no
more workers than that (``useful_workers``), so it does not spend trials on
configs that run as another.
"""

from __future__ import annotations

import dataclasses
import math
import resource
from collections.abc import Iterable, Mapping
from typing import Any

from autotune._ceilings import Ceilings
from autotune._knobs import Part, batch_of

#: Share of the CPUs its workers could use (at most one each) under which a loader
#: counts as waiting: more workers than cores then help.
WAITING_BELOW = 0.5
#: Open files a DataLoader worker may hold (its pipes, and shared-memory batches in flight).
FILES_PER_WORKER = 16
#: Processes the tuner, its worker and the user's own helpers may need beside the loader's.
SPARE_PROCESSES = 64


@dataclasses.dataclass(frozen=True)
class Evidence:
    """What one measured loader says about workers."""

    trial: int
    workers: int
    loader: float  # samples/s of the loader alone
    cpus_used: float  # CPUs the loader alone kept busy
    wanted: float  # samples/s the model takes (its compute ceiling)

    @property
    def waiting(self) -> float:
        """Share of its time an average worker (or the main process, with none) waits."""
        return max(0.0, 1.0 - self.cpus_used / max(1, self.workers))

    @property
    def needed(self) -> int:
        """Workers that feed ``wanted`` (Little's law: each worker makes what it makes now)."""
        return math.ceil(self.wanted / (self.loader / max(1, self.workers)))


def evidence(rows: Iterable[Any], ceilings: Ceilings, cpus: int) -> list[Evidence]:
    """Each measured config whose loader alone waits and is slower than its model."""
    found: dict[str, Evidence] = {}
    for row in rows:
        config = row.config
        loader, cpu = ceilings.get(Part.LOADER, config), ceilings.cpu(Part.LOADER, config)
        wanted = ceilings.get(Part.COMPUTE, config)
        workers = config.get("num_workers")
        if not (loader and cpu and wanted) or not isinstance(workers, int) or loader >= wanted:
            continue
        used = loader * cpu
        if used >= WAITING_BELOW * min(max(1, workers), cpus):
            continue  # the workers keep the CPUs busy: more than the cores cannot help
        seen = Evidence(row.number, workers, loader, used, wanted)
        found.setdefault(f"{workers}:{loader:.0f}", seen)
    return list(found.values())


def _ram_peaks(rows: Iterable[Any]) -> list[tuple[int, float, bool]]:
    """(workers, RAM peak, whether its heap retained freed memory) of each trial that has both."""
    peaks = [(row.config.get("num_workers"), row.metrics.get("ram_peak"), bool(row.config.get("malloc_retain")))
             for row in rows]
    return [(w, p, kept) for w, p, kept in peaks if isinstance(w, int) and p]


def ram_without_workers(rows: Iterable[Any]) -> float | None:
    """The least RAM peak (PSS) of a trial without workers, or None."""
    alone = [p for w, p, _ in _ram_peaks(rows) if w == 0]
    return min(alone) if alone else None


def worker_ram(rows: Iterable[Any]) -> float | None:
    """PSS one DataLoader worker adds, from trials' RAM peaks: the most any config showed
    over ``ram_without_workers``. None until both were seen. A trial whose heap keeps what it
    frees (``malloc_retain``) holds more in its main process too: it is held against the
    trials without workers that kept theirs alike, where there are some."""
    peaks = _ram_peaks(rows)
    alone = [p for w, p, _ in peaks if w == 0]
    if not alone:
        return None
    least = {kept: min((p for w, p, k in peaks if w == 0 and k == kept), default=min(alone))
             for kept in (False, True)}
    per = [(p - least[kept]) / w for w, p, kept in peaks if w > 0 and p > least[kept]]
    return max(per) if per else None


def limits(ram_budget: int | None, per_worker: float | None, base_ram: float | None) -> dict[str, int]:
    """The most workers each limit allows (only limits that are set and known)."""
    caps: dict[str, int] = {}
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    if nproc != resource.RLIM_INFINITY:
        caps["the process limit (ulimit -u)"] = max(0, nproc - SPARE_PROCESSES)
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if nofile != resource.RLIM_INFINITY:
        caps["the open-file limit (ulimit -n)"] = nofile // FILES_PER_WORKER
    if ram_budget and per_worker:
        caps["the RAM budget"] = max(0, int((ram_budget - (base_ram or 0.0)) / per_worker))
    return caps


def epoch_samples(rows: Iterable[Any]) -> int | None:
    """Samples in an epoch as the trials' loaders saw them (batches x batch size; the
    most any trial saw, so a last partial batch never bounds too low), or None."""
    seen = [row.dataset["epoch_batches"] * row.config["batch_size"] for row in rows
            if row.dataset.get("epoch_batches") and isinstance(row.config.get("batch_size"), int)]
    return max(seen) if seen else None


def useful_workers(batch_size: Any, base_batch_size: int | None, samples: int | None) -> int | None:
    """Workers that can each have a batch of an epoch of ``samples`` at ``batch_size``
    (as for ``autotune._knobs.batch_of``), or None when either size is unknown.

    >>> useful_workers("4x", 64, 60_000), useful_workers(None, 64, 60_000), useful_workers(500, 64, 1_000)
    (235, 938, 2)
    """
    size = batch_of(batch_size, base_batch_size)
    return math.ceil(samples / size) if samples and size else None


@dataclasses.dataclass(frozen=True)
class WorkerRange:
    """A widened ``num_workers`` high end, and the line that says why."""

    high: int
    why: str


def widened_range(high: int, low: int, rows: Iterable[Any], ceilings: Ceilings, cpus: int,
                  ram_budget: int | None, caps: Mapping[str, int] | None = None,
                  also: Mapping[str, int] | None = None) -> WorkerRange | None:
    """The range's new high end, if what the loaders measured asks for more than ``high``
    (``caps``: the limits, by default this machine's and the RAM budget's; ``also``: more
    of them, such as an epoch's batches at the space's smallest batch size)."""
    rows = list(rows)
    seen = evidence(rows, ceilings, cpus)
    if not seen:
        return None
    best = max(seen, key=lambda e: e.needed)
    if best.needed <= high:
        return None
    caps = dict(limits(ram_budget, worker_ram(rows), ram_without_workers(rows)) if caps is None else caps)
    caps.update(also or {})
    bound = min(caps.items(), key=lambda kv: kv[1]) if caps else None
    new = min(best.needed, bound[1]) if bound else best.needed
    if new <= high:
        return None
    who = f"{best.workers} workers" if best.workers else "the main process (no workers)"
    why = (f"workers wait {best.waiting:.0%} of their time (trial {best.trial}'s loader alone: "
           f"{best.loader:,.0f} samples/s from {who}, using {best.cpus_used:.1f} of {cpus} CPUs; "
           f"its model takes {best.wanted:,.0f}): num_workers range {low}-{new}")
    if bound and new < best.needed:
        why += f" ({best.needed} would feed the model; {bound[0]} allows {bound[1]})"
    return WorkerRange(new, why)
