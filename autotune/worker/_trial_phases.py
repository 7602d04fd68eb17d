"""The two ceiling phases a ``Trial`` measures after its windows (its ``Phase``: ``_trial_state``).

After its measured windows a trial may measure the two ceilings (``autotune.core._ceilings``):
the compute ceiling (the same loop fed its last few batches again from the device) and
the loader ceiling (the loader iterated alone, with the transfer). ``CeilingPhases`` is
that part of ``autotune.worker._trial.Trial``: it reads and moves the trial's window state.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

from autotune.core._ceilings import ceiling_key
from autotune.core._knobs import Part
from autotune.core._loaders import batch_len, close_epoch
from autotune.machine._proctree import tree_cpu_s
from autotune.worker._trial_state import Phase, TrialState

#: Batches after which a loader ceiling window may close at a quarter of its length.
QUICK_LOADER_BATCHES = 32


class BudgetSpent(BaseException):
    """Ends a trial's training function once its measured windows are done.

    A BaseException, like KeyboardInterrupt, so that a user's ``except Exception``
    around the loop cannot swallow it; the worker catches it.
    """


class CeilingPhases(TrialState):
    """The ceiling phases of a ``Trial`` (a mixin: the trial's window state is its own)."""

    def _wants(self, part: Part) -> bool:
        """Whether this trial still has to measure the ceiling of ``part``."""
        if not self._ceiling_windows or self.loaderless:  # (both ceilings take batches from its loader)
            return False
        return ceiling_key(part, self.resolved()) not in self._known.get(part.value, ())

    def _next_phase(self) -> None:
        """After the windows: the compute ceiling, then the loader's, then the end."""
        if not self._pending:
            if self._start_recording():
                self._phase = Phase.PROFILE
                return
            self._phase = Phase.DONE
            raise BudgetSpent
        self._phase = Phase(self._pending.pop(0).value)
        self._ceiling_index = 0
        self._reset_window(time.perf_counter())

    def _close_ceiling_window(self, part: Part) -> None:
        from autotune.machine._probe import usable_cpus

        self._sync()
        now = time.perf_counter()
        assert self._win.cpu is not None  # a ceiling's window counts its CPU (Trial._reset_window)
        self._emit(
            "ceiling",
            part=part.value,
            key=ceiling_key(part, self.resolved()),
            index=self._ceiling_index,
            steps=self._win.steps,
            samples=self._win.samples,
            seconds=now - self._win.start,
            cpu_s=tree_cpu_s() - self._win.cpu,
            cpus=usable_cpus(),
            wall=time.time(),
        )
        self._ceiling_index += 1
        self._reset_window(now)
        if self._ceiling_index >= self._ceiling_windows:
            self._next_phase()

    def _loader_ceiling(self, loader: Iterable[Any], it: Iterator[Any]) -> None:
        """Iterate the loader alone, with the transfer, no model; raises BudgetSpent at the end.

        The batches the workers (and the thread prefetcher) queued ahead while the
        model ran are drained first: they cost nothing now and would flatter it.
        """
        from autotune.training._prefetch import THREAD_DEPTH

        resolved = self.resolved()
        queued = resolved.get("num_workers", 0) * resolved.get("prefetch_factor", 0) + (
            THREAD_DEPTH if resolved.get("prefetch") == "thread" else 0
        )
        drain = queued + 1
        epochs = [it]
        try:
            while True:
                try:
                    batch = next(epochs[-1])
                except StopIteration:  # a new epoch: its worker start-up is part of the cost
                    epochs.append(self._source(loader))
                    continue
                now = time.perf_counter()
                self._step += 1
                self._beat_if_due(now)
                if drain:
                    drain -= 1
                    if not drain:
                        self._sync()
                        self._reset_window(time.perf_counter())
                    continue
                self._win.steps += 1
                self._win.samples += batch_len(batch)
                elapsed = now - self._win.start
                # A fast loader is timed over a quarter window: its rate is precise by then.
                if self._window_due(now) or (elapsed >= self._window_s / 4 and self._win.steps >= QUICK_LOADER_BATCHES):
                    self._close_ceiling_window(Part.LOADER)  # the last one raises BudgetSpent
        finally:
            for extra in epochs[1:]:
                close_epoch(extra)
