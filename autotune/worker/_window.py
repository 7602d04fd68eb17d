"""One measured stretch of a trial's loop (its warmup, a window, a ceiling's window): what it
counted, and its loss, kept on the device and read once at its end.

The arithmetic over what was read (``chunk_curve``, ``compile_s``) is pure, so it is
tested on hand-written lists.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

#: Pieces a window's loss is reported in (``curve`` in its event): each the mean loss of
#: consecutive steps and the samples they span, so that two runs' losses can be
#: compared over the same samples however their windows fall (``autotune.core._guard``).
CURVE_CHUNKS = 16


def chunk_curve(
    losses: Sequence[float], ends: Sequence[int], start: int, chunks: int = CURVE_CHUNKS
) -> list[list[float]]:
    """Step losses in up to ``chunks`` pieces of consecutive steps, each ``[start, end, mean
    loss, steps]`` in samples since the first batch: ``ends[i]`` is where step ``i`` ends,
    ``start`` where the first step begins.

    >>> chunk_curve([4.0, 2.0, 3.0], [10, 20, 30], 0, chunks=2)
    [[0, 10, 4.0, 1], [10, 30, 2.5, 2]]
    """
    curve, n = [], len(losses)
    for i in range(min(chunks, n)):
        lo, hi = i * n // min(chunks, n), (i + 1) * n // min(chunks, n)
        begin = start if lo == 0 else ends[lo - 1]
        curve.append([begin, ends[hi - 1], sum(losses[lo:hi]) / (hi - lo), hi - lo])
    return curve


def compile_s(step_times: Sequence[float]) -> float:
    """What compiling cost a warmup: its steps' time past as many typical (median) steps.
    The first forward and backward compile; CUDA graphs are recorded over the next few.

    >>> compile_s([4.0, 0.5, 1.5, 0.5, 0.5])  # 7 s against 5 steps of 0.5 s
    4.5
    """
    times = sorted(step_times)
    return max(0.0, sum(times) - len(times) * times[len(times) // 2]) if times else 0.0


def compile_warm(hits: int, misses: int) -> float | None:
    """Whether a run's compile found every graph in the Inductor cache (1.0: warm, as a second run
    on the same machine compiles) or built some (0.0: cold, as a machine's first run of this
    config, what production pays once); None where the cache counted neither (bypassed).

    >>> compile_warm(3, 0), compile_warm(2, 1), compile_warm(0, 0)
    (1.0, 0.0, None)
    """
    if misses:
        return 0.0
    return 1.0 if hits else None


class Window:
    """What the loop did from ``start`` (``time.perf_counter()``) on.

    Attributes:
        start: When it started.
        cpu: CPU seconds the worker's process tree had used at its start (a ceiling's
            window: what it costs the CPUs), or None.
        thread: CPU seconds of the thread running the loop at its start.
        steps: Steps in it.
        samples: Samples in its steps.
        wait: Seconds its steps waited for their batch.
        step_times: Each step's seconds, its wait included.
        outside: Seconds between epochs that its clock skipped (``Trial._resume_clock``).
    """

    def __init__(self, start: float, cpu: float | None = None) -> None:
        self.start, self.cpu = start, cpu
        self.thread = time.thread_time()
        self.steps = 0
        self.samples = 0
        self.wait = 0.0
        self.outside = 0.0
        self.step_times: list[float] = []
        self.waits: list[float] = []  # each step's wait for its batch (``split`` divides ``wait`` by them)
        self._loss_sum: Any = None
        self._loss_steps = 0
        self._losses: list[Any] = []  # the curve's step losses, on the device
        self._ends: list[int] = []  # samples since the first batch at each of those steps' end

    def add_loss(self, loss: Any, end: int | None = None) -> None:
        """Add a step's loss (a tensor, summed on the device); with ``end``, where the step
        ends in samples since the first batch, to the curve as well."""
        self._loss_sum = loss if self._loss_sum is None else self._loss_sum + loss
        self._loss_steps += 1
        if end is not None:
            self._losses.append(loss)
            self._ends.append(end)

    @property
    def ends(self) -> list[int]:
        """Where each of its curve's steps ended, in samples since the first batch."""
        return self._ends

    def joined(self, later: Window) -> Window:
        """This stretch and the ``later`` one that followed it, as one."""
        both = Window(self.start, self.cpu)
        both.thread, both.outside = self.thread, self.outside + later.outside
        both.steps, both.samples, both.wait = (
            self.steps + later.steps,
            self.samples + later.samples,
            self.wait + later.wait,
        )
        both.step_times, both.waits = self.step_times + later.step_times, self.waits + later.waits
        for loss, end in [*zip(self._losses, self._ends), *zip(later._losses, later._ends)]:
            both.add_loss(loss, end)
        return both

    def split(self, steps: int, samples: int, seen: int) -> tuple[Window, Window]:
        """This stretch as two: its first ``steps`` steps, which end ``samples`` samples since the
        first batch, and the rest, which ends at ``seen``. Each keeps its own steps' times, waits
        and losses (the curve's steps, by where they end); the clock of each is its steps' time
        (between-epoch gaps are in neither)."""
        first, rest = Window(self.start, self.cpu), Window(self.start + sum(self.step_times[:steps]), self.cpu)
        first.thread = rest.thread = self.thread
        first.outside, rest.outside = 0.0, self.outside
        for part, times, waits in (
            (first, self.step_times[:steps], self.waits[:steps]),
            (rest, self.step_times[steps:], self.waits[steps:]),
        ):
            part.step_times, part.waits, part.steps, part.wait = list(times), list(waits), len(times), sum(waits)
        rest.samples = seen - samples
        first.samples = self.samples - rest.samples
        for loss, end in zip(self._losses, self._ends):
            (first if end <= samples else rest).add_loss(loss, end)
        return first, rest

    def loss(self) -> float | None:
        """The mean loss of its steps: one device read, at its end (the device synced)."""
        if self._loss_sum is None:
            return None
        return self._loss_sum.item() / self._loss_steps

    def curve(self, seen: int) -> list[list[float]]:
        """Its curve's step losses in ``chunk_curve``'s pieces, ``seen`` samples since the first
        batch at its end (one device read; the device is synced)."""
        if not self._losses:
            return []
        import torch

        return chunk_curve(torch.stack(self._losses).tolist(), self._ends, seen - self.samples)
