"""A trial's phase, and the state a ``Trial``'s parts share, declared once for the type checker.

``autotune.worker._trial.Trial`` is assembled from mixins (``Stretches``, ``CeilingPhases``,
``ProfilePhase``, ``LoaderlessSteps``) over ``Run``; each reads and moves state that
``Trial.__init__`` creates and calls methods another part defines. ``TrialState`` names that
state and those methods with their types, so mypy checks every part against one list. At run
time it is ``object``: it adds nothing to a trial.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from autotune.core._knobs import Part


class Phase(enum.Enum):
    """Where a trial is: warming up, measuring its windows, measuring a ceiling, recording a
    profile, done."""

    WARMUP = "warmup"
    MEASURE = "measure"
    COMPUTE = Part.COMPUTE.value  # the compute ceiling's windows
    LOADER = Part.LOADER.value  # the loader ceiling's windows
    PROFILE = "profile"  # a profile run's steps under torch.profiler (autotune.worker._profile)
    DONE = "done"

    @property
    def ceiling(self) -> Part | None:
        """The part whose ceiling this phase measures, or None."""
        return Part(self.value) if self in (Phase.COMPUTE, Phase.LOADER) else None


if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from typing import Any

    from autotune.training._handles import Run
    from autotune.worker._window import Window

    class TrialState(Run):
        _emit: Callable[..., None]
        _warmup_steps: int
        _warmup_s: float
        _window_s: float
        _windows: int
        _min_window_steps: int
        _ceiling_windows: int
        _learn_windows: int
        _learn_to: float
        _warmup_loss: float | None
        _chunks: list[list[float]]
        _known: dict[str, set[str]]
        _pending: list[Part]
        _step: int
        _seen: int
        _phase: Phase
        _windows_done: int
        _win: Window
        _started: float
        _beat: float
        _announced: bool
        _batch_samples: int
        _epoch_s: float | None
        _epochs: int
        _loop_t0: float | None
        _epoch_rows: int | None
        _last_step: float
        _outside_total: float
        _so_far: tuple[int, float]
        _whole: bool
        _extra: bool
        loaderless: bool

        def _count(self, samples: int, waited: float, t0: float) -> None: ...
        def _reset_window(self, now: float) -> None: ...
        def _sync(self) -> None: ...
        def _say_resolved(self) -> None: ...
        def _source(self, loader: Iterable[Any]) -> Iterator[Any]: ...
        def _beat_if_due(self, now: float) -> None: ...
        def _end_warmup(self) -> None: ...
        def _close_window(self) -> float | None: ...
        @staticmethod
        def _stop_if_nonfinite(loss: float | None) -> None: ...
        def _window_due(self, now: float) -> bool: ...
        def _next_phase(self) -> None: ...
        def _start_recording(self) -> bool: ...
        def _end_recording(self) -> None: ...
        def _split_warmup(self) -> None: ...
        def _last_window_wanted(self) -> bool: ...
        def _measured_all(self) -> bool: ...
else:
    TrialState = object
