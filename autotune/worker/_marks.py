"""When a trial's warmup and windows end: counted in the training's own samples, not the clock.

The baseline (the code as written) measures its warmup and windows in seconds (at least
``warmup_s``, then windows of at least ``window_s``) and records where each ended in samples
since its first batch: its *marks*. Every later trial of the study ends its warmup and
its windows at those marks (``Budget.marks``), so each config is timed over the same
stretch of the same training whatever its speed: a config five times faster is measured
on the same samples in a fifth of the time, never on fewer windows. (Counted in seconds,
the faster a config, the fewer of its windows fitted before a short script ended: on an
H200 every faster config of the quickstart was a "short measure" and none ranked.)

A window still needs ``min_window_steps`` steps and ``MIN_WINDOW_S`` seconds: one shorter
than that (a larger batch crosses two marks in a step) is merged into the next.

Two more ways to end, for the whole run of a short script (``autotune.tuner._training_shape``):

- ``whole``: the trial never stops the code; after the marks its last window closes where
  the code returns, and the run is ranked on its whole wall time.
- ``whole_s`` (the baseline): after its windows it goes on measuring (*extra* windows,
  which the tuner keeps only if the code returns by itself) until the code returns or
  ``whole_s`` seconds have passed since the worker started; only then its ceilings.

``Stretches`` is that part of ``autotune.worker._trial.Trial`` (a mixin: the window state is the
trial's own).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from autotune.core._guard import LARGER_BATCH, judged_span, mean_over
from autotune.worker._trial_state import Phase, TrialState

#: Where an epoch lasts at most this many windows, the warmup and every window end on an
#: epoch's last batch (a window: once it has lasted ``window_s``, or reached its mark), so
#: each window holds whole epochs. A loader's rate swings within an epoch (its workers
#: start, or their queues fill, at each epoch's start, and run dry at its end): the jpeg
#: runner with 24 workers read 1,000 and 400 samples/s in turns in 1 s windows over its
#: 2 s epochs, and the median of three such windows was either, by their phase. Production
#: pays for whole epochs.
EPOCH_WINDOWS = 2.0
#: A window aligned to epochs closes anyway past this many ``window_s`` (epochs that
#: grew longer than they were).
ALIGNED_MAX = 3.0
#: Seconds a window lasts at least, at a mark: shorter, the clock's and the scheduler's
#: jitter (a millisecond or so on a loaded host) would be a large share of it. A config 30x the
#: baseline's speed still gets windows of its own at the default 1.5 s (a 5x one, at the tests'
#: 0.3 s windows, lost one of three to a floor of 0.05 s).
MIN_WINDOW_S = 0.02


#: A window of a config this many times slower than the baseline (lasting this many of its
#: ``window_s``) closes where it is, short of its mark, and counts as that mark's: seconds are
#: the measure's ceiling as well as its floor. It is that slow (the pruning rule says so, unless
#: --prune 0), and counted in samples, a config 7x slower on twice the batch measured 15x the
#: baseline's time (two tuners sharing 2 CPUs: 80 s for a 2-trial study of 16).
SLOW_WINDOWS = 4.0


def marks_reached(marks: Sequence[int], seen: int, start: int = 0) -> int:
    """The index of the first of ``marks[start:]`` above ``seen`` (``len(marks)``: all reached).

    >>> marks_reached([100, 200, 300], 250), marks_reached([100, 200, 300], 300), marks_reached([100], 0)
    (2, 3, 0)
    """
    i = start
    while i < len(marks) and marks[i] <= seen:
        i += 1
    return i


class Stretches(TrialState):
    """When the warmup and the windows of a ``Trial`` end (see the module's docstring)."""

    def _start_stretches(self, marks: Sequence[int], whole: bool, whole_s: float, step_samples: float) -> None:
        self._marks = list(marks)
        self._step_samples = step_samples
        self._mark = 0  # the next mark to reach
        self._whole, self._whole_s = whole, whole_s
        self._born = time.perf_counter()  # (the worker's start, near enough: whole_s counts from here)
        self._extra = False  # the baseline measures on past its windows (``whole_s``)
        self._passed = False  # the window under way has reached a mark
        self._warmup_win: Any = None  # the warmup's stretch, and what its event said besides
        self._said_warmup: dict[str, Any] = {}

    def too_short(self, steps: int) -> str | None:
        """Why code that returned by itself after ``steps`` training steps gave nothing to measure,
        with its numbers, or None: too few for a warmup and one window (the floor of any measure).
        A trial of a whole study is measured by its wall time, window or not: dcgan at 8x the
        batch ran FakeData's 1,000 images in 2 batches, no window, and was counted a crash."""
        if self._windows_done or self._whole:
            return None
        return (
            f"ended after {steps} training step{'s' * (steps != 1)}, before one measured window: a measure "
            f"needs a warmup (at least {self._warmup_steps} steps and {self._warmup_s:g} s: DataLoader workers "
            f"starting, caches filling), then a window of at least {self._min_window_steps} steps; give it "
            "more epochs or steps (its own arguments), or shorten --warmup"
        )

    def _scale_marks(self, batch: int) -> None:
        """At the first batch: on batches larger than the baseline's (its knob or its code), measured
        in pieces, the marks times the ratio, so that it is measured over the same steps. Its
        divergence is judged at the same steps (``autotune.core._guard.same_steps``), and it needs the
        samples to reach the baseline's loss: at the same samples, a 4x batch of shuffled labels
        took 16 steps, where the baseline's loss had not fallen yet, and passed as complete."""
        ratio = batch / self._step_samples if self._step_samples else 1.0
        if self._marks and not self._whole and ratio > LARGER_BATCH:
            self._marks = [round(mark * ratio) for mark in self._marks]

    def _measured_all(self) -> bool:
        """Whether the windows this trial was asked for are measured."""
        if self._marks:
            return self._mark >= len(self._marks)
        return self._windows_done >= self._windows

    def _warm(self, now: float) -> bool:
        if self._marks:
            return self._seen >= self._marks[0]
        return self._step >= self._warmup_steps and now - self._started >= self._warmup_s

    def _window_due(self, now: float) -> bool:
        """Whether a window in seconds is due (a ceiling's; the baseline's, which sets the marks)."""
        return self._win.steps >= self._min_window_steps and now - self._win.start >= self._window_s

    def _mark_due(self, now: float) -> bool:
        """Whether a measured window is due: at the mark it reached, or where there are none (the
        baseline, a study from before marks), by ``_window_due``. A window too short at its mark
        runs on to the next (merged), or past the last, until it is long enough; past the last
        mark a whole run's window closes only where the code returns."""
        if not self._marks or self._extra:
            return self._window_due(now)
        if (
            not self._whole
            and self._window_s
            and self._mark < len(self._marks)
            and self._seen < self._marks[self._mark]
            and now - self._win.start >= SLOW_WINDOWS * self._window_s
            and self._win.steps >= self._min_window_steps
        ):
            self._mark += 1  # (a window of its time, not its samples: see SLOW_WINDOWS)
            return True
        if self._mark < len(self._marks) and self._seen >= self._marks[self._mark]:
            self._mark = marks_reached(self._marks, self._seen, self._mark)
            self._passed = True
        elif not self._passed or self._mark < len(self._marks):
            return False  # (between marks: only a window past its last mark closes there)
        return self._win.steps >= self._min_window_steps and now - self._win.start >= MIN_WINDOW_S

    def _aligned(self) -> bool:
        """Whether the warmup and the windows end on an epoch's last batch (``EPOCH_WINDOWS``): the
        baseline's; every later trial's end at its marks, which are on its epochs' ends where it was
        aligned (a faster config's own epochs would be short enough to align where it was not)."""
        return not self._marks and self._epoch_s is not None and self._epoch_s <= EPOCH_WINDOWS * self._window_s

    def _after_count(self, now: float) -> None:
        """A measured step was counted: the warmup or the window ends here, if due."""
        if self._phase is Phase.WARMUP:
            if self._warm(now) and not self._aligned():
                self._end_warmup()
        elif self._mark_due(now) and (
            not self._aligned() or now - self._win.start >= ALIGNED_MAX * max(self._window_s, MIN_WINDOW_S)
        ):
            self._end_window()

    def _epoch_done(self, seconds: float) -> None:
        """An epoch ended (its iterator ran out): the warmup or the window ends here, if due."""
        self._epoch_s = seconds
        self._epochs += 1
        if not self._aligned():
            return
        now = time.perf_counter()
        if self._phase is Phase.WARMUP and self._warm(now):
            self._end_warmup()
        elif self._phase is Phase.MEASURE and self._mark_due(now):
            self._end_window()

    def _end_window(self) -> None:
        loss = self._close_window()
        self._passed = False
        self._stop_if_nonfinite(loss)
        if not self._measured_all() or self._still_learning() or self._whole:
            return  # (a whole run goes on to the code's end)
        if self._whole_s and time.perf_counter() - self._born < self._whole_s:
            self._extra = True  # the baseline: on, in case the code ends by itself in time
            return
        self._next_phase()

    def _still_learning(self) -> bool:
        """Whether to measure one more window: ``learn_windows`` are left and the loss over
        the judged span is still above ``learn_to`` times the warmup's (a positive loss)."""
        if (
            self._marks
            or self._extra
            or self._windows_done >= self._windows + self._learn_windows
            or not self._warmup_loss
            or self._warmup_loss < 0
            or not math.isfinite(self._warmup_loss)
        ):
            return False
        span = judged_span(self._chunks)
        loss = mean_over(self._chunks, *span) if span else None
        return loss is None or loss > self._learn_to * self._warmup_loss

    def _split_warmup(self) -> None:
        """Code that returned inside its warmup, or right after it with no window (shorter than
        the warmup's seconds, or its epochs aligned and the warmup's end the last epoch's): where
        it took a warmup's steps and a window's, its first ``warmup_steps`` steps (``marks[0]``'s
        samples, where it has marks) were its warmup, said again, and the rest its one window,
        which ``finish`` closes. A whole run of 140 steps is a measure, however short."""
        win, k, said = self._win, self._warmup_steps, self._said_warmup
        if self._phase is Phase.MEASURE and not self._windows_done and win.steps < self._min_window_steps:
            win = self._warmup_win.joined(win)  # (the parent keeps the last warmup it is told)
        elif self._phase is not Phase.WARMUP:
            return
        if win.steps < k + self._min_window_steps or len(win.ends) < win.steps:
            return
        if self._marks:  # (a trial of a whole study: its warmup's mark, where a step reached it)
            k = next((i + 1 for i, end in enumerate(win.ends) if end >= self._marks[0]), k)
            if win.steps - k < self._min_window_steps:
                return
        at = win.ends[k - 1]
        first, rest = win.split(k, at, self._seen)
        self._win = first
        self._emit(
            "warmup",
            steps=k,
            seconds=sum(first.step_times),
            samples=first.samples,
            samples_seen=at,
            loss=first.loss(),
            curve=first.curve(at),
            **said,
        )
        self._phase, self._win = Phase.MEASURE, rest
        if self._marks:
            self._mark = marks_reached(self._marks, at)

    def _last_window_wanted(self) -> bool:
        """Whether the code's return closes a last, partial window: in a whole run, in the
        baseline's run past its windows, or where the windows were not all measured."""
        return (
            self._phase is Phase.MEASURE
            and self._win.steps >= self._min_window_steps
            and (self._whole or self._extra or not self._measured_all())
        )
