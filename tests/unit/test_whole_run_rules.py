"""Whole runs rank on wall time, and a run that trained other samples than the baseline's is another
training (autotune.core._whole_runs, applied by autotune.tuner._standing): on hand-built standings."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from autotune.core._config import ConfigError
from autotune.core._kinds import Kind
from autotune.core._outcome import Outcome
from autotune.core._whole_runs import HORIZON_H, objective_lines, other_training
from autotune.tuner._confirm import plan
from autotune.tuner._option_groups import Judge, Options, check
from autotune.tuner._options import StudyOptions
from autotune.tuner._standing import findings
from autotune.tuner._watch import TrialResult
from autotune.worker._streams import same_training
from standings import standing_from, trial


def whole(
    number: int,
    run_s: float,
    samples: int,
    batch: int = 32,
    *,
    epochs: int = 4,
    steps: int | None = None,
    kind: Kind | None = None,
    of: int | None = None,
    **sampled,
) -> object:
    """A complete whole run of ``samples`` in ``run_s`` seconds at ``batch`` (the code's: 32)."""
    shape = {
        "ended": True,
        "epochs": epochs,
        "samples": samples,
        "steps": steps or samples // batch,
        "marks": [64, 512],
        "at": [1.0, 2.0],
    }
    return trial(
        number,
        400.0,
        kind=kind,
        of=of,
        sampled=sampled,
        config={**sampled, "batch_size": batch},
        base_batch_size=32,
        shape=shape,
        run_s=run_s,
        run_samples_per_s=samples / run_s,
        startup_s=2.0,
        loop_s=run_s - 3.0,
        outside_s=0.5,
        after_s=0.5,
    )


def test_whole_runs_rank_on_wall_time_not_on_the_samples_each_counted() -> None:
    # 4 epochs of 256 rows: at batch 32 the run counts 992 samples, at 256 only 768 (the first batch
    # is not counted). 768 / 7 s = 110/s against 992 / 10 s = 99/s read 1.11x; in wall time it is 10 / 7.
    standing = standing_from(
        whole(0, 10.0, 992), whole(1, 7.0, 768, 256, batch_size="8x"), whole(2, 8.0, 992, num_workers=4)
    )
    assert standing.decision.winner.first.number == 1
    assert standing.speedup(standing.decision.winner) == pytest.approx(10.0 / 7.0)
    assert [round(r.speedup, 2) for r in standing.rows] == [1.0, 1.43, 1.25]
    assert findings(standing)[0].startswith(
        "trial 1, 1.43x the baseline (your script's whole run in 7.0 s against 10.0 s as written"
    )


def test_a_whole_run_too_short_for_a_window_ranks_on_its_wall_time_alone() -> None:
    """dcgan at 8x the batch: 2 batches of FakeData's 1,000 images, no window (no loop samples/s,
    ``autotune.core._outcome.classify``: "measured whole only"); its wall time ranks it."""
    short = whole(1, 5.4, 488, 512, epochs=1, steps=1, batch_size="8x")
    loopless = {k: v for k, v in short.metrics.items() if not k.startswith(("samples_per_s", "data_wait"))}
    standing = standing_from(whole(0, 5.9, 936, 64, epochs=1), dataclasses.replace(short, metrics=loopless))
    assert standing.decision.winner.first.number == 1
    assert standing.speedup(standing.decision.winner) == pytest.approx(5.9 / 5.4)


def test_a_whole_run_on_another_batch_ranks_on_its_wall_time_and_its_loss_only_costs() -> None:
    # The README quickstart's case: 4x the batch ran the whole script 1.15x as fast and passed the
    # baseline's loss on 0.65x its samples; the production run trains all of them, so 1.15x, not
    # the 1.77x of an early stop the script never makes.
    def judged(number: int, run_s: float, **loss: float) -> object:
        row = whole(number, run_s, 768, 128, batch_size="4x")
        return dataclasses.replace(
            row, metrics={**row.metrics, "loss_excess": -0.1, "loss_tolerance": 0.5, "to_loss_target": 0.42, **loss}
        )

    early = standing_from(whole(0, 11.5, 992), judged(1, 10.0, to_loss_ratio=0.65))
    assert found_speedup(early) == pytest.approx(1.15)
    lines = findings(early)
    assert lines[0].startswith("trial 1, 1.15x the baseline (your script's whole run in 10.0 s against 11.5 s")
    assert next(line for line in lines if line.startswith("loss: ")).endswith(
        "; it reached the baseline's loss (0.42) on 0.65x the baseline's samples: not counted, as your run "
        "trains all of them"
    )
    # needing more samples than the baseline for its loss (or not there by its end) costs: production
    # trains that much longer for the same loss
    for key in ("to_loss_ratio", "to_loss_beyond"):
        late = standing_from(whole(0, 11.5, 992), judged(1, 10.0, **{key: 1.4}))
        assert found_speedup(late, number=1) == pytest.approx(1.15 / 1.4)


def test_a_warm_compiled_rerun_ranks_with_the_cold_compile_a_user_pays() -> None:
    # Trial 1 compiled cold in 6 s of its 8 s run; its re-run found the study's Inductor cache and
    # compiled in 1 s (a 3 s run). Production's first run compiles cold: the config's runs count 8 s.
    def compiled(number: int, run_s: float, compile_s: float, warm: float, **kw: object) -> object:
        row = whole(number, run_s, 992, compile="default", **kw)
        return dataclasses.replace(row, metrics={**row.metrics, "compile_s": compile_s, "compile_warm": warm})

    standing = standing_from(
        whole(0, 10.0, 992), compiled(1, 8.0, 6.0, 0.0), compiled(2, 3.0, 1.0, 1.0, kind=Kind.CONFIRM, of=1)
    )
    assert [round(r.speedup, 2) for r in standing.rows] == [1.0, 1.25, 1.25]  # not 10 / 3 for the re-run
    assert any(
        line.startswith(
            "compile: torch.compile took 6.0 s cold (a first run on a machine: what its whole "
            "run counts) and 1.0 s warm"
        )
        for line in findings(standing)
    )


def found_speedup(standing: object, number: int | None = None) -> float:
    """The speedup of the winner (or of trial ``number``'s config) in ``standing``."""
    group = standing.decision.winner if number is None else next(g for g in standing.groups if g.first.number == number)
    return standing.speedup(group)


def test_a_whole_run_that_trained_other_samples_never_ranks_as_faster() -> None:
    # A script that stops after 200 steps: 8x the batch trains 8x the samples. 51,200 in 14 s is 3,657/s
    # against 6,400 in 10 s, 640/s: "5.71x" on samples over run time, while its run took 1.4x as long.
    base = whole(0, 10.0, 6_400, epochs=1, steps=200)
    wide = whole(1, 14.0, 51_200, 256, epochs=1, steps=200, batch_size="8x")
    standing = standing_from(base, wide, whole(2, 9.0, 6_400, epochs=1, steps=200, num_workers=2))
    assert standing.decision.winner.first.number == 2 and standing.decision.fastest.first.number == 2
    row = standing.rows[1]
    assert row.outcome == "distorted" and row.speedup is None
    assert row.reason == (
        "its whole run trained 51,200 samples, 8.00x the baseline's 6,400 (200 steps of 256 "
        "against 200 of 32): another training, whose wall time is no speedup of the baseline's"
    )
    assert f"not ranked, another training: trial 1: {row.reason}" in findings(standing)
    assert 1 not in plan(standing.groups, runs=1)  # nor confirmed: it cannot win
    # faster in wall time too (say, 12 workers at 8x): still another training, still not ranked
    quick = standing_from(base, whole(1, 6.0, 51_200, 256, epochs=1, steps=200, batch_size="8x", num_workers=12))
    assert quick.decision.winner.first.number == 0 and quick.rows[1].outcome == "distorted"


def test_the_same_training_is_the_baselines_samples_within_a_batch_an_epoch_and_one_more() -> None:
    base = {"samples": 992, "epochs": 4, "steps": 31}
    assert other_training({"samples": 768, "epochs": 4}, 256, base, 32) is None  # 224 <= (4 + 1) * 256
    assert other_training({"samples": 960, "epochs": 4}, 64, base, 32) is None
    assert other_training({"samples": 2_048, "epochs": 8}, 32, base, 32) is not None  # twice the epochs
    assert other_training({}, 256, base, 32) is None and other_training(base, 32, {}, 32) is None  # not said


def test_windowed_runs_and_a_study_read_without_shapes_rank_as_before() -> None:
    # no run_s: the loop's samples/s ranks, and nothing is another training
    standing = standing_from(trial(0, 100.0), trial(1, 150.0, sampled={"num_workers": 2}))
    assert standing.decision.winner.first.number == 1 and standing.rows[1].wall_rate is None
    # whole runs of a study from before shapes were recorded: their samples over their run time
    old = [
        trial(0, 400.0, run_s=10.0, run_samples_per_s=99.2),
        trial(1, 400.0, run_s=8.0, run_samples_per_s=124.0, sampled={"num_workers": 4}),
    ]
    assert standing_from(*old).speedup(standing_from(*old).groups[1]) == pytest.approx(1.25)


def result_of(outcome: Outcome, samples: int, batch: int, metrics: dict | None = None) -> TrialResult:
    """A finished whole run of ``samples`` at ``batch``, as the worker's parent reads it."""
    shape = {"ended": True, "epochs": 1, "samples": samples, "steps": samples // batch}
    return TrialResult(
        outcome,
        "",
        dict(metrics or {"samples_per_s": 900.0}),
        {},
        [],
        {"batch_size": batch},
        32,
        None,
        Path("trial.log"),
        shape=shape,
    )


def test_a_trial_of_other_samples_is_recorded_as_another_training_not_only_ranked_so() -> None:
    # what the standing reads as distorted the recorder records so: Optuna's sampler never learns its figure
    base = whole(0, 10.0, 6_400, epochs=1, steps=200)
    wide = same_training(result_of(Outcome.COMPLETE, 51_200, 256), base)
    assert wide.outcome is Outcome.DISTORTED and wide.reason.startswith("its whole run trained 51,200 samples")
    assert same_training(result_of(Outcome.COMPLETE, 6_400, 32), base).outcome is Outcome.COMPLETE
    assert same_training(result_of(Outcome.COMPLETE, 51_200, 256), None).outcome is Outcome.COMPLETE  # the baseline
    # diverged stays diverged (infeasible by its constraint already), as the standing leaves it
    assert same_training(result_of(Outcome.DIVERGED, 51_200, 256), base).outcome is Outcome.DIVERGED
    # a loader's distortion is said first
    duplicated = result_of(Outcome.COMPLETE, 51_200, 256, {"repeat_share": 0.75})
    assert same_training(duplicated, base).reason.startswith("distorted: 75% of the rows")


def timed(number: int, loop: float, startup_s: float, run_s: float, compile_s: float | None = None, **sampled):
    """A complete whole run of the baseline's 992 samples whose loop ran ``loop`` samples/s."""
    row = whole(number, run_s, 992, **sampled)
    extra = {"compile_s": compile_s} if compile_s is not None else {}
    return dataclasses.replace(row, metrics={**row.metrics, "samples_per_s": loop, "startup_s": startup_s, **extra})


def test_with_a_horizon_whole_runs_rank_on_their_projected_production_time() -> None:
    # A short run: fewer workers start sooner and win its wall time; compiled, the loop runs twice as fast.
    base = timed(0, 400.0, 2.0, 10.0)
    lean = timed(1, 300.0, 1.0, 8.0, num_workers=0)  # 8 s against 10 s: 1.25x as given
    fast = timed(2, 800.0, 5.0, 11.0, 3.0, compile="default")  # 11 s: slower as given
    given = standing_from(base, lean, fast)
    assert given.decision.winner.first.number == 1 and given.horizon_h is None
    # 2 h of the baseline's loop: 2,880,000 samples. The baseline takes 2 + 7,200 s; lean 1 + 9,600;
    # fast 5 + 3 + 3,600: 7,202 / 3,608 = 2.00x, and lean 7,202 / 9,601 = 0.75x
    standing = standing_from(base, lean, fast, horizon_h=2.0)
    assert standing.decision.winner.first.number == 2 and standing.horizon_h == 2.0
    assert [round(r.speedup, 3) for r in standing.rows] == [1.0, round(7202 / 9601, 3), round(7202 / 3608, 3)]
    assert findings(standing)[0].startswith(
        "trial 2, 2.00x the baseline (in 2 h of production (--horizon): start-up "
        "+ compile + the loop at 800 vs 400 samples/s; your script's whole run "
        "in 11.0 s against 10.0 s as written"
    )
    # another training is still not ranked, whatever the horizon
    wide = whole(3, 6.0, 7_936, 256, batch_size="8x")
    assert standing_from(base, wide, horizon_h=2.0).rows[1].outcome == "distorted"


def test_a_study_with_a_run_it_cannot_project_ranks_on_wall_time() -> None:
    base, old = timed(0, 400.0, 2.0, 10.0), whole(1, 8.0, 992, num_workers=2)
    old = dataclasses.replace(old, metrics={k: v for k, v in old.metrics.items() if k != "startup_s"})
    # (a study recorded before start-up was: every run on its wall time, never two units in one ranking)
    standing = standing_from(base, old, horizon_h=2.0)
    assert standing.rows[1].speedup == pytest.approx(10.0 / 8.0) and standing.horizon_h is None


def test_the_objective_is_said_and_a_start_up_heavy_run_without_a_horizon_is_told_to_pass_one() -> None:
    assert objective_lines({"run_s": 16.0, "startup_s": 4.0}, None) == [  # 25%: not over a quarter
        "objective: your script's whole run as given (the production run): whole runs rank on its wall time"
    ]
    heavy = objective_lines({"run_s": 16.0, "startup_s": 4.5}, None)
    assert len(heavy) == 2 and heavy[1].startswith("start-up is 28% of your script's whole run (4.5 s of 16.0 s)")
    assert "--horizon HOURS" in heavy[1]
    assert objective_lines({"run_s": 16.0, "startup_s": 8.0}, 0.5) == [
        "objective: a production run of 0.5 h of the baseline's training (--horizon 0.5): whole runs rank on "
        "start-up + compile + the loop's projected time for it"
    ]


def test_without_a_horizon_compile_still_pays_back_within_an_hour_and_none_is_allowed() -> None:
    assert StudyOptions("t.py").hold_limits[2] == HORIZON_H == 1.0
    assert StudyOptions("t.py", options=Options(judge=Judge(horizon=8.0))).hold_limits[2] == 8.0
    check("horizon", None)
    with pytest.raises(ConfigError, match=r"horizon=0: must be a number > 0"):
        check("horizon", 0)


def test_the_study_keeps_its_horizon_for_every_reader_of_its_standing() -> None:
    # (show, export and every tuner of it rank its whole runs alike: the founder's --horizon, in its user attrs)
    import optuna

    from autotune.stores._records import ATTR_HORIZON
    from autotune.tuner._standing import read_standing as read

    study = optuna.create_study(direction="maximize")
    assert read(study).horizon_h is None
    study.set_user_attr(ATTR_HORIZON, 2.0)
    assert read(study).horizon_h == 2.0
