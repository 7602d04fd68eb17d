"""The holds of the model-side knobs: ``compile`` and ``channels_last`` where the function never
hands its model over, ``compile`` where the script compiles its own or compiling cannot pay back
within the horizon, and ``amp`` where the script sets its own precision or one precision runs far
slower on this machine (``autotune.tuner._precision``). Pure functions of the standing and the
space; each returns the values it holds and the line that says why (``Line``), for
``autotune.tuner._space_now.holds``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.core._compile_cost import cold_and_warm
from autotune.core._kinds import Line
from autotune.core._knobs import MODEL_KNOBS
from autotune.machine._noise import doubt
from autotune.tuner._space import Choice

if TYPE_CHECKING:
    from autotune.stores._records import TrialRow
    from autotune.tuner._space import Space
    from autotune.tuner._standing import Standing


def own_precision_hold(standing: Standing, space: Space) -> tuple[dict[str, Any], Line | None]:
    """``amp`` not drawn once a trial saw that the script uses its own autocast or GradScaler: its
    own precision is what runs whatever the knob says (``autotune.training._outside_amp``)."""
    if "amp" not in space.domains:
        return {}, None
    own = next((r.dataset["amp_own"] for r in standing.rows if r.dataset.get("amp_own")), None)
    if own is None:
        return {}, None
    return {"amp": None}, Line(
        f"amp not tuned: your script sets its own precision ({own}: torch.autocast or a "
        "GradScaler), and it is what runs",
        "amp-own",
    )


def own_compile_hold(standing: Standing, space: Space) -> tuple[dict[str, Any], Line | None]:
    """``compile`` not drawn once a trial saw that the script compiles its model itself: the trial
    holds the knob and the script's own compile runs (``autotune.training._outside_model``), so
    every drawn value would run the same."""
    if "compile" not in space.domains or not any(r.dataset.get("compile_own") for r in standing.rows):
        return {}, None
    return {"compile": None}, Line(
        "compile not tuned: your script compiles its model itself (torch.compile), and its own compile is what runs",
        "compile-own",
    )


def compile_hold(standing: Standing, space: Space, horizon_h: float) -> tuple[dict[str, Any], Line | None]:
    """``compile`` held at off once a compiled trial showed that compiling cannot pay back within
    ``horizon_h`` hours of production: it ran past --compile-timeout, it ran no faster than the
    baseline, or its cost over the time it saves per second of training is past the horizon.
    Measured once per study: the first compiled trials decide for every config after them."""
    base = standing.base.loop_median if standing.base is not None else None  # (the loop's: compiling is kept out)
    if "compile" not in space.domains or not base:
        return {}, None
    compiled = [r for r in standing.rows if r.config.get("compile") not in (None, "off")]
    stuck = next((r for r in compiled if r.outcome == "timeout" and "compile_unfinished_s" in r.metrics), None)
    if stuck is not None:
        why = f"compiling ran past --compile-timeout in trial {stuck.number}"
    else:
        ran = [r for r in compiled if r.reliable and r.metrics.get("compile_s") and r.samples_per_s]
        if not ran:
            return {}, None
        best = max(ran, key=lambda r: r.samples_per_s or 0.0)
        rate = best.samples_per_s or 0.0  # (ran: each has one)
        saved = 1 - base / rate  # production seconds saved per second
        # (the cold compile a user pays, where a warm re-run of its config is the faster run)
        cost = cold_and_warm(r.metrics for r in ran if r.config == best.config)[0] or best.metrics["compile_s"]
        if saved > 0 and cost / saved <= horizon_h * 3600:
            return {}, None
        pays = f"pays back after {cost / saved / 3600:.1f} h of training" if saved > 0 else "never pays back"
        why = (
            f"trial {best.number} compiled in {cost:.0f} s and runs {rate / base:.2f}x "
            f"the baseline, so compiling {pays}, past the {horizon_h:g} h horizon (--horizon)"
        )
    return {"compile": "off"}, Line(f"compile held at off: {why}", "compile-hold")


def amp_hold(standing: Standing, space: Space, max_load: float, max_spread: float) -> tuple[dict[str, Any], str | None]:
    from autotune.tuner._precision import KNOB, precision_hold

    domain = space.domains.get(KNOB)
    if not isinstance(domain, Choice):
        return {}, None

    def believed(row: TrialRow) -> bool:  # a pruned or diverged figure was never doubted: judge it here
        return row.doubt is None and doubt(row.metrics, "", max_load, max_spread) is None

    hold = precision_hold(standing.rows, domain.values(), believed)
    return ({}, None) if hold is None else ({KNOB: hold.value}, hold.why)


def model_hold(standing: Standing, space: Space) -> tuple[dict[str, Any], Line | None]:
    tuned = [name for name in MODEL_KNOBS if name in space.domains]
    base = standing.base.first if standing.base else None
    if not tuned or base is None or not base.config or any(name in base.config for name in MODEL_KNOBS):
        return {}, None
    return dict.fromkeys(tuned), Line(
        f"{' and '.join(tuned)} not tuned: no model was found (a training function "
        "hands it to run.model(...); in a script, it is the module called with the "
        "parameters an optimizer trains)",
        "model-knobs",
    )
