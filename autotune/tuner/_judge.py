"""What the study believes of a finished trial, and the record the recorder writes of it.

The doubt on its figure and on each ceiling it measured, which of the study's ceilings it
shows wrong, its bottleneck, its params, tags and note: pure functions, so that the rules
are tested on hand-built results in milliseconds (``autotune.tuner._recorder`` writes the record:
the pending file, then Optuna, then MLflow).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.core._ceilings import Ceilings, ceiling_key
from autotune.core._knobs import Part
from autotune.core._outcome import Outcome, clip
from autotune.machine._noise import ceiling_doubt, doubt
from autotune.stores._records import (
    ATTR_BASE_BATCH,
    ATTR_CEILINGS,
    ATTR_CONFIG,
    ATTR_CURVE,
    ATTR_DATASET,
    ATTR_DOUBT,
    ATTR_LOSSES,
    ATTR_LR,
    ATTR_METRICS,
    ATTR_OUTCOME,
    ATTR_REASON,
    ATTR_SAMPLED,
    ATTR_SHAPE,
    REASON_LIMIT,
    bottleneck_of,
    trial_note,
)

if TYPE_CHECKING:
    import optuna

    from autotune.tuner._option_groups import Noise
    from autotune.tuner._space import Domain
    from autotune.tuner._watch import TrialResult


@dataclasses.dataclass(frozen=True)
class TrialIds:
    """Which trial a record is of: its number in the study, its Optuna trial id (the storage's
    key) and its MLflow child run."""

    number: int
    trial_id: int
    run_id: str


def checked_ceilings(
    number: int,
    outcome: Outcome,
    reason: str,
    metrics: Mapping[str, float],
    resolved: Mapping[str, Any],
    measured: Sequence[Mapping[str, Any]],
    ceilings: Ceilings,
    noise: Noise,
) -> list[dict[str, Any]]:
    """The trial's own ceiling entries, each marked with a ``doubt`` when others loaded the
    CPUs while it was measured or the trial ran past it beyond the noise; and a
    ``distrust`` entry for each ceiling of the study it ran past. Either way the
    ceiling is not used, and the next trial with its key measures it again.

    Only a ceiling the trial ran past counts against it (``Bottleneck.ran_past``, each
    with the value it was compared with): one of its own already doubted (measured under
    load) shows nothing wrong with the study's figure for that key. ``noise``: when a figure is
    believed (its ``max_load`` and ``max_spread``)."""
    own = [dict(entry) for entry in measured]
    for entry in own:
        entry["doubt"] = ceiling_doubt(entry, noise.max_load)
    sps = metrics.get("samples_per_s")
    if outcome != Outcome.COMPLETE or not sps or doubt(metrics, reason, noise.max_load, noise.max_spread):
        return own  # a figure not believed proves no ceiling wrong
    mine = {e["part"]: e for e in own if not e["doubt"]}
    for part in bottleneck_of(metrics, resolved, ceilings, own).ran_past:
        if part not in (Part.COMPUTE.value, Part.LOADER.value):
            continue  # the CPU roof is derived from the two: it is said unreliable, not re-measured
        if part in mine:
            mine[part]["doubt"] = f"trial {number} ran at {sps / mine[part]['samples_per_s']:.0%} of it"
        else:
            value = ceilings.get(Part(part), resolved)
            assert value is not None  # (ran past: the study's figure it was compared with)
            own.append(
                {
                    "part": part,
                    "key": ceiling_key(Part(part), resolved),
                    "distrust": f"trial {number} ran at {sps / value:.0%} of the {value:,.0f} other trials measured",
                }
            )
    return own


def result_record(
    ids: TrialIds,
    attrs: Mapping[str, Any],
    result: TrialResult,
    ceilings: Ceilings,
    base_rate: float | None,
    noise: Noise,
    optuna_params: Mapping[str, list[Any]],
) -> dict[str, Any]:
    """A finished trial's record, as the recorder writes it to the pending file, then Optuna
    (``attrs``, ``optuna_params``), then MLflow (``mlflow``). JSON data throughout.

    Args:
        ids: Which trial it is, in Optuna and in MLflow.
        attrs: The trial's user attrs as it started (its kind, what it sampled).
        ceilings: The study's ceilings as the trial ended.
        base_rate: The baseline's samples/s then, for the note (None: none yet).
        noise: When its figure is believed (``checked_ceilings``).
        optuna_params: See ``optuna_params``.
    """
    number = ids.number
    derived = {f"resolved.{k}": v for k, v in result.resolved.items()}
    derived.update(
        base_batch_size=result.base_batch_size,
        effective_lr=result.lr,
        **{f"dataset.{k}": v for k, v in result.dataset.items() if k != "optimizers"},
    )
    if result.dataset.get("optimizers"):  # e.g. "Adadelta (no fused=)"
        derived["optimizers"] = ", ".join(
            f"{name}{'' if fusable else ' (no fused=)'}" for name, fusable in result.dataset["optimizers"].items()
        )
    # Every knob a param, as the space writes it: those the config did not set (the
    # baseline's every knob) at the code's own value, named in own_knobs.
    sampled = attrs.get(ATTR_SAMPLED, {})
    own = {
        k: "1x" if k == "batch_size" and v == result.base_batch_size else v
        for k, v in result.resolved.items()
        if k not in sampled
    }
    derived.update(own, own_knobs=",".join(own) or "-")
    metrics, tags = dict(result.metrics), {}
    measured = checked_ceilings(
        number,
        result.outcome,
        result.reason,
        result.metrics,
        result.resolved,
        result.ceilings,
        ceilings,
        noise,
    )
    why = (
        doubt(metrics, result.reason, noise.max_load, noise.max_spread)
        if result.outcome == Outcome.COMPLETE and "samples_per_s" in metrics
        else None
    )
    if why:
        tags["autotune.doubt"] = why
    bound = None
    if "samples_per_s" in metrics:
        bound = bottleneck_of(metrics, result.resolved, ceilings, measured)
        tags.update({"autotune.bottleneck": bound.verdict, "autotune.bottleneck_why": bound.why})
        metrics.update(
            {
                name: value
                for name, value in (
                    ("efficiency", bound.efficiency),
                    ("compute_ceiling", bound.compute),
                    ("loader_ceiling", bound.loader),
                    ("cpu_roof", bound.cpu),
                    ("of_roof", bound.of_roof),
                )
                if value is not None
            }
        )
    tags["mlflow.note.content"] = trial_note(
        number,
        result.outcome,
        result.reason,
        why,
        metrics,
        base_rate,
        bound.why if bound else None,
        attrs,
    )
    return {
        "trial_id": ids.trial_id,
        "number": number,
        "run_id": ids.run_id,
        "optuna_params": dict(optuna_params),
        "attrs": {
            ATTR_OUTCOME: result.outcome.value,
            ATTR_REASON: clip(result.reason, REASON_LIMIT),
            ATTR_METRICS: result.metrics,
            ATTR_CONFIG: result.resolved,
            ATTR_BASE_BATCH: result.base_batch_size,
            ATTR_LR: result.lr,
            ATTR_LOSSES: result.losses,
            ATTR_CEILINGS: measured,
            ATTR_DOUBT: why,
            ATTR_CURVE: result.curve,
            ATTR_DATASET: result.dataset,
            ATTR_SHAPE: result.shape,
        },
        "mlflow": {
            "outcome": result.outcome.value,
            "reason": result.reason,
            "metrics": metrics,
            "series": result.series,
            "params": {k: v for k, v in derived.items() if v is not None},
            "log_path": str(result.log_path),
            "tags": tags,
        },
    }


def optuna_params(
    first: optuna.trial.FrozenTrial | None,
    sampled: Mapping[str, Any],
    resolved: Mapping[str, Any],
    base_batch_size: int | None,
    domains: Mapping[str, Domain],
) -> dict[str, list[Any]]:
    """Optuna params for a trial the sampler did not draw, so that every trial has them
    (optuna-dashboard, importances), each as ``[distribution json, value]``: a repeat or
    retry gets its ``first`` trial's (a retry with its own ``lr_scaling``, from ``sampled``);
    the baseline the values its code ran with (``resolved``), for each knob whose domain
    holds that value (its batch size as ``1x``)."""
    import optuna

    from autotune.tuner._space import Choice, IntRange

    to_json = optuna.distributions.distribution_to_json
    if first is not None:  # as its first trial drew them
        return {
            name: [to_json(first.distributions[name]), sampled.get(name, value)] for name, value in first.params.items()
        }
    params = {}
    dist: optuna.distributions.BaseDistribution
    for name, domain in domains.items():
        value = resolved.get(name)
        if name == "batch_size" and value is not None and value == base_batch_size:
            value = "1x"
        if isinstance(domain, Choice) and value in domain.choices:
            dist = optuna.distributions.CategoricalDistribution(list(domain.choices))
        elif (
            isinstance(domain, IntRange)
            and isinstance(value, int)
            and domain.low <= value <= domain.high
            and (value - domain.low) % domain.step == 0
        ):
            dist = optuna.distributions.IntDistribution(domain.low, domain.high, log=domain.log, step=domain.step)
        else:
            continue
        params[name] = [to_json(dist), value]
    return params


def optuna_state(outcome: Outcome, samples_per_s: float | None, doubt: str | None) -> tuple[str, float | None]:
    """How a finished trial is told to Optuna, so that its sampler learns only from believed
    figures: ``("complete", value)`` for a figure it may rank (a diverged one too: kept
    infeasible by its constraint, so never the best), else ``("fail", None)`` or
    ``("pruned", None)``. A noisy figure is told as failed: Optuna's samplers skip failed
    trials, and its re-measure, with the same params, tells the real one.

    >>> optuna_state(Outcome.COMPLETE, 900.0, None), optuna_state(Outcome.COMPLETE, 900.0, "noisy: ...")
    (('complete', 900.0), ('fail', None))
    """
    from autotune.machine._noise import is_noisy

    if is_noisy(doubt):
        return "fail", None
    if outcome in (Outcome.COMPLETE, Outcome.DIVERGED) and samples_per_s:
        return "complete", samples_per_s
    return ("pruned", None) if outcome == Outcome.PRUNED else ("fail", None)
