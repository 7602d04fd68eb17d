"""Whether a script's loss is a signal to judge configs by, and in what unit to compare it.

Two kinds of script break the divergence rule (``autotune.core._guard``), both found on
pytorch/examples: a loss that is no convergence curve (dcgan's generator loss: two runs of
the code as written ended 0.714 and 0.226 over the same steps), and a loss summed over the
batch (vae's ``reduction='sum'``: 4x the batch, 4x the loss). Pure functions over loss lists.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from autotune.core._guard import Chunk, Comparison, Point, judge_loss, samples_per_step

#: Batches closer than this factor are not told apart by their loss: a summed loss at 1.2x the
#: batch is 1.2x, inside the run-to-run noise of most losses.
SUMMED_MIN_RATIO = 1.5


def self_disagreement(
    reference: Sequence[Point],
    history: Sequence[Point],
    reference_curve: Sequence[Chunk],
    curve: Sequence[Chunk],
    tolerance: float,
) -> Comparison | None:
    """A re-run of the code as written against its first run, where their losses disagree by
    more than ``tolerance`` either way (as ``judge_loss`` compares them); None where they agree,
    share nothing or a loss is nan or inf (that is the nan guard's to say).

    The same code twice is no divergence: a gap past the tolerance says the tolerance is inside
    this loss's own noise, so no config can be judged by it.

    >>> gan = [(0, 100, 0.7, 10), (100, 200, 0.2, 10), (200, 300, 0.2, 10), (300, 400, 0.7, 10)]
    >>> again = [(0, 100, 0.2, 10), (100, 200, 0.7, 10), (200, 300, 0.7, 10), (300, 400, 0.2, 10)]
    >>> round(self_disagreement([], [], gan, again, 0.5).excess, 2)
    2.5
    """
    found = judge_loss(reference, history, reference_curve, curve)
    if found is None or not math.isfinite(found.excess) or abs(found.excess) <= tolerance:
        return None
    return found


def noise_line(found: Comparison, tolerance: float) -> str:
    """The one line that says the loss is no signal for this script (``found``: ``self_disagreement``)."""
    return (
        f"the code as written, run again, reached loss {found.loss:.3g} against its first run's "
        f"{found.reference:.3g} over the same {found.unit} ({found.first:,.0f}-{found.last:,.0f}): "
        f"{abs(found.excess):.0%} apart, past the {tolerance:.0%} tolerance. Its loss is no signal "
        "for this script (a GAN, RL returns, a noisy loss): configs rank on speed of the same "
        "training, guarded against a nan or inf loss only"
    )


def _ratio(loss: float, reference: float) -> float | None:
    return loss / reference if loss > 0 and reference > 0 and math.isfinite(loss / reference) else None


def per_sample_factor(
    reference: Sequence[Point], history: Sequence[Point], reference_curve: Sequence[Chunk], curve: Sequence[Chunk]
) -> float:
    """What to divide a trial's loss by to compare it with the baseline's per sample: its batch
    over the baseline's (``samples_per_step``) where its loss is found to scale with the batch
    (summed over samples, ``reduction='sum'``); else 1.

    Found so when, at the start (the warmups: both models near the same initial weights) and at
    the same steps (``judge_loss`` counted in steps), the trial's loss over the baseline's is
    nearer the batch ratio than 1, on a log scale. A mean loss at the same steps stays near 1x
    the baseline's (a larger batch trains at least as well per step); a summed one is the batch
    ratio times that. Both points are asked, so that a mean loss that went bad later is still
    judged diverged, not divided away.

    >>> base = [(i * 100, i * 100 + 100, 200.0 / (i + 1), 10) for i in range(8)]
    >>> big = [(i * 400, i * 400 + 400, 800.0 / (i + 1), 10) for i in range(4)]
    >>> per_sample_factor([(50, 400.0)], [(200, 1600.0)], base, big)
    4.0
    """
    ours, theirs = samples_per_step(curve), samples_per_step(reference_curve)
    if not ours or not theirs or not reference or not history:
        return 1.0
    batch = ours / theirs
    if abs(math.log(batch)) < math.log(SUMMED_MIN_RATIO):
        return 1.0
    at_steps = judge_loss(
        [(s / theirs, loss) for s, loss in reference],
        [(s / ours, loss) for s, loss in history],
        [(a / theirs, b / theirs, loss, n) for a, b, loss, n in reference_curve],
        [(a / ours, b / ours, loss, n) for a, b, loss, n in curve],
    )
    ratios = [_ratio(history[0][1], reference[0][1]), at_steps and _ratio(at_steps.loss, at_steps.reference)]
    known = [r for r in ratios if r is not None]
    if len(known) < len(ratios):
        return 1.0
    # nearer the batch ratio than 1 on a log scale: past half of log(batch) the same way
    return batch if all(math.log(r) / math.log(batch) > 0.5 for r in known) else 1.0


def per_sample(history: Sequence[Point], curve: Sequence[Chunk], factor: float) -> tuple[list[Point], list[Chunk]]:
    """A trial's loss history and curve divided by ``factor`` (``per_sample_factor``)."""
    if factor == 1.0:
        return list(history), list(curve)
    return [(s, loss / factor) for s, loss in history], [(a, b, loss / factor, n) for a, b, loss, n in curve]


def per_sample_line(factor: float) -> str:
    """The one line that says a trial's loss was compared per sample."""
    return (
        f"its loss scales with the batch ({factor:g}x the code's batch, about {factor:g}x the loss: summed "
        "over samples, as reduction='sum' does): compared with the baseline's per sample"
    )
