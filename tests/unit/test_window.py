"""A trial's measured stretch (autotune.worker._window): its loss curve and its compile cost, on
hand-written lists."""

from __future__ import annotations

import itertools

import pytest
import torch

from autotune.worker._window import CURVE_CHUNKS, Window, chunk_curve, compile_s


@pytest.mark.parametrize(
    ("losses", "ends", "start", "chunks", "expected"),
    [
        ([], [], 0, 16, []),  # no step: no curve
        # one step per piece while there are fewer steps than pieces; each from where the last ended
        ([4.0, 2.0], [100, 150], 50, 16, [[50, 100, 4.0, 1], [100, 150, 2.0, 1]]),
        # 3 steps in 2 pieces: 3 // 2 = 1 step, then 2: (2 + 3) / 2 = 2.5
        ([4.0, 2.0, 3.0], [10, 20, 30], 0, 2, [[0, 10, 4.0, 1], [10, 30, 2.5, 2]]),
        # 4 steps of 8 samples in 2 pieces of 2: means (1 + 3) / 2 and (5 + 7) / 2
        ([1.0, 3.0, 5.0, 7.0], [8, 16, 24, 32], 0, 2, [[0, 16, 2.0, 2], [16, 32, 6.0, 2]]),
        # steps of unequal batches: a piece spans the samples of its own steps
        ([1.0, 1.0, 1.0], [104, 105, 140], 100, 3, [[100, 104, 1.0, 1], [104, 105, 1.0, 1], [105, 140, 1.0, 1]]),
        # a nan step makes its piece nan (the divergence rule sees it), not the others
        ([1.0, float("nan")], [4, 8], 0, 2, [[0, 4, 1.0, 1], [4, 8, pytest.approx(float("nan"), nan_ok=True), 1]]),
    ],
)
def test_a_curve_chunks_consecutive_steps(losses, ends, start, chunks, expected) -> None:
    assert chunk_curve(losses, ends, start, chunks) == expected


def test_a_curve_has_at_most_curve_chunks_pieces_covering_every_step() -> None:
    # 100 steps of 2 samples from sample 10 in 16 pieces of 100 // 16 = 6 or 7 steps
    curve = chunk_curve([1.0] * 100, [10 + 2 * (i + 1) for i in range(100)], 10)
    assert len(curve) == CURVE_CHUNKS
    assert sum(piece[3] for piece in curve) == 100 and {piece[3] for piece in curve} == {6, 7}
    assert curve[0][0] == 10 and curve[-1][1] == 210
    assert all(a[1] == b[0] for a, b in itertools.pairwise(curve))


@pytest.mark.parametrize(
    ("times", "expected"),
    [
        ([], 0.0),  # no step timed
        ([0.5, 0.5, 0.5], 0.0),  # no step past the typical one
        ([4.0, 0.5, 1.5, 0.5, 0.5], 4.5),  # 7 s against 5 x 0.5 s (the median)
        ([0.25, 8.0, 0.25, 0.25], 7.75),  # 8.75 s against 4 x 0.25 s (of 4, the upper middle one)
        ([1.0, 0.0, 0.0], 1.0),  # the first forward compiled: 1 s against 3 x 0 s
    ],
)
def test_compile_cost_is_the_time_past_as_many_median_steps(times, expected) -> None:
    assert compile_s(times) == expected


def test_a_window_sums_its_loss_and_keeps_the_curve_only_of_the_steps_given_an_end() -> None:
    window = Window(start=0.0)
    assert window.loss() is None and window.curve(seen=0) == []
    window.samples = 8  # two steps of 4 samples, ending at sample 12 since the first batch
    window.add_loss(torch.tensor(1.0), end=8)
    window.add_loss(torch.tensor(3.0), end=12)
    window.add_loss(torch.tensor(5.0))  # a ceiling's step: in the mean, not in the curve
    assert window.loss() == 3.0  # (1 + 3 + 5) / 3
    assert window.curve(seen=12) == [[4, 8, 1.0, 1], [8, 12, 3.0, 1]]
