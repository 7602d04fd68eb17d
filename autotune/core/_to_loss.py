"""Time to the baseline's loss: the samples a trial took to reach the loss the baseline had over
its judged span (``autotune.core._guard.judged_span``), against the baseline's own. A config that
trains on another batch size ranks on its samples/s over that ratio (``autotune.stores._records.ranked_rate``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from autotune.core._guard import Chunk, Point, judged_span, mean_over


class ToLoss(NamedTuple):
    """Samples to the baseline's loss (see ``to_loss``)."""

    target: float  # the baseline's mean loss over its judged span
    reference: float  # samples the baseline took to it
    samples: float | None  # samples the trial took to it (None: not within its curve)
    reach: float  # samples the trial's curve reached

    @property
    def ratio(self) -> float | None:
        """The trial's samples to the target over the baseline's (2.0: twice the samples for
        the same loss; its speedup to that loss is its samples/s speedup over this); None when
        it did not get there."""
        return self.samples / self.reference if self.samples else None


#: Pieces of a loss curve ``samples_to`` averages at least (one lucky piece is no arrival).
TO_LOSS_PIECES = 3


def samples_to(curve: Sequence[Chunk], target: float) -> float | None:
    """The first piece end ``x`` of ``curve`` where its mean loss over ``[x/2, x]`` (the judged
    span's own averaging, over at least ``TO_LOSS_PIECES`` pieces: a noisy piece does not count)
    is at most ``target``; None when it never is.

    >>> samples_to([(i * 100, i * 100 + 100, loss, 4) for i, loss in enumerate([2, 1.5, 1, 0.6, 0.5])], 0.8)
    500
    """
    for chunk in curve:
        end = chunk[1]
        if sum(1 for c in curve if end / 2 <= (c[0] + c[1]) / 2 <= end) < TO_LOSS_PIECES:
            continue
        loss = mean_over(curve, end / 2, end)
        if loss is not None and loss <= target:
            return end
    return None


#: The baseline's loss must fall by more than this many standard deviations of its pieces over its
#: judged span (their noise), and by this share of where it started, for time to its loss to mean
#: anything: with random labels a linear model's loss fell from 0.70 to 0.693 (ln 2) in its warmup,
#: many times its noise, and nothing was learned.
FALL_NOISES, FALL_SHARE = 2.0, 0.05


def loss_falls(curve: Sequence[Chunk], history: Sequence[Point] = ()) -> bool:
    """Whether the baseline's loss falls beyond its own noise: its loss where it started (its
    warmup's, the first point of its ``history``; else the mean of its curve's first
    ``TO_LOSS_PIECES`` pieces) against its mean over its judged span, by more than
    ``FALL_NOISES`` standard deviations of the pieces there and ``FALL_SHARE`` of where it
    started. Random labels (people benchmark
    with ``FakeData``) hold the loss at ln(classes) from the first step: reaching it "sooner"
    is noise (on the 2-core CPU one such study read 11.69x in time to loss from 1.34x the
    samples/s). A loss that fell in the warmup and is flat since has fallen: a larger batch
    must still get there (a 2,048-wide MLP's loss was 0.0005 by its first window).

    >>> flat = [(i * 100, i * 100 + 100, 2.30 + (0.03 if i % 2 else -0.03), 8) for i in range(16)]
    >>> falling = [(i * 100, i * 100 + 100, 2.3 / (1 + i / 4), 8) for i in range(16)]
    >>> loss_falls(flat), loss_falls(falling), loss_falls(flat, [(50.0, 2.31)]), loss_falls(flat, [(50.0, 9.0)])
    (False, True, False, True)
    """
    span = judged_span(curve)
    if not span or len(curve) < 2 * TO_LOSS_PIECES:
        return True  # (too little to tell: judged as before)
    judged = [c[2] for c in curve if span[0] <= (c[0] + c[1]) / 2 <= span[1] and math.isfinite(c[2])]
    early = [history[0][1]] if history else [c[2] for c in curve[:TO_LOSS_PIECES]]
    if len(judged) < 2 or not all(math.isfinite(x) for x in early):
        return True
    mean = sum(judged) / len(judged)
    noise = math.sqrt(sum((x - mean) ** 2 for x in judged) / (len(judged) - 1))
    start = sum(early) / len(early)
    return start - mean > max(FALL_NOISES * noise, FALL_SHARE * abs(start))


def to_loss(reference_curve: Sequence[Chunk], curve: Sequence[Chunk]) -> ToLoss | None:
    """Samples a trial took to reach the loss the baseline had over its judged span, and the
    baseline's own, by the same rule (``samples_to``): a config that learns less per sample (a
    larger batch at the same lr) needs more of them, and its samples/s gain is worth that much
    less in time to the same loss. None without a baseline curve or a finite target.

    >>> losses = [2.0, 1.5, 1.0, 0.8, 0.6, 0.5, 0.45, 0.4]
    >>> base = [(i * 1000, i * 1000 + 1000, loss, 8) for i, loss in enumerate(losses)]
    >>> stretched = [(i * 2000, i * 2000 + 2000, loss, 8) for i, loss in enumerate(losses)]
    >>> to_loss(base, stretched)
    ToLoss(target=0.9, reference=5000, samples=10000, reach=16000)
    """
    span = judged_span(reference_curve)
    target = mean_over(reference_curve, *span) if span else None
    if target is None or not math.isfinite(target) or not curve:
        return None
    reference = samples_to(reference_curve, target)
    if reference is None:
        return None
    return ToLoss(target, reference, samples_to(curve, target), curve[-1][1])
