"""Where a step's time goes: its parts timed in a profile run, and a torch.profiler trace of it.

A profile run (``autotune.tuner._profiling``) measures one window with each step cut into
``PARTS`` at the edges the loop passes through autotune (``run.batches``, ``run.step``,
or an unmodified script's hooked ``DataLoader``, ``backward`` and ``optimizer.step``);
then records a few steps under ``torch.profiler`` with those parts as labelled ranges
(``autotune.data_wait`` ...) and writes them as a Chrome trace, which Perfetto and
TensorBoard open. The parts' seconds come from the window, outside the profiler, so that
they add up to the step time the trial measured; the profiler's own cost shows in the
trace's steps only.

On CUDA each edge synchronises the device in the profile run, so that a part is what the
device spent on it, not the time to queue its kernels.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.core._memline import MemoryLine, memory_path
from autotune.worker._trial_state import TrialState

#: A step's parts, in the order a step passes them. ``copy``: the batch's copy to the device
#: on the loop's thread (0 where a prefetcher copies on its own thread or stream: overlapped);
#: ``forward``: from the batch to the backward (the model and the loss; in an unmodified script
#: also its own ``.to(device)``); ``other``: after the optimizer's step until the next batch is
#: asked for (logging, ``loss.item()``, the loop's own work).
PARTS = ("data_wait", "copy", "forward", "backward", "optimizer", "other")
#: What the report and the summary call each part.
LABELS = {
    "data_wait": "data wait",
    "copy": "copy to device",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer step",
    "other": "other",
}
#: Steps recorded under torch.profiler after the timed window, all in the trace; the first 2
#: carry the profiler's own start and are left out of the recorded steps' time.
PROFILER_WARMUP, PROFILER_ACTIVE = 2, 6


class StepParts:
    """The current part of the loop, its seconds summed per part, and its range in the trace.

    ``mark(part)`` ends the part running and starts ``part``: the parts tile the loop's
    time, so their sum over a stretch is the stretch's wall time. With ``ranges`` set each
    part is also a ``torch.profiler.record_function`` range (they show in a trace when one is
    recording); on a CUDA device each edge waits for the device first.
    """

    def __init__(self, device: Any, ranges: bool = False) -> None:
        self.seconds = dict.fromkeys(PARTS, 0.0)
        self.ranges = ranges
        self._part: str | None = None
        self._since = 0.0
        self._range: Any = None
        self._sync = getattr(device, "type", "cpu") == "cuda"
        self._device = device
        #: On CUDA, the allocator's bytes at each edge of the timed window (``autotune.core._memline``).
        self.memory = MemoryLine(device) if self._sync else None

    def mark(self, part: str | None, at: float | None = None) -> None:
        """End the running part (if any) and start ``part`` (None: stop timing), now or ``at``
        (an instant of the window's clock already taken, never before the running part began)."""
        if self._sync:
            import torch

            torch.cuda.synchronize(self._device)
        now = time.perf_counter() if at is None else max(at, self._since)
        if self._part is not None:
            self.seconds[self._part] += now - self._since
        if self._range is not None:
            self._range.__exit__(None, None, None)
            self._range = None
        self._part, self._since = part, now
        if self.memory is not None and part is not None:
            self.memory.sample(part)
        if part is not None and self.ranges:
            from torch.profiler import record_function

            self._range = record_function(f"autotune.{part}")
            self._range.__enter__()

    def reset(self) -> None:
        """Zero the sums; the running part goes on from now."""
        self.seconds = dict.fromkeys(PARTS, 0.0)
        self._since = time.perf_counter()


def recorder(device: Any):
    """A ``torch.profiler.profile`` for a profile run's recorded steps (CPU, and CUDA on a GPU),
    not yet started."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if getattr(device, "type", "cpu") == "cuda":
        activities.append(ProfilerActivity.CUDA)
    return profile(
        activities=activities,
        record_shapes=False,
        profile_memory=getattr(device, "type", "cpu") == "cuda",
        with_stack=False,
    )


def write_trace(prof: Any, path: Path) -> int:
    """Write the recorder's Chrome trace to ``path`` (gzip where it ends in ``.gz``); its bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    plain = path.with_suffix("") if path.suffix == ".gz" else path
    prof.export_chrome_trace(str(plain))
    if plain != path:
        with open(plain, "rb") as src, gzip.open(path, "wb") as dst:
            dst.write(src.read())
        plain.unlink()
    return path.stat().st_size


def trace_events(path: Path) -> list[dict[str, Any]]:
    """The events of a Chrome trace written by ``write_trace``."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f).get("traceEvents", [])


def breakdown(seconds: Mapping[str, float], steps: int) -> dict[str, float]:
    """Each part's seconds per step, from a window's sums over ``steps`` steps; ``step`` is
    their sum (the window's step time).

    >>> breakdown({"data_wait": 0.2, "forward": 0.6, "backward": 1.0, "optimizer": 0.2}, 100)
    {'data_wait': 0.002, 'copy': 0.0, 'forward': 0.006, 'backward': 0.01, 'optimizer': 0.002, 'other': 0.0, 'step': 0.02}
    """
    if steps <= 0:
        raise ValueError(f"breakdown over {steps} steps: needs at least one")
    per = {part: round(seconds.get(part, 0.0) / steps, 9) for part in PARTS}
    per["step"] = round(sum(per.values()), 9)
    return per


def shares(parts: Mapping[str, float]) -> dict[str, float]:
    """Each part's share of the step (``breakdown``'s ``step``); empty without a step time.

    >>> shares({"data_wait": 0.5, "forward": 1.5, "step": 2.0})["forward"]
    0.75
    """
    step = parts.get("step") or 0.0
    if step <= 0:
        return {}
    return {part: parts.get(part, 0.0) / step for part in PARTS}


def changed(base: Mapping[str, float], winner: Mapping[str, float]) -> str:
    """One line: the step time (and its samples, where the batch changed) and the parts that moved
    most from the baseline to the winner.

    >>> changed({"data_wait": 0.010, "forward": 0.004, "backward": 0.004, "step": 0.018, "samples": 32},
    ...         {"data_wait": 0.001, "forward": 0.004, "backward": 0.004, "step": 0.009, "samples": 32})
    'step 18.0 ms -> 9.0 ms; data wait 10.0 -> 1.0 ms (56% -> 11% of the step)'
    >>> changed({"data_wait": 0.001, "forward": 0.001, "step": 0.002, "samples": 32},
    ...         {"data_wait": 0.001, "forward": 0.004, "step": 0.005, "samples": 128})
    'step 2.0 ms (32 samples) -> 5.0 ms (128 samples), 62.5 -> 39.1 us a sample; data wait 31.2 -> 7.8 us a sample (50% -> 20% of the step)'
    """
    n0, n1 = base.get("samples", 0.0), winner.get("samples", 0.0)
    per_sample = bool(n0 and n1 and abs(n0 - n1) > 0.01 * n0)  # another batch: a step is not the same work
    scale0, scale1, unit = (1e6 / n0, 1e6 / n1, "us a sample") if per_sample else (1e3, 1e3, "ms")
    moved = sorted(
        (part for part in PARTS if base.get(part, 0.0) or winner.get(part, 0.0)),
        key=lambda p: -abs(base.get(p, 0.0) * scale0 - winner.get(p, 0.0) * scale1),
    )
    before, after = shares(base), shares(winner)
    parts = [
        f"{LABELS[p]} {base.get(p, 0.0) * scale0:.1f} -> {winner.get(p, 0.0) * scale1:.1f} {unit} "
        f"({before.get(p, 0.0):.0%} -> {after.get(p, 0.0):.0%} of the step)"
        for p in moved[:2]
        if abs(base.get(p, 0.0) * scale0 - winner.get(p, 0.0) * scale1) >= 0.1 * base.get("step", 0.0) * scale0
    ]
    step = f"step {base.get('step', 0.0) * 1e3:.1f} ms -> {winner.get('step', 0.0) * 1e3:.1f} ms"
    if per_sample:
        step = (
            f"step {base['step'] * 1e3:.1f} ms ({n0:.0f} samples) -> {winner['step'] * 1e3:.1f} ms "
            f"({n1:.0f} samples), {base['step'] * scale0:.1f} -> {winner['step'] * scale1:.1f} us a sample"
        )
    return "; ".join([step, *parts])


class ProfilePhase(TrialState):
    """The profile phase of a ``Trial`` (a mixin, as ``CeilingPhases``): with a trace path, the
    step's parts are timed from the warmup's end (``StepParts``), and after the windows a few
    steps are recorded under torch.profiler; then the ``profile`` event ends the run."""

    def _start_parts(self, trace: str | None) -> None:
        self._trace = trace
        self._parts = StepParts(self.device) if trace else None
        self._parts_from = self._parts_seen = 0  # the step and the samples the timed stretch starts at
        self._recording: Any = None
        self._recorded = 0  # steps ended under the profiler
        self._recording_t0 = 0.0  # when the recorded steps past PROFILER_WARMUP began
        self._timed: dict[str, float] | None = None
        self._memory: dict[str, Any] | None = None  # on CUDA: the allocator over the window (MemoryFinding)

    def _edge(self, part: str | None, at: float | None = None) -> None:
        if self._parts is not None:
            self._parts.mark(part, at)

    def _time_parts(self) -> None:
        """The warmup ended: the timed stretch (the windows) starts now."""
        if self._parts is not None:
            self._parts.reset()
            self._parts_from, self._parts_seen = self._step, self._seen
            if self._parts.memory is not None:
                self._parts.memory.start(self._step)

    def _start_recording(self) -> bool:
        """After the windows: start torch.profiler; False where this is no profile run."""
        if self._parts is None or self._trace is None:  # (a profile run has both)
            return False
        steps = max(1, self._step - self._parts_from)
        self._timed = {**breakdown(self._parts.seconds, steps), "samples": (self._seen - self._parts_seen) / steps}
        line = self._parts.memory
        if line is not None and line.active:
            found = line.stop(self._step)
            line.write(memory_path(self._trace), found)
            self._memory = {**found.as_dict(), "timeline": str(memory_path(self._trace))}
        self._recording = recorder(self.device)
        self._recording.__enter__()
        self._parts.ranges = True
        self._recording_t0 = time.perf_counter()
        return True

    def _recorded_step(self) -> bool:
        """A step ended under the profiler; True once the trace has all it records."""
        self._recorded += 1
        if self._recorded == PROFILER_WARMUP:
            self._recording_t0 = time.perf_counter()
        return self._recorded >= PROFILER_WARMUP + PROFILER_ACTIVE

    def _end_recording(self) -> None:
        """Stop the profiler, write its trace, say what the steps cost (``profile``)."""
        if self._recording is None or self._trace is None:  # (recording: a profile run, with its trace)
            return
        recording, self._recording = self._recording, None
        self._edge(None)
        steps = max(1, self._recorded - (PROFILER_WARMUP if self._recorded >= PROFILER_WARMUP else 0))
        seconds = time.perf_counter() - self._recording_t0
        recording.__exit__(None, None, None)
        path = Path(self._trace)
        size = write_trace(recording, path)
        self._emit(
            "profile",
            parts=self._timed,
            trace=str(path),
            trace_bytes=size,
            recorded_steps=steps,
            recorded_step_s=seconds / steps,
            memory=self._memory,
        )
