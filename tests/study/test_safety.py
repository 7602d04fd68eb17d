"""Every outcome of a trial, recorded in both stores, shown and said: one real study of a function that fails in every way (tests/fixtures/faulty_train.py)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from conftest import TAG, tagged

from autotune import Outcome
from autotune.core._outcome import headline
from autotune.stores._tracking import RUN_STATUS
from helpers import (
    FAULTY,
    SHORT_TRIALS,
    autotune,
    built_once,
    enqueue_workers,
    faults_space,
    load_study,
    mlflow_runs,
)

#: The fault each num_workers value injects (see faulty_train.py), in the order they
#: are enqueued: the healthy 1 first, so that the slow 7 has a best to be pruned against.
FAULTS = {
    1: "complete",
    7: "pruned",
    0: "diverged",
    2: "crashed",
    3: "timeout",
    4: "oom_host",
    5: "crashed",
    6: "oom_gpu",
    8: "diverged",
}


#: Optuna's state per fault: a diverged trial with a measured speed is COMPLETE with its
#: constraint violated (the sampler learns from it); one that went nan in its warmup
#: has no speed to tell, so it FAILs; the rest fail, but the pruned.
OPTUNA_STATE = {1: "COMPLETE", 0: "COMPLETE", 7: "PRUNED"}


@pytest.fixture(scope="module")
def fault_study(tmp_path_factory) -> tuple[Path, str]:
    """A baseline, then one trial per fault, enqueued in FAULTS' order; its folder and what the
    second run printed."""

    def build(cwd: Path) -> None:
        space = faults_space(cwd, sorted(FAULTS))
        tag = {TAG: f"fault-study-{uuid.uuid4().hex[:8]}"}
        args = ["--study", "faults", "--space", str(space), *SHORT_TRIALS, "--windows", "3"]  # pruned after 2, or a 3rd
        first = autotune("run", FAULTY, "--trials", "1", *args, cwd=cwd, env=tag)
        assert first.returncode == 0, first.stderr
        enqueue_workers(cwd / "mlflow", "faults", *FAULTS)
        # --prune 0.2: the slow fault runs at a 25th of the baseline's speed and a 200th of the
        # healthy config's, so it is pruned whichever of them is the best, however loaded the machine.
        second = autotune(
            "run",
            FAULTY,
            "--trials",
            str(len(FAULTS)),
            "--ram-budget",
            "1",
            "--stall-timeout",
            "3",
            "--prune",
            "0.2",
            *args,
            cwd=cwd,
            env=tag,
            timeout=400,
        )
        assert second.returncode == 0, second.stderr
        assert not tagged(tag[TAG]), "a process of the study outlived it"
        (cwd / "output.txt").write_text(second.stdout + second.stderr)

    cwd = built_once(tmp_path_factory, "fault-study", build)
    return cwd, (cwd / "output.txt").read_text()


def test_every_outcome_in_optuna_and_mlflow(fault_study) -> None:
    cwd, _ = fault_study
    study = load_study(cwd / "mlflow", "faults")
    trials = study.get_trials()
    assert [t.number for t in trials] == list(range(1 + len(FAULTS)))
    assert trials[0].user_attrs["outcome"] == "complete"
    client, runs = mlflow_runs(cwd / "mlflow", "faults")
    by_trial = {int(r.data.tags["autotune.trial"]): r for r in runs if "autotune.trial" in r.data.tags}
    for trial, (value, expected) in zip(trials[1:], FAULTS.items()):
        assert trial.params == {"num_workers": value}
        attrs, run = trial.user_attrs, by_trial[trial.number]
        assert attrs["outcome"] == expected, (value, attrs["reason"])
        assert trial.state.name == OPTUNA_STATE.get(value, "FAIL"), value
        assert run.data.tags["autotune.outcome"] == expected
        assert run.info.status == RUN_STATUS[Outcome(expected)]
        if expected != "complete":
            assert attrs["reason"] and headline(run.data.tags["autotune.reason"]) == headline(attrs["reason"])
        # a loss figure only for a trial judged at its end: none for one stopped early (pruned,
        # stalled, crashed, killed), whose partial loss was never held against the tolerance
        if expected not in ("complete", "diverged"):
            assert "loss_excess" not in attrs["metrics"] and "loss_excess" not in run.data.metrics, expected
        assert f"trial-{trial.number}.log" in {a.path for a in client.list_artifacts(run.info.run_id)}


def test_each_reason_says_what_happened(fault_study) -> None:
    cwd, _ = fault_study
    reasons = {
        t.params.get("num_workers"): t.user_attrs["reason"]
        for t in load_study(cwd / "mlflow", "faults").get_trials()
        if not t.user_attrs["baseline"]
    }
    assert reasons[8].startswith("loss is nan after ")
    assert reasons[2].splitlines()[-1] == "ValueError: fault injected: the user's loop raised"
    assert "faulty_train.py" in reasons[2]  # the user's frame, from the traceback
    assert reasons[3].startswith("stalled: no step finished for 3 s")
    assert reasons[4].startswith("the trial's processes used ") and "over the RAM budget of 1.00 GiB" in reasons[4]
    assert reasons[5].startswith("killed by SIGSEGV")
    assert "Segmentation fault" in reasons[5]  # faulthandler's report, from the trial log
    assert reasons[6].startswith("OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB")
    assert "under 20% of the best so far" in reasons[7]
    assert "over the same steps" in reasons[0]  # the loss rule's words (a 4x batch: at the same steps)


def test_killed_trials_keep_their_figures(fault_study) -> None:
    cwd, _ = fault_study
    client, runs = mlflow_runs(cwd / "mlflow", "faults")
    hog = next(r for r in runs if r.data.tags.get("autotune.outcome") == "oom_host")
    assert hog.data.metrics["ram_peak"] > 2**30  # killed over the 1 GiB budget, figure kept
    # pruned on its measure so far (its windows, at the baseline's samples, would take it 25x the
    # time): that figure is kept
    pruned = next(r for r in runs if r.data.tags.get("autotune.outcome") == "pruned")
    assert 0 < pruned.data.metrics["samples_per_s"] < 0.2 * max(r.data.metrics.get("samples_per_s", 0) for r in runs)


def test_each_trial_log_says_what_the_trial_did(fault_study) -> None:
    """The log artifact: the worker's lines for each stage, the user's output, a crash's
    whole traceback."""
    cwd, _ = fault_study
    client, runs = mlflow_runs(cwd / "mlflow", "faults")
    by_trial = {int(r.data.tags["autotune.trial"]): r for r in runs if "autotune.trial" in r.data.tags}

    def log(number: int) -> str:
        path = client.download_artifacts(by_trial[number].info.run_id, f"trial-{number}.log", str(cwd))
        return Path(path).read_text()

    healthy = log(1)  # num_workers 1: complete
    assert "autotune: trial worker pid" in healthy and "autotune: window 3: " in healthy
    assert "autotune: done: " in healthy
    raised = log(4)  # num_workers 2: the user's loop raised
    assert "Traceback (most recent call last)" in raised
    assert raised.rstrip().endswith("ValueError: fault injected: the user's loop raised")


def test_a_diverged_config_can_be_fastest_and_is_never_the_best(fault_study) -> None:
    cwd, _ = fault_study
    study = load_study(cwd / "mlflow", "faults")
    by_value = {t.params.get("num_workers"): t for t in study.get_trials() if not t.user_attrs["baseline"]}
    fast_but_wrong, healthy = by_value[0], by_value[1]
    assert fast_but_wrong.value > healthy.value  # really the fastest of all
    assert fast_but_wrong.constraints == {"diverged": 1.0}  # infeasible for the sampler
    assert healthy.constraints == {"diverged": 0.0}
    # Optuna 5 honours the constraint: the best is the healthy config (faster than the baseline by
    # design: the baseline spins 4 ms of CPU a step, tests/fixtures/faulty_train.py)
    assert study.best_trial.number == healthy.number
    out = autotune("export", "--study", "faults", cwd=cwd)
    assert out.returncode == 0, out.stderr
    assert f"trial {healthy.number}," in out.stdout.splitlines()[0]
    assert "num_workers: 1" in out.stdout


def test_show_lists_every_outcome_with_its_reason(fault_study) -> None:
    cwd, _ = fault_study
    out = autotune("show", "--study", "faults", cwd=cwd)
    assert out.returncode == 0, out.stderr
    for outcome in set(FAULTS.values()):
        assert outcome in out.stdout
    for words in (
        "stalled: no step finished",
        "over the RAM budget",
        "killed by SIGSEGV",
        "CUDA out of memory",
        "under 20% of the best",
        "over the same steps",
    ):
        assert words in out.stdout


def test_the_run_prints_each_outcome_as_it_happens(fault_study) -> None:
    _, output = fault_study
    for outcome in set(FAULTS.values()):
        assert outcome in output


def test_a_new_study_of_the_same_target_runs_the_earlier_ones_top_configs_first(fault_study, tmp_path: Path) -> None:
    """Warm start: a second study of faulty_train.py in a copy of the faults study's store runs the
    one config that beat that study's baseline (num_workers 1) right after its own baseline,
    measured here, and says where it came from."""
    import shutil

    cwd, _ = fault_study
    store = tmp_path / "copy"
    shutil.copytree(cwd, store)
    out = autotune(
        "run",
        FAULTY,
        "--study",
        "again",
        "--warm-start",
        "on",
        "--trials",
        "2",
        "--space",
        str(store / "faults.yaml"),
        *SHORT_TRIALS,
        "--windows",
        "3",
        cwd=store,
    )
    assert out.returncode == 0, out.stderr
    said = " ".join(out.stderr.split())
    assert "warm start: the 1 top config(s) of study faults (" in said, said
    assert "run first, measured here (the same target on this machine; --warm-start off skips this)" in said
    again = load_study(store / "mlflow", "again").get_trials()
    assert [t.user_attrs["kind"] for t in again] == ["baseline", "warm_start"]
    assert again[1].params == {"num_workers": 1}  # the sampler learns from it as from a draw
    assert again[1].user_attrs["outcome"] == "complete", again[1].user_attrs["reason"]
