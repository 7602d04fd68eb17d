"""Confirmation: grouping re-runs, the beyond-the-noise rule, the winner, the re-run plan (pure)."""

from __future__ import annotations

import dataclasses

import pytest

from autotune.core._kinds import Kind
from autotune.stores._records import TrialRow
from autotune.tuner._confirm import Group, beats, decide, group_runs, plan


def row(
    number: int,
    sps: float | None,
    outcome: str = "complete",
    *,
    baseline: bool = False,
    confirms: int | None = None,
    doubt: str | None = None,
) -> TrialRow:
    metrics = {"samples_per_s": sps} if sps is not None else {}
    kind = Kind.BASELINE if baseline else Kind.SAMPLED if confirms is None else Kind.CONFIRM
    return TrialRow(number, baseline, outcome, "", metrics, {}, None, None, kind=kind, of=confirms, doubt=doubt)


NOISY = "noisy: other processes used 48% of its CPUs while it measured (over 20%)"
SHORT = "short measure: the training function returned after 2 of 4 windows"


def groups_of(*rows: TrialRow) -> dict[int, Group]:
    return {g.first.number: g for g in group_runs(rows)}


def test_re_runs_join_the_group_of_their_first_trial() -> None:
    groups = groups_of(
        row(0, 100, baseline=True),
        row(1, 150),
        row(2, 90),
        row(3, 140, confirms=1),
        row(4, 105, confirms=0),
        row(5, 160, confirms=1),
    )
    assert {n: [r.number for r in g.runs] for n, g in groups.items()} == {0: [0, 4], 1: [1, 3, 5], 2: [2]}
    one = groups[1]
    assert one.rates == [150, 140, 160] and one.median == 150
    assert one.spread == pytest.approx((160 - 140) / 150)
    assert one.confirmed and not groups[2].confirmed and groups[2].spread == 0.0


@pytest.mark.parametrize(
    "outcomes, feasible",
    [
        (["complete", "complete"], True),
        (["complete", "interrupted"], True),  # the tuner stopped it: it says nothing about the config
        (["complete", "diverged"], False),  # diverged once: not safe to export
        (["complete", "oom_host"], False),
        (["interrupted"], False),  # no complete run at all
    ],
)
def test_a_config_is_feasible_only_if_every_run_that_ended_completed(outcomes, feasible) -> None:
    def sps(outcome: str) -> float | None:
        return 100.0 if outcome == "complete" else None

    rows = [row(1, sps(outcomes[0]), outcomes[0])] + [
        row(2 + i, sps(o), o, confirms=1) for i, o in enumerate(outcomes[1:])
    ]
    assert groups_of(*rows)[1].feasible is feasible


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ([110, 112, 111], [100, 104, 102], True),  # every run of a beats every run of b
        ([110, 103, 111], [100, 104, 102], False),  # a's slowest (103) under b's fastest (104)
        ([110], [100, 101], False),  # one run: not confirmed, no claim
    ],
)
def test_beats_means_no_overlap(a, b, expected) -> None:
    rows = [row(0, a[0])] + [row(10 + i, v, confirms=0) for i, v in enumerate(a[1:])]
    rows += [row(1, b[0])] + [row(20 + i, v, confirms=1) for i, v in enumerate(b[1:])]
    groups = groups_of(*rows)
    assert beats(groups[0], groups[1]) is expected


def test_the_winner_is_the_best_median_that_beats_the_baseline() -> None:
    # trial 1 has the best median (130) but one run as slow as the baseline's fastest;
    # trial 2 (median 120) clearly beats the baseline: it wins; 1 is inside its noise.
    groups = group_runs(
        [
            row(0, 100, baseline=True),
            row(1, 130),
            row(2, 120),
            row(3, 101, confirms=0),
            row(4, 102, confirms=0),
            row(5, 102, confirms=1),
            row(6, 131, confirms=1),
            row(7, 119, confirms=2),
            row(8, 121, confirms=2),
        ]
    )
    decision = decide(groups)
    assert decision.winner.first.number == 2
    assert decision.fastest.first.number == 1
    assert [g.first.number for g in decision.ties] == [1]
    assert not decision.no_win


def test_no_win_when_nothing_beats_the_baseline_beyond_the_noise() -> None:
    groups = group_runs(
        [
            row(0, 100, baseline=True),
            row(1, 104),
            row(2, 99, confirms=0),
            row(3, 103, confirms=0),
            row(4, 102, confirms=1),
            row(5, 106, confirms=1),
        ]
    )
    decision = decide(groups)
    assert decision.winner.first.number == 0 and decision.fastest.first.number == 1
    assert decision.no_win


def test_unconfirmed_configs_compete_on_their_single_run() -> None:
    decision = decide(group_runs([row(0, 100, baseline=True), row(1, 120), row(2, 140, "diverged")]))
    assert decision.winner.first.number == 1 and not decision.no_win and decision.ties == ()
    assert decide(group_runs([row(0, None, "crashed", baseline=True)])).winner is None


def test_once_the_baseline_is_confirmed_a_single_run_cannot_win() -> None:
    # (from a 12-trial MNIST study) the confirmed 9 and 7 overlap the baseline's runs; 11 ranked
    # 4th when the confirmation was planned and has one run: it does not win on it
    rows = [
        row(0, 5011, baseline=True),
        row(7, 4979),
        row(9, 5189),
        row(11, 4816),
        row(13, 4926, confirms=9),
        row(14, 5737, confirms=7),
        row(15, 4171, confirms=0),
        row(17, 6274, confirms=9),
        row(18, 4720, confirms=7),
        row(19, 4356, confirms=0),
    ]
    decision = decide(group_runs(rows))
    assert decision.winner is decision.baseline and decision.no_win
    assert decision.fastest.first.number == 9


def test_plan_re_runs_the_top_three_and_the_baseline_in_turns() -> None:
    rows = [
        row(0, 100, baseline=True),
        row(1, 150),
        row(2, 90),
        row(3, 140),
        row(4, 160),
        row(5, 200, "diverged"),
        row(6, 130),
    ]
    # top three feasible: 4 (160), 1 (150), 3 (140); then the baseline; two turns
    assert plan(group_runs(rows), runs=2) == [4, 1, 3, 0, 4, 1, 3, 0]
    # resumed after some re-runs: only what is missing; an interrupted re-run counts for nothing
    more = rows + [row(7, 158, confirms=4), row(8, 151, confirms=1), row(9, None, "interrupted", confirms=3)]
    assert plan(group_runs(more), runs=2) == [4, 1, 3, 0, 3, 0]
    assert plan(group_runs(rows), runs=0) == []
    # the baseline alone: nothing to confirm it against
    assert plan(group_runs([row(0, 100, baseline=True), row(1, 90, "diverged")]), runs=2) == []
    # under half the baseline's speed (dcgan's 8x batch at 0.23x): it cannot win, not run again
    slow = [row(0, 100, baseline=True), row(1, 150), row(2, 49), row(3, 50)]
    assert plan(group_runs(slow), runs=1) == [1, 3, 0]


def test_plan_counts_re_runs_already_enqueued_or_running_as_done() -> None:
    # Another tuner's round is under way: 4 has one re-run running and one waiting, 0 one waiting.
    rows = [
        row(0, 100, baseline=True),
        row(1, 150),
        row(3, 140),
        row(4, 160),
        row(7, None, "running", confirms=4),
        row(8, None, "waiting", confirms=4),
        row(9, None, "waiting", confirms=0),
    ]
    # 4 needs none more; 1 and 3 two each; the baseline one more
    assert plan(group_runs(rows), runs=2) == [1, 3, 0, 1, 3]
    # a config whose only run is still waiting is not feasible yet: not planned
    assert plan(group_runs([row(0, 100, baseline=True), row(1, None, "waiting")]), runs=2) == []


def test_doubted_runs_never_rank_a_config() -> None:
    # trial 2's noisy 900/s and trial 3's short 5,000/s are shown but count for nothing
    rows = [
        row(0, 100, baseline=True),
        row(1, 150),
        row(2, 900, doubt=NOISY),
        row(3, 5000, doubt=SHORT),
        row(4, 140, confirms=2),
    ]
    groups = groups_of(*rows)
    assert groups[2].rates == [140] and [r.number for r in groups[2].doubted] == [2]
    assert groups[2].lead.number == 4  # its first believed run speaks for it
    assert groups[3].rates == [] and not groups[3].feasible
    decision = decide(list(groups.values()))
    assert decision.winner.first.number == 1 and decision.fastest.first.number == 1


def test_a_baseline_with_noisy_runs_only_is_still_the_baseline() -> None:
    groups = group_runs([row(0, 10, baseline=True, doubt=NOISY), row(1, 150)])
    decision = decide(groups)
    assert decision.baseline is groups[0] and decision.baseline.rates == []
    assert decision.winner is groups[1]


def test_plan_measures_again_configs_whose_runs_were_all_noisy() -> None:
    # 2 ran only under load (its best noisy run: 170/s): it competes on that, and gets 1 + 2
    # believed runs like the others (which have one each already); the short measure 3 would be
    # short again: never planned
    rows = [row(0, 100, baseline=True), row(1, 150), row(2, 170, doubt=NOISY), row(3, 900, doubt=SHORT), row(4, 120)]
    assert plan(group_runs(rows), runs=2) == [2, 1, 4, 0, 2, 1, 4, 0, 2]
    # the baseline's only run noisy: it is re-run too
    rows = [row(0, 10, baseline=True, doubt=NOISY), row(1, 150)]
    assert plan(group_runs(rows), runs=1) == [1, 0, 0]


def test_a_config_drawn_again_joins_its_group_one_answer_per_config() -> None:
    def drawn(number: int, sps: float, workers: int, **kw) -> TrialRow:
        return dataclasses.replace(row(number, sps, **kw), sampled={"num_workers": workers})

    # 1 and 3 drew the same config: one group, its median of 425 and 170 (not "4.25x and 1.69x");
    # a re-run of 3 (a noisy one measured again) joins it too
    rows = [
        row(0, 100, baseline=True),
        drawn(1, 425, 2),
        drawn(2, 150, 4),
        drawn(3, 170, 2),
        row(4, 300, confirms=3),
        dataclasses.replace(row(5, None, "waiting"), sampled={}),
    ]
    groups = groups_of(*rows)
    assert sorted(groups) == [0, 1, 2, 5]
    assert [r.number for r in groups[1].runs] == [1, 3, 4] and groups[1].median == 300
