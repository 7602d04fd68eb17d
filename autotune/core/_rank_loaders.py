"""What a trial on several ranks (``--nproc-per-node N``) says of each rank's loader, from its
own figures.

Ceilings are not measured on several ranks (a part measured alone on one rank would wait on the
others' collectives: ``autotune.training._ranks``), so the worker rule of
``autotune.tuner._loader_workers`` (Little's law on a loader's and a model's rates, and whether
the loader keeps its CPUs busy) reads its figures per rank from the trial's windows instead:

- the model's rate: a rank's samples/s (the job's over its ranks) over the share of its time it
  did not wait on data (the slowest rank's wait: the job steps at its pace);
- the loader's rate: without workers, the rank's main process reads in the time it waits, so
  its samples/s over that share; with workers, what the rank took (a rank that waits gets all
  its workers make, and no more);
- the CPU seconds a sample cost to read: without workers, rank 0's main thread reads and steps,
  so its busy time over the samples it took bounds it from above (its own steps included);
  with workers the main thread only steps, so the bound of a trial without workers holds for
  every trial of the study (its dataset's items cost what they cost).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable


@dataclasses.dataclass(frozen=True)
class RankLoader:
    """One rank's loader in a trial on ``ranks`` ranks."""

    workers: int  # per rank
    loader: float  # samples/s one rank's loader makes
    wanted: float  # samples/s one rank's model takes (its steps, never waiting)
    #: CPU seconds a sample cost to read, at most (None: not measured; only without workers).
    read_cpu: float | None = None

    def cpus_used(self, read_cpu: float) -> float:
        """CPUs the loader keeps busy at ``read_cpu`` CPU seconds a sample."""
        return self.loader * read_cpu


def rank_loader(
    rate: float | None, waits: float | None, busy: float | None, workers: int, ranks: int
) -> RankLoader | None:
    """A rank's loader, from a trial's samples/s summed over its ``ranks`` (``rate``), the share
    of its time the slowest rank waited on data (``waits``), rank 0's main thread busy share
    (``busy``), and the ``workers`` each rank had; None when it never waited or never stepped.

    >>> rank_loader(1750.0, 0.875, 0.0875, 0, 2)  # 875/s a rank, reading 7/8 of its time
    RankLoader(workers=0, loader=1000.0, wanted=7000.0, read_cpu=0.0001)
    >>> rank_loader(4000.0, 0.75, 0.5, 4, 2)  # 4 workers a rank, waited on a quarter of the time
    RankLoader(workers=4, loader=2000.0, wanted=8000.0, read_cpu=None)
    """
    if not rate or not waits or waits >= 1.0 or ranks < 1:
        return None
    own = rate / ranks
    wanted = own / (1.0 - waits)
    if workers > 0:
        return RankLoader(workers, own, wanted)
    # (rounded: the figures are a few digits good, and a bound is what is read from them)
    read_cpu = float(f"{busy / own:.4g}") if busy is not None else None
    return RankLoader(0, own / waits, wanted, read_cpu)


def read_cpu(loaders: Iterable[RankLoader | None]) -> float | None:
    """The least of the bounds ``loaders`` give on a sample's reading (each is one from above,
    so the least is the closest), or None when none of them measured one."""
    bounds = [r.read_cpu for r in loaders if r is not None and r.read_cpu is not None]
    return min(bounds) if bounds else None
