"""What a DataLoader reads, and the loader kwargs whose meaning a knob must not change.

Worker side and production side alike (``Run._loader_kwargs`` and the trial's counting):
no tuner module, no torch import until a function runs.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any


def shuffles(kw: Mapping[str, Any]) -> bool:
    """Whether a DataLoader built with ``kw`` draws its samples in a random order: ``shuffle=True``,
    or a sampler that shuffles (``RandomSampler``, a ``DistributedSampler(shuffle=True)``)."""
    from torch.utils.data import RandomSampler

    sampler = kw.get("sampler")
    return kw.get("shuffle") is True or isinstance(sampler, RandomSampler) or getattr(sampler, "shuffle", False) is True


@functools.cache
def _takes_in_order() -> bool:
    """Whether this torch's DataLoader has ``in_order`` (2.6 and later): read once per process."""
    import inspect

    from torch.utils.data import DataLoader

    return "in_order" in inspect.signature(DataLoader.__init__).parameters


def drop_worker_kwargs(kw: dict[str, Any]) -> dict[str, Any]:
    """``kw`` without what a DataLoader refuses when it has no workers (``prefetch_factor``,
    ``persistent_workers``: inactive knobs then), where ``num_workers`` is 0 or unset."""
    if not kw.get("num_workers", 0):
        kw.pop("prefetch_factor", None)
        kw.pop("persistent_workers", None)
    return kw


def keep_order(kw: dict[str, Any], user: Mapping[str, Any]) -> dict[str, Any]:
    """``kw`` with ``in_order`` as it may be: the config's where the loader shuffles and has
    workers (its order means nothing: batches may then come as workers finish them), else the
    user's own (default: in order); dropped on a torch whose DataLoader has none (< 2.6)."""
    if not _takes_in_order():
        kw.pop("in_order", None)
    elif kw.get("in_order") is False and not (kw.get("num_workers", 0) and shuffles(kw)):
        kw["in_order"] = user.get("in_order", True)
    return kw


def dataset_facts(
    dataset: Any, epoch_batches: int | None, kw: Mapping[str, Any], ranks: int | None = None
) -> dict[str, Any]:
    """What a loader built with ``kw`` reads, for the study: its class, its batches per epoch
    (None: no length), whether it shuffles (``shuffles``), and whether it fetches a batch in
    one call (``__getitems__``, which the DataLoader uses in place of one ``__getitem__`` per
    sample; a ``Subset`` has it when what it wraps does). An IterableDataset makes its own
    batches: nothing to say of that.

    In a job of ``ranks`` processes (default: torch.distributed's world, 1 outside one) over a
    map-style dataset, also ``ranks`` and whether its sampler gives each rank its own share
    (``splits_ranks``): without a ``DistributedSampler`` (or a sampler of ``num_replicas``) each
    rank reads every row, and the job's samples/s counts each row once per rank."""
    from torch.utils.data import IterableDataset, Subset

    inner = dataset
    while isinstance(inner, Subset):
        inner = inner.dataset
    facts = {"name": type(inner).__name__, "epoch_batches": epoch_batches, "shuffles": shuffles(kw)}
    if not isinstance(inner, IterableDataset):
        facts["batched_fetch"] = callable(getattr(inner, "__getitems__", None))
        ranks = world_size() if ranks is None else ranks
        if ranks > 1:
            sampler = kw.get("sampler") or getattr(kw.get("batch_sampler"), "sampler", None)
            facts.update(ranks=ranks, splits_ranks=(getattr(sampler, "num_replicas", 1) or 1) > 1)
    return facts


def world_size() -> int:
    """Processes in this process's torch.distributed job (1 outside one)."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def batches_per_epoch(loader: Any) -> int | None:
    """Batches the loader makes per epoch, or None when its dataset has no length."""
    try:
        return len(loader)
    except TypeError:  # an IterableDataset without __len__
        return None


def batch_len(batch: Any) -> int:
    """Samples in a batch: the leading dimension of its first tensor."""
    import torch

    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            n = batch_len(item)
            if n:
                return n
    return 0


def close_epoch(it: Any) -> None:
    """End an epoch's iterator early: a generator (the prefetchers) is closed; a DataLoader's own
    iterator (an unmodified script's) has nothing to close, its workers end with it."""
    close = getattr(it, "close", None)
    if close is not None:
        close()
