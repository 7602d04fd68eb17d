"""The planner's rules on hand-built standings (autotune.tuner._planner): what runs next, and why."""

from __future__ import annotations

import dataclasses

import pytest

from autotune.core._kinds import Kind, Line, Request
from autotune.tuner._planner import (
    Failed,
    Settings,
    Wait,
    after_quiet_wait,
    after_trial,
    baseline_curve,
    climb,
    confirmation,
    measure_again,
    owed_again,
    retry_lr,
    smaller_batch,
    without_baseline,
)
from autotune.tuner._space import Choice, Fixed, IntRange, Space
from standings import ceilings_of, standing_from, trial

NOISY = "noisy: other processes used 48% of its CPUs while it measured (over 20%)"
LR = Space("lr", {"batch_size": Choice(("1x", "2x", "4x")), "lr_scaling": Choice(("none", "sqrt", "linear"))})


def settings(space: Space = LR, trials_left: int = 4, remeasure: int = 2) -> Settings:
    return Settings(space, cpus=2, tolerance=0.5, windows=4, remeasure=remeasure, trials_left=trials_left)


# -- while the study has no complete baseline ------------------------------------------------


def test_without_a_baseline_a_tuner_waits_for_the_one_running_stops_on_a_failed_one_or_asks_again() -> None:
    running = trial(0, None, "running")
    assert without_baseline(standing_from(running), None) == Wait(0)
    rerun = trial(3, None, "waiting", kind=Kind.REMEASURE, of=0, baseline=True)  # its noisy figure, again
    assert without_baseline(standing_from(trial(0, 900.0, doubt=NOISY), rerun), None) == Wait(3)
    crashed = trial(0, None, "crashed")
    assert without_baseline(standing_from(crashed), watched=0) == Failed(crashed)
    # one this tuner did not watch fail (an older study), or one interrupted: asked for again,
    # once per generation however many tuners find it missing
    assert without_baseline(standing_from(crashed), None) == Request(Kind.BASELINE, baseline=True, once="baseline-1")
    stopped = trial(0, None, "interrupted")
    assert without_baseline(standing_from(stopped), watched=0).once == "baseline-1"
    assert without_baseline(standing_from(), None).once == "baseline-0"


# -- after a trial ---------------------------------------------------------------------------


def test_an_interrupted_baseline_or_repeat_is_owed_again_a_draw_is_not() -> None:
    base = trial(0, None, "interrupted")
    assert owed_again(base, standing_from(base)) == Request(Kind.BASELINE, baseline=True, once="baseline-1")
    again = trial(5, None, "interrupted", kind=Kind.REMEASURE, of=2, sampled={"num_workers": 2}, remeasure=1)
    assert owed_again(again, standing_from(trial(0), again)) == Request(
        Kind.REMEASURE, {"num_workers": 2}, 2, attempt=1
    )
    assert owed_again(trial(4, None, "interrupted", sampled={"num_workers": 2}), standing_from(trial(0))) is None
    assert owed_again(trial(4, 900.0), standing_from(trial(0))) is None


def test_a_noisy_figure_is_measured_again_up_to_the_limit() -> None:
    drawn = trial(3, 900.0, sampled={"num_workers": 2}, doubt=NOISY)
    assert measure_again(drawn, 2) == Request(
        Kind.REMEASURE, {"num_workers": 2}, 3, f"trial 3: {NOISY}; measuring it again", attempt=1
    )
    # a re-measure of it names the config's first trial; the baseline's stays a baseline
    again = dataclasses.replace(drawn, number=6, kind=Kind.REMEASURE, of=3, remeasure=1)
    assert measure_again(again, 2).of == 3 and measure_again(again, 2).attempt == 2
    assert measure_again(trial(0, 900.0, doubt=NOISY), 2).baseline
    # the limit reached: said, not run; --remeasure 0: nothing to say
    assert measure_again(dataclasses.replace(again, remeasure=2), 2) == Line(
        f"trial 6: {NOISY}; measured 3 times, never quietly: its figure is not ranked"
    )
    assert measure_again(drawn, 0) is None
    # a short measure would be short again; a believed figure needs nothing
    assert measure_again(trial(3, 900.0, doubt="short measure: 2 of 4 windows"), 2) is None
    assert measure_again(trial(3, 900.0), 2) is None


def test_after_the_wait_for_a_quiet_machine_the_remeasure_says_how_it_went() -> None:
    request = measure_again(trial(3, 900.0, doubt=NOISY), 2)
    assert after_quiet_wait(request, True, 0.01, 0.5, 2).why == f"trial 3: {NOISY}; measuring it again (attempt 2 of 3)"
    assert after_quiet_wait(request, True, 0.01, 12.0, 2).why.endswith(
        "measuring it again after 12 s, once the machine was quiet (attempt 2 of 3)"
    )
    assert after_quiet_wait(request, False, 0.55, 120.0, 2) == Line(
        f"trial 3: {NOISY}; the machine is still busy (others use 55% of its CPUs after 120 s): its figure is not ranked"
    )


def diverged(number: int = 1, rate: float = 2000.0, scaling: str = "none", **kw) -> object:
    return trial(
        number,
        rate,
        "diverged",
        sampled={"batch_size": "2x", "lr_scaling": scaling},
        config={"batch_size": 32, "lr_scaling": scaling},
        lr=0.01,
        losses=[(100.0, 2.0), (500.0, 1.9)],
        **kw,
    )


def test_a_fast_config_diverged_on_its_lr_runs_again_with_the_next_scaling() -> None:
    row = diverged()
    standing = standing_from(trial(0, 1000.0), row)
    retry = retry_lr(row, standing, LR, trials_left=True)
    assert retry == Request(Kind.RETRY, {"batch_size": "2x", "lr_scaling": "sqrt"}, 1, retry.why)
    assert retry.why == (
        "trial 1 diverged at batch size 32 (2x the code's) with lr_scaling none, but ran at 2,000 "
        "samples/s, past the best so far (1,000): its config runs again with lr_scaling sqrt (its "
        "speed does not depend on the lr)"
    )
    # the retry's own divergence goes on from the config's first trial, not tried twice
    second = diverged(2, scaling="sqrt", kind=Kind.RETRY, of=1)
    assert retry_lr(second, standing_from(trial(0, 1000.0), row, second), LR, True).config["lr_scaling"] == "linear"
    # slower than the best, at the code's batch size, no trials left: nothing
    assert retry_lr(diverged(rate=900.0), standing_from(trial(0, 1000.0), diverged(rate=900.0)), LR, True) is None
    assert retry_lr(row, standing, LR, trials_left=False) is None
    assert retry_lr(row, standing, Space("fixed", {"lr_scaling": Fixed("none")}), True) is None


def test_a_complete_larger_batch_slow_to_the_baselines_loss_runs_again_with_the_next_scaling() -> None:
    """Judged at the same steps, a larger batch held back by its lr is complete; the samples it
    took to the baseline's loss (2.5x here) say its lr is too small, as divergence did."""
    slow = trial(
        1,
        2000.0,
        sampled={"batch_size": "2x", "lr_scaling": "none"},
        config={"batch_size": 32, "lr_scaling": "none"},
        lr=0.01,
        to_loss_ratio=2.5,
    )
    standing = standing_from(trial(0, 1000.0), slow)
    assert slow.ranked_rate == 800.0  # ranks under the baseline: its time to the loss
    decisions = after_trial(slow, standing, settings())
    (retry,) = [d for d in decisions if isinstance(d, Request) and d.kind is Kind.RETRY]
    assert retry.config == {"batch_size": "2x", "lr_scaling": "sqrt"}
    assert retry.why.startswith(
        "trial 1 took 2.5x the baseline's samples to its loss at batch size 32 (2x the "
        "code's) with lr_scaling none, but ran at 2,000 samples/s, past the best so far (1,000)"
    )
    # near the baseline's samples, or on the code's batch: nothing to retry
    near = dataclasses.replace(slow, metrics={**slow.metrics, "to_loss_ratio": 1.2})
    assert not [
        d
        for d in after_trial(near, standing_from(trial(0, 1000.0), near), settings())
        if isinstance(d, Request) and d.kind is Kind.RETRY
    ]
    same = trial(1, 2000.0, sampled={"lr_scaling": "none"}, config={"batch_size": 16}, lr=0.01, to_loss_ratio=2.5)
    assert not [
        d
        for d in after_trial(same, standing_from(trial(0, 1000.0), same), settings())
        if isinstance(d, Request) and d.kind is Kind.RETRY
    ]


def test_a_retry_that_another_trial_drew_already_is_said_not_run() -> None:
    row = diverged()
    other = trial(2, None, "running", sampled={"batch_size": "2x", "lr_scaling": "sqrt"})
    said = retry_lr(row, standing_from(trial(0, 1000.0), row, other), LR, True)
    assert isinstance(said, Line) and said.text.endswith(
        "its config with lr_scaling sqrt runs already (trial 2): not run again"
    )
    done = dataclasses.replace(other, outcome="complete", metrics={"samples_per_s": 1900.0})
    assert retry_lr(row, standing_from(trial(0, 1000.0), row, done), LR, True).text.endswith(
        "ran already (trial 2): not run again"
    )


WORKERS = Space("w", {"num_workers": IntRange(0, 34), "persistent_workers": Choice((False, True))})
LOADER = {"num_workers": 0, "batch_size": 64}


def leader_standing(persistent: bool | None = None, **extra):
    """The loader waits (800 samples/s from the main process, 0.1 of 2 CPUs, the model takes
    4,000); trial 3 leads with 9 workers and waits on data 40% of its time."""
    sampled = {"num_workers": 9, **({} if persistent is None else {"persistent_workers": persistent})}
    rows = [
        trial(0, 200.0, config=LOADER),
        trial(1, 900.0, waits=0.5, sampled={"num_workers": 4}, workers_high=34),
        trial(3, 1600.0, waits=0.4, sampled=sampled, workers_high=34, **extra),
    ]
    return rows[2], standing_from(*rows, ceilings=ceilings_of((LOADER, 4000.0, 800.0, None, 1e-4)))


def test_a_leader_that_waits_on_data_runs_again_with_more_workers_once() -> None:
    leader, found = leader_standing(persistent=False)
    more = climb(leader, found, WORKERS, cpus=2)
    assert more == Request(
        Kind.MORE_WORKERS,
        {"num_workers": 18, "persistent_workers": True},
        3,
        more.why,
        once="more-workers-3",
        enqueue_params=True,
    )
    assert more.why.startswith("trial 3, the fastest then, drew num_workers=9 and waited on data 40%")
    # a space that holds persistent_workers at false keeps it so: a single choice is not drawn
    held = Space("w", {"num_workers": IntRange(0, 34), "persistent_workers": Choice((False,))})
    assert climb(leader, found, held, cpus=2).config == {"num_workers": 18, "persistent_workers": False}
    # drawn already by someone: not asked again
    drawn = trial(4, None, "running", sampled={"num_workers": 18, "persistent_workers": True})
    assert climb(leader, standing_from(*found.rows, drawn, ceilings=found.ceilings), WORKERS, 2) is None
    # no worker range in the space: nothing
    assert climb(leader, found, Space("none", {}), 2) is None


def test_no_more_follow_ups_are_enqueued_than_the_tuners_trials_left_hold() -> None:
    """A follow-up of the sampling takes one of the tuner's own trials: past those left (less
    the ones already enqueued) it is said, not enqueued to wait in the store unclaimed."""
    leader, found = leader_standing()
    waiting = trial(4, None, "waiting", kind=Kind.RETRY, sampled={"lr_scaling": "linear"})
    queued = standing_from(*found.rows, waiting, ceilings=found.ceilings)
    with_room = after_trial(leader, queued, settings(WORKERS, trials_left=2))
    assert [type(d) for d in with_room] == [Request] and with_room[0].kind is Kind.MORE_WORKERS
    (said,) = after_trial(leader, queued, settings(WORKERS, trials_left=1))
    assert isinstance(said, Line) and said.text.startswith("trial 3, the fastest then, drew num_workers=9")
    assert said.text.endswith("; not run: no trial of --trials is left for it")
    # an enqueued repeat (a confirmation's re-run) is no trial of --trials, and a config enqueued
    # from outside may be claimed by another tuner: neither takes this tuner's room
    rerun = trial(5, None, "waiting", kind=Kind.CONFIRM, of=3, sampled=leader.sampled)
    outside = trial(6, None, "waiting", sampled={"num_workers": 2})
    queued = standing_from(*found.rows, rerun, outside, ceilings=found.ceilings)
    assert [d.kind for d in after_trial(leader, queued, settings(WORKERS, trials_left=1))] == [Kind.MORE_WORKERS]


def test_a_leader_with_a_worker_per_batch_climbs_at_the_next_smaller_batch() -> None:
    epoch = {"epoch_batches": 9}  # its epoch at 4x (64): 9 batches, one per worker
    leader, standing = leader_standing(dataset=epoch)
    leader = dataclasses.replace(
        leader, sampled={**leader.sampled, "batch_size": "4x"}, config={"num_workers": 9, "batch_size": 64}
    )
    standing = standing_from(*standing.rows[:2], leader, ceilings=standing.ceilings)
    space = Space("w", {**WORKERS.domains, "batch_size": Choice(("1x", "2x", "4x"))})
    more = climb(leader, standing, space, cpus=2)
    assert more == Request(
        Kind.SMALLER_BATCH,
        {"num_workers": 18, "batch_size": "2x"},
        3,
        more.why,
        once="more-workers-3",
        enqueue_params=True,
    )
    assert "one per batch of its epoch at batch_size=4x: its config runs again at batch_size=2x" in more.why


def test_the_next_smaller_batch_size() -> None:
    sizes = Choice(("1x", 48, "4x", "2x"))  # the code's own is 32
    assert [smaller_batch(b, 32, sizes) for b in ("4x", "2x", 48, "1x")] == ["2x", 48, "1x", None]
    assert smaller_batch("4x", None, sizes) is None and smaller_batch(None, 32, sizes) is None


def test_the_baseline_says_when_its_curve_cannot_judge_divergence() -> None:
    flat = trial(0, 900.0, losses=[(100.0, 2.30), (600.0, 2.2)], curve=[(0, 512, 2.29, 8), (512, 1024, 2.2, 8)])
    assert baseline_curve(flat, 0.5, 1).text.startswith("the baseline's loss fell only from 2.3 (its warmup) to 2.2")
    learned = trial(
        0, 900.0, losses=[(100.0, 2.3), (600.0, 1.0), (900.0, 0.9)], curve=[(0, 512, 1.0, 8), (512, 1024, 0.9, 8)]
    )
    assert baseline_curve(learned, 0.5, 1).text.startswith("the baseline measured 1 more window than planned")
    assert baseline_curve(learned, 0.5, 2) is None
    # a whole run measured its code to the end: its windows past the planned ones are no addition
    whole = dataclasses.replace(learned, metrics={**learned.metrics, "run_s": 12.0})
    assert baseline_curve(whole, 0.5, 1) is None


def test_after_a_trial_the_rules_come_in_order() -> None:
    row = diverged(doubt=None)
    standing = standing_from(trial(0, 1000.0), row)
    assert [d.kind for d in after_trial(row, standing, settings())] == [Kind.RETRY]
    assert after_trial(row, standing, settings(trials_left=0)) == []
    base = trial(0, None, "interrupted")
    assert after_trial(base, standing_from(base), settings()) == [
        Request(Kind.BASELINE, baseline=True, once="baseline-1")
    ]
    noisy = trial(0, 900.0, doubt=NOISY, losses=[(100.0, 2.3), (600.0, 1.0)], curve=[(0, 512, 1.0, 8)])
    assert [type(d) for d in after_trial(noisy, standing_from(noisy), settings())] == [Request]  # and no curve line
    # a repeat is never retried or climbed: it runs a config another trial explores
    again = dataclasses.replace(row, number=2, kind=Kind.CONFIRM, of=1)
    assert after_trial(again, standing_from(trial(0, 1000.0), row, again), settings()) == []


@pytest.mark.parametrize(
    "runs, order",
    [
        (2, [3, 2, 1, 0, 3, 2, 1, 0]),  # the top 3 by median, then the baseline, in turns
        (1, [3, 2, 1, 0]),
    ],
)
def test_the_confirmation_re_runs_the_top_configs_and_the_baseline(runs: int, order: list) -> None:
    standing = standing_from(
        trial(0, 1000.0),
        trial(1, 800.0, sampled={"a": 1}),
        trial(2, 1200.0, sampled={"a": 2}),
        trial(3, 1500.0, sampled={"a": 3}),
        trial(4, None, "crashed", sampled={"a": 4}),
    )
    round_ = confirmation(standing, runs)
    assert [r.of for r in round_.requests] == order
    assert [r.baseline for r in round_.requests] == [n == 0 for n in order]  # its re-runs are the baseline too
    assert all(r.kind is Kind.CONFIRM and r.config == standing.rows[r.of].sampled for r in round_.requests)
    assert round_.once == "confirm-after-5"
    assert round_.why == (
        f"confirming: {len(order)} re-runs of trials 3, 2, 1, 0 (the winner is chosen on the median of its runs)"
    )
    assert confirmation(standing_from(trial(0, 1000.0)), 2).requests == ()  # nothing to compare the baseline with
