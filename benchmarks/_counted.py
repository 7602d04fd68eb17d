"""A training function that runs another one and counts its optimizer steps in a shared file,
for ``benchmarks/interleaved.py``: the same wrapper in a trial and in production, so whatever
it costs falls on both alike. Light on purpose (no torch; the target is loaded by ``autotune.worker._trial_main.load_target``).

The function it runs is named by ``AUTOTUNE_BENCH_TARGET`` (``path.py:function``), the file
it counts in by ``AUTOTUNE_BENCH_COUNTER``: three native unsigned 64-bit numbers, the steps
so far and the ``CLOCK_MONOTONIC`` nanoseconds at the last one's end (both written after each
step), and the parent's pid (written once: a trial forked from the warm worker has it for its
parent). A reader in another process sees them through the page cache.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from pathlib import Path
from typing import Any

TARGET_ENV = "AUTOTUNE_BENCH_TARGET"
COUNTER_ENV = "AUTOTUNE_BENCH_COUNTER"
COUNT = struct.Struct("QQQ")
STEP = struct.Struct("QQ")  # the first two of COUNT, written each step


def new_counter(path: Path) -> None:
    path.write_bytes(bytes(COUNT.size))


def read_counter(path: Path) -> tuple[int, int, int]:
    """Steps so far, the monotonic nanoseconds at the last one's end, the parent's pid."""
    with open(path, "rb") as f:
        return COUNT.unpack(f.read(COUNT.size))


class _Counted:
    """``run`` as it is, but each ``step`` also writes the count of steps so far and when."""

    def __init__(self, run: Any, counter: mmap.mmap) -> None:
        self._run, self._counter, self._steps = run, counter, 0
        COUNT.pack_into(self._counter, 0, 0, time.monotonic_ns(), os.getppid())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._run, name)

    def step(self, loss: Any, optimizer: Any) -> None:
        self._run.step(loss, optimizer)
        self._steps += 1
        STEP.pack_into(self._counter, 0, self._steps, time.monotonic_ns())


def train(run: Any) -> None:
    """The target of ``AUTOTUNE_BENCH_TARGET`` on ``run``, its steps counted."""
    from autotune.worker._trial_main import load_target  # (loaded as a trial loads it, both sides alike)

    with open(os.environ[COUNTER_ENV], "r+b") as f:
        counter = mmap.mmap(f.fileno(), COUNT.size)
    load_target(os.environ[TARGET_ENV])(_Counted(run, counter))
