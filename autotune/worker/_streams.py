"""Configs that are not the same training: a loader that delivers rows twice, smaller batches, or a
whole run of other samples than the baseline's.

An ``IterableDataset`` whose ``__iter__`` does not split its rows by
``torch.utils.data.get_worker_info()`` yields the whole stream once per DataLoader worker:
with N workers every row arrives N times and samples/s rises N-fold while the model learns
nothing more. Each worker of a stream also batches its own rows, so many workers over a
short stream give partial batches. Both look like speed and are not; a trial shows them in
three figures, read by the worker (``Repeats``, the epoch's rows, samples per step) and
judged here against the baseline's by one pure rule (``distortion``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from autotune.core._outcome import Outcome
from autotune.core._whole_runs import other_training

if TYPE_CHECKING:
    from autotune.stores._records import TrialRow
    from autotune.tuner._watch import TrialResult

#: Batches at the start of a trial whose rows are fingerprinted (in the warmup, never in a
#: window): with N workers in order, batch k comes from worker k mod N, so a stream every
#: worker yields whole repeats its rows from the second batch on.
PRINT_BATCHES = 64
#: Elements of a row that its fingerprint reads (all of a smaller row; else evenly spaced).
ROW_ELEMENTS = 4096
#: The share of rows seen again (beyond the baseline's own share) that marks a duplicating
#: loader: N workers yielding the whole stream repeat (N - 1) / N of them, at least half.
REPEAT_MARGIN = 0.25
#: An epoch of more rows than the baseline's by this factor delivers some twice.
EPOCH_MARGIN = 1.25
#: Batches smaller on average than the baseline's (each as a share of its batch_size) by
#: this factor are another training, not a faster one.
FILL_MARGIN = 0.9

#: The head of a reason for rows delivered more than once (``duplicating`` reads it back from
#: the store), and of one for smaller batches.
DUPLICATED, SMALLER = "distorted", "not the same training"

_FIX = (
    "split the rows in the dataset's __iter__ by torch.utils.data.get_worker_info() (its id and "
    "num_workers), or every worker yields the whole stream"
)


def _widest(batch: Any) -> Any:
    """The batch's tensor with the most elements per row (the input, not the labels)."""
    import torch

    if isinstance(batch, torch.Tensor):
        return batch if batch.dim() >= 1 and batch.shape[0] else None
    items = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (list, tuple)) else ()
    best = None
    for item in items:
        found = _widest(item)
        if found is not None and (best is None or found[0].numel() > best[0].numel()):
            best = found
    return best


def row_prints(batch: Any) -> list[int]:
    """A hash of each row of ``batch`` (its widest tensor's rows, ``ROW_ELEMENTS`` of each at
    most); none for a batch that holds no tensor."""
    import torch

    tensor = _widest(batch)
    if tensor is None:
        return []
    rows = tensor.detach().reshape(tensor.shape[0], -1)
    if rows.shape[1] > ROW_ELEMENTS:
        rows = rows[:, torch.linspace(0, rows.shape[1] - 1, ROW_ELEMENTS, device=rows.device).long()]
    array = rows.contiguous().cpu().view(torch.uint8).numpy()  # its bytes (numpy lacks bfloat16, float8)
    return [hash(array[i].tobytes()) for i in range(array.shape[0])]


class Repeats:
    """The share of rows seen again among a trial's first ``PRINT_BATCHES`` batches."""

    def __init__(self) -> None:
        self._seen: set[int] = set()
        self.rows = self.repeats = self.batches = 0

    def add(self, batch: Any) -> None:
        if self.batches >= PRINT_BATCHES:
            return
        self.batches += 1
        try:
            prints = row_prints(batch)
        except Exception:  # noqa: BLE001 - a batch it cannot read (a sparse or nested tensor) ends the count, not the trial
            self.batches = PRINT_BATCHES
            return
        for p in prints:
            self.rows += 1
            if p in self._seen:
                self.repeats += 1
            else:
                self._seen.add(p)

    @property
    def share(self) -> float | None:
        return self.repeats / self.rows if self.rows else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def fill(metrics: Mapping[str, Any], batch_size: Any) -> float | None:
    """Samples per step as a share of the loader's ``batch_size`` (None: either unknown)."""
    per_step, size = _number(metrics.get("samples_per_step")), _number(batch_size)
    return per_step / size if per_step and size and size > 0 else None


def distortion(
    metrics: Mapping[str, Any],
    config: Mapping[str, Any],
    base_metrics: Mapping[str, Any],
    base_config: Mapping[str, Any],
) -> str | None:
    """Why a trial's figure is not the same training as the baseline's, or None.

    Compares its rows seen again in its first batches, the rows of a whole epoch and its
    samples per step (as a share of its batch_size) with the baseline's. Missing figures
    decide nothing.

    >>> distortion({"repeat_share": 0.75}, {"num_workers": 4}, {"repeat_share": 0.0}, {})[:58]
    'distorted: 75% of the rows of its first batches came again'
    >>> distortion({"samples_per_step": 3.0}, {"batch_size": 64, "num_workers": 16},
    ...            {"samples_per_step": 64.0}, {"batch_size": 64})[:59]
    'not the same training: the model saw batches of 3.0 samples'
    >>> distortion({"repeat_share": 0.02, "epoch_rows": 1024}, {}, {"epoch_rows": 1000}, {}) is None
    True

    An epoch's last batch is partial where its rows are no multiple of the batch size: 640 rows
    in batches of 256 are 256, 256 and 128, 83% full on average, and that is the same training.

    >>> distortion({"samples_per_step": 213.3, "epoch_rows": 640}, {"batch_size": 256, "num_workers": 2},
    ...            {"samples_per_step": 64.0}, {"batch_size": 64}) is None
    True
    """
    workers = config.get("num_workers")
    by = f"its {workers} DataLoader workers" if isinstance(workers, int) and workers > 1 else "its loader"
    repeats, base_repeats = _number(metrics.get("repeat_share")), _number(base_metrics.get("repeat_share")) or 0.0
    if repeats is not None and repeats - base_repeats >= REPEAT_MARGIN:
        return (
            f"{DUPLICATED}: {repeats:.0%} of the rows of its first batches came again (the baseline's: "
            f"{base_repeats:.0%}): {by} deliver the same rows more than once; {_FIX}"
        )
    rows, base_rows = _number(metrics.get("epoch_rows")), _number(base_metrics.get("epoch_rows"))
    if rows and base_rows and rows > EPOCH_MARGIN * base_rows:
        return (
            f"{DUPLICATED}: an epoch of its loader delivered {rows:,.0f} rows, {rows / base_rows:.1f}x the "
            f"baseline's {base_rows:,.0f}: {by} deliver rows more than once; {_FIX}"
        )
    share, base_share = fill(metrics, config.get("batch_size")), fill(base_metrics, base_config.get("batch_size"))
    size = _number(config.get("batch_size"))
    # an epoch's last batch is partial where its rows are no multiple of it (only counts say so: a
    # batch_size or an epoch under one row divided by zero, and tells nothing)
    if base_share and rows is not None and rows >= 1 and size is not None and size >= 1:
        base_share = min(base_share, rows / (size * math.ceil(rows / size)))
    if share and base_share and share < FILL_MARGIN * base_share:
        return (
            f"{SMALLER}: the model saw batches of {metrics['samples_per_step']:.1f} samples on "
            f"average, {share:.0%} of its batch_size {config['batch_size']} (the baseline's: {base_share:.0%}): "
            f"each worker of a stream batches its own rows, so {by} end in partial batches; a smaller batch "
            "is not a faster config of the same training"
        )
    return None


def duplicating(rows: Iterable[TrialRow]) -> TrialRow | None:
    """The first trial whose loader delivered rows more than once (a stream that every worker
    yields whole): past one worker, every config would, so none is drawn or climbed to."""
    return next(
        (r for r in rows if r.outcome == Outcome.DISTORTED.value and r.reason.startswith(f"{DUPLICATED}:")), None
    )


def same_training(result: TrialResult, base: TrialRow | None) -> TrialResult:
    """``result`` as it stands, or as ``distorted`` where it is another training than the
    baseline's (``base``: the baseline's first run; None for that run): its loader's figures
    (``distortion``), or, for a complete whole run, the samples it trained (``other_training``:
    the standing never ranks it, so neither Optuna's value nor MLflow may call it complete)."""
    if base is None or result.outcome not in (Outcome.COMPLETE, Outcome.DIVERGED):
        return result
    why = distortion(result.metrics, result.resolved, base.metrics, base.config)
    if why is None and result.outcome == Outcome.COMPLETE:
        why = other_training(result.shape, result.resolved.get("batch_size"), base.shape, base.config.get("batch_size"))
    return result if why is None else dataclasses.replace(result, outcome=Outcome.DISTORTED, reason=why)
