"""How a trial ended: one enum, and one pure function that decides it."""

from __future__ import annotations

import dataclasses
import enum
import signal
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.core._guard import Chunk, LossReference, Point, divergence

#: What a trial not finished yet shows instead of an outcome: enqueued, or running.
WAITING, RUNNING = "waiting", "running"


class Outcome(str, enum.Enum):
    """Every way a trial can end."""

    COMPLETE = "complete"
    DIVERGED = "diverged"
    OOM_GPU = "oom_gpu"
    OOM_HOST = "oom_host"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    PRUNED = "pruned"
    #: Its loader delivered rows more than once, or smaller batches than the baseline's
    #: (``autotune.worker._streams``): a figure of another training, which never ranks.
    DISTORTED = "distorted"
    #: The tuner stopped (Ctrl-C, SIGTERM, or it was killed and a later run found
    #: the trial stale): says nothing about the config, so it is not "crashed".
    INTERRUPTED = "interrupted"


# The messages torch raises for CUDA OOM: torch.OutOfMemoryError's text, and the
# driver's own (seen as "CUDA error: out of memory" from cuBLAS/cuDNN calls).
_GPU_OOM = ("CUDA out of memory", "CUDA error: out of memory", "OutOfMemoryError")


def headline(reason: str) -> str:
    """The line that says what happened: every reason ``classify`` writes starts with it."""
    return reason.strip().partition("\n")[0]


def clip(reason: str, limit: int) -> str:
    """``reason`` in at most ``limit`` characters: its headline, then as much of its end as fits."""
    if len(reason) <= limit:
        return reason
    head = headline(reason)[: limit // 2]
    return f"{head}\n...\n{reason[-(limit - len(head) - 5) :]}"


@dataclasses.dataclass(frozen=True)
class WorkerExit:
    """How a trial's worker process ended, before anything it measured is looked at.

    Attributes:
        returncode: Its exit status (negative: killed by that signal).
        killed: Why autotune killed it, if it did: the outcome it decided
            (oom_host, timeout, pruned, interrupted) and the reason.
        error: Its ``error`` event (type, message, traceback), if any.
        stderr_tail: The last lines of its output, for crashes that said nothing.
        memory_low: The machine's available memory was nearly gone while it ran
            (then a SIGKILL from outside is most likely the kernel's OOM killer).
    """

    returncode: int | None
    killed: tuple[Outcome, str] | None = None
    error: Mapping[str, Any] | None = None
    stderr_tail: str = ""
    memory_low: bool = False


def classify(
    worker: WorkerExit,
    windows: Sequence[Mapping[str, Any]],
    *,
    history: Sequence[Point] = (),
    curve: Sequence[Chunk] = (),
    against: LossReference = LossReference(),
    expected_windows: int = 0,
    batches: int | None = None,
    whole_run: bool = False,
) -> tuple[Outcome, str]:
    """Decide a finished worker's outcome and the reason shown to the user.

    The reason's first line says what happened (see ``headline``); the lines
    after it are evidence: a traceback's tail, the end of the trial's log.

    Args:
        worker: How its process ended.
        windows: The measured windows it reported.
        history: Its loss history (see ``autotune.core._guard``).
        curve: Its loss curve (``autotune.core._guard.loss_curve``).
        against: The baseline's loss it is judged against; the default (none) for the baseline itself.
        expected_windows: The windows its budget asked for; a complete trial with
            fewer (the function ran out of epochs) says so in its reason.
        batches: The batches it took from ``run.batches`` (its end event's steps; None: unknown).
        whole_run: Its code ran to its end and its wall time was measured (a trial of a whole
            study): with no window, that is its measure.
    """
    returncode, killed, error, stderr_tail = worker.returncode, worker.killed, worker.error, worker.stderr_tail
    if killed:
        return killed
    if error:
        text = f"{error.get('type', '')}: {error.get('message', '')}"
        if any(marker in text for marker in _GPU_OOM):
            return Outcome.OOM_GPU, text.strip()
        trace = error.get("traceback")
        first = text.strip().splitlines()[0] if text.strip() else "an exception"
        return Outcome.CRASHED, f"{first}\n{trace}" if trace else text
    tail = f"\n{stderr_tail}" if stderr_tail else ""
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:  # realtime signals have no name
            name = f"signal {-returncode}"
        if -returncode == signal.SIGKILL and worker.memory_low:
            return Outcome.OOM_HOST, f"killed by {name} while the machine was out of memory (the kernel's OOM killer)"
        if -returncode == signal.SIGKILL:
            name += " from outside autotune"
        return Outcome.CRASHED, f"killed by {name}{tail}"
    if returncode:
        return Outcome.CRASHED, f"exit status {returncode}{tail}"
    reason = divergence(against.losses, history, against.tolerance, against.curve, curve)
    if reason:  # before the window check: a nan in the warmup ends the trial with no window
        return Outcome.DIVERGED, reason
    if not windows and batches == 0:
        return Outcome.CRASHED, (
            "the training function returned without taking a batch from run.batches(loader): "
            "autotune measures the loop through it; iterate `for batch in run.batches(loader):`"
        )
    if not windows and whole_run:
        return Outcome.COMPLETE, (
            f"measured whole only: its run ended after {batches} step{'s' * (batches != 1)}, too few for a "
            "warmup and a window; it ranks on its wall time"
        )
    if not windows:
        return Outcome.CRASHED, (
            "the training function returned before one measured window "
            "finished: give it more steps (epochs) or shorten --warmup/--window"
        )
    if len(windows) < expected_windows:
        # Still a measurement, but a short one: on a fast machine a small dataset's whole run
        # can end inside the budget (the MNIST runner on an H100: benchmarks/results/gpu.md).
        return Outcome.COMPLETE, (
            f"short measure: the training function returned after {len(windows)} "
            f"window{'s' if len(windows) != 1 else ''}, before its measured stretch ended, "
            "so no ceiling was measured; give it more steps (epochs) or shorten "
            "--warmup/--window"
        )
    return Outcome.COMPLETE, ""
