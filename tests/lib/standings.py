"""Hand-built trials and standings for the unit tests of the study's rules (no store, no process)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from autotune.core._ceilings import Ceilings, ceiling_key
from autotune.core._kinds import Kind
from autotune.core._knobs import Part
from autotune.stores._records import TrialRow
from autotune.stores._records import bottleneck_of as _bottleneck_of
from autotune.tuner._standing import Standing, standing_of


def trial(
    number: int,
    rate: float | None = 1000.0,
    outcome: str = "complete",
    *,
    kind: Kind | None = None,
    of: int | None = None,
    sampled: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
    waits: float = 0.0,
    spread: float = 0.05,
    doubt: str | None = None,
    remeasure: int = 0,
    base_batch_size: int | None = 16,
    lr: float | None = None,
    losses: Iterable = (),
    curve: Iterable = (),
    dataset: Mapping[str, Any] | None = None,
    workers_high: int | None = None,
    baseline: bool | None = None,
    shape: Mapping[str, Any] | None = None,
    **metrics: float,
) -> TrialRow:
    """A trial as ``row_of`` reads it back. ``kind`` defaults to the baseline for trial 0 and a
    draw after it; ``config`` (as it ran) to what it ``sampled``; ``shape`` what its run told of
    the training (``autotune.tuner._watch.shape_of_run``)."""
    kind = kind or (Kind.BASELINE if number == 0 else Kind.SAMPLED)
    figures = {"samples_per_s": rate, "samples_per_s_spread": spread, "data_wait_frac": waits} if rate else {}
    sampled = dict(sampled or {})
    return TrialRow(
        number,
        kind is Kind.BASELINE if baseline is None else baseline,
        outcome,
        "",
        {**figures, **metrics},
        dict(config if config is not None else sampled),
        base_batch_size,
        None,
        losses=list(losses),
        sampled=sampled,
        kind=kind,
        doubt=doubt,
        remeasure=remeasure,
        curve=list(curve),
        dataset=dict(dataset or {}),
        lr=lr,
        of=of,
        workers_high=workers_high,
        shape=dict(shape or {}),
    )


def with_bound(row: TrialRow, ceilings: Ceilings) -> TrialRow:
    """``row`` with the bottleneck ``row_of`` gives it against the study's ``ceilings``."""
    import dataclasses

    if row.outcome not in ("complete", "diverged") or "samples_per_s" not in row.metrics:
        return row
    return dataclasses.replace(row, bottleneck=_bottleneck_of(row.metrics, row.config, ceilings, []))


def ceilings_of(*entries: tuple[Mapping[str, Any], float, float, float | None, float | None]) -> Ceilings:
    """Per entry: a config, its compute ceiling, its loader ceiling, and the CPU seconds a
    sample cost each (None: not measured), on 2 CPUs."""
    found = Ceilings()
    for config, compute, loader, compute_cpu, loader_cpu in entries:
        for part, rate, cpu in ((Part.COMPUTE, compute, compute_cpu), (Part.LOADER, loader, loader_cpu)):
            entry = {"part": part.value, "key": ceiling_key(part, config), "samples_per_s": rate}
            if cpu is not None:
                entry.update(cpu_per_sample=cpu, cpus=2)
            found.add(entry)
    return found


def standing_from(*rows: TrialRow, ceilings: Ceilings | None = None, horizon_h: float | None = None) -> Standing:
    """The standing of ``rows`` as ``autotune.tuner._standing.standing`` builds it from a store (of a
    study given ``--horizon horizon_h``)."""
    ceilings = ceilings or Ceilings()
    return standing_of([with_bound(r, ceilings) for r in rows], ceilings, horizon_h)
