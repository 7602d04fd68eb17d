"""A training loop without a DataLoader, measured in its optimizer's steps.

Language models and RL scripts slice their batches from tensors (nanoGPT's ``get_batch``,
pytorch/examples' word_language_model): there is no loader to count samples at. The trial's
clock then runs on the optimizer's steps instead: the end of each step is the edge of the next
(the step's own data preparation is inside it, so no data wait is measured), and each step counts
as one sample, the unit of the marks, windows and loss curve of every trial alike. No loader knob
applies to such a loop, and the study does not draw them (``autotune.tuner._space_now``).
"""

from __future__ import annotations

import time
from typing import Any

from autotune.worker._trial_state import TrialState


class LoaderlessSteps(TrialState):
    """The part of ``autotune.worker._trial.Trial`` that measures a loop without a DataLoader (a
    mixin: the window state is the trial's own)."""

    #: The code stepped an optimizer before any DataLoader gave a batch: the loop has none.
    loaderless = False
    _step_end = 0.0

    def _loaderless_step(self, loss: Any) -> None:
        """After an optimizer step of a loop that takes no batch from a DataLoader. The first one
        starts the clock, as a loader's first batch does (its step held the set-up and is not
        counted); each later one is a step of one sample."""
        now = time.perf_counter()
        if not self._announced:
            self.loaderless = True
            self._announced = True
            self._started = self._beat = self._loop_t0 = self._step_end = now
            self._batch_samples = 1
            self._say_resolved()
            return
        self._after_step(loss)
        started, self._step_end = self._step_end, now
        self._count(1, 0.0, started)
