"""The rules that judge a trial while and after it runs: divergence against the baseline, and pruning.

Pure functions over numbers, so they are tested on hand-written histories. A loss
history is a list of ``(samples, loss)`` points: ``samples`` is how many samples
the training function had consumed at the middle of the stretch whose mean loss
is ``loss`` (the warmup, then each measured window).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

#: How much worse than the baseline's loss, at matched samples, a trial's loss
#: may be before it counts as diverged: 0.5 = 50%. Measured on the three runners
#: (benchmarks/RESULTS.md, "Divergence tolerance"): another seed moves it by 6%
#: at most; configs that train the same way (4x batch with linear lr scaling,
#: bf16, loader workers) by +17% at most; a blown-up lr by +2400%. In between,
#: a 4x batch without lr scaling costs +34% to +122%: past 50%, a config needs
#: clearly more samples for the same loss, so its samples/s is not a real gain.
DIVERGENCE_TOLERANCE = 0.5
#: Loss differences are scaled by the baseline's loss at that point, but never by
#: less than this share of the baseline's first loss: late in a run the loss can
#: approach 0, where 0.02 against 0.01 is "100% worse" and means nothing.
SCALE_FLOOR = 0.1

#: A trial is pruned when its fastest window so far is under this share of the
#: best complete trial's samples/s. One config's samples/s varies by up to ±13%
#: between runs on the CPU machine (benchmarks/RESULTS.md: the mnist baseline,
#: 3,076 to 3,978 across 3 studies), so half the best is far outside the noise:
#: no plausible measurement makes such a trial the winner.
PRUNE_FRACTION = 0.5
#: Windows a trial measures before it may be pruned: one window can be a fluke
#: (a cache filling, a neighbour's burst).
PRUNE_MIN_WINDOWS = 2

Point = tuple[float, float]


def loss_history(warmup: Mapping[str, Any] | None, windows: Sequence[Mapping[str, Any]]) -> list[Point]:
    """The ``(samples, loss)`` points of a trial's warmup and windows (those that read a loss).

    Events carry ``samples_seen`` (consumed since the first batch, at the stretch's
    end) and ``samples`` (consumed in the stretch); the point sits at its middle.
    """
    points = []
    for event in ([warmup] if warmup else []) + list(windows):
        if event.get("loss") is None or "samples_seen" not in event:
            continue
        points.append((event["samples_seen"] - event["samples"] / 2, float(event["loss"])))
    return points


def reference_span(windows: Sequence[Mapping[str, Any]]) -> dict[str, float] | None:
    """The later half of a run's measured windows as one span of samples, with its mean loss
    (each window's mean weighted by its steps): ``{"start", "end", "loss"}``.

    The baseline's is the span every trial of the study is judged on (``divergence``):
    the same samples for every config, whatever its speed.

    >>> reference_span([{"samples_seen": 100, "samples": 100, "steps": 4, "loss": 2.0},
    ...                 {"samples_seen": 200, "samples": 100, "steps": 4, "loss": 1.0},
    ...                 {"samples_seen": 300, "samples": 100, "steps": 4, "loss": 0.5}])
    {'start': 100, 'end': 300, 'loss': 0.75}
    """
    known = [w for w in windows if w.get("loss") is not None and "samples_seen" in w and w.get("steps")]
    tail = known[len(known) // 2:]
    if not tail:
        return None
    return {"start": tail[0]["samples_seen"] - tail[0]["samples"], "end": tail[-1]["samples_seen"],
            "loss": sum(w["loss"] * w["steps"] for w in tail) / sum(w["steps"] for w in tail)}


#: A baseline whose loss over its judged span is within this share of its warmup's
#: barely trained while measured: against it, only blow-ups show as divergence.
FLAT_REFERENCE = 0.05


def flat_reference(reference: Sequence[Point], span: Mapping[str, float] | None) -> str | None:
    """Why the baseline's loss curve cannot tell a config that trains worse, or None.

    >>> flat_reference([(100.0, 2.30)], {"start": 512, "end": 1024, "loss": 2.28})
    "the baseline's loss barely fell while it was measured (2.3 in its warmup, 2.28 over samples 512-1,024)"
    """
    if not reference or span is None or not math.isfinite(span["loss"]):
        return None
    first = reference[0][1]
    if first - span["loss"] > FLAT_REFERENCE * abs(first):
        return None
    return (f"the baseline's loss barely fell while it was measured ({first:.3g} in its warmup, "
            f"{span['loss']:.3g} over samples {span['start']:,.0f}-{span['end']:,.0f})")


def first_nonfinite(history: Sequence[Point]) -> Point | None:
    """The first point whose loss is nan or inf, or None."""
    return next((p for p in history if not math.isfinite(p[1])), None)


def loss_at(reference: Sequence[Point], samples: float) -> float | None:
    """The reference's loss at ``samples``: linear between its points, its last loss beyond them.

    None before its first point: the loss falls fastest there, and comparing an
    earlier point of a trial with it would call a healthy trial worse.
    """
    if not reference or samples < reference[0][0]:
        return None
    for (s0, l0), (s1, l1) in zip(reference, reference[1:]):
        if samples <= s1:
            return l0 + (l1 - l0) * (samples - s0) / (s1 - s0) if s1 > s0 else l1
    return reference[-1][1]  # beyond the baseline's run: its loss only falls further, so this is lenient


class Comparison(NamedTuple):
    """A trial's loss against the baseline's over the later half of their shared points."""

    excess: float  # (loss - reference) / scale: 0.5 = 50% worse
    loss: float  # the trial's mean loss there
    reference: float  # the baseline's mean loss there
    first: float  # samples at the first and last compared point
    last: float


def compare(reference: Sequence[Point], history: Sequence[Point]) -> Comparison | None:
    """Compare finite loss histories at matched samples (None when they share no point).

    The trial's mean loss over the later half of the points it shares with the
    baseline, against the baseline's mean there, relative to the baseline's loss
    (but at least ``SCALE_FLOOR`` times the baseline's first loss). The later
    half is what training would go on from; averaging damps one noisy window.
    """
    matched = [(s, loss, ref) for s, loss in history if (ref := loss_at(reference, s)) is not None]
    if not matched:
        return None
    tail = matched[len(matched) // 2:]
    loss = sum(p[1] for p in tail) / len(tail)
    ref = sum(p[2] for p in tail) / len(tail)
    scale = max(abs(ref), SCALE_FLOOR * abs(reference[0][1]))
    if scale == 0:
        return None
    return Comparison((loss - ref) / scale, loss, ref, tail[0][0], tail[-1][0])


def divergence(reference: Sequence[Point], history: Sequence[Point],
               tolerance: float = DIVERGENCE_TOLERANCE, span: Mapping[str, float] | None = None,
               judged: Mapping[str, Any] | None = None) -> str | None:
    """Why a trial counts as diverged, or None when it trains like the baseline.

    Diverged when any loss is nan or inf, or when it is worse than the baseline by
    more than ``tolerance``: on the baseline's ``span`` when the trial measured its
    loss there (``judged``: the same samples for every config, so the verdict does
    not move with speed), else on their histories (``compare``).

    Args:
        reference: The baseline's loss history, sorted by samples.
        history: The trial's loss history, sorted by samples.
        tolerance: The allowed relative excess (0.5 = 50% worse).
        span: The baseline's ``reference_span``.
        judged: The trial's mean loss over that span (its ``judged`` event).
    """
    bad = first_nonfinite(history)
    if bad is not None:
        return f"loss is {bad[1]} after {bad[0]:,.0f} samples"
    if judged is not None and not math.isfinite(judged["loss"]):
        return f"loss is {judged['loss']} over samples {judged['start']:,.0f}-{judged['end']:,.0f}"
    if span is not None and judged is not None and reference:
        scale = max(abs(span["loss"]), SCALE_FLOOR * abs(reference[0][1]))
        excess = (judged["loss"] - span["loss"]) / scale if scale else 0.0
        if excess <= tolerance:
            return None
        where = f"samples {span['start']:,.0f}-{span['end']:,.0f}"
        if not judged.get("reached", True):
            where += f" (it reached {judged['end']:,.0f})"
        return (f"loss {judged['loss']:.3g} vs the baseline's {span['loss']:.3g} over the same {where}: "
                f"{excess:.0%} worse, over the {tolerance:.0%} tolerance")
    found = compare(reference, history)
    if found is None or found.excess <= tolerance:
        return None
    return (f"loss {found.loss:.3g} vs the baseline's {found.reference:.3g} at matched samples "
            f"({found.first:,.0f}-{found.last:,.0f}): {found.excess:.0%} worse, over the "
            f"{tolerance:.0%} tolerance")


def prune_reason(rates: Sequence[float], best: float | None, fraction: float = PRUNE_FRACTION,
                 min_windows: int = PRUNE_MIN_WINDOWS) -> str | None:
    """Why a running trial should stop now, or None.

    Args:
        rates: samples/s of the windows the trial has finished.
        best: samples/s of the best complete, feasible trial so far (None: no best yet).
        fraction: Prune below this share of ``best``; 0 never prunes.
        min_windows: Windows needed before judging.
    """
    if not best or fraction <= 0 or len(rates) < min_windows:
        return None
    fastest = max(rates)
    if fastest >= fraction * best:
        return None
    return (f"{fastest:,.0f} samples/s at best in {len(rates)} windows, under {fraction:.0%} "
            f"of the best so far ({best:,.0f})")
