"""How many DataLoader workers can help, from what the loaders measured (``num_workers: {high: auto}``).

A loader ceiling (``autotune.core._ceilings``) times the loader alone and the CPU
seconds it cost. Workers that use few of the CPUs they could are waiting (on
storage, the network, a sleep): more of them help past the core count, and by
Little's law as many as the rate wanted times a batch's latency, that is the
model's rate (its compute ceiling) over one worker's. Workers that keep the CPUs
busy are CPU-bound: more than the cores cannot help, and the range stays.

Little's law counts the workers that feed the model on average, each as fast as it was
alone. In training they share the CPUs with the model, and a batch that comes late holds up
the ones behind it, so more may help: when the fastest trial so far (or one within
``LEAD_WITHIN`` of it: one run's figure is that noisy here) drew the top of the range
(``TOP_SHARE`` of it or more) and still waited on data (``TOP_WAITS`` of its time), the
range widens to twice what it drew. On the jpeg runner on a 2-core host, all three 16-trial
studies' winners sat at the top of the range Little's law set (6, 7 and 10), and the sweep's
best, 2x batches with as many workers as an epoch has batches (24), ran 9-36% faster than they
did (benchmarks/results/reach.md).

A leading trial that still waits on data runs again with more workers: ``autotune.tuner._worker_climb``.

The range only widens, and it comes from the study's records, so every tuner on a
study agrees on it. It is bounded by the RAM budget (at the PSS one worker was
seen to add) and by the process and open-file limits, and by the batches of an
epoch: a worker makes whole batches, so past one per batch the rest sit idle
(``Run.dataloader`` clamps them). At each trial's batch size the search draws no
more workers than that (``useful_workers``), so it does not spend trials on
configs that run as another.

On several ranks (``--nproc-per-node``) no ceilings are measured, and ``num_workers`` is each
rank's: the same rule runs per rank on each trial's own figures (``ranked``), on the rank's
share of the CPUs. Its RAM share needs no change: a trial's RAM peak is the whole job's, so
what it adds over one without workers, per worker drawn, is what one more worker on every rank
costs, and the budget over that is workers a rank. Without this, a DDP study of a script that
read 1 ms an item kept to 1-2 workers a rank, waited on data 88% of its time and never
climbed (2.18x, where one process climbed to 18-62 workers and 17x).
"""

from __future__ import annotations

import dataclasses
import math
import resource
from collections.abc import Iterable, Mapping
from typing import Any

from autotune.core._ceilings import Ceilings
from autotune.core._knobs import Part, batch_of
from autotune.core._outcome import Outcome
from autotune.core._rank_loaders import rank_loader, read_cpu

#: Share of the CPUs its workers could use (at most one each) under which a loader
#: counts as waiting: more workers than cores then help.
WAITING_BELOW = 0.5
#: Share of its time the fastest trial so far waits on data from which a worker range it drew
#: the top of (``TOP_SHARE`` of its high end or more) widens to twice what it drew.
TOP_WAITS = 0.1
TOP_SHARE = 0.75
#: How far below the fastest believed trial before it a trial may be and still count as
#: leading: one run's figure moves by about that between runs of one config on these
#: machines (a jpeg study's winner at 9 of 0-10 workers read 652 samples/s against an
#: earlier trial's 694, 6% less, and its range never widened).
LEAD_WITHIN = 0.1
#: Open files a DataLoader worker may hold (its pipes, and shared-memory batches in flight).
FILES_PER_WORKER = 16
#: Processes the tuner, its worker and the user's own helpers may need beside the loader's.
SPARE_PROCESSES = 64


@dataclasses.dataclass(frozen=True)
class Evidence:
    """What one measured loader says about workers (on a trial of several ranks, each rank's)."""

    trial: int
    workers: int
    loader: float  # samples/s of the loader alone
    cpus_used: float  # CPUs the loader alone kept busy
    wanted: float  # samples/s the model takes (its compute ceiling)
    ranks: int = 1  # (over 1: read from the trial's own figures, ``autotune.core._rank_loaders``)

    @property
    def waiting(self) -> float:
        """Share of its time an average worker (or the main process, with none) waits."""
        return max(0.0, 1.0 - self.cpus_used / max(1, self.workers))

    @property
    def needed(self) -> int:
        """Workers that feed ``wanted`` (Little's law: each worker makes what it makes now)."""
        return math.ceil(self.wanted / (self.loader / max(1, self.workers)))


def evidence(rows: Iterable[Any], ceilings: Ceilings, cpus: int) -> list[Evidence]:
    """Each measured config whose loader alone waits and is slower than its model: from its
    ceilings, or on several ranks (which measure none) from each rank's figures (``ranked``)."""
    rows = list(rows)
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
    for seen in ranked(rows, cpus):
        found.setdefault(f"{seen.workers}:{seen.loader:.0f}", seen)
    return list(found.values())


def ranks_of(row: Any) -> int:
    """The ranks a trial ran on, as its loader saw them (1: one process, or a loader that
    could not tell: a stream's)."""
    return int(row.dataset.get("ranks") or 1)


def ranked(rows: Iterable[Any], cpus: int) -> list[Evidence]:
    """The single-process rule per rank, for the trials on several ranks: each rank's loader
    and model as its figures give them (``autotune.core._rank_loaders.rank_loader``), on its share
    of the ``cpus`` (the job's). A loader counts as waiting only once a trial without workers
    bounded what a sample costs to read (``read_cpu``): the busy share of its main thread,
    which read and stepped, over what it read."""
    read = [
        (
            row,
            rank_loader(
                row.metrics.get("samples_per_s"),
                row.metrics.get("data_wait_frac"),
                row.metrics.get("main_thread_busy"),
                row.config.get("num_workers"),
                ranks_of(row),
            ),
        )
        for row in rows
        if ranks_of(row) > 1 and isinstance(row.config.get("num_workers"), int)
    ]
    cost = read_cpu(r for _, r in read)
    found = []
    for row, rank in read:
        if rank is None or cost is None or rank.loader >= rank.wanted:
            continue
        share = max(1, cpus // ranks_of(row))
        if rank.cpus_used(cost) >= WAITING_BELOW * min(max(1, rank.workers), share):
            continue  # (as above, on the rank's share of the CPUs)
        found.append(Evidence(row.number, rank.workers, rank.loader, rank.cpus_used(cost), rank.wanted, ranks_of(row)))
    return found


def _ram_peaks(rows: Iterable[Any]) -> list[tuple[int, float, bool]]:
    """(workers, RAM peak, whether its heap retained freed memory) of each trial that has both."""
    peaks = [
        (row.config.get("num_workers"), row.metrics.get("ram_peak"), bool(row.config.get("malloc_retain")))
        for row in rows
    ]
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
    least = {kept: min((p for w, p, k in peaks if w == 0 and k == kept), default=min(alone)) for kept in (False, True)}
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
    most any trial saw, so a last partial batch never bounds too low), or None. A stream,
    which has no length, counts the rows of a whole epoch (never a distorted trial's, which
    delivered some twice: ``autotune.worker._streams``)."""
    rows = list(rows)
    seen = [
        row.dataset["epoch_batches"] * row.config["batch_size"]
        for row in rows
        if row.dataset.get("epoch_batches") and isinstance(row.config.get("batch_size"), int)
    ]
    seen += [
        int(row.metrics["epoch_rows"])
        for row in rows
        if row.metrics.get("epoch_rows") and row.outcome != Outcome.DISTORTED.value
    ]
    return max(seen) if seen else None


def useful_workers(batch_size: Any, base_batch_size: int | None, samples: int | None) -> int | None:
    """Workers that can each have a batch of an epoch of ``samples`` at ``batch_size``
    (as for ``autotune.core._knobs.batch_of``), or None when either size is unknown.

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


def leads(rows: Iterable[Any]) -> list[tuple[Any, float]]:
    """The trials that led when they ran, each with how far it was below the fastest believed
    one before it (0.0 when it was the fastest): in trial order, each believed one within
    ``LEAD_WITHIN`` of every believed one before it. Rows added later never change who led
    before them, so what this says only grows with the study."""
    found, fastest = [], 0.0
    for row in sorted(rows, key=lambda r: r.number):
        if row.reliable and row.rate >= (1.0 - LEAD_WITHIN) * fastest:
            found.append((row, max(0.0, 1.0 - row.rate / fastest) if fastest else 0.0))
        if row.reliable:
            fastest = max(fastest, row.rate)
    return found


def led_when(behind: float) -> str:
    """How a leader of ``leads`` stood when it ran, for a line: "the fastest then", or how close."""
    return f"within {behind:.0%} of the fastest then" if behind >= 0.005 else "the fastest then"


def prefetch_high(batches: int, workers: int) -> int:
    """The most ``prefetch_factor`` can ask of ``workers`` for an epoch of ``batches``: the
    loader never asks for more than an epoch ahead."""
    return max(1, math.ceil(batches / min(workers, batches)))


def widened_range(
    high: int,
    low: int,
    rows: Iterable[Any],
    ceilings: Ceilings,
    cpus: int,
    ram_budget: int | None,
    caps: Mapping[str, int] | None = None,
    also: Mapping[str, int] | None = None,
) -> WorkerRange | None:
    """The range's new high end, if what the loaders measured asks for more than ``high``
    (``caps``: the limits, by default this machine's and the RAM budget's; ``also``: more
    of them, such as an epoch's batches at the space's smallest batch size): Little's law
    on the loader that asks for most, then twice the workers any of the study's ``leads``
    drew at the top of that range while it waited on data ``TOP_WAITS`` of its time or more."""
    rows = list(rows)
    seen = evidence(rows, ceilings, cpus)
    if not seen:
        return None  # no loader waits: more workers than the cores cannot help
    most = max(seen, key=lambda e: e.needed)
    new, why = high, []
    if most.needed > high:
        new = most.needed
        who = f"{most.workers} workers" if most.workers else "the main process (no workers)"
        alone, of = (
            ("loader alone", f"{cpus} CPUs")
            if most.ranks == 1
            else (f"loader on each of {most.ranks} ranks", f"the rank's {max(1, cpus // most.ranks)} CPUs")
        )
        why.append(
            f"workers wait {most.waiting:.0%} of their time (trial {most.trial}'s {alone}: "
            f"{most.loader:,.0f} samples/s from {who}, using {most.cpus_used:.1f} of {of}; "
            f"its model takes {most.wanted:,.0f})"
        )
    # (against the range each drew from, as Optuna recorded it: a leader's verdict never changes)
    topped = [
        (r, behind)
        for r, behind in leads(rows)
        if isinstance(r.sampled.get("num_workers"), int)
        and r.workers_high
        and r.sampled["num_workers"] >= max(1, TOP_SHARE * r.workers_high)
        and r.metrics.get("data_wait_frac", 0.0) >= TOP_WAITS
    ]
    if topped:
        lead, behind = max(topped, key=lambda rb: rb[0].sampled["num_workers"])
        drawn = lead.sampled["num_workers"]
        if 2 * drawn > new:
            new = 2 * drawn
            why.append(
                f"trial {lead.number}, {led_when(behind)}, drew num_workers={drawn} of {low}-{lead.workers_high} "
                f"and waited on data {lead.metrics['data_wait_frac']:.0%} of its time"
            )
    if new <= high:
        return None
    caps = dict(limits(ram_budget, worker_ram(rows), ram_without_workers(rows)) if caps is None else caps)
    caps.update(also or {})
    bound = min(caps.items(), key=lambda kv: kv[1]) if caps else None
    wanted, new = new, min(new, bound[1]) if bound else new
    if new <= high:
        return None
    line = "; ".join(why) + f": num_workers range {low}-{new}"
    if new < wanted and bound:  # (bound: what made it less)
        asked = "would feed the model" if len(why) == 1 and most.needed > high else "asked"
        line += f" ({wanted} {asked}; {bound[0]} allows {bound[1]})"
    return WorkerRange(new, line)
