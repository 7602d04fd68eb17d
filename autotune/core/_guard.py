"""The rules that judge a trial while and after it runs: divergence against the baseline (pruning:
``autotune.core._prune``).

Pure functions over numbers, so they are tested on hand-written histories. A loss
history is a list of ``(samples, loss)`` points: ``samples`` is how many samples
the training function had consumed at the middle of the stretch whose mean loss
is ``loss`` (the warmup, then each measured window).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple

#: How much worse than the baseline's loss, at matched samples, a trial's loss
#: may be before it counts as diverged: 0.5 = 50%. Measured on the three runners
#: (benchmarks/results/divergence.md): another seed moves it by 6%
#: at most; configs that train the same way (4x batch with linear lr scaling,
#: bf16, loader workers) by +17% at most; a blown-up lr by +2400%. A 4x batch without
#: lr scaling costs +34% to +122% at the same samples: it takes 4x fewer steps for them,
#: which is not divergence; a larger batch is judged at the same steps instead
#: (``divergence``), and what it costs in samples ranks it (its time to the baseline's loss).
DIVERGENCE_TOLERANCE = 0.5
#: A trial whose samples per step exceed the baseline's by more than this factor trains
#: on a larger batch: its loss is compared with the baseline's at the same steps.
LARGER_BATCH = 1.01
#: Loss differences are scaled by the baseline's loss at that point, but never by
#: less than this share of the baseline's first loss: late in a run the loss can
#: approach 0, where 0.02 against 0.01 is "100% worse" and means nothing.
SCALE_FLOOR = 0.1


#: ``lr_scaling`` from the least change of the user's lr at a larger batch to the most.
LR_STEPS = ("none", "sqrt", "linear")

Point = tuple[float, float]
#: A piece of a loss curve: samples from, samples to, the mean loss of its steps, their count.
Chunk = tuple[float, float, float, int]


@dataclasses.dataclass(frozen=True)
class LossReference:
    """What a trial's loss is judged against: the baseline's loss history (``loss_history``) and
    loss curve (``loss_curve``), and how much worse than them it may be (``divergence``). With
    neither (the default), only a nan or inf loss diverges: the baseline itself, a re-run of it.

    Attributes:
        losses: The baseline's loss history, sorted by samples.
        curve: The baseline's loss curve: the two are compared over the same samples.
        tolerance: The allowed relative excess (0.5 = 50% worse).
    """

    losses: Sequence[Point] = ()
    curve: Sequence[Chunk] = ()
    tolerance: float = DIVERGENCE_TOLERANCE


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


#: The baseline measures up to this many times its planned windows more while its loss
#: has not fallen to ``learned_share`` of its warmup's.
LEARN_WINDOWS = 2


def learned_share(tolerance: float = DIVERGENCE_TOLERANCE) -> float:
    """The share of its warmup's loss the baseline's loss must fall to over its judged span
    before divergence can be judged against it: there, a config whose loss stays where the
    baseline's started (it learns nothing: shuffled labels, a dead lr) is ``2 * tolerance``
    worse, twice past the tolerance. On a slow machine the baseline reaches fewer samples in
    its windows, and its loss may not have fallen that far yet (shuffled labels once passed
    as complete when the baseline had measured 1,024 samples).

    >>> learned_share(0.5)
    0.5
    """
    return 1 / (1 + 2 * tolerance)


def flat_reference(
    reference: Sequence[Point], curve: Sequence[Chunk], tolerance: float = DIVERGENCE_TOLERANCE
) -> str | None:
    """Why the baseline's loss curve cannot tell a config that learns nothing, or None: its
    loss over its judged span is above ``learned_share`` of its warmup's.

    >>> flat_reference([(100.0, 2.30)], [(0, 512, 2.29, 8), (512, 1024, 1.6, 8)])
    "the baseline's loss fell only from 2.3 (its warmup) to 1.6 (samples 512-1,024), not to half"
    """
    span = judged_span(curve)
    loss = mean_over(curve, *span) if span else None
    if not reference or span is None or loss is None or not math.isfinite(loss):
        return None
    first = reference[0][1]
    share = learned_share(tolerance)
    if first <= 0 or loss <= share * first:
        return None
    return (
        f"the baseline's loss fell only from {first:.3g} (its warmup) to {loss:.3g} "
        f"(samples {span[0]:,.0f}-{span[1]:,.0f}), not to {'half' if share == 0.5 else f'{share:.0%}'}"
    )


def loss_curve(windows: Sequence[Mapping[str, Any]]) -> list[Chunk]:
    """A run's loss curve: its windows' pieces (``curve`` in each window event), in order."""
    return [tuple(chunk) for w in windows for chunk in w.get("curve", ())]


def judged_curve(warmup: Mapping[str, Any] | None, windows: Sequence[Mapping[str, Any]]) -> list[Chunk]:
    """The loss curve a trial is judged on: its warmup's pieces, then its windows'.

    The warmup's count for the trial, never for the reference (the baseline's span starts
    after its warmup, ``judged_span``): a config 4x the baseline's speed passes, in its
    warmup, most of the samples the baseline's windows reached, and judged on its windows
    alone it was compared with the baseline's last loss only, which let a 4x batch that
    learned 4x less per sample pass as complete.
    """
    return loss_curve([warmup, *windows] if warmup else windows)


def judged_span(curve: Sequence[Sequence[float]]) -> tuple[float, float] | None:
    """The samples a study judges divergence on: from half to all of the largest power of two
    of samples the baseline's measured windows reached (not before its first window).

    A power of two, so that the span does not move with the baseline's speed: two studies
    whose baselines reached 26,000 and 31,000 samples both judge on 8,192-16,384, and a config
    gets the same verdict in both.

    >>> judged_span([(3000, 20000, 1.0, 10), (20000, 31000, 0.8, 10)])
    (8192.0, 16384.0)
    """
    if not curve:
        return None
    first, reached = curve[0][0], curve[-1][1]
    end = float(2 ** math.floor(math.log2(reached))) if reached >= 1 else reached
    return max(first, end / 2), end  # (not before the windows: the warmup's loss is no reference)


def mean_over(curve: Sequence[Sequence[float]], start: float, end: float) -> float | None:
    """Mean loss of the steps whose pieces lie in ``[start, end]`` (by the piece's middle),
    weighted by steps; None when none does."""
    inside = [c for c in curve if start <= (c[0] + c[1]) / 2 <= end]
    steps = sum(c[3] for c in inside)
    return sum(c[2] * c[3] for c in inside) / steps if steps else None


def first_nonfinite(history: Sequence[Point]) -> Point | None:
    """The first point whose loss is nan or inf, or None."""
    return next((p for p in history if not math.isfinite(p[1])), None)


def blew_up(history: Sequence[Point], curve: Sequence[Chunk] = ()) -> Point | None:
    """A trial's first nan or inf loss: in its history, else in its curve's pieces (at a
    piece's end); None when every loss is finite."""
    return first_nonfinite(history) or next(((c[1], c[2]) for c in curve if not math.isfinite(c[2])), None)


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
    """A trial's loss against the baseline's over the same samples (see ``judge_loss``)."""

    excess: float  # (loss - reference) / scale: 0.5 = 50% worse
    loss: float  # the trial's mean loss there
    reference: float  # the baseline's mean loss there
    first: float  # samples (or steps: ``unit``) where the comparison starts and ends
    last: float
    unit: str = "samples"


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
    tail = matched[len(matched) // 2 :]
    loss = sum(p[1] for p in tail) / len(tail)
    ref = sum(p[2] for p in tail) / len(tail)
    scale = max(abs(ref), SCALE_FLOOR * abs(reference[0][1]))
    if scale == 0:
        return None
    return Comparison((loss - ref) / scale, loss, ref, tail[0][0], tail[-1][0])


def judge_loss(
    reference: Sequence[Point],
    history: Sequence[Point],
    reference_curve: Sequence[Chunk] = (),
    curve: Sequence[Chunk] = (),
) -> Comparison | None:
    """A trial's loss against the baseline's, as the divergence verdict compares them.

    Over the same samples of both loss curves: the baseline's ``judged_span``, up to where
    the trial got; so a fast and a slow run of a config are judged on the same samples as
    the baseline is there. Without curves that reach the span (a function that steps its
    optimizer itself), the histories instead (``compare``). None when they share nothing;
    its excess is nan or inf when the trial's loss was.

    Args:
        reference: The baseline's loss history (warmup and windows), sorted by samples.
        history: The trial's loss history, sorted by samples.
        reference_curve: The baseline's loss curve.
        curve: The trial's loss curve.
    """
    span = judged_span(reference_curve)
    if span is not None and curve and curve[-1][1] > span[0]:
        start, end = span[0], min(span[1], curve[-1][1])
        loss, ref = mean_over(curve, start, end), mean_over(reference_curve, start, end)
        if loss is not None and ref is not None:
            scale = max(abs(ref), SCALE_FLOOR * abs(reference[0][1] if reference else reference_curve[0][2]))
            return Comparison((loss - ref) / scale if scale else 0.0, loss, ref, start, end)
    return compare(reference, history)


def divergence(
    reference: Sequence[Point],
    history: Sequence[Point],
    tolerance: float = DIVERGENCE_TOLERANCE,
    reference_curve: Sequence[Chunk] = (),
    curve: Sequence[Chunk] = (),
) -> str | None:
    """Why a trial counts as diverged, or None when it trains like the baseline.

    Diverged when any loss is nan or inf, or when it is worse than the baseline by
    more than ``tolerance`` as ``judge_loss`` compares them (the arguments are its own).

    Args:
        tolerance: The allowed relative excess (0.5 = 50% worse).
    """
    bad = blew_up(history, curve)
    if bad is not None:
        return f"loss is {bad[1]} after {bad[0]:,.0f} samples"
    found = same_steps(reference, history, reference_curve, curve)
    if found is None:
        found = judge_loss(reference, history, reference_curve, curve)
    if found is None or found.excess <= tolerance:
        return None
    return (
        f"loss {found.loss:.3g} vs the baseline's {found.reference:.3g} over the same {found.unit} "
        f"({found.first:,.0f}-{found.last:,.0f}): {found.excess:.0%} worse, over the "
        f"{tolerance:.0%} tolerance"
    )


def samples_per_step(curve: Sequence[Chunk]) -> float | None:
    """A loss curve's samples per step (its batch, as the loop saw it); None without steps.

    >>> samples_per_step([(0, 640, 1.0, 10), (640, 1280, 0.9, 10)])
    64.0
    """
    steps = sum(c[3] for c in curve)
    return (curve[-1][1] - curve[0][0]) / steps if steps and curve else None


def same_steps(
    reference: Sequence[Point], history: Sequence[Point], reference_curve: Sequence[Chunk], curve: Sequence[Chunk]
) -> Comparison | None:
    """For a trial on a larger batch than the baseline's (``LARGER_BATCH``): its loss against the
    baseline's at the same steps, as ``judge_loss`` compares them with both runs counted in steps;
    None for a trial on the baseline's batch or a smaller one (judged at the same samples: it has
    taken at least as many steps for them), or without curves to count steps by.

    At the same samples a 4x batch has taken a quarter of the baseline's steps, and its loss is
    worse for that alone (the MNIST script's larger batches were all called diverged, +104% to
    +291%). At the same steps it has seen 4x the samples: worse there, it trains worse.

    >>> base = [(i * 100, i * 100 + 100, 2.0 / (i + 1), 10) for i in range(16)]
    >>> big = [(i * 400, i * 400 + 400, 2.0 / (i + 1), 10) for i in range(8)]
    >>> judge_loss([], [], base, big).excess > 0.5, round(same_steps([], [], base, big).excess, 6)
    (True, 0.0)
    """
    ours, theirs = samples_per_step(curve), samples_per_step(reference_curve)
    if not ours or not theirs or ours <= LARGER_BATCH * theirs:
        return None

    def steps(points: Sequence[Point], per: float) -> list[Point]:
        return [(s / per, loss) for s, loss in points]

    def chunks(pieces: Sequence[Chunk], per: float) -> list[Chunk]:
        return [(a / per, b / per, loss, n) for a, b, loss, n in pieces]

    found = judge_loss(
        steps(reference, theirs), steps(history, ours), chunks(reference_curve, theirs), chunks(curve, ours)
    )
    return found._replace(unit="steps") if found is not None else None


def lr_retry(
    scaling: str | None, ratio: float, exploded: bool, tried: Collection[str | None], allowed: Collection[str]
) -> str | None:
    """The ``lr_scaling`` to run a diverged config with again, or None.

    A config's speed does not depend on its lr, so a fast config judged diverged at a
    batch larger than the user's may train soundly at another lr: a loss that stayed too
    high asks for a larger lr (the next step in ``LR_STEPS``), a loss that blew up (nan or
    inf) for a smaller one. Each step at most once per config (``tried``), within the space
    (``allowed``). A loss too high at ``linear`` gets no smaller lr: on the jpeg runner both
    such tries (4x: 68% worse at linear, then 95% at sqrt, 126% at none) were trials spent
    for nothing (benchmarks/results/reach.md).

    Args:
        scaling: The diverged run's ``lr_scaling``.
        ratio: Its batch size over the user's (at 1x or below, ``lr_scaling`` acts little
            or against the lr a smaller batch wants: nothing is tried).
        exploded: Whether its loss went nan or inf (``blew_up``).
        tried: The scalings this config has run with (the diverged run's included).
        allowed: The values the space draws.

    >>> lr_retry("none", 2.0, False, {"none"}, LR_STEPS)
    'sqrt'
    >>> lr_retry("linear", 8.0, True, {"linear"}, LR_STEPS)
    'sqrt'
    >>> lr_retry("linear", 8.0, False, {"linear"}, LR_STEPS) is None
    True
    """
    if ratio <= 1 or scaling not in LR_STEPS:
        return None
    at = LR_STEPS.index(scaling)
    order = LR_STEPS[:at][::-1] if exploded else LR_STEPS[at + 1 :]
    return next((step for step in order if step in allowed and step not in tried), None)
