"""Configs that are not the same training (autotune.worker._streams): the rule on hand-built figures,
the fingerprints on real batches, and what the study draws once a loader duplicated rows."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_planner import WORKERS, leader_standing

from autotune.tuner._loader_workers import epoch_samples
from autotune.tuner._planner import climb
from autotune.tuner._space import IntRange, Space
from autotune.tuner._space_now import draw_caps
from autotune.worker._streams import (
    PRINT_BATCHES,
    ROW_ELEMENTS,
    Repeats,
    distortion,
    duplicating,
    row_prints,
)
from standings import standing_from, trial


def test_a_duplicating_loader_is_told_by_its_repeated_rows_and_names_the_fix() -> None:
    why = distortion({"repeat_share": 0.75}, {"num_workers": 4}, {"repeat_share": 0.0}, {})
    assert why.startswith(
        "distorted: 75% of the rows of its first batches came again (the baseline's: 0%): "
        "its 4 DataLoader workers deliver the same rows more than once"
    )
    assert "get_worker_info()" in why


def test_a_dataset_with_repeated_rows_of_its_own_is_not_a_duplicating_loader() -> None:
    # the baseline (one process) repeats 60% of its rows too: the data, not the workers
    assert distortion({"repeat_share": 0.7}, {"num_workers": 4}, {"repeat_share": 0.6}, {}) is None


def test_an_epoch_of_more_rows_than_the_baseline_s_is_told_even_without_repeats_seen() -> None:
    # (workers that shuffle with their own seeds: no repeat in the first batches, but whole epochs show it)
    why = distortion(
        {"repeat_share": 0.01, "epoch_rows": 4096}, {"num_workers": 4}, {"repeat_share": 0.0, "epoch_rows": 1024}, {}
    )
    assert why.startswith("distorted: an epoch of its loader delivered 4,096 rows, 4.0x the baseline's 1,024")
    # drop_last at a larger batch or per worker delivers fewer: never told
    assert distortion({"epoch_rows": 960}, {}, {"epoch_rows": 1024}, {}) is None


def test_partial_batches_are_another_training_and_a_larger_batch_is_not() -> None:
    why = distortion(
        {"samples_per_step": 16.0},
        {"batch_size": 64, "num_workers": 16},
        {"samples_per_step": 64.0},
        {"batch_size": 64},
    )
    assert why.startswith(
        "not the same training: the model saw batches of 16.0 samples on average, 25% of its "
        "batch_size 64 (the baseline's: 100%)"
    )
    # 8x the batch, each full: the same training at another batch size (judged on its loss elsewhere)
    assert (
        distortion({"samples_per_step": 512.0}, {"batch_size": 512}, {"samples_per_step": 64.0}, {"batch_size": 64})
        is None
    )
    # a last partial batch per epoch in both: within the margin
    assert (
        distortion({"samples_per_step": 60.0}, {"batch_size": 64}, {"samples_per_step": 63.0}, {"batch_size": 64})
        is None
    )


@pytest.mark.parametrize(
    ("rows", "size"),
    [
        (1.0, -2.0),  # ceil(1 / -2) = 0: the partial last batch's share divided by zero (found by the test below)
        (-5, 64),  # ceil(-5 / 64) = 0 too
        (1e10, 5e-324),  # 1e10 / 5e-324 is inf: math.ceil raises OverflowError
        (0.5, 64),  # not a row
    ],
)
def test_a_batch_size_or_an_epoch_under_one_row_tells_nothing_of_partial_batches(rows, size) -> None:
    # full batches, as full as the baseline's: nothing to tell, and nothing raised on the way
    assert (
        distortion(
            {"epoch_rows": rows, "samples_per_step": abs(size)},
            {"batch_size": size},
            {"samples_per_step": 1.0},
            {"batch_size": 1},
        )
        is None
    )


figures = st.dictionaries(
    st.sampled_from(["repeat_share", "epoch_rows", "samples_per_step"]),
    st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 10**6), st.text(max_size=3)),
)
configs = st.dictionaries(
    st.sampled_from(["batch_size", "num_workers"]),
    st.one_of(st.none(), st.integers(-2, 4096), st.floats(), st.sampled_from(["2x", "auto"])),
)


@settings(max_examples=300, deadline=None)
@given(figures, configs, figures, configs)
def test_the_rule_never_raises_and_needs_a_finite_figure_to_tell(mine, config, base, base_config) -> None:
    why = distortion(mine, config, base, base_config)
    assert why is None or why.startswith(("distorted: ", "not the same training: "))
    finite = [v for v in mine.values() if isinstance(v, (int, float)) and math.isfinite(v)]
    if not finite:
        assert why is None


def test_row_prints_tell_equal_rows_equal_and_read_the_widest_tensor() -> None:
    x = torch.randn(4, 3, 8, 8)
    x[2] = x[0]
    prints = row_prints((x, torch.tensor([0, 1, 0, 1])))  # the images, not the labels (two values)
    assert len(prints) == 4 and prints[0] == prints[2] and len(set(prints)) == 3
    assert (
        row_prints({"ids": torch.arange(6).reshape(2, 3), "mask": torch.ones(2, 3)})[0]
        != row_prints({"ids": torch.arange(6).reshape(2, 3) + 1, "mask": torch.ones(2, 3)})[0]
    )
    assert len(row_prints(torch.randn(2, 5, dtype=torch.bfloat16))) == 2
    assert row_prints(["no tensor here"]) == []
    wide = torch.randn(2, 3 * ROW_ELEMENTS)  # read at ROW_ELEMENTS evenly spaced places
    wide[1] = wide[0]
    wide[1, 1] += 1.0  # between two read places: the rows read the same
    assert row_prints(wide)[0] == row_prints(wide)[1]


def test_repeats_count_rows_seen_again_in_the_first_batches_only() -> None:
    repeats = Repeats()
    assert repeats.share is None
    rows = torch.randn(8, 4)
    for _ in range(4):  # 4 workers each yielding the whole stream, in order
        repeats.add((rows, torch.zeros(8)))
    assert repeats.share == pytest.approx(0.75)
    for _ in range(PRINT_BATCHES):
        repeats.add((torch.randn(8, 4), torch.zeros(8)))
    assert repeats.batches == PRINT_BATCHES


def _duplicated(number: int, workers: int):
    row = trial(number, 3000.0, "distorted", sampled={"num_workers": workers})
    return dataclasses.replace(row, reason="distorted: 75% of the rows of its first batches came again")


def test_after_a_duplicating_trial_no_config_draws_or_climbs_past_one_worker() -> None:
    space = Space("s", {"num_workers": IntRange(0, 8)})
    base = trial(0, 800.0)
    assert draw_caps(standing_from(base), space, print) is None  # nothing known: no cap
    said = []
    cap = draw_caps(standing_from(base, _duplicated(1, 4)), space, said.append)
    assert cap("num_workers", {}) == 1
    assert said[0].text.startswith("num_workers drawn up to 1: with 4 the loader delivered rows more than once")
    # a leader that waits on data climbs to more workers (tests/unit/test_planner.py); not past a duplicating loader
    leader, standing = leader_standing(persistent=True)
    assert climb(leader, standing, WORKERS, cpus=2) is not None
    standing = standing_from(*standing.rows, _duplicated(4, 2), ceilings=standing.ceilings)
    assert duplicating(standing.rows).number == 4
    assert climb(leader, standing, WORKERS, cpus=2) is None
    # a partial-batch trial is another training too, but more workers do not duplicate its rows
    short = dataclasses.replace(trial(1, 3000.0, "distorted"), reason="not the same training: ...")
    assert duplicating([base, short]) is None


def test_a_stream_s_epoch_counts_its_rows_never_a_distorted_trial_s() -> None:
    base = trial(0, 800.0, epoch_rows=1024.0)
    assert epoch_samples([base, trial(1, 3000.0, "distorted", epoch_rows=4096.0)]) == 1024
    assert epoch_samples([trial(0, 800.0)]) is None


def test_rows_of_any_dtype_are_fingerprinted_and_an_unreadable_batch_ends_the_count_not_the_trial() -> None:
    for dtype in (torch.bfloat16, torch.bool, torch.int64, torch.float16, torch.float8_e4m3fn):
        rows = torch.zeros(3, 4).to(dtype)
        assert len(set(row_prints(rows))) == 1, dtype  # three equal rows
    repeats = Repeats()
    repeats.add(torch.sparse_coo_tensor([[0, 1]], [1.0, 2.0], (2,), check_invariants=True))
    repeats.add(torch.randn(4, 2))  # counted no more
    assert repeats.batches == PRINT_BATCHES and repeats.share is None
