"""The rules that judge a trial (autotune.core._guard): divergence against the baseline, pruning, lr retries; on hand-written histories."""

from __future__ import annotations

import math

import pytest

from autotune.core._guard import (
    DIVERGENCE_TOLERANCE,
    LR_STEPS,
    blew_up,
    divergence,
    first_nonfinite,
    judge_loss,
    loss_at,
    loss_history,
    lr_retry,
    same_steps,
)
from autotune.core._prune import prune_reason
from autotune.core._to_loss import samples_to, to_loss

NAN, INF = math.nan, math.inf


# The baseline: loss 2.0 in the middle of its warmup (100 samples), then falling.
BASE = [(100.0, 2.0), (300.0, 1.0), (500.0, 0.6), (700.0, 0.5)]


def test_loss_history_puts_each_point_mid_stretch() -> None:
    warmup = {"samples": 200, "samples_seen": 200, "loss": 2.0}
    windows = [
        {"samples": 400, "samples_seen": 600, "loss": 1.0},
        {"samples": 400, "samples_seen": 1000, "loss": None},  # no run.step: skipped
        {"samples": 400, "samples_seen": 1400, "loss": NAN},
    ]
    # 200 - 200/2 = 100; 600 - 400/2 = 400; 1400 - 200 = 1200
    history = loss_history(warmup, windows)
    assert history[:2] == [(100.0, 2.0), (400.0, 1.0)]
    assert history[2][0] == 1200.0 and math.isnan(history[2][1])


def test_loss_history_of_a_trial_without_warmup_event() -> None:
    assert loss_history(None, [{"samples": 10, "samples_seen": 40, "loss": 0.5}]) == [(35.0, 0.5)]


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        ([(1.0, 2.0), (2.0, 1.0)], None),
        ([(1.0, 2.0), (2.0, NAN), (3.0, INF)], 2.0),
        ([(1.0, -INF)], 1.0),
        ([], None),
    ],
)
def test_first_nonfinite(history, expected) -> None:
    found = first_nonfinite(history)
    assert (found[0] if found else None) == expected


def test_blew_up_finds_a_nan_in_the_history_or_the_curve() -> None:
    assert blew_up([(1.0, 2.0)], [(0, 10, 1.0, 4), (10, 20, 0.9, 4)]) is None
    assert blew_up([(1.0, 2.0), (5.0, INF)], []) == (5.0, INF)
    # a window's mean loss can stay finite for a step's nan only in its curve's piece
    found = blew_up([(1.0, 2.0)], [(0, 10, 1.0, 4), (10, 20, NAN, 4)])
    assert found[0] == 20 and math.isnan(found[1])


@pytest.mark.parametrize(
    ("scaling", "ratio", "exploded", "tried", "allowed", "expected"),
    [
        ("none", 2.0, False, {"none"}, LR_STEPS, "sqrt"),  # too little lr: the next step up
        ("none", 2.0, False, {"none"}, ("none", "linear"), "linear"),  # sqrt not in the space
        ("sqrt", 4.0, False, {"none", "sqrt"}, LR_STEPS, "linear"),
        ("linear", 8.0, False, {"linear"}, LR_STEPS, None),  # too high at linear: no less lr
        ("none", 8.0, False, {"none", "sqrt", "linear"}, LR_STEPS, None),  # each tried once
        ("sqrt", 4.0, True, {"sqrt"}, LR_STEPS, "none"),  # nan: only less lr
        ("none", 4.0, True, {"none"}, LR_STEPS, None),
        ("none", 1.0, False, {"none"}, LR_STEPS, None),  # at the code's batch lr_scaling acts not
        ("linear", 0.5, False, {"linear"}, LR_STEPS, None),
        (None, 2.0, False, {None}, LR_STEPS, None),  # not drawn: nothing to step
    ],
)
def test_lr_retry_steps_the_lr_the_way_the_loss_asks(scaling, ratio, exploded, tried, allowed, expected) -> None:
    assert lr_retry(scaling, ratio, exploded, tried, allowed) == expected


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        (50.0, None),  # before the baseline's first point: no comparison
        (100.0, 2.0),  # on a point
        (200.0, 1.5),  # halfway between 2.0 and 1.0
        (600.0, 0.55),  # halfway between 0.6 and 0.5
        (5000.0, 0.5),  # beyond its run: its last loss
    ],
)
def test_loss_at_interpolates_the_reference(samples, expected) -> None:
    got = loss_at(BASE, samples)
    assert got == expected if expected is None else got == pytest.approx(expected)


@pytest.mark.parametrize(
    ("history", "diverged", "words"),
    [
        # the same curve as the baseline
        (BASE, False, ""),
        # nan or inf anywhere is divergence, whatever the rest
        ([(100.0, 2.0), (300.0, NAN)], True, "loss is nan after 300 samples"),
        ([(100.0, INF)], True, "loss is inf after 100 samples"),
        ([(100.0, 2.0), (300.0, 1.0), (500.0, -INF)], True, "loss is -inf"),
        # 40% worse at the later points: later half is (500, 0.84), (700, 0.70) vs 0.6, 0.5;
        # mean 0.77 vs 0.55 -> (0.77 - 0.55) / 0.55 = 40%, inside the 50% tolerance
        ([(100.0, 2.0), (300.0, 1.4), (500.0, 0.84), (700.0, 0.70)], False, ""),
        # 60% worse: (0.96 + 0.80) / 2 = 0.88 vs 0.55 -> 60%, over it
        ([(100.0, 2.0), (300.0, 1.6), (500.0, 0.96), (700.0, 0.80)], True, "60% worse"),
        # stuck at the starting loss: 2.0 vs 0.55 -> 264% worse
        ([(100.0, 2.0), (300.0, 2.0), (500.0, 2.0), (700.0, 2.0)], True, "264% worse"),
        # bad early but caught up: only the later half counts
        ([(100.0, 5.0), (300.0, 3.0), (500.0, 0.6), (700.0, 0.5)], False, ""),
        # a faster trial that saw many more samples than the baseline: compared with the
        # baseline's last loss (0.5); 0.45 is better
        ([(300.0, 1.0), (2000.0, 0.45), (4000.0, 0.45)], False, ""),
        # ... and 1.2 is 140% worse than it, though it saw 5x the samples
        ([(300.0, 1.0), (2000.0, 1.2), (4000.0, 1.2)], True, "140% worse"),
        # all points before the baseline's first: nothing to compare
        ([(10.0, 9.0), (20.0, 9.0)], False, ""),
    ],
)
def test_divergence(history, diverged, words) -> None:
    reason = divergence(BASE, history)
    assert (reason is not None) is diverged
    assert words in (reason or "")


def test_divergence_scale_floor_near_zero_loss() -> None:
    # Late in a run both losses are tiny: 0.02 vs 0.01 is "100% worse" relative to 0.01,
    # but the scale is floored at 10% of the baseline's first loss (0.1 * 2.0 = 0.2):
    # (0.02 - 0.01) / 0.2 = 5%.
    base = [(100.0, 2.0), (1000.0, 0.01)]
    assert divergence(base, [(1000.0, 0.02)]) is None
    # ... while 0.2 is (0.2 - 0.01) / 0.2 = 95% worse
    assert "95% worse" in divergence(base, [(1000.0, 0.2)])


def test_divergence_with_negative_losses() -> None:
    # A log-likelihood style loss below zero: worse means higher.
    base = [(100.0, -1.0), (300.0, -2.0)]
    assert divergence(base, [(300.0, -1.9)]) is None  # 0.1 / 2.0 = 5%
    assert divergence(base, [(300.0, -0.5)]) is not None  # 1.5 / 2.0 = 75%


def test_divergence_tolerance_is_configurable() -> None:
    history = [(300.0, 2.0)]  # (2.0 - 1.0) / 1.0 = 100% worse
    assert divergence(BASE, history, tolerance=1.5) is None
    assert divergence(BASE, history, tolerance=0.9) is not None
    assert DIVERGENCE_TOLERANCE == 0.5


def test_divergence_without_reference_checks_only_finiteness() -> None:
    assert divergence([], [(1.0, 100.0)]) is None
    assert divergence([], [(1.0, NAN)]) is not None


@pytest.mark.parametrize(
    ("rates", "best", "pruned"),
    [
        ([100.0], 1000.0, False),  # one window is not enough to judge
        ([100.0, 120.0], 1000.0, True),  # 120 < 0.5 * 1000
        ([100.0, 600.0], 1000.0, False),  # its fastest window, 600, is over 500
        ([499.0, 499.0], 1000.0, True),  # just under half
        ([500.0, 500.0], 1000.0, False),  # exactly half stays
        ([1.0, 1.0], None, False),  # no best yet (the baseline)
        ([1.0, 1.0], 0.0, False),
    ],
)
def test_prune_reason(rates, best, pruned) -> None:
    reason = prune_reason(rates, best)
    assert (reason is not None) is pruned
    if pruned:
        assert "under 50% of the best so far" in reason


def test_prune_fraction_zero_never_prunes() -> None:
    assert prune_reason([1.0, 1.0, 1.0], 1000.0, fraction=0.0) is None


# The baseline's curve over samples 0-800 (pieces of 100 samples, 4 steps each): the judged span
# is half to all of the largest power of two it reached, 256-512, where its mean loss (pieces by
# their middle: 350 and 450) is (0.9 + 0.7) / 2 = 0.8.
CURVE = [
    (0, 100, 2.0, 4),
    (100, 200, 1.5, 4),
    (200, 300, 1.1, 4),
    (300, 400, 0.9, 4),
    (400, 500, 0.7, 4),
    (500, 600, 0.6, 4),
    (600, 700, 0.55, 4),
    (700, 800, 0.5, 4),
]


def test_divergence_compares_the_same_samples_whatever_the_pieces() -> None:
    from autotune.core._guard import judged_span, mean_over

    assert judged_span(CURVE) == (256, 512) and mean_over(CURVE, 256, 512) == pytest.approx(0.8)
    # the baseline reached 700 or 1,000 samples (slower, faster): the same span
    assert judged_span(CURVE[:7]) == judged_span([*CURVE, (800, 1000, 0.45, 4)]) == (256, 512)
    # a fast trial, in big pieces: the one in the span (middle 500) reads 0.8, like the baseline
    # (on the baseline's batch: 25 samples a step, as CURVE)
    fast = [(0, 400, 1.5, 16), (400, 600, 0.8, 8), (600, 800, 0.75, 8), (800, 1600, 0.7, 32)]
    assert divergence(BASE, [], reference_curve=CURVE, curve=fast) is None
    # 1.28 there: (1.28 - 0.8) / 0.8 = 60% worse, over the tolerance
    worse = [(0, 300, 1.5, 12), (300, 500, 1.28, 8), (500, 800, 0.9, 12)]
    assert divergence(BASE, [], reference_curve=CURVE, curve=worse) == (
        "loss 1.28 vs the baseline's 0.8 over the same samples (256-512): 60% worse, over the 50% tolerance"
    )
    # a slow trial that got to 400: both judged on 256-400 only, the baseline's 0.9 there
    assert divergence(BASE, [], reference_curve=CURVE, curve=[(0, 300, 1.7, 12), (300, 400, 1.0, 4)]) is None
    assert "over the same samples (256-400): 67% worse" in divergence(
        BASE, [], reference_curve=CURVE, curve=[(0, 300, 1.7, 12), (300, 400, 1.5, 4)]
    )
    # a nan anywhere in the curve is divergence
    assert "loss is nan" in divergence(BASE, [], reference_curve=CURVE, curve=[(0, 100, float("nan"), 1)])
    # a trial that never reached the span: the histories decide (as without curves)
    assert divergence(BASE, BASE, reference_curve=CURVE, curve=[(0, 200, 1.2, 4)]) is None


def test_a_larger_batch_is_judged_at_the_same_steps_not_the_same_samples() -> None:
    # 4x the baseline's batch (100 samples a step), its loss step for step the baseline's: at the
    # same samples it is far worse (a quarter of the steps), at the same steps it trains alike.
    by_step = [c[2] for c in CURVE]
    big = [(j * 100, j * 100 + 100, by_step[j // 4], 1) for j in range(4 * len(by_step))]
    assert judge_loss(BASE, [], CURVE, big).excess > DIVERGENCE_TOLERANCE  # what the verdict used to read
    assert divergence(BASE, [], reference_curve=CURVE, curve=big) is None
    # the same batch, learning 60% worse per step: diverged, said in steps
    bad = [(a, b, loss * 1.6, n) for a, b, loss, n in big]
    assert divergence(BASE, [], reference_curve=CURVE, curve=bad) == (
        "loss 0.94 vs the baseline's 0.587 over the same steps (16-32): 60% worse, over the 50% tolerance"
    )
    # a smaller batch has taken more steps for the same samples: judged at the same samples
    small = [(i * 50, i * 50 + 50, 2.0 - i * 0.1, 4) for i in range(16)]
    assert same_steps(BASE, [], CURVE, small) is None
    assert "over the same samples" in divergence(BASE, [], reference_curve=CURVE, curve=small)
    assert same_steps(BASE, [], CURVE, CURVE) is None and same_steps(BASE, [], [], big) is None


def test_judge_loss_gives_the_comparison_whatever_the_verdict() -> None:
    from autotune.core._guard import Comparison, judge_loss

    # the fast trial above passes: its loss on the span is the baseline's, 0% worse
    # (on the baseline's batch: 25 samples a step, as CURVE)
    fast = [(0, 400, 1.5, 16), (400, 600, 0.8, 8), (600, 800, 0.75, 8), (800, 1600, 0.7, 32)]
    assert judge_loss(BASE, [], CURVE, fast) == pytest.approx(Comparison(0.0, 0.8, 0.8, 256, 512))
    # a slow one that got to 400 is compared on 256-400: (1.0 - 0.9) / 0.9 = 11% worse, passing
    assert judge_loss(BASE, [], CURVE, [(0, 300, 1.7, 4), (300, 400, 1.0, 4)]) == pytest.approx(
        Comparison(0.1 / 0.9, 1.0, 0.9, 256, 400)
    )
    # short of the span, the histories' later half: the trial's 0.6 at 500 against the baseline's 0.6
    assert judge_loss(BASE, [(300.0, 1.2), (500.0, 0.6)], CURVE, [(0, 200, 1.2, 4)]) == pytest.approx(
        Comparison(0.0, 0.6, 0.6, 500, 500)
    )
    assert judge_loss(BASE, [(50.0, 3.0)]) is None  # nothing shared: before the baseline's first point


@pytest.mark.parametrize(
    "first, span_loss, flat",
    [
        (2.30, 2.28, True),  # 1% lower: the baseline barely trained while measured
        (2.30, 1.60, True),  # 30% lower: a config that learns nothing is only 44% worse, and passes
        (2.30, 1.10, False),  # under half: one that learns nothing is over 100% worse
        (2.30, 2.50, True),  # it rose: nothing to judge a worse config by
    ],
)
def test_flat_reference(first, span_loss, flat) -> None:
    from autotune.core._guard import flat_reference

    why = flat_reference([(100.0, first)], [(0.0, 512.0, first, 8), (512.0, 1024.0, span_loss, 8)])
    assert (why is not None) is flat
    assert flat_reference([], []) is None


def curve_of(losses: list[float], per: float = 1000.0) -> list[tuple[float, float, float, int]]:
    """A loss curve of pieces ``per`` samples wide, 8 steps each."""
    return [(i * per, (i + 1) * per, loss, 8) for i, loss in enumerate(losses)]


def test_samples_to_a_loss_are_counted_as_the_judged_span_averages_not_at_one_lucky_piece() -> None:
    falling = curve_of([2.0, 1.6, 1.3, 1.1, 1.0, 0.9, 0.85, 0.8])
    assert samples_to(falling, 0.9) == 8000  # the mean over [4000, 8000] is 0.89
    lucky = curve_of([2.0, 0.5, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0])  # one piece under: not there
    assert samples_to(lucky, 0.9) is None


def test_a_batch_that_learns_half_as_much_per_sample_takes_twice_the_samples_to_the_baselines_loss() -> None:
    base = curve_of([2.0 / (1 + i) for i in range(16)])
    half = curve_of([2.0 / (1 + i / 2) for i in range(32)])  # the same curve, stretched over twice the samples
    found = to_loss(base, half)
    assert found.target == pytest.approx(0.3173, rel=1e-3)  # the baseline's mean over its span, 4,096-8,192
    assert (found.reference, found.samples) == (8000, 16000) and found.ratio == 2.0
    assert to_loss(base, base).ratio == 1.0  # the baseline's own re-run: 1
    short = to_loss(base, half[:10])  # stopped before it got there: no ratio, and how far it got
    assert short.ratio is None and short.reach == 10000
    assert to_loss([], half) is None
