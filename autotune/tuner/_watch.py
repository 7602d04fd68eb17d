"""Run one trial: launch its worker, read its events, watch its limits, classify its end."""

from __future__ import annotations

import dataclasses
import math
import os
import select
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core._events import EventReader
from autotune.core._guard import (
    Chunk,
    Comparison,
    LossReference,
    Point,
    judge_loss,
    judged_curve,
    loss_curve,
    loss_history,
)
from autotune.core._loss_signal import noise_line, per_sample, per_sample_factor, per_sample_line, self_disagreement
from autotune.core._outcome import Outcome, WorkerExit, classify
from autotune.core._to_loss import loss_fall, to_loss
from autotune.machine._figures import (
    add_foreign_load,
    log_tail,
    marks_of,
    overheads,
    run_figures,
    run_load,
    summarize,
    summarize_ceilings,
    window_series,
)
from autotune.machine._launch import Budget, TrialSpec, launch
from autotune.machine._monitor import Monitor, nvml_handle
from autotune.machine._reap import kill_group, kill_processes
from autotune.stores._records import changes_batch

if TYPE_CHECKING:
    from autotune.machine._launch import Launcher


@dataclasses.dataclass
class TrialResult:
    """What one worker did."""

    outcome: Outcome
    reason: str
    metrics: dict[str, float]
    series: dict[str, list[float]]
    windows: list[dict[str, Any]]
    resolved: dict[str, Any]
    base_batch_size: int | None
    lr: float | None
    log_path: Path
    losses: list[Point] = dataclasses.field(default_factory=list)
    ceilings: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: Its loss curve (``autotune.core._guard.loss_curve``): the baseline's judges the study's trials.
    curve: list[Chunk] = dataclasses.field(default_factory=list)
    #: What its loader read (``autotune.core._loaders.dataset_facts``): batches per epoch, batched fetch.
    dataset: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Its loss against the baseline's as the divergence verdict compared them, complete or
    #: diverged (None: no baseline to judge by, nothing shared with it, or stopped before its
    #: end). Also in :attr:`metrics` where finite: ``loss_excess``, and the ``loss_tolerance``
    #: it was held to.
    judged: Comparison | None = None
    #: A profile run's ``profile`` event (``autotune.worker._profile``): its step's parts, its trace.
    profile: dict[str, Any] | None = None
    #: Where its warmup and windows ended (``autotune.machine._figures.marks_of``), and whether its code
    #: returned by itself (``ended``): the baseline's set every later trial's (``autotune.tuner._training_shape``).
    shape: dict[str, Any] = dataclasses.field(default_factory=dict)


#: Events that show the training loop is alive (the stall clock restarts on each).
_PROGRESS = frozenset({"resolved", "progress", "warmup", "window", "ceiling"})

#: A reason to stop a running trial now: the outcome it ends with, and why.
Stop = tuple[Outcome, str]


def run_trial(
    spec: TrialSpec,
    log_path: Path,
    ram_budget: int | None = None,
    on_event: Callable[[dict[str, Any]], Stop | None] | None = None,
    *,
    interrupt: threading.Event | None = None,
    against: LossReference = LossReference(),
    floor: int | None = None,
    warm: Launcher | None = None,
) -> TrialResult:
    """Run one worker to its end and classify it. Never raises for the trial's own faults.

    The worker runs in its own process group, which is killed when the trial ends
    (however it ends), so no DataLoader worker outlives it; so is every process
    carrying the trial's tag (``TRIAL_TAG_ENV``), which catches those that left
    the group with ``setsid``. It is also killed, as
    ``timeout``, when it has no batch after ``budget.startup_s``, no finished step
    for ``budget.stall_s`` or runs past the deadline; as ``oom_host`` when the
    monitor sees the RAM budget or the machine's floor crossed.

    Args:
        spec: What to run.
        log_path: Where the worker's stdout and stderr go.
        ram_budget: Bytes its process tree may use.
        on_event: Gets every event (and a first ``spawned`` one with the pid and the
            tag, which ``kill_orphans`` takes); a verdict it returns (pruned,
            diverged) stops the trial with that outcome.
        interrupt: Set from elsewhere (a signal handler) to stop the trial as
            ``interrupted``.
        against: The baseline's loss history and curve, and the tolerance, to judge divergence
            (``autotune.core._guard.divergence``: on the same samples in both); the default (none)
            for the baseline itself.
        floor: Available-memory floor in bytes (default: the monitor's).
        warm: The slot's warm worker (``autotune.worker._warm``): the worker is forked from it
            when it can be, else spawned cold (``autotune.machine._launch.launch``).
    """
    read_fd, write_fd = os.pipe()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    spawned = time.monotonic()  # the spans (``overheads``) start here: the spawn's own cost counts
    with open(log_path, "wb") as log:
        proc, tag = launch(spec, log.fileno(), write_fd, warm)
    os.close(write_fd)
    killed: list[Stop] = []
    so_far: dict[str, Any] = {}  # the last measure so far its progress said

    def kill(outcome: Outcome, reason: str) -> None:
        if not killed:
            killed.append((outcome, reason))
        kill_group(proc.pid)

    def judge(event: dict[str, Any]) -> None:
        verdict = on_event(event) if on_event else None
        if verdict:
            kill(*verdict)

    gpu = nvml_handle(int(spec.device.partition(":")[2] or 0), os.environ) if spec.device.startswith("cuda") else None
    events: dict[str, Any] = {}
    windows: list[dict[str, Any]] = []
    ceilings: list[dict[str, Any]] = []
    reader = EventReader()
    budget = spec.budget
    started = time.time()
    alive = time.monotonic()
    # Seconds from the spawn to each kind's first event, and to the exit. An event counts from the
    # worker's stamp (``at``, see ``EventWriter``), not from when this loop read it: a loaded
    # machine can delay the read past the next event.
    arrived: dict[str, float] = {}
    step = 0
    # Compiling (torch.compile's first forward and backward) finishes no step: while it runs the
    # stall clock allows budget.compile_s, and the deadline moves by what it took.
    compiling: float | None = None
    stall_limit, compiled_s = budget.stall_s, 0.0
    paged_from = 0  # the tree's memory at the last step, or when a stall was last put off for paging
    judge({"event": "spawned", "pid": proc.pid, "tag": tag})
    try:
        with Monitor(
            proc.pid,
            ram_budget,
            lambda why: kill(Outcome.OOM_HOST, why),
            gpu,
            floor,
            cpus=spec.cpus,
            on_error=lambda why: kill(Outcome.CRASHED, why),
        ) as monitor:
            while True:
                exited = proc.poll() is not None
                if exited and "exit" not in arrived:
                    arrived["exit"] = time.monotonic() - spawned
                # (once its end is said the worker exits, through the interpreter's shutdown where the
                # code ran to its end: its exit is timed closely, a whole run's wall time ends there)
                ready, _, _ = select.select([read_fd], [], [], 0 if exited else 0.005 if "end" in events else 0.1)
                data = os.read(read_fd, 1 << 16) if ready else b""
                now = time.monotonic()
                for event in reader.feed(data):
                    events[event["event"]] = event
                    arrived.setdefault(event["event"], event.get("at", now) - spawned)
                    if event["event"] == "compiling":  # torch.compile at the first forward: no step
                        compiling, stall_limit = now, max(budget.stall_s, budget.compile_s)
                    elif event["event"] in _PROGRESS:
                        # (the tree read here where the sampler has not read it yet: a trial that pages
                        # in from its first steps is judged against its memory before them)
                        alive, step = now, event.get("step", step)
                        paged_from = monitor.last_ram() or monitor.read_ram()
                        if compiling is not None:  # the deadline moves by what compiling took
                            compiled_s += now - compiling
                            compiling, stall_limit = None, budget.stall_s
                    if "seconds" in event:  # a window, a ceiling's, or a measure so far (progress)
                        add_foreign_load(event, monitor)
                    if event["event"] in ("window", "ceiling"):
                        (windows if event["event"] == "window" else ceilings).append(event)
                    elif event["event"] == "progress" and "seconds" in event:
                        so_far = event
                    judge(event)
                if exited and not data:
                    break
                if exited or killed:
                    continue
                if interrupt is not None and interrupt.is_set():
                    kill(Outcome.INTERRUPTED, "the tuner was interrupted (Ctrl-C or SIGTERM)")
                # (after its end is said, the code's exit, its threads joined and atexit run, is bounded
                # by the deadline alone: no step is due)
                elif late := _late(
                    now - spawned,
                    0.0 if "end" in events else now - alive if "resolved" in events else None,
                    stall_limit,
                    now - compiling if compiling is not None else None,
                    step,
                    budget,
                    compiled_s,
                ):
                    # A tree paging in gigabytes stops stepping: its memory is read now, so that it
                    # ends as over its RAM, not as stalled, where the sampling thread was behind.
                    why = monitor.limit_now()
                    if why:
                        kill(Outcome.OOM_HOST, why)
                    elif late.startswith("stalled") and compiling is None and paging(monitor, paged_from):
                        # still faulting memory in (a loaded machine pages slowly): not stalled yet;
                        # judged again a stall later, over the RAM budget by then or grown again
                        # (not while compiling: --compile-timeout bounds that, memory or not)
                        paged_from, alive = monitor.ram_now, now
                    else:
                        kill(Outcome.TIMEOUT, late)
    finally:
        kill_group(proc.pid)  # orphaned DataLoader workers, or everything on Ctrl-C
        proc.wait()
        os.close(read_fd)
        # those that left the group; the group's dying members are waited for
        kill_processes((), tag, spare=warm.pid if warm is not None else None)
    if monitor.problems:  # handled, and said: in the log and the reason
        with open(log_path, "a") as text_log:
            text_log.writelines(f"autotune: {line}\n" for line in monitor.problems)
    stderr_tail = log_tail(log_path.read_text(errors="replace"))
    end = events.get("end") or {}
    # A run that goes on to the code's end (a whole run; the baseline, which may be one) is timed
    # as the user waits for it; the baseline's windows past its own count only if it got there.
    whole = budget.whole or bool(budget.whole_s)
    ended = bool(whole and end.get("ended"))
    if not ended:
        windows = [w for w in windows if not w.get("extra")]
    metrics = summarize(windows, monitor, started, events)
    metrics.update(overheads(arrived))
    if ended:
        metrics.update(run_figures(end, arrived))
        if not windows and "resolved" in arrived:  # (too few steps for a window: its run is its measure)
            metrics.update(run_load(monitor, started + arrived["resolved"]))
    if not windows and so_far.get("seconds") and killed and killed[0][0] is Outcome.PRUNED:
        # pruned on its measure so far (autotune.core._prune.prune_so_far): that is its figure
        metrics.update(
            samples_per_s=so_far["samples"] / so_far["seconds"],
            samples_per_s_spread=0.0,
            measured_samples=float(so_far["samples"]),
        )
    if compiling is not None:  # stopped while torch.compile compiled: how long it had been at it
        metrics["compile_unfinished_s"] = time.monotonic() - compiling
    measured = summarize_ceilings(ceilings)
    losses = loss_history(events.get("warmup"), windows)
    curve = judged_curve(events.get("warmup"), windows)
    reference, reference_curve, tolerance = against.losses, against.curve, against.tolerance
    # The code as written run again (a re-run of the baseline) is never diverged from itself: a gap
    # past the tolerance says its loss is noise (autotune.core._loss_signal); only nan/inf is judged.
    own = not spec.config.set_values() and bool(reference or reference_curve)
    factor = 1.0 if own else per_sample_factor(reference, losses, reference_curve, curve)
    history, judged_c = per_sample(losses, curve, factor)  # (a summed loss, per sample)
    outcome, reason = classify(
        WorkerExit(
            proc.returncode,
            killed[0] if killed else None,
            events.get("error"),
            stderr_tail,
            memory_low=metrics.get("available_min", float("inf")) < 2 * monitor.floor,
        ),
        windows,
        history=history,
        curve=judged_c,
        against=LossReference(tolerance=tolerance) if own else against,
        # (the worker says whether it ran out before its measure was done)
        expected_windows=len(windows) + 1 if end.get("short") and not ended else 0,
        batches=events["end"].get("steps") if "end" in events else None,
        whole_run=ended and "run_s" in metrics,
    )
    if monitor.problems and not killed:
        reason = "\n".join(filter(None, [reason, *monitor.problems]))
    # Kept for the trials the verdict judged (those that ran to their end), not for one stopped
    # early (pruned, timed out, crashed), whose partial loss was never held against the tolerance.
    judged = (
        judge_loss(reference, history, reference_curve, judged_c)
        if (reference or reference_curve) and outcome in (Outcome.COMPLETE, Outcome.DIVERGED)
        else None
    )
    noise = (
        self_disagreement(reference, history, reference_curve, judged_c, tolerance)
        if own and outcome is Outcome.COMPLETE
        else None
    )
    if noise is not None:
        metrics["loss_noise"] = abs(noise.excess)
    if factor != 1.0 and judged is not None:
        metrics["loss_per_sample"] = factor
    reason = "\n".join(
        filter(
            None,
            [
                reason,
                noise and noise_line(noise, tolerance),
                per_sample_line(factor) if factor != 1.0 and judged is not None else None,
            ],
        )
    )
    if judged is not None and math.isfinite(judged.excess):
        metrics.update(loss_excess=judged.excess, loss_tolerance=tolerance)
        reached, fall = to_loss(reference_curve, judged_c), loss_fall(reference_curve)
        if reached is not None and fall is not None and not fall.falls:  # (flat after its warmup: noise)
            if changes_batch(end.get("config", {}).get("batch_size"), end.get("base_batch_size")):
                metrics.update(to_loss_flat=1.0, to_loss_target=reached.target, to_loss_start=fall.start)
        elif reached is not None and reached.ratio is not None:  # (its speedup to that loss: speedup / ratio)
            metrics.update(to_loss_ratio=reached.ratio, to_loss_target=reached.target)
        elif reached is not None and reached.reach > reached.reference:  # not there by its last sample:
            metrics.update(to_loss_beyond=reached.reach / reached.reference, to_loss_target=reached.target)
    final = events.get("end") or events.get("resolved") or {}
    return TrialResult(
        outcome,
        reason,
        metrics,
        window_series(windows, monitor),
        windows,
        final.get("config", {}),
        final.get("base_batch_size"),
        final.get("lr"),
        log_path,
        losses,
        measured,
        loss_curve(windows),
        final.get("dataset") or {},
        judged,
        events.get("profile"),
        shape_of_run(events.get("warmup"), windows, end, ended),
    )


def shape_of_run(
    warmup: dict[str, Any] | None, windows: Sequence[dict[str, Any]], end: dict[str, Any], ended: bool
) -> dict[str, Any]:
    """What a run tells of the training's shape: its marks (``marks_of``), and, where its code
    returned by itself, that it did (``ended``) with its epochs, steps and samples."""
    if warmup is None:
        return {}
    found: dict[str, Any] = marks_of(warmup, windows)
    if ended:
        found.update(ended=True, epochs=end.get("epochs"), steps=end.get("steps"), samples=end.get("samples"))
    return found


#: A stalled tree whose memory grew at least this much since it was last read is paging in.
PAGING_BYTES = 64 << 20


def paging(monitor: Monitor, since: int) -> bool:
    """Whether the tree's memory (read now by ``monitor.limit_now``) grew ``PAGING_BYTES`` past
    ``since`` (its reading at the last step, or when a stall was last put off)."""
    return bool(since) and monitor.ram_now > since + PAGING_BYTES


def _late(
    running_s: float,
    since_step_s: float | None,
    stall_limit: float,
    compiling_s: float | None,
    step: int,
    budget: Budget,
    compiled_s: float,
) -> str | None:
    """Why a running trial is past its time, or None: no batch by ``budget.startup_s``, no step
    for ``stall_limit`` seconds since its config was resolved (``since_step_s``; None before),
    or past its deadline, which moves by what compiling took (``compiled_s``) and by what the
    compile still running has taken so far (``compiling_s``; None when none runs): a compile is
    bounded by --compile-timeout, not the deadline (beside the suite's load, one ran past a 64 s
    deadline and its trial ended as a timeout)."""
    if since_step_s is None and running_s > budget.startup_s:
        return f"startup: no batch after {budget.startup_s:.0f} s (imports, the dataset, DataLoader workers starting)"
    if since_step_s is not None and since_step_s > stall_limit:
        return (
            f"stalled: no step finished for {stall_limit:.0f} s"
            + (" while torch.compile compiled the model (--compile-timeout)" if compiling_s is not None else "")
            + (f" (the last report was at step {step})" if step else "")
        )
    compiled_s += compiling_s or 0.0
    if running_s > budget.deadline() + compiled_s:
        return f"deadline: still running after {budget.deadline() + compiled_s:.0f} s" + (
            f" ({compiled_s:.0f} s of it compiling)" if compiled_s else ""
        )
    return None
