"""The iterator a script gets from ``iter(loader)`` under autotune's hooks.

The batches come through autotune (the loop knobs, a trial's windows), but the object is the
loader's own iterator to the script: ``len()``, ``isinstance(it, _BaseDataLoaderIter)`` and every
attribute (``_shutdown_workers``, ``_num_yielded``, a stateful loader's state) are the real one's.
Dropping it (a ``break``, ``del``) drops the real one too, so a loader's workers end as they would.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class EpochIterator:
    """The loader's own iterator ``real``, its batches taken from ``batches`` (see the module)."""

    __slots__ = ("_real", "_batches")

    def __init__(self, real: Any, batches: Iterator[Any]) -> None:
        self._real = real
        self._batches = batches

    @property  # type: ignore[misc]  # read-only over object.__class__: on purpose (isinstance)
    def __class__(self) -> type:  # (isinstance() reads it: the script's checks see the real class)
        return type(self._real)

    def __iter__(self) -> EpochIterator:
        return self

    def __next__(self) -> Any:
        return next(self._batches)

    def __len__(self) -> int:
        return len(self._real)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def close(self) -> None:
        """End the epoch early: autotune's part stops (a prefetcher's thread is joined)."""
        close = getattr(self._batches, "close", None)
        if close is not None:
            close()
