"""Time to the baseline's loss (autotune.core._to_loss): used only where the baseline's loss falls
after its warmup beyond its noise; on hand-written loss lists."""

from __future__ import annotations

import random

import pytest

from autotune.core._to_loss import FALL_SHARE, loss_fall, to_loss


def curve_of(losses: list[float], per: float = 64.0, start: float = 0.0) -> list[tuple[float, float, float, int]]:
    """A loss curve of pieces ``per`` samples wide from ``start``, 4 steps each."""
    return [(start + i * per, start + (i + 1) * per, loss, 4) for i, loss in enumerate(losses)]


#: pytorch/examples' MNIST on random labels (10 classes), as a study measured it: the loss fell from
#: the first batches' 2.65 to chance (ln 10 = 2.303) within the warmup, then stayed there.
WARMUP = curve_of([2.65, 2.52, 2.41, 2.35, 2.32, 2.31])
CHANCE = [
    2.31,
    2.30,
    2.32,
    2.29,
    2.31,
    2.30,
    2.30,
    2.31,
    2.29,
    2.30,
    2.31,
    2.30,
    2.29,
    2.31,
    2.30,
    2.30,
    2.31,
    2.29,
    2.30,
    2.31,
    2.30,
    2.30,
    2.29,
    2.31,
    2.30,
    2.31,
    2.30,
    2.29,
    2.30,
    2.31,
    2.30,
    2.30,
]
WINDOWS = curve_of(CHANCE, start=WARMUP[-1][1])


def test_a_loss_that_fell_to_chance_in_the_warmup_and_stayed_there_does_not_fall() -> None:
    fall = loss_fall(WINDOWS)  # the baseline's curve: its windows', after the warmup
    assert fall is not None and not fall.falls
    assert fall.start == pytest.approx(2.31) and fall.level == pytest.approx(2.30, abs=0.01)
    # Measured from its first batches it had "fallen" 2.65 -> 2.30, 15% and many times its noise:
    # that start is what ranked an 8x batch at 2.00x the samples to the loss.
    assert loss_fall(WARMUP + WINDOWS).falls
    # and to_loss still finds a (noise) ratio for a 4x batch on the same flat loss: only the fall gates it
    wide = curve_of([2.45, 2.35, *CHANCE[:14]], per=256.0)
    assert to_loss(WINDOWS, wide) is not None


def test_a_real_falling_curve_falls() -> None:
    # a real MNIST-like curve after its warmup: 1.2 -> about 0.3 over the windows
    falling = curve_of([1.2 / (1 + i / 6) for i in range(32)], start=384.0)
    fall = loss_fall(falling)
    assert fall is not None and fall.falls
    assert fall.start - fall.level > 0.5  # 1.05 (its first 3 pieces) -> about 0.45 over 1,024-2,048


def test_a_noisy_flat_curve_does_not_fall_and_a_noisy_falling_one_does() -> None:
    rng = random.Random(7)
    flat = curve_of([2.30 + rng.gauss(0, 0.08) for _ in range(48)])
    assert not loss_fall(flat).falls
    # the same noise on a loss falling 2.3 -> 1.4: its pieces' scatter is the noise, not the fall
    falling = curve_of([2.3 - 0.02 * i + rng.gauss(0, 0.08) for i in range(48)])
    assert loss_fall(falling).falls


def test_a_drift_under_its_share_is_flat_however_quiet() -> None:
    # 2.310 -> 2.300 with no noise at all: 0.4%, under FALL_SHARE of where it started
    drift = curve_of([2.31 - 0.01 * i / 31 for i in range(32)])
    fall = loss_fall(drift)
    assert fall.noise < 1e-3 and (fall.start - fall.level) / fall.start < FALL_SHARE and not fall.falls


def test_too_little_curve_to_tell_is_judged_as_before() -> None:
    assert loss_fall(curve_of([2.3, 2.2, 2.1, 2.0, 1.9])) is None
    assert loss_fall([]) is None
    assert loss_fall(curve_of([2.3, float("nan")] * 8)) is None  # (a blown-up loss: divergence's to judge)
