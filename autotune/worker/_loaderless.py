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

#: Said where a loader gave one batch and the loop then stepped on it alone.
READ_ONCE = (
    "autotune: {name}.step() ran again on the same batch (the loader gave one and then none): the loop "
    "trains on data it holds, measured in its optimizer's steps; the loader's knobs do not apply"
)


class LoaderlessSteps(TrialState):
    """The part of ``autotune.worker._trial.Trial`` that measures a loop without a DataLoader (a
    mixin: the window state is the trial's own)."""

    #: The code stepped an optimizer before any DataLoader gave a batch: the loop has none.
    loaderless = False
    _step_end = 0.0
    _first_stepper: Any = None  # the optimizer that stepped first after the training loader's batch

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

    def _loader_read_once(self, optimizer: Any, loss: Any) -> bool:
        """After an optimizer step that came before the training loader's second batch: whether the
        optimizer that stepped first stepped again on that one batch. The loader then only read the
        data (a full batch taken once, as pytorch/examples' mnist_forward_forward does with
        ``next(iter(loader))``), and the loop is measured in its steps from this one. Another
        optimizer stepping on the same batch is a GAN's or a two-model loop's: not this."""
        if self._first_stepper is None:
            self._first_stepper = optimizer
            return False
        if optimizer is not self._first_stepper:
            return False
        print(READ_ONCE.format(name=type(optimizer).__name__), flush=True)
        self._loaderless_step(loss)
        return True
