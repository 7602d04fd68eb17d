"""The memory margin of an adaptive recipe: ``autotune.load(path, adapt=True)``.

A config can fit at study time and be killed hours later: host RAM grows with batch x workers x
prefetch, and items can grow (longer sequences, a shard of larger images). The recipe counts
what its training process tree holds, every ``CHECK_EVERY`` s at most, and past ``MARGIN`` of its
RAM budget steps ``prefetch_factor`` and ``num_workers`` down to what fits (``fit``: a pure rule),
says so, and keeps the lower values for the rest of the job; it never changes what changes the
math (the batch size, the lr, the precision).

What it counts: in a memory cgroup with a limit (a container's: ``Cgroup``), the cgroup's own
working set, against its limit; elsewhere (``Footprint``), from cheap reads, the main process's
RSS and each worker's private memory (RSS less its shared pages), plus the batches in flight,
counted in bytes where they are made (``Counted``: the collate function, in the workers) and
where the loop takes them. That last term is what a tree's PSS misses and a container's limit
does not: a batch a worker has sent and the loop has not taken sits in shared memory that no
process maps (measured here: 8 workers x prefetch 8 of 64 MiB batches held 3.4 GiB of
``/dev/shm`` while the tree's PSS read 1.5 GiB). Either way the step judges the bound, the
batches the loader may hold at the size it now makes, not the queue as last read.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

#: Past this share of the budget the loader's values step down.
MARGIN = 0.85
#: Share of the RAM available at the start that one trial's processes may use, and by default
#: a recipe's (``default_budget``).
RAM_BUDGET_FRACTION = 0.75
#: Seconds between two readings of the tree at most (a reading costs about 20 us a process).
CHECK_EVERY = 0.2
#: Seconds between two walks of the process tree for new workers.
WALK_EVERY = 2.0


@dataclasses.dataclass(frozen=True)
class Step:
    """Loader values that fit the budget, and why, in one line."""

    workers: int
    prefetch: int | None
    why: str


def fit(held: float, batch_bytes: float, budget: float, workers: int, prefetch: int | None) -> Step | None:
    """The loader's values when the batches it may hold would take the tree past ``MARGIN`` of
    ``budget``, or None.

    ``held`` is what the tree holds but its batches in flight. A loader holds up to ``workers x
    prefetch`` batches at once (of ``batch_bytes`` each), and fills that queue whenever the loop
    is slower than its workers, faster than any reading can follow: so the bound is judged, not
    the queue as last read. The step keeps as many batches as fit in what the rest leaves of
    the margin: ``prefetch_factor`` first, down to 2, then ``num_workers``, down to none (the
    loop reads its own batches).

    >>> fit(3 * 2**30, 2**30 / 10, 10 * 2**30, 8, 8).why
    '8 workers x 8 batches of 102 MiB on 3.00 GiB would reach 9.40 GiB, 94% of its 10.00 GiB budget: prefetch_factor 8 -> 6'
    >>> fit(3 * 2**30, 2**30, 10 * 2**30, 8, 2)
    Step(workers=2, prefetch=2, why='8 workers x 2 batches of 1,024 MiB on 3.00 GiB would reach 19.00 GiB, 190% of its 10.00 GiB budget: num_workers 8 -> 2')
    >>> fit(3 * 2**30, 2**30 / 10, 10 * 2**30, 8, 2) is None
    True
    """
    depth = prefetch or 2
    projected = held + workers * depth * batch_bytes
    if workers <= 0 or projected < MARGIN * budget:
        return None
    fits = int(max(0.0, MARGIN * budget - held) // batch_bytes) if batch_bytes > 0 else 0
    if fits >= 2 * workers:
        new_workers, new_prefetch = workers, min(depth - 1, fits // workers)
    elif fits >= 2:
        new_workers, new_prefetch = min(workers - 1, fits // 2), 2
    else:
        new_workers, new_prefetch = 0, None
    moved = [f"prefetch_factor {prefetch} -> {new_prefetch}"] * (new_workers == workers) + [
        f"num_workers {workers} -> {new_workers}"
    ] * (new_workers != workers)
    return Step(
        new_workers,
        new_prefetch if new_workers else None,
        f"{workers} workers x {depth} batches of {batch_bytes / 2**20:,.0f} MiB on {held / 2**30:.2f} GiB "
        f"would reach {projected / 2**30:.2f} GiB, {projected / budget:.0%} of its {budget / 2**30:.2f} GiB "
        "budget: " + ", ".join(moved),
    )


def gpu_line(reserved: int, total: int, peak_gib: float | None) -> str | None:
    """A line for GPU memory past ``MARGIN`` of the device's, or None. Said, not stepped: what
    sets it (the batch, the model, the precision) is math an adaptive recipe never changes.

    >>> gpu_line(70 * 2**30, 80 * 2**30, 41.5)
    "GPU memory: 70.0 GiB reserved, 88% of the device's 80.0 GiB (the study's winner peaked at 41.5 GiB); the batch and the model set it, which adapt never changes: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True cuts what fragmentation adds"
    >>> gpu_line(10 * 2**30, 80 * 2**30, None) is None
    True
    """
    if total <= 0 or reserved < MARGIN * total:
        return None
    peak = f" (the study's winner peaked at {peak_gib:.1f} GiB)" if peak_gib else ""
    return (
        f"GPU memory: {reserved / 2**30:.1f} GiB reserved, {reserved / total:.0%} of the device's "
        f"{total / 2**30:.1f} GiB{peak}; the batch and the model set it, which adapt never changes: "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True cuts what fragmentation adds"
    )


def batch_bytes(batch: Any) -> int:
    """Bytes of the tensors in a batch (nested in tuples, lists and dicts)."""
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.nelement() * batch.element_size()
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        return sum(batch_bytes(item) for item in batch)
    return 0


class Counted:
    """A loader's collate function, counting the batches it makes, their bytes and the bytes
    of the last, in memory shared with the loop: three counters per worker (so no lock: a
    lock's semaphore would start multiprocessing's resource tracker for a spawned worker). The
    loop counts what it takes (``took``); the difference is in flight. Picklable, for workers
    started by spawn."""

    def __init__(self, collate: Any, workers: int) -> None:
        from multiprocessing.sharedctypes import RawArray

        self.collate = collate
        self.made = RawArray("q", 3 * max(1, workers))  # per worker: bytes, batches, the last's bytes
        self.taken = [0, 0]
        self.last = 0  # bytes of the last batch taken

    def __call__(self, items: Any) -> Any:
        from torch.utils.data import get_worker_info

        batch = self.collate(items)
        info = get_worker_info()
        at = 3 * (info.id if info is not None else 0)
        if at < len(self.made):
            size = batch_bytes(batch)
            self.made[at] += size
            self.made[at + 1] += 1
            self.made[at + 2] = size
        return batch

    def took(self, batch: Any) -> None:
        self.last = batch_bytes(batch)
        self.taken[0] += self.last
        self.taken[1] += 1

    def ready(self) -> int:
        """Batches made and not taken yet (in flight, or waiting in a queue for the loop)."""
        return sum(self.made[1::3]) - self.taken[1]

    def in_flight(self) -> tuple[int, int]:
        """Bytes in flight, and a batch's bytes: the largest of the last each worker made and
        the last the loop took (items that grow show in the batches made first: those taken
        come through a queue of the smaller ones before them)."""
        made = self.made[:]
        return max(0, sum(made[0::3]) - self.taken[0]), max([self.last, *made[2::3]])

    def restart(self) -> None:
        """A new epoch: no batch of the last is in flight any more (one the loop left untaken
        went with its iterator). Called between epochs, while no worker makes a batch; the
        sizes stay (the next epoch's batches are judged by them)."""
        for at in range(0, len(self.made), 3):
            self.made[at] = self.made[at + 1] = 0
        self.taken = [0, 0]


class EpochOrder:
    """A loader's batch sampler, kept so that a loader rebuilt mid-epoch goes on where the loop
    was: the batches of indices it has given out and the loop has not trained on yet
    (``trained`` takes them off, in order) are given again first, then the rest of the epoch's
    own order. Nothing is drawn twice: the same samples, in the same order, as the loader
    without it (its sampler draws its order lazily, as in a plain loader)."""

    def __init__(self, source: Any) -> None:
        import collections

        self.source = source
        self._order: Any = iter(())
        self._given: collections.deque[Any] = collections.deque()
        self._resume = False

    def __len__(self) -> int:
        return len(self.source)

    def __iter__(self) -> Any:
        return self._batches()

    def _batches(self) -> Any:
        # Decided at the first batch asked, not at ``iter``: a DataLoader iterator calls ``iter``
        # twice as it starts (``__init__``, then ``_reset``) and draws from the second only.
        if not self._resume:  # a new epoch
            self._order, self._given = iter(self.source), type(self._given)()
        self._resume = False
        yield from list(self._given)
        for batch in self._order:
            self._given.append(batch)
            yield batch

    def trained(self) -> None:
        """The loop took the oldest batch given out."""
        if self._given:
            self._given.popleft()

    def resume(self) -> None:
        """The next loader built on it continues this epoch."""
        self._resume = True


class Footprint:
    """What the training process tree holds but its batches in flight, from cheap reads (a
    reading of a worker's PSS costs about 9 ms here, 40x its RSS): the main process's RSS, and
    each DataLoader worker's private memory (RSS less its shared pages) above what it was when
    first seen. A forked worker's RSS counts every page it shares with the main process until
    either writes to it (its RSS read 7x the tree's PSS with 6 workers here); what it
    allocates or copies after that first reading is its own."""

    def __init__(self) -> None:
        import psutil

        self._me = psutil.Process()
        self._workers: list[Any] = []
        self._first: dict[int, int] = {}  # worker pid -> its private memory when first seen
        self._walked = -WALK_EVERY

    def _workers_now(self) -> list[Any]:
        """The tree's other processes, walked again at most every ``WALK_EVERY`` s."""
        import os

        from autotune.machine._proctree import process_tree

        now = time.monotonic()
        if now - self._walked >= WALK_EVERY:
            self._walked = now
            self._workers = process_tree(os.getpid())[1:]
            alive = {proc.pid for proc in self._workers}
            self._first = {pid: first for pid, first in self._first.items() if pid in alive}
        return self._workers

    def cpu(self) -> float | None:
        """CPU seconds the tree has used (its live workers', and what reaped ones used), read now."""
        import psutil

        from autotune.machine._proctree import tree_cpu

        try:
            return tree_cpu([self._me, *self._workers_now()])
        except psutil.Error:
            return None

    def held(self) -> int:
        import psutil

        total = self._me.memory_info().rss
        for proc in self._workers_now():
            try:
                info = proc.memory_info()
            except psutil.Error:
                continue
            private = max(0, info.rss - getattr(info, "shared", 0))
            total += max(0, private - self._first.setdefault(proc.pid, private))
        return total


class Cgroup:
    """The memory cgroup this process is in, where it has a limit (a container's, a job
    scheduler's): the kernel kills at that limit, and counts against it what a tree's PSS does
    not (shared memory no process maps). ``find`` gives None where no limit applies.

    Attributes:
        limit: The tightest limit over the cgroup and its ancestors, in bytes.
    """

    def __init__(self, folder: Path, limit: int, version: int) -> None:
        self.folder, self.limit, self.version = folder, limit, version

    @classmethod
    def find(cls, root: Path = Path("/sys/fs/cgroup"), table: Path = Path("/proc/self/cgroup")) -> Cgroup | None:
        try:
            lines = table.read_text().splitlines()
        except OSError:
            return None
        for line in lines:
            _, controllers, path = line.split(":", 2)
            if "memory" in controllers.split(","):  # cgroup v1
                folder = root / "memory" / path.lstrip("/")
                limit = _number(folder / "memory.stat", "hierarchical_memory_limit")
                return cls(folder, limit, 1) if limit else None
        for line in lines:
            if line.startswith("0::"):  # cgroup v2: the tightest memory.max on the way up
                folder = root / line[3:].lstrip("/")
                limits = [_number(up / "memory.max") for up in [folder, *folder.parents] if up.is_relative_to(root)]
                known = [limit for limit in limits if limit]
                return cls(folder, min(known), 2) if known else None
        return None

    def used(self) -> int | None:
        """What the kernel holds against the limit now: its working set (usage less the file
        cache it reclaims before it kills), or None where it cannot be read."""
        usage = _number(self.folder / ("memory.usage_in_bytes" if self.version == 1 else "memory.current"))
        inactive = _number(self.folder / "memory.stat", "total_inactive_file" if self.version == 1 else "inactive_file")
        return None if usage is None else max(0, usage - (inactive or 0))


#: A cgroup limit at or past this is none (v1 writes the largest page-aligned int64; v2 "max").
UNLIMITED = 1 << 60


def _number(path: Path, key: str | None = None) -> int | None:
    """A cgroup file's number, or with ``key`` that line's of a ``memory.stat``; None where it
    cannot be read or is unlimited."""
    try:
        text = path.read_text()
    except OSError:
        return None
    if key is not None:
        values = dict(line.split()[:2] for line in text.splitlines() if len(line.split()) >= 2)
        text = values.get(key, "")
    text = text.strip()
    return int(text) if text.isdigit() and int(text) < UNLIMITED else None


def default_budget(cgroup: Cgroup | None = None) -> int:
    """The budget a study would give a trial on this machine (``RAM_BUDGET_FRACTION`` of its
    available RAM, counting what this process already holds as its own), and no more than the
    limit of its memory cgroup (``Cgroup``), if it has one."""
    import psutil

    host = int((psutil.virtual_memory().available + psutil.Process().memory_info().rss) * RAM_BUDGET_FRACTION)
    return min(host, cgroup.limit) if cgroup is not None else host
