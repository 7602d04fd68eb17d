"""The profile runs' rules (autotune.worker._profile, autotune.tuner._profiling): a step cut into parts that
tile it, the breakdown, the line the terminal prints, which configs are profiled."""

from __future__ import annotations

import dataclasses
import time

import pytest

from autotune.core._ceilings import Ceilings
from autotune.machine._launch import Budget
from autotune.tuner._profiling import parent_figures, profile_budget, profile_plan
from autotune.tuner._standing import standing_of
from autotune.worker._profile import PARTS, StepParts, breakdown, changed, shares
from standings import trial


def test_the_parts_tile_the_loop_so_they_add_up_to_its_wall_time() -> None:
    """On given instants (the window's clock's, as a trial passes them; a real clock's sleeps
    missed 8 ms to one descheduling in CI): each part runs from its mark to the next, and the
    time between a stop and the next mark counts in none."""
    parts = StepParts("cpu")
    steps = ("data_wait", "copy", "forward", "backward", "optimizer", "other") * 3
    for i, part in enumerate(steps):
        parts.mark(part, 100.0 + 0.001 * i)
    parts.mark(None, 100.018)  # between epochs: stopped
    parts.mark("data_wait", 200.0)  # the next epoch: the 99.982 s between them are outside
    parts.mark(None, 200.002)
    assert sum(parts.seconds.values()) == pytest.approx(0.020)
    assert parts.seconds["data_wait"] == pytest.approx(0.005)
    assert all(parts.seconds[p] == pytest.approx(0.003) for p in PARTS if p != "data_wait")
    # an instant before the running part began (a clock read earlier) counts as its start: never negative
    parts.mark("forward", 300.0)
    parts.mark("backward", 299.0)
    assert parts.seconds["forward"] == pytest.approx(0.003)
    # on the real clock, marks without instants: each part gets its sleep
    parts.reset()
    assert sum(parts.seconds.values()) == 0
    for part in ("forward", "backward"):
        parts.mark(part)
        time.sleep(0.002)
    parts.mark(None)
    assert parts.seconds["forward"] >= 0.002 and parts.seconds["backward"] >= 0.002


def test_breakdown_is_per_step_and_its_step_is_the_sum() -> None:
    per = breakdown({"data_wait": 1.0, "forward": 2.0, "backward": 3.0, "optimizer": 4.0}, 10)
    assert per["step"] == pytest.approx(1.0) and per["copy"] == 0.0
    assert shares(per)["optimizer"] == pytest.approx(0.4)
    assert shares({"step": 0.0}) == {}
    with pytest.raises(ValueError, match="at least one"):
        breakdown({}, 0)


def test_the_line_names_the_parts_that_moved_and_a_changed_batch() -> None:
    base = {"data_wait": 0.006, "forward": 0.002, "backward": 0.002, "step": 0.010, "samples": 32}
    same = {"data_wait": 0.0005, "forward": 0.002, "backward": 0.002, "step": 0.0045, "samples": 32}
    line = changed(base, same)
    assert line.startswith("step 10.0 ms -> 4.5 ms; data wait 6.0 -> 0.5 ms (60% -> 11% of the step)")
    assert "forward" not in line  # it did not move
    bigger = {"data_wait": 0.001, "forward": 0.008, "backward": 0.008, "step": 0.017, "samples": 128}
    assert "(32 samples) -> 17.0 ms (128 samples), 312.5 -> 132.8 us a sample" in changed(base, bigger)


def test_the_baseline_and_a_winner_other_than_it_are_profiled() -> None:
    won = standing_of([trial(0, 1000), trial(1, 2000, sampled={"num_workers": 2})], Ceilings())
    plan, why = profile_plan(won)
    assert why is None and plan == [("baseline", 0, {}), ("winner", 1, {"num_workers": 2})]
    lost = standing_of([trial(0, 1000), trial(1, 500, sampled={"num_workers": 2})], Ceilings())
    assert profile_plan(lost) == ([("baseline", 0, {})], None)
    assert profile_plan(won, nproc=2)[1].startswith("no profile on 2 ranks")
    assert (
        profile_plan(standing_of([trial(0, None, "crashed")], Ceilings()))[1]
        == "no profile: the study has no baseline figure"
    )


def test_a_winner_measured_whole_only_is_not_profiled_and_says_why() -> None:
    """Its run ended before a window (``classify``: "measured whole only"): a profile run, which
    measures one window, would end as a crash; the baseline is profiled, the winner's skip said."""
    shape = {"ended": True, "epochs": 1, "samples": 936, "marks": [64, 512], "at": [1.0, 2.0]}
    base = trial(0, 1000, shape=shape, run_s=5.9, run_samples_per_s=936 / 5.9, base_batch_size=64)
    short = trial(
        1,
        None,
        sampled={"batch_size": "8x"},
        config={"batch_size": 512},
        base_batch_size=64,
        shape={**shape, "samples": 488},
        run_s=5.4,
        run_samples_per_s=488 / 5.4,
    )
    short = dataclasses.replace(short, reason="measured whole only: its run ended after 2 steps")
    plan, why = profile_plan(standing_of([base, short], Ceilings()))
    assert plan == [("baseline", 0, {})]
    assert why == (
        "no profile of the winner (trial 1): its run is too short to profile "
        "(measured whole only: its run ended after 2 steps)"
    )


def test_a_profile_run_measures_one_window_and_no_ceiling() -> None:
    budget = profile_budget(Budget(warmup_s=2, windows=4, ceiling_windows=2, learn_windows=8, learn_to=0.5))
    assert (budget.warmup_s, budget.windows, budget.ceiling_windows, budget.learn_windows) == (2, 1, 0, 0)


def test_the_parent_run_gets_each_parts_milliseconds_and_share(tmp_path) -> None:
    trace = tmp_path / "baseline.pt.trace.json.gz"
    trace.write_bytes(b"")
    metrics, traces = parent_figures(
        {
            "baseline": {"parts": {"data_wait": 0.001, "forward": 0.003, "step": 0.004}, "trace": str(trace)},
            "winner": {"parts": {"forward": 0.002, "step": 0.002}, "trace": str(tmp_path / "gone.gz")},
        }
    )
    assert metrics["profile_baseline_data_wait_ms"] == pytest.approx(1.0)
    assert metrics["profile_baseline_forward_share"] == pytest.approx(0.75)
    assert metrics["profile_winner_step_ms"] == pytest.approx(2.0)
    assert traces == [str(trace)]  # a trace no longer on disk is not attached


def test_the_last_tuner_to_finish_runs_the_profile_runs_and_one_of_two_that_finish_together() -> None:
    """Three tuners of one study (a real, in-memory Optuna study): each that finishes while another
    still confirms leaves the profile runs to the last one, and steps out of the profiling phase
    at once (else the last, seeing it there first by identity, would leave them to it: nobody
    would run them); of two that get there together, the first by identity runs them."""
    from types import SimpleNamespace

    import optuna

    from autotune.tuner._profiling import run_profiles
    from autotune.tuner._tuners import Liveness, Registry, TunerPhase

    study = optuna.create_study()
    owners = [{"host": "h", "pid": pid, "started": 1.0} for pid in (1, 2, 3)]
    registries = [Registry(study, owner) for owner in owners]
    for registry in registries:
        registry.enter(TunerPhase.CONFIRMING)
    liveness = Liveness("h", alive=lambda pid, started: True)
    planned: list[int] = []

    def finish(i: int) -> None:  # found=None: a tuner that gets to plan says "no profile", runs nothing
        runner = SimpleNamespace(
            options=SimpleNamespace(profile=True, nproc_per_node=1),
            scheduler=SimpleNamespace(signum=None),
            registry=registries[i],
            _liveness=liveness,
            _owner=owners[i],
            reporter=SimpleNamespace(note=lambda line: planned.append(i)),
        )
        assert run_profiles(runner, None) == {}

    finish(0)
    finish(1)
    assert planned == [] and [r._phase for r in registries[:2]] == [TunerPhase.DONE] * 2
    finish(2)
    assert planned == [2]  # the last one
    planned.clear()
    for registry in registries:  # two get there together: pid 1 and pid 3
        registry.enter(TunerPhase.DONE)
    registries[2].enter(TunerPhase.PROFILING)
    finish(0)
    finish(2)
    assert planned == [0]
