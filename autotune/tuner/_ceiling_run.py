"""The ceilings of code that runs whole, measured in a run of their own.

A trial that runs the code to its end (``autotune.tuner._training_shape``) measures no ceiling: after the
code returns there is no loop left to feed, and measuring one before would change the
training it times (the compute ceiling trains the model on replayed batches; the loader's
takes epochs of its own). Without ceilings a study knows no model rate, no loader rate and
no CPU cost of loading, and cannot tell that workers past the core count would help (the
range of ``num_workers: {high: auto}``, ``autotune.tuner._loader_workers``): a loader-bound short
script would be held to as many workers as cores. So where the baseline ran whole, the same
config runs once more, at the baseline's first marks, then its ceilings; the baseline's
record takes those ceilings, and nothing of that run ranks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from autotune.core._outcome import Outcome
from autotune.machine._launch import TrialSpec
from autotune.tuner._training_shape import DEADLINE_FACTOR
from autotune.tuner._watch import TrialResult


def ceilings_run(spec: TrialSpec, log_path: Path) -> tuple[TrialSpec, Path]:
    """The run that measures the ceilings of ``spec``'s config after a whole run of it, and its log."""
    budget = dataclasses.replace(spec.budget, whole_s=0.0, learn_windows=0, learn_to=0.0)
    return dataclasses.replace(spec, budget=budget), log_path.with_name(f"{log_path.stem}-ceilings.log")


def ceiling_marks(marks: Sequence[int], windows: int) -> tuple[int, ...]:
    """Where the ceilings' run ends its warmup and windows: the baseline's first marks, leaving at
    least its last stretch for the ceilings (they take over the loop where the windows end; at
    the code's end there is no loop left); of a warmup and one window, the window's first half.
    Empty where there is no window to leave (a compute ceiling replays a window's batches).

    >>> ceiling_marks([64, 128, 192, 256], 4), ceiling_marks([64, 128, 192, 256], 1), ceiling_marks([64, 320], 4)
    ((64, 128, 192), (64, 128), (64, 192))
    """
    if len(marks) >= 3:
        return tuple(marks[: min(1 + windows, len(marks) - 1)])
    return (marks[0], (marks[0] + marks[1]) // 2) if len(marks) == 2 else ()


def with_ceilings(
    spec: TrialSpec, result: TrialResult, log_path: Path, run: Callable[[TrialSpec, Path], TrialResult]
) -> TrialResult:
    """``result`` with the ceilings of its config, where it ran whole and its budget asks for
    ceilings: measured by ``run`` (``autotune.tuner._watch.run_trial`` with the trial's other
    arguments) at ``result``'s first marks. Unchanged where it did not run whole, or where
    that run measured none (it failed: said in the reason)."""
    if result.outcome is not Outcome.COMPLETE or not result.metrics.get("run_s") or not spec.budget.ceiling_windows:
        return result
    marks = ceiling_marks(result.shape.get("marks", ()), spec.budget.windows)
    if not marks:
        return dataclasses.replace(
            result,
            reason="\n".join(
                filter(None, [result.reason, "its ceilings were not measured: its run is its warmup alone"])
            ),
        )
    again, log = ceilings_run(spec, log_path)
    at = result.shape["at"][-1] + 2 * spec.budget.ceiling_windows * spec.budget.window_s
    again = dataclasses.replace(
        again,
        budget=dataclasses.replace(
            again.budget, marks=marks, timeout_s=spec.budget.timeout_s or spec.budget.startup_s + DEADLINE_FACTOR * at
        ),
    )
    measured = run(again, log)
    if not measured.ceilings:
        note = f"its ceilings were not measured: their run ended as {measured.outcome.value}" + (
            f" ({measured.reason.splitlines()[0]})" if measured.reason else ""
        )
        return dataclasses.replace(result, reason="\n".join(filter(None, [result.reason, note])))
    return dataclasses.replace(result, ceilings=measured.ceilings)
