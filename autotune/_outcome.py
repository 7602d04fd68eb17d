"""How a trial ended: one enum, and one pure function that decides it."""

from __future__ import annotations

import enum
import math
import signal
from collections.abc import Mapping, Sequence
from typing import Any


class Outcome(str, enum.Enum):
    """Every way a trial can end."""

    COMPLETE = "complete"
    DIVERGED = "diverged"
    OOM_GPU = "oom_gpu"
    OOM_HOST = "oom_host"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    PRUNED = "pruned"


# The messages torch raises for CUDA OOM: torch.OutOfMemoryError's text, and the
# driver's own (seen as "CUDA error: out of memory" from cuBLAS/cuDNN calls).
_GPU_OOM = ("CUDA out of memory", "CUDA error: out of memory", "OutOfMemoryError")


def classify(returncode: int | None, killed_for: str | None, error: Mapping[str, Any] | None,
             windows: Sequence[Mapping[str, Any]], stderr_tail: str = "") -> tuple[Outcome, str]:
    """Decide a finished worker's outcome and the reason shown to the user.

    Args:
        returncode: The worker's exit status (negative: killed by that signal).
        killed_for: Why autotune killed it, if it did: a reason string starting
            with "ram" (RAM budget) or "deadline".
        error: The worker's ``error`` event (type, message, traceback), if any.
        windows: The measured windows it reported.
        stderr_tail: The last lines of its output, for crashes that said nothing.
    """
    if killed_for:
        kind = Outcome.OOM_HOST if killed_for.startswith("ram") else Outcome.TIMEOUT
        return kind, killed_for
    if error:
        text = f"{error.get('type', '')}: {error.get('message', '')}"
        if any(marker in text for marker in _GPU_OOM):
            return Outcome.OOM_GPU, text.strip()
        return Outcome.CRASHED, error.get("traceback") or text
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:  # realtime signals have no name
            name = f"signal {-returncode}"
        if -returncode == signal.SIGKILL:
            return Outcome.OOM_HOST, f"killed by {name} from outside autotune (the kernel's OOM killer?)"
        return Outcome.CRASHED, f"killed by {name}" + (f"\n{stderr_tail}" if stderr_tail else "")
    if returncode:
        return Outcome.CRASHED, f"exit status {returncode}" + (f"\n{stderr_tail}" if stderr_tail else "")
    if not windows:
        return Outcome.CRASHED, ("the training function returned before one measured window "
                                 "finished: give it more steps (epochs) or shorten --warmup/--window")
    bad = [w for w in windows if w.get("loss") is not None and not math.isfinite(w["loss"])]
    if bad:
        return Outcome.DIVERGED, f"loss is {bad[0]['loss']} in window {bad[0]['index']}"
    return Outcome.COMPLETE, ""
