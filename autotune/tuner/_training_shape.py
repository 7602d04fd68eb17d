"""The training's shape as the baseline ran it, what every later trial measures of it, and the
answer in the wall time a user waits for.

The baseline (trial 0, the code as written) tells the study what it is tuning: where its
warmup and windows ended in samples (its *marks*), and whether the code returned by itself
within ``--whole-run`` seconds (default ``WHOLE_RUN_S``). Then:

- **whole runs**: a script (or training function) that returned in time runs to its end
  in every trial, and each is ranked on its whole run, process start to exit: what the user
  waits for, start-up costs a config adds (more workers starting, compiling, cudnn's search)
  included. Its windows end at the baseline's marks and at the code's end; the re-runs of the
  confirmation give the spread.
- **windowed**: a longer one is measured over the baseline's first marks (a warmup and
  ``--windows`` windows), the same samples in every trial (``autotune.worker._marks``), and its
  answer in wall time is projected from its loop's samples/s.

Pure functions over a baseline's row, so that the rules are tested in milliseconds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from autotune.core._kinds import Kind
from autotune.machine._launch import Budget

if TYPE_CHECKING:
    from autotune.stores._records import TrialRow
    from autotune.tuner._confirm import Group

#: Seconds (from its worker's start) within which the baseline's code must return by itself for
#: the study to run it whole in every trial (``--whole-run``; 0: never). A minute: a study of 8
#: trials and the confirmation's 8 re-runs of a script that long takes about 17 minutes, the
#: most a quickstart should; the pytorch/examples MNIST script (14 epochs of 6,000 items) ran
#: 16 s on an H200, the quickstart's 13 s on a 2-core CPU.
WHOLE_RUN_S = 60.0
#: A trial may run this many times the baseline's measured time before its deadline (after its
#: start-up's own limit): a config five times slower is pruned long before, by its windows.
#: On larger batches it measures the same steps, so that time grows by the batches' ratio too.
DEADLINE_FACTOR = 5.0
#: A trial is stalled after this many of the baseline's slow steps (its 95th percentile) without
#: one, times its batches' ratio to the baseline's, where that is longer than ``--stall-timeout``:
#: a step of resnet18 on a CPU at 8x pytorch/examples' imagenet batch of 16 took over 30 s.
STALL_STEPS = 10.0


@dataclasses.dataclass(frozen=True)
class Shape:
    """What the baseline's run tells of the training.

    Attributes:
        marks: Samples since its first batch where its warmup and each window ended.
        at: Seconds of its loop (between-epoch time left out) at each mark.
        whole: Its code returned by itself: every later trial runs whole.
        run_s: Its whole run's wall time (None: not run whole).
        startup_s: Process start to its first batch (None: not known).
        step_samples: Its samples per step (0: unknown).
        step_s: Its slow step's seconds, the 95th percentile of its windows' (None: not known).
        base_batch: Its batch size, the base of a relative ``batch_size`` (None: not known).
    """

    marks: tuple[int, ...]
    at: tuple[float, ...]
    whole: bool
    run_s: float | None
    startup_s: float | None
    step_samples: float = 0.0
    step_s: float | None = None
    base_batch: int | None = None


def shape_of(base: TrialRow | None) -> Shape | None:
    """The baseline's shape (None: no baseline, or one from before shapes were recorded)."""
    if base is None or not base.shape.get("marks"):
        return None
    metrics = base.metrics
    startup = metrics.get("startup_s")
    if startup is None and all(k in metrics for k in ("spawn_s", "import_s", "setup_s")):
        startup = metrics["spawn_s"] + metrics["import_s"] + metrics["setup_s"]
    return Shape(
        tuple(base.shape["marks"]),
        tuple(base.shape["at"]),
        bool(base.shape.get("ended")),
        metrics.get("run_s"),
        startup,
        metrics.get("samples_per_step", 0.0),
        metrics.get("step_time_p95"),
        base.base_batch_size,
    )


def trial_budget(
    budget: Budget, kind: Kind, shape: Shape | None, tolerance: float, whole: bool = True, batch_size: object = None
) -> Budget:
    """What a trial of ``kind`` measures, given the study's ``budget`` and the baseline's ``shape``.

    The baseline learns (``Budget.learning``) and may run on to its code's end (``whole_s``);
    every other trial ends at the baseline's marks, and runs whole where the baseline did
    (``whole=False``: never, as a profile run, which records steps after its windows). A
    trial's limits follow the baseline's measured times and the trial's ``batch_size`` (its
    knob's value): its deadline, where ``--timeout`` sets none, the baseline's time times
    ``DEADLINE_FACTOR`` and the batches' ratio; its stall limit ``STALL_STEPS`` of the baseline's
    slow steps at that ratio, where longer than the study's (``limits``).

    >>> shape = Shape((100, 200, 300, 400, 500, 600), (1.0, 2.5, 4.0, 5.5, 7.0, 8.5), False, None, 2.0)
    >>> b = trial_budget(Budget(windows=4, whole_s=60.0), Kind.SAMPLED, shape, 0.5)
    >>> b.marks, b.whole_s, b.timeout_s
    ((100, 200, 300, 400, 500), 0.0, 125.0)
    >>> whole = dataclasses.replace(shape, whole=True, run_s=12.0)
    >>> w = trial_budget(Budget(whole_s=60.0), Kind.CONFIRM, whole, 0.5)
    >>> w.whole, w.marks, w.ceiling_windows, w.timeout_s
    (True, (100, 200, 300, 400, 500, 600), 0, 120.0)
    """
    if kind is Kind.BASELINE:
        return budget.learning(tolerance)
    plain = dataclasses.replace(budget, whole_s=0.0)
    if shape is None:  # a study from before the marks were recorded: windows in seconds, as it ran
        return plain
    ratio, stall_s = limits(budget, shape, batch_size)
    plain = dataclasses.replace(plain, stall_s=stall_s)
    if whole and shape.whole and shape.run_s:
        return dataclasses.replace(
            plain,
            whole=True,
            marks=shape.marks,
            ceiling_windows=0,
            learn_windows=0,
            timeout_s=budget.timeout_s or budget.startup_s + DEADLINE_FACTOR * shape.run_s * ratio,
        )
    marks, at = extended(shape, budget.windows)
    measured_s = at + 2 * budget.ceiling_windows * budget.window_s
    return dataclasses.replace(
        plain,
        marks=marks,
        step_samples=shape.step_samples,
        timeout_s=budget.timeout_s or budget.startup_s + DEADLINE_FACTOR * measured_s * ratio,
    )


def limits(budget: Budget, shape: Shape, batch_size: object) -> tuple[float, float]:
    """A trial's batches' ratio to the baseline's (at least 1: a smaller batch is no slower a step
    in the baseline's time; 1 where either is unknown), and its stall limit in seconds.

    >>> limits(Budget(stall_s=30.0), Shape((16,), (1.0,), False, None, 2.0, step_s=4.0, base_batch=16), "8x")
    (8.0, 320.0)
    >>> limits(Budget(stall_s=30.0), Shape((16,), (1.0,), False, None, 2.0, step_s=0.01, base_batch=16), 32)
    (2.0, 30.0)
    """
    from autotune.core._knobs import batch_of

    batch = batch_of(batch_size, shape.base_batch)
    ratio = max(1.0, batch / shape.base_batch) if batch and shape.base_batch else 1.0
    return ratio, max(budget.stall_s, STALL_STEPS * (shape.step_s or 0.0) * ratio)


def extended(shape: Shape, windows: int) -> tuple[tuple[int, ...], float]:
    """The marks of a warmup and ``windows`` windows, and the baseline's loop seconds to the
    last: its own, and past them (a later tuner asked for more windows than it measured)
    windows of its mean length, at its mean seconds each.

    >>> extended(Shape((100, 200, 300), (1.0, 2.0, 3.0), False, None, None), 4)
    ((100, 200, 300, 400, 500), 5.0)
    """
    marks, at = list(shape.marks[: 1 + windows]), shape.at[min(windows, len(shape.at) - 1)]
    if len(marks) < 1 + windows and len(shape.marks) > 1:
        step = (shape.marks[-1] - shape.marks[0]) / (len(shape.marks) - 1)
        seconds = (shape.at[-1] - shape.at[0]) / (len(shape.at) - 1)
        more = 1 + windows - len(marks)
        marks += [round(shape.marks[-1] + k * step) for k in range(1, more + 1)]
        at += more * seconds
    return tuple(marks), at


def cost_line(shape: Shape, budget: Budget, trials: int, reruns: int) -> str:
    """What the study's trials will cost, said once the baseline has run: ``trials`` still to
    run and the confirmation's ``reruns``, each about as long as the baseline took.

    >>> print(cost_line(Shape((64, 128), (1.0, 2.0), True, 16.2, 3.0), Budget(), 7, 8))
    each trial runs your script whole: about 16 s as written; 7 trials and 8 confirmation runs: about 4.0 min
    """
    runs = f"{trials} trial{'s' * (trials != 1)}" + (f" and {reruns} confirmation runs" if reruns else "")
    total = duration(cost_s(shape, budget, trials + reruns))
    if shape.whole and shape.run_s:
        return f"each trial runs your script whole: about {shape.run_s:.0f} s as written; {runs}: about {total}"
    marks, at = extended(shape, budget.windows)
    ceilings = 2 * budget.ceiling_windows * budget.window_s
    why = (
        f"your code runs past the {budget.whole_s:.0f} s a trial may run whole (--whole-run)"
        if budget.whole_s
        else "no trial runs your code whole (--whole-run 0)"
    )
    return (
        f"{why}: each trial "
        f"measures the same {marks[-1] - marks[0]:,} samples after a warmup of {marks[0]:,} (about "
        f"{(shape.startup_s or 0.0) + at:.0f} s with its start-up at the baseline's speed, plus up to "
        f"{ceilings:.0f} s of ceilings); {runs}: about {total}"
    )


def cost_s(shape: Shape, budget: Budget, runs: int) -> float:
    """The seconds ``cost_line`` says ``runs`` runs take: each as long as the baseline's whole run,
    or its start-up and measure at its speed, with half of the ceilings' windows."""
    if shape.whole and shape.run_s:
        return runs * shape.run_s
    _, at = extended(shape, budget.windows)
    return runs * ((shape.startup_s or 0.0) + at + budget.ceiling_windows * budget.window_s)


def duration(seconds: float) -> str:
    return (
        f"{seconds:.0f} s"
        if seconds < 90
        else f"{seconds / 60:.1f} min"
        if seconds < 5400
        else f"{seconds / 3600:.1f} h"
    )


def parts(group: Group) -> str:
    """A whole-run config's median wall time in its parts: ``13.1 s (start-up 3.2 s, training
    8.8 s, between epochs 1.1 s, after it 0.0 s)``."""
    import statistics

    runs = [r for r in group.runs if r.reliable and r.run_s]
    names = (
        ("startup_s", "start-up"),
        ("loop_s", "training"),
        ("outside_s", "between epochs"),
        ("after_s", "after it"),
    )
    pieces = [f"{label} {statistics.median(r.metrics.get(key, 0.0) for r in runs):.1f} s" for key, label in names]
    return f"{group.run_s:.1f} s ({', '.join(pieces)})"


def run_time_line(base: Group | None, win: Group | None) -> str | None:
    """The answer in wall time: the script's whole run as written and with the winner applied,
    measured (a study of whole runs) or projected from the loop's samples/s, and which."""
    if base is None or win is None:
        return None
    if base.run_s and win.run_s:
        runs = (
            f"medians of {len(base.rates)} and {len(win.rates)} runs"
            if win is not base
            else f"median of {len(base.rates)} run{'s' * (len(base.rates) != 1)}"
        )
        with_it = "" if win is base else f"; with trial {win.first.number}'s config {parts(win)}"
        return f"run time, measured whole ({runs}): as written {parts(base)}{with_it}"
    if win is base or not base.loop_median or not win.loop_median or not base.first.shape.get("marks"):
        return None  # (a study from before shapes were recorded did not try to run it whole)
    share = base.loop_median / win.loop_median
    return (
        f"run time, projected from the loop's samples/s (your code ran past --whole-run, so no trial ran "
        f"it whole): an hour of its training as written takes {60 * share:.0f} min with trial "
        f"{win.first.number}'s config ({1 / share:.2f}x), start-up aside"
    )


def flat_runs(rows: Sequence[TrialRow]) -> str | None:
    """Why time to the baseline's loss ranked no run here, where it would have: the first run
    that trained on another batch size whose baseline loss did not fall after its warmup
    (``to_loss_flat``, ``autotune.core._to_loss.loss_fall``)."""
    flat = next((r for r in rows if r.metrics.get("to_loss_flat")), None)
    if flat is None:
        return None
    start = flat.metrics.get("to_loss_start")
    since = f" from {start:.3g} at its windows' start" if start is not None else ""
    return (
        "ranked on speed, not time to the baseline's loss: after its warmup the baseline's loss did not fall "
        f"beyond its own noise{since} to {flat.metrics.get('to_loss_target', float('nan')):.3g} over the "
        "samples judged, so reaching it sooner would be noise"
    )
