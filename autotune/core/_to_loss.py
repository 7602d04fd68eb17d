"""Time to the baseline's loss: the samples a trial took to reach the loss the baseline had over
its judged span (``autotune.core._guard.judged_span``), against the baseline's own. A config that
trains on another batch size ranks on its samples/s over that ratio (``autotune.stores._records.ranked_rate``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from autotune.core._guard import Chunk, judged_span, mean_over


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


#: The baseline's loss must fall, after its warmup, by more than this many of its pieces' noise
#: (their scatter from piece to piece over its windows), and by this share of where its windows
#: started, for time to its loss to mean anything: a loss that only drifts a few percent over
#: the windows gives a target any config reaches by chance.
FALL_NOISES, FALL_SHARE = 2.0, 0.05


class Fall(NamedTuple):
    """The baseline's loss after its warmup (see ``loss_fall``)."""

    start: float  # its mean over the first ``TO_LOSS_PIECES`` pieces of its windows
    level: float  # its mean over its judged span
    noise: float  # its pieces' scatter over its windows
    falls: bool  # whether start - level is beyond the noise (``FALL_NOISES``) and ``FALL_SHARE``


def loss_fall(curve: Sequence[Chunk]) -> Fall | None:
    """How far the baseline's loss falls after its warmup: its windows' curve (``curve``: the
    warmup's pieces are not in it) from its first ``TO_LOSS_PIECES`` pieces to its judged span,
    against its pieces' noise; None where there is too little curve to tell.

    Measured from the end of the warmup, not from the first batches: with random labels (people
    benchmark with ``FakeData``) pytorch/examples' MNIST fell from its first batches' 2.65 to
    chance, ln 10 = 2.30, within its warmup and stayed there, and larger batches "reached" 2.30
    at 2.00x and 3.33x the samples, on noise. The noise is the scatter between neighbouring
    pieces (the root mean square of their differences over sqrt 2), so that the fall itself,
    spread over the windows, does not count as noise.

    Where it is flat, a config on another batch ranks on its speed (``to_loss_flat``); where
    there is too little curve to tell, time to loss is judged as before.

    >>> flat = [(i * 100, i * 100 + 100, 2.30 + (0.03 if i % 2 else -0.03), 8) for i in range(16)]
    >>> falling = [(i * 100, i * 100 + 100, 2.3 / (1 + i / 4), 8) for i in range(16)]
    >>> loss_fall(flat).falls, loss_fall(falling).falls, loss_fall(flat[:5])
    (False, True, None)
    """
    span = judged_span(curve)
    losses = [c[2] for c in curve]
    if not span or len(curve) < 2 * TO_LOSS_PIECES or not all(math.isfinite(x) for x in losses):
        return None
    level = mean_over(curve, *span)
    if level is None:
        return None
    start = sum(losses[:TO_LOSS_PIECES]) / TO_LOSS_PIECES
    steps = [b - a for a, b in zip(losses, losses[1:])]
    noise = math.sqrt(sum(d * d for d in steps) / len(steps) / 2)
    return Fall(start, level, noise, start - level > max(FALL_NOISES * noise, FALL_SHARE * abs(start)))


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
