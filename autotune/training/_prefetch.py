"""How batches reach the device: inline, from a background thread, or on a CUDA side stream."""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any

#: Batches the thread prefetcher keeps ready. Two hide one slow batch; more only
#: costs memory, since the DataLoader's own workers already queue ahead.
THREAD_DEPTH = 2


def map_tensors(batch: Any, fn, only: Collection[tuple] | None = None, path: tuple = ()) -> Any:
    """Apply ``fn`` to every tensor in a structure of tensors: tuples, lists, namedtuples, dicts
    and other mappings that can be made from a dict (a tokenizer's ``BatchEncoding``), and
    dataclasses; anything else is left as it is. With ``only``, to the tensors at those paths
    (each a tuple of the keys, indices and field names that lead to it: ``paths_of``) only."""
    import torch

    if isinstance(batch, torch.Tensor):
        return batch if only is not None and path not in only else fn(batch)
    if isinstance(batch, dict) and type(batch) is dict:
        return {k: map_tensors(v, fn, only, (*path, k)) for k, v in batch.items()}
    if isinstance(batch, Mapping):
        try:
            make: Any = type(batch)  # (a Mapping subclass: made from a dict where it can be)
            return make({k: map_tensors(v, fn, only, (*path, k)) for k, v in batch.items()})
        except TypeError:  # (a mapping that is not made from a dict: left as it is)
            return batch
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(map_tensors(v, fn, only, (*path, i)) for i, v in enumerate(batch)))
    if isinstance(batch, (list, tuple)):
        return type(batch)(map_tensors(v, fn, only, (*path, i)) for i, v in enumerate(batch))
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        return dataclasses.replace(
            batch,
            **{
                f.name: map_tensors(getattr(batch, f.name), fn, only, (*path, f.name))
                for f in dataclasses.fields(batch)
                if f.init
            },
        )
    return batch


def paths_of(batch: Any) -> list[tuple[tuple, Any]]:
    """Each tensor ``map_tensors`` reaches in ``batch``, with its path.

    >>> import torch
    >>> [(path, t.shape[0]) for path, t in paths_of({"x": torch.zeros(2), "n": [torch.ones(3), 7]})]
    [(('x',), 2), (('n', 0), 3)]
    """
    import torch

    found: list[tuple[tuple, Any]] = []

    def walk(value: Any, path: tuple) -> None:
        if isinstance(value, torch.Tensor):
            found.append((path, value))
        elif isinstance(value, Mapping):
            for k, v in value.items():
                walk(v, (*path, k))
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(v, (*path, i))
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                if f.init:
                    walk(getattr(value, f.name), (*path, f.name))

    walk(batch, ())
    return found


def count_tensors(batch: Any) -> int:
    """The tensors ``map_tensors`` reaches in ``batch`` (0: nothing it could move)."""
    found: list[Any] = []

    def keep(tensor: Any) -> Any:
        found.append(tensor)
        return tensor

    map_tensors(batch, keep)
    return len(found)


def to_device(
    batch: Any, device, non_blocking: bool, channels_last: bool = False, only: Collection[tuple] | None = None
) -> Any:
    """Copy every tensor in ``batch`` (with ``only``, those at its paths) to ``device`` (4-D
    floating-point ones in channels-last memory format if asked: images for a channels-last model)."""
    if not channels_last:
        return map_tensors(batch, lambda t: t.to(device, non_blocking=non_blocking), only)
    import torch

    def move(t):
        if t.dim() == 4 and t.is_floating_point():
            return t.to(device, non_blocking=non_blocking, memory_format=torch.channels_last)
        return t.to(device, non_blocking=non_blocking)

    return map_tensors(batch, move, only)


def iter_batches(
    loader: Iterable,
    device,
    strategy: str,
    non_blocking: bool,
    channels_last: bool = False,
    before_copy: Callable[[], None] | None = None,
    only: Collection[tuple] | None = None,
) -> Iterator[Any]:
    """Yield the loader's batches on ``device`` using a prefetch strategy.

    Args:
        loader: Any iterable of batches (usually a DataLoader).
        device: The target ``torch.device``.
        strategy: "none", "thread" or "cuda_stream".
        non_blocking: Copy asynchronously (right only from pinned memory).
        channels_last: 4-D floating-point tensors arrive in channels-last format.
        before_copy: Called before each copy on the loop's thread (strategy "none"): a profile
            run's edge between data wait and copy (``autotune.worker._profile``).
        only: Move the tensors at these paths only (``paths_of``; None: all): those an unmodified
            script moves itself, the rest left where the loader made them.
    """
    if strategy == "none":
        if before_copy is not None:
            return _edged_batches(loader, device, non_blocking, channels_last, before_copy)
        return (to_device(b, device, non_blocking, channels_last, only) for b in loader)
    if strategy == "thread":
        return _thread_batches(loader, device, non_blocking, channels_last, only)
    if strategy == "cuda_stream":
        return _stream_batches(loader, device, channels_last, only)
    raise ValueError(f"prefetch={strategy!r}; allowed: none, thread, cuda_stream")


def _edged_batches(
    loader: Iterable, device, non_blocking: bool, channels_last: bool, before_copy: Callable[[], None]
) -> Iterator[Any]:
    """The loader's batches copied on this thread, ``before_copy`` called between each batch's
    arrival and its copy."""
    for batch in loader:
        before_copy()
        yield to_device(batch, device, non_blocking, channels_last)


_DONE = object()


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _thread_batches(
    loader: Iterable, device, non_blocking: bool, channels_last: bool = False, only: Collection[tuple] | None = None
) -> Iterator[Any]:
    """A background thread loads (and copies) the next batches into a bounded queue.

    The producer's exceptions are re-raised here; closing the generator (a
    ``break``, an exception in the loop, the trial's budget) stops and joins it.
    """
    ready: queue.Queue = queue.Queue(maxsize=THREAD_DEPTH)
    stop = threading.Event()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for batch in loader:
                if not put(to_device(batch, device, non_blocking, channels_last, only)):
                    return
            put(_DONE)
        except BaseException as exc:  # handed to the consumer, never lost
            put(_Failure(exc))

    thread = threading.Thread(target=produce, name="autotune-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = ready.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.exc
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # drain so a blocked put() sees the stop flag
            try:
                ready.get(timeout=0.1)
            except queue.Empty:
                pass
        thread.join()


def _stream_batches(
    loader: Iterable, device, channels_last: bool = False, only: Collection[tuple] | None = None
) -> Iterator[Any]:
    """Issue the next batch's copy on a side stream while the current one computes.

    The source is pinned (so the copy is truly asynchronous), the compute stream
    waits on the copy stream before using a batch, and ``record_stream`` stops
    the caching allocator from handing the batch's memory to the side stream's
    next copy while compute still reads it.
    """
    import torch

    side = torch.cuda.Stream(device)
    compute = torch.cuda.current_stream(device)

    def copy(batch: Any) -> Any:
        with torch.cuda.stream(side):
            pinned = map_tensors(batch, lambda t: t if t.is_pinned() else t.pin_memory(), only)
            return to_device(pinned, device, True, channels_last, only)

    def hand_over(t):
        if t.is_cuda:  # (a tensor left on the host has no stream to hand over)
            t.record_stream(compute)
        return t

    for batch in loader:
        batch = copy(batch)
        compute.wait_stream(side)
        # The copy of batch i+1 is issued when the loop asks for it, i.e. after
        # the compute of batch i was enqueued, so the two overlap on the GPU.
        yield map_tensors(batch, hand_over)
