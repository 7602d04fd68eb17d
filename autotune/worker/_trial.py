"""The worker side of a trial: the measuring state machine behind a training function's ``Run``.

Production (``Recipe``) never imports this module.
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from autotune.core._ceilings import CACHED_BATCHES
from autotune.core._config import Config
from autotune.core._knobs import Part
from autotune.core._loaders import batch_len, close_epoch
from autotune.machine._launch import Budget
from autotune.machine._proctree import tree_cpu_s
from autotune.training._handles import Run
from autotune.worker._loaderless import LoaderlessSteps
from autotune.worker._marks import Stretches, marks_reached
from autotune.worker._profile import ProfilePhase
from autotune.worker._streams import Repeats
from autotune.worker._trial_close import Closing
from autotune.worker._trial_phases import BudgetSpent, CeilingPhases
from autotune.worker._trial_state import Phase
from autotune.worker._window import Window, compile_s, compile_warm

#: Seconds between a trial's ``progress`` events: the parent's stall detector
#: (``Budget.stall_s``) needs a sign of life, and a clock read per step costs nothing.
PROGRESS_S = 1.0


class Trial(Closing, Stretches, CeilingPhases, ProfilePhase, LoaderlessSteps, Run):
    """A run under tuning: measures the loop in windows and stops it when done, as its
    ``budget`` says (the study's: how long it warms up, its windows, its marks).

    Warmup steps come first (``warmup_steps`` and at least ``warmup_s``); then
    ``windows`` windows of at least ``window_s`` seconds, which end on an epoch's
    last batch once an epoch lasts ``EPOCH_WINDOWS`` windows or less. With ``marks``
    (every trial after the baseline), the warmup and the windows end instead where
    the baseline's did, in samples since the first batch;
    ``whole`` runs the code to its end, ``whole_s`` (the baseline) measures on past
    its windows until the code ends or that many seconds have passed. The device is
    synchronised only at window edges; the loss is summed on the device and read
    once per window.

    Each window also reports its loss curve: the step losses (kept on the device,
    read with the window's) in ``CURVE_CHUNKS`` pieces, each
    with the samples it spans, so that divergence is judged on the same samples for
    every config. The warmup reports its curve too: a config several times the
    baseline's speed can pass the samples the baseline's windows reached while it
    warms up.

    With ``learn_windows`` (the baseline), it measures up to that many windows more
    while its loss over its judged span is above ``learn_to`` times its warmup's.

    Then, with ``ceiling_windows``, the two ceilings (docs/ceilings.md), each
    over that many windows and skipped when ``known_ceilings`` has its key: the
    same loop fed its last few batches again from the device (compute), then the
    loader iterated alone with the transfer (loader).

    With ``trace`` (a profile run, ``autotune run --profile``), each step's parts are timed
    over the windows and a few steps after them are recorded by torch.profiler into that
    file.
    """

    def __init__(
        self,
        config: Config,
        device: Any,
        emit: Callable[..., None],
        budget: Budget,
        *,
        known_ceilings: Mapping[str, Sequence[str]] | None = None,
        trace: str | None = None,
    ) -> None:
        super().__init__(config, device)
        self._emit = emit
        self._warmup_steps, self._warmup_s = budget.warmup_steps, budget.warmup_s
        self._window_s, self._windows, self._min_window_steps = budget.window_s, budget.windows, budget.min_window_steps
        self._ceiling_windows = budget.ceiling_windows
        self._learn_windows, self._learn_to = budget.learn_windows, budget.learn_to
        self._warmup_loss: float | None = None
        self._chunks: list[list[float]] = []  # the loss curve of every window so far
        self._known = {part: set(keys) for part, keys in (known_ceilings or {}).items()}
        self._pending: list[Part] = []  # the ceilings still to measure, fixed when measuring starts
        self._ceiling_index = 0
        self._replayed = 0
        self._cached: collections.deque = collections.deque(maxlen=CACHED_BATCHES)
        self._step = 0
        self.stepped = 0  # run.step() calls (a step whose batch the loop has not handed back yet counts)
        self._seen = 0  # samples consumed since the first batch: the x axis of loss comparisons
        self._phase = Phase.WARMUP
        self._windows_done = 0
        self._reset_window(time.perf_counter())
        self._started = self._beat = self._win.start
        self._announced = False
        self._batch_samples = 0  # of the batch the user's step is training on
        self._compiling = False  # run.model compiled the model: its first steps compile it
        self._epoch_s: float | None = None  # the last whole epoch's seconds (run.batches to its end)
        #: When the last epoch of the measured loader ended (None: none ended, or the next began).
        self._outside_since: float | None = None
        self._repeats = Repeats()  # rows seen again in the first batches (autotune.worker._streams)
        self._epoch_rows: int | None = None  # the last whole epoch's rows
        self._epochs = 0  # epochs of the measured loader that ran to their end
        self._loop_t0: float | None = None  # the first batch (the loop's time starts here)
        self._last_step = 0.0  # when the last training step ended
        self._outside_total = 0.0  # seconds between the measured loader's epochs, all of them
        self._so_far = (0, 0.0)  # samples and seconds of the windows closed so far
        self._start_parts(trace)
        self._start_stretches(budget.marks, budget.whole, budget.whole_s, budget.step_samples)

    def _resume_clock(self, now: float) -> None:
        """An epoch begins: the time since the last one ended (an evaluation pass, a checkpoint,
        the loop's own logging between epochs) is outside the training loop. The window's clock
        skips it (its start moves on by as much) and the window reports it as ``outside_s``: a
        test pass inside a window would otherwise count as a slow training step."""
        if self._outside_since is None:
            return
        gap = now - self._outside_since
        self._outside_since = None
        self._outside_total += gap
        self._win.start += gap
        self._win.outside += gap
        if self._phase == Phase.WARMUP:
            self._started += gap

    def _compiled(self, module: Any) -> Any:
        """Say when the compiled model's first forward starts (compiling it), so that the
        parent's stall clock allows for it; the warmup then reports its cost (``compile_s``)."""
        self._compiling = True

        def first_call(_module: Any, _args: Any) -> None:
            hook.remove()
            self._emit("compiling", step=self._step)

        hook = module.register_forward_pre_hook(first_call)
        return module

    def _after_step(self, loss: Any) -> None:
        if not self._announced:  # a step with no batch from run.batches: nothing would be measured
            raise RuntimeError(
                "run.step() ran before any batch came from run.batches(loader): autotune "
                "measures the loop through it; iterate `for batch in run.batches(loader):`"
            )
        self.stepped += 1
        curve = self._phase in (Phase.WARMUP, Phase.MEASURE)  # its curve: where each step ends, its loss
        self._win.add_loss(loss.detach().float(), self._seen + self._batch_samples if curve else None)

    def batches(self, loader: Iterable[Any]) -> Iterator[Any]:
        asked = time.perf_counter()  # (the epoch's iterator starts its workers now: inside the epoch)
        return self._measured(loader, self._source(loader), asked)

    def _source(self, loader: Iterable[Any]) -> Iterator[Any]:
        """An epoch of the loader's batches, as the loop gets them (on the device, per the prefetch knob)."""
        return Run.batches(self, loader)

    def _copy_edge(self) -> Callable[[], None] | None:
        return None if self._parts is None else lambda: self._edge("copy")

    def _measured(self, loader: Iterable[Any], it: Iterator[Any], asked: float | None = None) -> Iterator[Any]:
        """The batches of ``it`` (an epoch of ``loader``), counted into the trial's windows. The
        epoch begins when its iterator was ``asked`` for (``iter(loader)``, which starts workers that
        do not persist: a config's cost each epoch), not at its first batch; only the time before
        that, between epochs, is outside the loop."""
        epoch_t0 = time.perf_counter() if asked is None else asked
        self._resume_clock(epoch_t0)
        resumed: float | None = epoch_t0  # the parts resume where the window's clock did
        rows = 0
        try:
            while True:
                if self._phase == Phase.LOADER:
                    self._loader_ceiling(loader, it)  # ends the trial
                t0 = time.perf_counter()
                if self._phase == Phase.COMPUTE:  # data already on the device: no loader, no copy
                    batch = self._cached[self._replayed % len(self._cached)]
                    self._replayed += 1
                else:
                    self._edge("data_wait", resumed)
                    resumed = None
                    try:
                        batch = next(it)
                    except StopIteration:
                        self._epoch_rows = rows
                        self._epoch_done(time.perf_counter() - epoch_t0)
                        self._outside_since = time.perf_counter()
                        # between epochs: outside the loop, for the parts on the windows' clock
                        self._edge(None, self._outside_since)
                        return
                    rows += batch_len(batch)
                waited = time.perf_counter() - t0
                if not self._announced:  # the first batch: warmup starts now
                    self._announced = True
                    self._started = self._beat = self._loop_t0 = time.perf_counter()
                    self._scale_marks(batch_len(batch))
                    self._say_resolved()
                if self._phase == Phase.MEASURE and Part.COMPUTE in self._pending:
                    self._cached.append(batch)
                elif self._phase == Phase.WARMUP and self._epoch_rows is None:  # its first epoch's rows:
                    self._repeats.add(batch)  # a second epoch repeats them, and faster configs reach it
                self._batch_samples = batch_len(batch)
                self._edge("forward")
                yield batch
                self._count(batch_len(batch), waited, t0)
        finally:
            close_epoch(it)

    def _reset_window(self, now: float) -> None:
        """Start a window at ``now``: a ceiling's counts what it costs the CPUs, too."""
        self._win = Window(now, tree_cpu_s() if self._phase.ceiling is not None else None)

    def _count(self, samples: int, waited: float, t0: float) -> None:
        now = time.perf_counter()
        self._step += 1
        self._win.steps += 1
        self._win.samples += samples
        self._win.wait += waited
        self._beat_if_due(now)
        if self._phase == Phase.PROFILE:
            if self._recorded_step():
                self._end_recording()
                self._phase = Phase.DONE
                raise BudgetSpent
            return
        if self._phase == Phase.COMPUTE:
            if self._window_due(now):
                self._close_ceiling_window(Part.COMPUTE)
            return
        self._seen += samples
        self._last_step = now
        self._win.step_times.append(now - t0)
        self._win.waits.append(waited)
        self._after_count(now)

    def _end_warmup(self) -> None:
        self._sync()
        self._phase = Phase.MEASURE
        if self._marks:  # (the warmup's own mark is reached)
            self._mark = marks_reached(self._marks, self._seen)
        self._time_parts()
        self._pending = [part for part in (Part.COMPUTE, Part.LOADER) if self._wants(part)]
        loss = self._win.loss()
        self._warmup_loss = loss
        seconds = time.perf_counter() - self._started
        # at most the warmup's own time: the first step's time counts its wait for the first
        # batch, which came before the warmup's clock started
        cost = (
            {"compile_s": min(seconds, compile_s(self._win.step_times)), **_compile_cache()} if self._compiling else {}
        )
        repeats = {"repeat_share": self._repeats.share} if self._repeats.share is not None else {}
        self._said_warmup = {**cost, **repeats}  # (said again if the code's end makes it the whole run)
        self._warmup_win = self._win
        self._emit(
            "warmup",
            steps=self._step,
            seconds=seconds,
            samples=self._win.samples,
            samples_seen=self._seen,
            loss=loss,
            curve=self._win.curve(self._seen),
            **cost,
            **repeats,
        )
        self._reset_window(time.perf_counter())
        self._stop_if_nonfinite(loss)

    def _beat_if_due(self, now: float) -> None:
        if now - self._beat >= PROGRESS_S:  # the parent's stall detector counts on these
            self._beat = now
            # measuring: its samples and seconds so far, the window under way's too (a slow config
            # is pruned on them before its windows, at the baseline's marks, are done)
            so_far = (
                {
                    "samples": self._so_far[0] + self._win.samples,
                    "seconds": self._so_far[1] + now - self._win.start,
                    "window_s": now - self._win.start,
                    "wall": time.time(),
                }
                if self._phase == Phase.MEASURE
                else {}
            )
            self._emit("progress", step=self._step, **so_far)

    @staticmethod
    def _stop_if_nonfinite(loss: float | None) -> None:
        # A nan or inf loss never recovers: end the trial now, not after its budget.
        if loss is not None and not math.isfinite(loss):
            raise BudgetSpent


def _compile_cache() -> dict[str, float]:
    """``compile_warm`` for the compile just done (``autotune.worker._window.compile_warm``), read from
    torch's counters of its Inductor and AOTAutograd caches; nothing where they counted neither."""
    from torch._dynamo.utils import counters

    hits = counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"]
    misses = counters["inductor"]["fxgraph_cache_miss"] + counters["aot_autograd"]["autograd_cache_miss"]
    warm = compile_warm(hits, misses)
    return {} if warm is None else {"compile_warm": warm}
