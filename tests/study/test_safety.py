"""A study that outlives what goes wrong: every outcome recorded in both stores, a diverged fast config retried, the tuner killed or interrupted and resumed."""

from __future__ import annotations


import re

import signal

import subprocess

import time

import uuid

from pathlib import Path

import psutil

import pytest

from conftest import TAG, tagged

from helpers import autotune, cli, cli_env, FIXTURES, load_study, mlflow_runs, seed_store

from autotune import Outcome

from autotune._outcome import headline

from autotune._records import signed_share


from autotune._tracking import RUN_STATUS


FIXTURE = FIXTURES / "faulty_train.py"


TARGET = f"{FIXTURE}:train"


FAST = ["--warmup", "0.2", "--window", "0.3", "--windows", "3", "--seed", "0", "--confirm", "0", "--ceiling-windows", "0"]


#: The fault each num_workers value injects (see faulty_train.py), in the order they
#: are enqueued: the healthy 1 first, so that the slow 7 has a best to be pruned against.
FAULTS = {1: "complete", 7: "pruned", 0: "diverged", 2: "crashed", 3: "timeout", 4: "oom_host",
          5: "crashed", 6: "oom_gpu", 8: "diverged"}


#: Optuna's state per fault: a diverged trial with a measured speed is COMPLETE with its
#: constraint violated (the sampler learns from it); one that went nan in its warmup
#: has no speed to tell, so it FAILs; the rest fail, but the pruned.
OPTUNA_STATE = {1: "COMPLETE", 0: "COMPLETE", 7: "PRUNED"}


def write_space(folder: Path, values) -> Path:
    path = folder / "faults.yaml"
    path.write_text(f"knobs:\n  num_workers: {list(values)}\n")
    return path


def enqueue(store: Path, name: str, *values: int, url: str | None = None) -> None:
    study = load_study(store, name, url)
    for value in values:
        study.enqueue_trial({"num_workers": value})


def wait_for_running_worker(store: Path, name: str, timeout: float = 90, url: str | None = None,
                            measured: bool = False):
    """The RUNNING trial once its worker has printed that it hangs (fault 3), or, with
    `measured`, once it has reported its first window. A fixed sleep races a loaded machine:
    a tuner killed before its worker's first batch takes the worker with it (its next event
    meets a broken pipe), and there is no orphan left to find."""
    import optuna

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = load_study(store, name, url).get_trials(states=(optuna.trial.TrialState.RUNNING,))
        if running and measured and running[0].intermediate_values:
            return running[0]
        log = store / "trials" / name / f"trial-{running[0].number}.log" if running else None
        if log is not None and not measured and log.exists() and "fault 3: the main loop blocks now" in log.read_text():
            return running[0]
        time.sleep(0.3)
    raise AssertionError("no trial " + ("measured a window" if measured else "reached its hang"))


@pytest.fixture(scope="module")
def fault_study(tmp_path_factory) -> tuple[Path, str]:
    """A baseline, then one trial per fault, enqueued in FAULTS' order."""
    cwd = tmp_path_factory.mktemp("faults")
    space = write_space(cwd, sorted(FAULTS))
    tag = {TAG: f"fault-study-{uuid.uuid4().hex[:8]}"}
    args = ["--study", "faults", "--space", str(space), *FAST]
    first = autotune("run", TARGET, "--trials", "1", *args, cwd=cwd, env=tag)
    assert first.returncode == 0, first.stderr
    enqueue(cwd / "mlflow", "faults", *FAULTS)
    # --prune 0.2: the slow fault runs at a fifth of the baseline's speed and a fortieth of
    # the healthy config's, so it is pruned however the machine's load moves the others.
    second = autotune("run", TARGET, "--trials", str(len(FAULTS)), "--ram-budget", "1",
                      "--stall-timeout", "3", "--prune", "0.2", *args, cwd=cwd, env=tag, timeout=400)
    assert second.returncode == 0, second.stderr
    assert not tagged(tag[TAG]), "a process of the study outlived it"
    return cwd, second.stdout + second.stderr


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
        assert "trial-%d.log" % trial.number in {a.path for a in client.list_artifacts(run.info.run_id)}


def test_each_reason_says_what_happened(fault_study) -> None:
    cwd, _ = fault_study
    reasons = {t.params.get("num_workers"): t.user_attrs["reason"]
               for t in load_study(cwd / "mlflow", "faults").get_trials() if not t.user_attrs["baseline"]}
    assert reasons[8].startswith("loss is nan after ")
    assert reasons[2].splitlines()[-1] == "ValueError: fault injected: the user's loop raised"
    assert "faulty_train.py" in reasons[2]  # the user's frame, from the traceback
    assert reasons[3].startswith("stalled: no step finished for 3 s")
    assert reasons[4].startswith("the trial's processes used ") and "over the RAM budget of 1.00 GiB" in reasons[4]
    assert reasons[5].startswith("killed by SIGSEGV")
    assert "Segmentation fault" in reasons[5]  # faulthandler's report, from the trial log
    assert reasons[6].startswith("OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB")
    assert "under 20% of the best so far" in reasons[7]
    assert "over the same samples" in reasons[0]  # the loss rule's words, on either path


def test_killed_trials_keep_their_figures(fault_study) -> None:
    cwd, _ = fault_study
    client, runs = mlflow_runs(cwd / "mlflow", "faults")
    hog = next(r for r in runs if r.data.tags.get("autotune.outcome") == "oom_host")
    assert hog.data.metrics["ram_peak"] > 2**30  # killed over the 1 GiB budget, figure kept
    pruned = next(r for r in runs if r.data.tags.get("autotune.outcome") == "pruned")
    assert len(client.get_metric_history(pruned.info.run_id, "window_samples_per_s")) == 2


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
    assert study.best_trial.number == healthy.number  # Optuna 5 honours the constraint
    out = autotune("export", "--study", "faults", cwd=cwd)
    assert out.returncode == 0, out.stderr
    assert f"trial {healthy.number}," in out.stdout.splitlines()[0]
    assert "num_workers: 1" in out.stdout


def test_a_fast_config_diverged_on_its_lr_runs_again_with_the_lr_scaled(tmp_path: Path) -> None:
    """2x the batch without lr scaling learns half as much per sample (lr_train.py): judged
    diverged, though twice as fast. The study runs its config again with lr_scaling linear
    (none and linear in the space; sqrt is not), which trains as the baseline and wins.
    Shorter warmups and more windows than FAST: the fast trial's warmup must end before
    the samples the baseline's loss is judged on begin."""
    target = f"{FIXTURE.parent / 'lr_train.py'}:train"
    space = tmp_path / "lr.yaml"
    space.write_text("knobs:\n  batch_size: [1x, 2x]\n  lr_scaling: [none, linear]\n")
    args = ["--study", "lr", "--space", str(space), *FAST, "--warmup", "0.1", "--windows", "4"]
    first = autotune("run", target, "--trials", "1", *args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    load_study(tmp_path / "mlflow", "lr").enqueue_trial({"batch_size": "2x", "lr_scaling": "none"})
    out = autotune("run", target, "--trials", "2", *args, "--seed", "5", cwd=tmp_path)  # a tuner's own seed
    assert out.returncode == 0, out.stderr
    base, diverged, retry = load_study(tmp_path / "mlflow", "lr").get_trials()
    # every trial trains from the baseline's seed, whatever the tuner that runs it was given
    assert [t.user_attrs["seed"] for t in (base, diverged, retry)] == [0, 0, 0]
    assert ", seed 0, " in (tmp_path / "mlflow" / "trials" / "lr" / f"trial-{retry.number}.log").read_text()
    assert diverged.user_attrs["outcome"] == "diverged", diverged.user_attrs["reason"]
    assert "over the same samples" in diverged.user_attrs["reason"]  # worse, not nan: more lr
    assert diverged.value > 1.5 * base.value  # fast: its config is worth another lr
    assert (retry.user_attrs["kind"], retry.user_attrs["of"]) == ("retry", diverged.number)
    assert retry.user_attrs["sampled"] == {"batch_size": "2x", "lr_scaling": "linear"}
    assert retry.params == {"batch_size": "2x", "lr_scaling": "linear"}  # the sampler learns from it
    assert retry.user_attrs["outcome"] == "complete", retry.user_attrs["reason"]
    assert retry.user_attrs["lr"] == pytest.approx(2 * diverged.user_attrs["lr"])
    assert retry.constraints == {"diverged": 0.0}
    said = " ".join(out.stderr.split())  # the study's notes, beside its progress
    assert (f"trial {diverged.number} diverged at batch size 16 (2x the code's) with lr_scaling none, "
            "but ran at") in said
    assert "its config runs again with lr_scaling linear" in said
    _, runs = mlflow_runs(tmp_path / "mlflow", "lr")
    run = next(r for r in runs if r.data.tags.get("autotune.trial") == str(retry.number))
    assert (run.data.tags["autotune.kind"], run.data.tags["autotune.of"]) == ("retry", str(diverged.number))
    assert f"trial {diverged.number}'s config, which diverged, with lr_scaling linear" in \
        run.data.tags["mlflow.note.content"]
    # How near the tolerance the complete retry's loss came, wherever a user looks: its metrics,
    # its MLflow run (metric and note), the run's terminal line, `show` and the export's header.
    excess = retry.user_attrs["metrics"]["loss_excess"]
    assert -0.5 < excess <= 0.5 and retry.user_attrs["metrics"]["loss_tolerance"] == 0.5
    assert "loss_excess" not in base.user_attrs["metrics"]  # the baseline is the reference
    assert run.data.metrics["loss_excess"] == pytest.approx(excess)
    words = f"{signed_share(excess)} against the baseline's on the same samples"
    assert f"Loss {words} (diverged past +50%)." in run.data.tags["mlflow.note.content"]
    assert f"loss {signed_share(excess)}" in said
    table = autotune("show", "--study", "lr", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if line.lstrip().startswith(f"{retry.number} *"))
    assert signed_share(excess) in row.split()
    shown = autotune("export", "--study", "lr", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert f"trial {retry.number}," in shown.stdout.splitlines()[0]
    assert f"# loss: {words} (diverged past +50%)" in shown.stdout


def test_show_lists_every_outcome_with_its_reason(fault_study) -> None:
    cwd, _ = fault_study
    out = autotune("show", "--study", "faults", cwd=cwd)
    assert out.returncode == 0, out.stderr
    for outcome in set(FAULTS.values()):
        assert outcome in out.stdout
    for words in ("stalled: no step finished", "over the RAM budget", "killed by SIGSEGV",
                  "CUDA out of memory", "under 20% of the best", "over the same samples"):
        assert words in out.stdout


def test_the_run_prints_each_outcome_as_it_happens(fault_study) -> None:
    _, output = fault_study
    for outcome in set(FAULTS.values()):
        assert outcome in output


def start_tuner(cwd: Path, *args: str) -> subprocess.Popen:
    seed_store(cwd, ("run", TARGET, *args))
    return subprocess.Popen(cli("run", TARGET, *args), cwd=cwd,
                            env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("rdb", [False, True], ids=["journal", "sqlite-rdb"])
def test_sigkill_of_the_tuner_then_resume(tmp_path: Path, rdb: bool) -> None:
    store = tmp_path / "mlflow"
    url = f"sqlite:///{tmp_path}/optuna.db" if rdb else None  # many-host setups use an RDB
    args = ["--study", "s", "--space", str(write_space(tmp_path, [1, 3])), *FAST, "--prune", "0",
            *(["--storage", url] if url else [])]
    assert autotune("run", TARGET, "--trials", "1", *args, cwd=tmp_path).returncode == 0
    baseline = load_study(store, "s", url).get_trials()[0]
    enqueue(store, "s", 3, url=url)  # hangs at step 3, and the stall timeout is long: still running
    tuner = start_tuner(tmp_path, "--trials", "1", "--stall-timeout", "300", *args)
    stale = wait_for_running_worker(store, "s", url=url)
    tuner.kill()  # SIGKILL: no handler runs, nothing is closed
    tuner.communicate()
    worker = psutil.Process(stale.user_attrs["worker"]["pid"])
    assert worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE  # orphaned, alive

    enqueue(store, "s", 1, url=url)
    out = autotune("run", TARGET, "--trials", "1", *args, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"trial {stale.number}: left RUNNING" in out.stderr

    assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE
    trials = load_study(store, "s", url).get_trials()
    assert [t.number for t in trials] == [0, 1, 2]  # numbers continue, none counted twice
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL", "COMPLETE"]
    assert trials[1].user_attrs["outcome"] == "interrupted"
    assert "is gone" in trials[1].user_attrs["reason"]
    # This tuner kills them (the worker and its 3 loader workers), unless a tuner that a test
    # running beside this one started meanwhile swept them first: every tuner sweeps the host's
    # orphans at start (sweep_orphans; the suite runs on two processes). kill_orphans' own count
    # is checked in test_kill_orphans_kills_the_whole_group.
    killed = re.search(r"which killed (\d+) orphaned worker process\(es\)", trials[1].user_attrs["reason"])
    assert killed is None or killed.group(1) == "4", trials[1].user_attrs["reason"]
    assert trials[0].value == baseline.value and trials[0].user_attrs == baseline.user_attrs
    assert trials[2].params == {"num_workers": 1} and trials[2].user_attrs["outcome"] == "complete"

    client, runs = mlflow_runs(store, "s")
    by_trial = {int(r.data.tags["autotune.trial"]): r for r in runs if "autotune.trial" in r.data.tags}
    assert sorted(by_trial) == [0, 1, 2]
    assert [by_trial[n].info.status for n in (0, 1, 2)] == ["FINISHED", "KILLED", "FINISHED"]
    assert by_trial[1].data.tags["autotune.outcome"] == "interrupted"
    assert by_trial[0].data.metrics["samples_per_s"] == pytest.approx(baseline.value)
    parents = [r for r in runs if "autotune.trial" not in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["ctrl-c", "sigterm"])
def test_ctrl_c_records_the_trial_prints_the_summary_and_exits_130(tmp_path: Path, sig, status) -> None:
    store = tmp_path / "mlflow"
    # Pruning off: on a loaded machine the enqueued trial could be pruned before the signal.
    args = ["--study", "c", "--space", str(write_space(tmp_path, [1, 3])), *FAST[:4], "--prune", "0",
            "--confirm", "0", "--ceiling-windows", "0"]
    assert autotune("run", TARGET, "--trials", "1", *args, "--windows", "3", cwd=tmp_path).returncode == 0
    enqueue(store, "c", 1)
    tuner = start_tuner(tmp_path, "--trials", "3", "--windows", "1000", *args)  # a long trial
    wait_for_running_worker(store, "c", measured=True)  # so that it has something to keep
    pressed = time.monotonic()
    tuner.send_signal(sig)
    stdout, stderr = tuner.communicate(timeout=60)
    assert tuner.returncode == status, stderr  # 128 + the signal, as shells report it
    assert time.monotonic() - pressed < 30
    assert "best: trial 0" in stdout  # the summary, over what was done
    assert f"stopped by {sig.name}" in stderr

    trials = load_study(store, "c").get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL"]  # no further trial started
    assert trials[1].user_attrs["outcome"] == "interrupted"
    assert trials[1].user_attrs["metrics"]["samples_per_s"] > 0  # what it measured is kept
    client, runs = mlflow_runs(store, "c")
    by_trial = {int(r.data.tags["autotune.trial"]): r for r in runs if "autotune.trial" in r.data.tags}
    assert by_trial[1].info.status == "KILLED"
    assert by_trial[1].data.tags["autotune.outcome"] == "interrupted"
    parent = next(r for r in runs if "autotune.trial" not in r.data.tags)
    assert parent.info.status == "KILLED"
    assert (store / "exports" / "c.yaml").is_file()  # the best so far is exported


@pytest.mark.parametrize("url", ["sqlite:////nonexistent-dir/optuna.db",
                                 "postgresql://autotune@127.0.0.1:9/optuna"])
def test_unreachable_study_storage_fails_before_any_trial(tmp_path: Path, url: str) -> None:
    out = autotune("run", TARGET, "--storage", url, "--trials", "1", *FAST, cwd=tmp_path)
    assert out.returncode == 2
    assert f"--storage {url!r}: cannot be opened" in out.stderr
    assert not (tmp_path / "mlflow" / "trials").exists()  # no trial ran


def test_a_baseline_that_never_gets_a_batch_stops_the_study(tmp_path: Path) -> None:
    hangs = f"{FIXTURES / 'tiny_train.py'}:train_hangs_in_setup"
    out = autotune("run", hangs, "--trials", "3", "--startup-timeout", "3", *FAST, cwd=tmp_path)
    assert out.returncode == 1
    assert "ended as timeout" in out.stderr and "startup: no batch after 3 s" in out.stderr
    assert len(load_study(tmp_path / "mlflow", "tiny_train.train_hangs_in_setup").get_trials()) == 1
