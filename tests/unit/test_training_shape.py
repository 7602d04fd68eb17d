"""What every trial measures of the training, from its baseline (autotune.tuner._training_shape), and the answer
in the wall time a user waits for: the rules, on hand-built rows."""

from __future__ import annotations

import dataclasses

import pytest

from autotune.core._ceilings import Ceilings
from autotune.core._kinds import Kind
from autotune.machine._launch import Budget
from autotune.stores._records import TrialRow
from autotune.tuner._confirm import decide, group_runs
from autotune.tuner._standing import Standing, findings
from autotune.tuner._training_shape import Shape, cost_line, flat_runs, run_time_line, shape_of, trial_budget

#: The baseline's marks: its warmup ended at 640 samples, then a window an epoch (640 rows).
MARKS = {"marks": [640, 1280, 1920, 2560, 3200, 3840], "at": [1.0, 2.5, 4.0, 5.5, 7.0, 8.5]}


def run(
    number: int,
    run_s: float | None,
    *,
    kind: Kind = Kind.SAMPLED,
    of: int | None = None,
    sps: float = 300.0,
    shape: dict | None = None,
    samples: int = 3840,
    sampled: dict | None = None,
    **metrics: float,
) -> TrialRow:
    """A complete trial; with ``run_s``, a whole run of ``samples`` in that many seconds."""
    figures = {"samples_per_s": sps, "samples_per_s_spread": 0.05, **metrics}
    if run_s:
        figures.update(
            run_s=run_s,
            run_samples_per_s=samples / run_s,
            startup_s=2.0,
            loop_s=run_s - 3.0,
            outside_s=0.5,
            after_s=0.5,
        )
    baseline = kind is Kind.BASELINE or (kind is Kind.CONFIRM and of == 0)
    return TrialRow(
        number,
        baseline,
        "complete",
        "",
        figures,
        {"batch_size": 64},
        64,
        None,
        kind=kind,
        of=of,
        shape=shape if shape is not None else (MARKS if baseline else {}),
        sampled=sampled or {},
    )


def standing_from(*rows: TrialRow) -> Standing:
    from autotune.tuner._standing import standing_of

    return standing_of(rows, Ceilings())


@pytest.mark.parametrize(
    ("shape", "whole", "marks", "timeout"),
    [
        # ended by itself: every later trial runs whole, at all its marks, no ceilings; its deadline
        # the start-up limit and 5x the baseline's whole run (60 + 5 x 10.0)
        ({**MARKS, "ended": True}, True, (640, 1280, 1920, 2560, 3200, 3840), 110.0),
        # ran past --whole-run: the first warmup and --windows (4) marks; its deadline from the
        # baseline's time to the last of them and the ceilings: 60 + 5 x (7.0 + 2 x 2 x 1.5)
        (MARKS, False, (640, 1280, 1920, 2560, 3200), 125.0),
    ],
)
def test_every_trial_measures_at_the_baselines_marks(shape: dict, whole: bool, marks: tuple, timeout: float) -> None:
    base = run(0, 10.0 if whole else None, kind=Kind.BASELINE, shape=shape)
    found = shape_of(base)
    assert found.whole is whole and found.marks[0] == 640
    budget = trial_budget(Budget(whole_s=60.0), Kind.SAMPLED, found, 0.5)
    assert (budget.whole, budget.marks, budget.whole_s, budget.timeout_s) == (whole, marks, 0.0, timeout)
    assert budget.ceiling_windows == (0 if whole else 2)
    # a re-run of the code as written is a trial like the others: measured the same way
    assert trial_budget(Budget(whole_s=60.0), Kind.CONFIRM, found, 0.5) == budget
    # a --timeout of the user's own stands
    assert trial_budget(Budget(whole_s=60.0, timeout_s=30.0), Kind.SAMPLED, found, 0.5).timeout_s == 30.0


def test_the_baseline_learns_and_may_run_whole_and_an_old_study_runs_as_it_did() -> None:
    study = Budget(whole_s=60.0)
    first = trial_budget(study, Kind.BASELINE, None, 0.5)
    assert first.whole_s == 60.0 and first.learn_windows == 8 and not first.marks
    # a study from before marks were recorded: windows in seconds, and never whole
    old = run(0, None, kind=Kind.BASELINE, shape={})
    assert shape_of(old) is None
    assert trial_budget(study, Kind.SAMPLED, None, 0.5) == dataclasses.replace(study, whole_s=0.0)
    # a profile run records steps after its windows: never whole
    ended = shape_of(run(0, 10.0, kind=Kind.BASELINE, shape={**MARKS, "ended": True}))
    assert not trial_budget(study, Kind.SAMPLED, ended, 0.5, whole=False).whole


def test_the_cost_line_says_what_the_trials_will_take() -> None:
    whole = Shape((640, 1280), (1.0, 2.5), True, 16.2, 3.0)
    # 15 runs of 16.2 s each: a trial that runs whole starts cold, as the baseline did
    assert cost_line(whole, Budget(), 7, 8) == (
        "each trial runs your script whole: about 16 s as written; 7 trials and 8 confirmation runs: about 4.0 min"
    )
    windowed = Shape((640, 1280, 1920, 2560, 3200), (1.0, 2.5, 4.0, 5.5, 7.0), False, None, 3.0)
    line = cost_line(windowed, Budget(whole_s=60.0), 11, 0)
    # each: 3.0 s of start-up and 7.0 s to its last mark; up to 6 s of ceilings (half counted)
    assert line.startswith(
        "your code runs past the 60 s a trial may run whole (--whole-run): each trial measures "
        "the same 2,560 samples after a warmup of 640 (about 10 s"
    )
    assert line.endswith("11 trials: about 2.4 min")  # 11 x 13 s


def test_findings_of_whole_runs_say_the_wall_time_measured() -> None:
    rows = [
        run(0, 10.0, kind=Kind.BASELINE),
        run(1, 5.0, sps=700.0, sampled={"num_workers": 4}),
        run(2, 10.2, kind=Kind.CONFIRM, of=0),
        run(3, 9.8, kind=Kind.CONFIRM, of=0),
        run(4, 5.1, kind=Kind.CONFIRM, of=1, sps=690.0, sampled={"num_workers": 4}),
        run(5, 4.9, kind=Kind.CONFIRM, of=1, sps=710.0, sampled={"num_workers": 4}),
    ]
    lines = findings(standing_from(*rows))
    # ranked on samples over the whole run: 3840 / 5.0 against 3840 / 10.0; ± half of (4.9 .. 5.1) about 5.0
    assert lines[0] == "trial 1, 2.00x the baseline (your script's whole run in 5.0 s against 10.0 s as written, ±2%)"
    assert (
        "run time, measured whole (medians of 3 and 3 runs): as written 10.0 s (start-up 2.0 s, training 7.0 s, "
        "between epochs 0.5 s, after it 0.5 s); with trial 1's config 5.0 s (start-up 2.0 s, training 2.0 s, "
        "between epochs 0.5 s, after it 0.5 s)"
    ) in lines


def test_a_faster_loop_never_outranks_a_faster_whole_run() -> None:
    # trial 1's loop runs faster, but its whole run is slower (its workers' start-up, say): the
    # user waits for the whole run, and that is what ranks
    rows = [
        run(0, 10.0, kind=Kind.BASELINE, sps=300.0),
        run(1, 12.0, sps=900.0, sampled={"num_workers": 8}),
        run(2, 8.0, sps=400.0, sampled={"num_workers": 1}),
    ]
    standing = standing_from(*rows)
    assert standing.best.number == 2
    assert [round(r.speedup, 2) for r in standing.rows] == [1.0, 0.83, 1.25]


def test_windowed_answers_are_projected_and_said_so() -> None:
    base = run(0, None, kind=Kind.BASELINE, sps=100.0)
    win = run(1, None, sps=150.0, sampled={"num_workers": 2})
    groups = group_runs([base, win])
    line = run_time_line(groups[0], groups[1])
    assert line == (
        "run time, projected from the loop's samples/s (your code ran past --whole-run, so no trial "
        "ran it whole): an hour of its training as written takes 40 min with trial 1's config (1.50x), "
        "start-up aside"
    )
    # a study from before shapes were recorded makes no such claim
    old = [dataclasses.replace(base, shape={}), win]
    assert run_time_line(*group_runs(old)) is None
    assert decide(groups).winner is not None


def test_time_to_loss_is_not_used_where_the_baselines_loss_is_flat() -> None:
    flat = run(1, None, to_loss_flat=1.0, to_loss_target=2.303)
    assert flat_runs([run(0, None), flat]).startswith(
        "ranked on speed, not time to the baseline's loss: after its warmup the baseline's loss did not fall "
        "beyond its own noise to 2.3 over the samples judged"
    )
    started = run(1, None, to_loss_flat=1.0, to_loss_target=2.303, to_loss_start=2.31)
    assert "did not fall beyond its own noise from 2.31 at its windows' start to 2.3 " in flat_runs([started])
    assert flat_runs([run(0, None)]) is None


def test_a_larger_batch_gets_limits_sized_from_the_baselines_steps() -> None:
    """pytorch/examples' imagenet on a CPU: the baseline's slow step 4 s at batch 16; a trial at 8x
    measures the same steps, each about 8x as long: stalled only after 10 such steps (320 s, not the
    study's 30 s), its deadline the baseline's time x 5 x 8. A smaller batch keeps the study's."""
    shape = Shape((64, 128, 192), (4.0, 8.0, 12.0), False, None, 5.0, step_s=4.0, base_batch=16)
    study = Budget(windows=2, ceiling_windows=0, stall_s=30.0, startup_s=60.0)
    big = trial_budget(study, Kind.SAMPLED, shape, 0.5, batch_size="8x")
    assert big.stall_s == 320.0
    assert big.timeout_s == 60.0 + 5 * 12.0 * 8  # the same steps: 8x the samples of 8x the batch
    same = trial_budget(study, Kind.SAMPLED, shape, 0.5, batch_size=None)
    assert same.stall_s == 40.0 and same.timeout_s == 60.0 + 5 * 12.0  # 10 slow steps: past 30 s already
    small = trial_budget(study, Kind.SAMPLED, shape, 0.5, batch_size=8)
    assert small.timeout_s == same.timeout_s
    whole = dataclasses.replace(shape, whole=True, run_s=20.0)
    assert trial_budget(study, Kind.CONFIRM, whole, 0.5, batch_size="4x").timeout_s == 60.0 + 5 * 20.0 * 4
    # --timeout wins; the stall limit never drops below --stall-timeout
    fixed = dataclasses.replace(study, timeout_s=99.0, stall_s=500.0)
    assert trial_budget(fixed, Kind.SAMPLED, shape, 0.5, batch_size="8x").timeout_s == 99.0
    assert trial_budget(fixed, Kind.SAMPLED, shape, 0.5, batch_size="8x").stall_s == 500.0
