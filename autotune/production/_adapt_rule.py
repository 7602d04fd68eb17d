"""The adaptive loader's rule (``decide``): from the epochs measured so far, the loader's values
for the next one, or None to keep them. Pure, and unit-tested on hand-built epochs
(tests/process/test_adapt.py); ``autotune.production._adapt`` measures the epochs and acts on it."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping, Sequence

#: Data wait (the share of an epoch's wall time the loop waited for its next batch) past which
#: the loader is short of workers, and under which it has more than it needs.
HIGH, LOW = 0.10, 0.02
#: Epochs in a row past a threshold before a move (twice that under ``LOW``): one slow epoch
#: (a cache refilling, a neighbour's burst) moves nothing.
PATIENCE = 2
#: A move down that ran under this share of the rate before it is undone; a move up (more
#: workers or prefetch, which cost RAM and CPU) that did not gain ``1 / WORSE`` of it, too.
WORSE = 0.97
#: The most workers per usable CPU (an I/O-bound loader's workers mostly sleep) and in all.
WORKERS_PER_CPU, MOST_WORKERS = 4, 64
#: Epochs and seconds (both must pass) the values a move was undone back to stay put
#: (``decide``'s ``stuck``): long enough not to churn (each move restarts the workers), short
#: enough to follow a storage that slows hours into the job.
STUCK_EPOCHS, STUCK_S = 16, 600.0
#: ... unless ``PATIENCE`` epochs back at those values run under this share of their rate
#: before the move: the storage or the load changed since, and the comparison that undid the
#: move no longer holds. Far under ``WORSE``, so that noise does not churn: where reads slowed
#: 4x while a move was judged, it ran "1.00x" and was undone, and 2 workers then ran 0.3x.
CHANGED = 0.75
#: The most ``prefetch_factor`` a move asks for.
MOST_PREFETCH = 16
#: The share of its CPUs kept busy (by the job or others) past which no move goes up, where the
#: training tree itself keeps ``CPU_OWN`` of them busy: the loop then waits for CPU time, which
#: more workers only split finer. Busy CPUs beside a loader whose workers sleep on storage do not
#: stop more of them from helping (its loop needs little CPU: a test of it failed in CI under a
#: guard on the machine's share alone). Reasoned and unit-tested, not yet seen to bind: the steady
#: benchmark's data wait of 30% on a 2-CPU host came with its CPUs 40% busy, the hand-over of
#: batches made already (``Epoch.wanting``), which no longer moves.
CPU_FULL = 0.9
CPU_OWN = 0.5


@dataclasses.dataclass(frozen=True)
class Epoch:
    """One measured epoch: its data wait share, samples/s, the loader's values in force, the
    share of the process's CPUs kept busy (``cpu``, by every process: ``cpu_seconds``) and by
    the training process tree itself (``own``), the share of its time waited with no batch made
    (``unmade``); None: not read."""

    wait: float
    rate: float
    workers: int
    prefetch: int | None
    cpu: float | None = None
    own: float | None = None
    unmade: float | None = None

    @property
    def wanting(self) -> float:
        """The share of its time the loop waited for batches no worker had made yet (``unmade``;
        else all its ``wait``): what more workers can shorten. The rest of the wait is the hand-over
        of batches already made (a pipe, a shared-memory file, unpickling, on the loop's own thread),
        which more workers only lengthen: on a sandboxed host it was 13% of a 20 ms step's time
        with 4 workers far ahead, and every move up was tried and undone."""
        return self.wait if self.unmade is None else self.unmade


@dataclasses.dataclass(frozen=True)
class Move:
    """New loader values, and why, in one line; ``undoes``: back to the values before a move
    that did not pay."""

    workers: int
    prefetch: int | None
    why: str
    undoes: bool = False
    #: for an undo: the samples/s its values ran at before the move (what ``held`` compares with)
    was: float | None = None


@dataclasses.dataclass(frozen=True)
class Mark:
    """Values a move was undone back to (``Move.undoes``): after ``epoch`` epochs, at ``at``
    (monotonic seconds), from a move that ran no better than their ``rate`` (samples/s)."""

    epoch: int
    at: float
    rate: float | None


def decide(
    epochs: Sequence[Epoch],
    floor: int,
    ceiling: int,
    stuck: Collection[tuple[int, int | None]] = (),
    most_prefetch: int = MOST_PREFETCH,
) -> Move | None:
    """The loader's values for the next epoch, or None to keep them.

    Up where the last ``PATIENCE`` epochs at these values all waited over ``HIGH`` for batches
    not made yet (``Epoch.wanting``; a wait for batches made already is their hand-over): workers to
    what would have fed the loop (its workers over the share of time they kept up, Little's
    law), at most ``ceiling``; with the workers at ``ceiling``, ``prefetch_factor`` doubled.
    Down one step (a quarter of the workers) where ``2 * PATIENCE`` epochs all waited under
    ``LOW``, never under ``floor`` (the export's own). Back to the values before a move whose
    second epoch (the first pays for starting its workers) ran under ``WORSE`` of their rate, or,
    for a move up, gained less than ``1 / WORSE`` (more workers cost RAM and CPU); an undo is
    not itself judged, and ``stuck`` (the values a move was undone back to) move no more the
    same way: where more workers did not help, waiting is not for want of them (the CPUs are).
    Nor does a move go up while ``CPU_FULL`` of the CPUs are busy and the tree itself keeps
    ``CPU_OWN`` of them so (``Epoch.cpu``, ``Epoch.own``): its loop waits for CPU, not workers.
    ``prefetch_factor`` goes up to ``most_prefetch`` at most (lower after a memory margin step).

    >>> up = [Epoch(0.5, 500.0, 2, 2), Epoch(0.5, 510.0, 2, 2)]
    >>> decide(up, 2, 8)
    Move(workers=4, prefetch=2, why='data wait 50% over 2 epochs (over 10%): num_workers 2 -> 4', undoes=False, was=None)
    >>> decide([*up, Epoch(0.3, 600.0, 4, 2), Epoch(0.3, 450.0, 4, 2)], 2, 8).why
    'num_workers 4 -> 2: the move ran 0.88x the samples/s before it'
    >>> decide([*up, Epoch(0.6, 500.0, 2, 2)], 2, 8, stuck={(2, 2)}) is None
    True
    >>> decide([Epoch(0.5, 500.0, 2, 2, cpu=0.95, own=0.7)] * 2, 2, 8) is None  # waiting for CPU
    True
    >>> decide([Epoch(0.3, 500.0, 2, 2, unmade=0.01)] * 2, 2, 8) is None  # batches made: their hand-over
    True
    """
    values = [(e.workers, e.prefetch) for e in epochs]
    runs = [i for i in range(1, len(values)) if values[i] != values[i - 1]]  # where each later run starts
    run = len(epochs) - (runs[-1] if runs else 0)
    last, before = epochs[-1], (epochs[runs[-1] - 1] if runs else None)
    undoing = len(runs) >= 2 and values[runs[-2] - 1] == values[-1]  # back where the run before started
    up = before is not None and (last.workers, last.prefetch or 0) > (before.workers, before.prefetch or 0)
    if (
        before is not None
        and not undoing
        and run == 2
        and last.rate < (before.rate / WORSE if up else WORSE * before.rate)
    ):
        undo = ", ".join(
            [f"num_workers {last.workers} -> {before.workers}"] * (last.workers != before.workers)
            + [f"prefetch_factor {last.prefetch} -> {before.prefetch}"] * (last.prefetch != before.prefetch)
        )
        return Move(
            before.workers,
            before.prefetch,
            f"{undo}: the move ran {last.rate / before.rate:.2f}x the samples/s before it",
            undoes=True,
            was=before.rate,
        )
    stays = (last.workers, last.prefetch) in stuck
    recent = epochs[-PATIENCE:]
    full = all(e.cpu is not None and e.own is not None and e.cpu >= CPU_FULL and e.own >= CPU_OWN for e in recent)
    if run >= PATIENCE and all(e.wanting > HIGH for e in recent) and not stays and not full:
        wait = sum(e.wanting for e in recent) / len(recent)
        said = f"data wait {wait:.0%} over {len(recent)} epochs (over {HIGH:.0%}): "
        if last.workers < ceiling:
            wanted = min(ceiling, max(last.workers + 1, math.ceil(max(last.workers, 1) / max(1 - wait, 0.05))))
            return Move(wanted, last.prefetch, said + f"num_workers {last.workers} -> {wanted}")
        if last.workers and last.prefetch is not None and last.prefetch < most_prefetch:
            wanted = min(most_prefetch, 2 * last.prefetch)
            return Move(
                last.workers,
                wanted,
                said + f"prefetch_factor {last.prefetch} -> {wanted} (num_workers at its most here, {ceiling})",
            )
        return None
    calm = epochs[-2 * PATIENCE :]
    if run >= 2 * PATIENCE and last.workers > floor and all(e.wait < LOW for e in calm) and not stays:
        wanted = max(floor, last.workers - max(1, last.workers // 4))
        return Move(
            wanted,
            last.prefetch,
            f"data wait under {LOW:.0%} over {len(calm)} epochs: num_workers {last.workers} -> {wanted}",
        )
    return None


def held(
    marks: Mapping[tuple[int, int | None], Mark], epochs: Sequence[Epoch], now: float
) -> set[tuple[int, int | None]]:
    """The values that stay put (``decide``'s ``stuck``): each marked one until both
    ``STUCK_EPOCHS`` epochs and ``STUCK_S`` seconds have passed, or until its last ``PATIENCE``
    epochs, all since the undo and at those values, ran under ``CHANGED`` of its rate before the
    move (what it is compared with has changed: the move may pay now).

    >>> at_2 = [Epoch(0.9, 100.0, 2, 2)] * 2
    >>> held({(2, 2): Mark(4, 0.0, 100.0)}, [Epoch(0.9, 100.0, 2, 2)] * 4 + at_2, 60.0)
    {(2, 2)}
    >>> held({(2, 2): Mark(4, 0.0, 400.0)}, [Epoch(0.9, 400.0, 2, 2)] * 4 + at_2, 60.0)  # 0.25x: reads slowed
    set()
    >>> held({(2, 2): Mark(4, 0.0, 100.0)}, at_2 * 10, 601.0)  # 16 epochs and 600 s on
    set()
    """
    kept = set()
    for values, mark in marks.items():
        if len(epochs) - mark.epoch >= STUCK_EPOCHS and now - mark.at >= STUCK_S:
            continue
        since = epochs[mark.epoch :][-PATIENCE:]
        if (
            mark.rate is not None
            and len(epochs) - mark.epoch >= PATIENCE
            and all((e.workers, e.prefetch) == values and e.rate < CHANGED * mark.rate for e in since)
        ):
            continue
        kept.add(values)
    return kept


def most_workers(cpus: int, exported: int) -> int:
    """The most workers a move asks for on ``cpus`` usable CPUs (never under the export's).

    >>> most_workers(2, 2), most_workers(32, 4), most_workers(2, 12)
    (8, 64, 12)
    """
    return max(exported, min(MOST_WORKERS, WORKERS_PER_CPU * cpus))
