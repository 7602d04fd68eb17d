"""Many tuners on one study, as a team runs them: real tuner processes on a real PostgreSQL
database and a real ``mlflow server``, started together, on skewed clocks, through a
tracking server that goes down and a database that restarts."""

from __future__ import annotations

import functools
import os
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from helpers import cli, cli_env, FIXTURES, seed_store
from servers import PrivateCluster, _without_test_tag

from autotune._queue import CLAIM_MARK
from autotune._tuners import HOST_DIR_ENV, TUNER_KEY

TARGET = f"{FIXTURES / 'team_train.py'}:train"
FAST = ["--warmup", "0.2", "--window", "0.3", "--windows", "2", "--ceiling-windows", "0", "--seed", "0",
        "--prune", "0"]
#: Trials long enough to take an outage in the middle of one (about 5 s of measuring), in a
#: space whose every config trains the same way: these tests are about records, not verdicts.
LOADER_ONLY = FIXTURES / "loader_only.yaml"
SLOW = ["--warmup", "0.5", "--window", "1", "--windows", "4", "--ceiling-windows", "0", "--prune", "0",
        "--seed", "0", "--confirm", "0", "--space", str(LOADER_ONLY)]


class Tuner:
    """``autotune run`` in a subprocess, its output in a file (a pipe could fill and block it)."""

    def __init__(self, cwd: Path, *args: str, env: dict | None = None, prefix: list[str] | None = None,
                 target: str = TARGET) -> None:
        self.log = cwd / f"tuner-{uuid.uuid4().hex[:6]}.log"
        seed_store(cwd, ("run", target, *args), env)
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen([*(prefix or []), *cli("run", target, *args)],
                                         cwd=cwd, env=cli_env(env), stdout=out, stderr=subprocess.STDOUT)

    def wait(self, timeout: float = 400) -> str:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"tuner still running after {timeout} s:\n{self.output}") from None
        return self.output

    @property
    def output(self) -> str:
        return self.log.read_text()


@pytest.fixture
def launch():
    """Starts tuners; any still running when the test ends (it failed) is stopped as Ctrl-C would."""
    started: list[Tuner] = []

    def start(cwd: Path, *args: str, env: dict | None = None, prefix: list[str] | None = None,
              target: str = TARGET) -> Tuner:
        started.append(Tuner(cwd, *args, env=env, prefix=prefix, target=target))
        return started[-1]

    yield start
    for tuner in started:
        if tuner.proc.poll() is None:
            tuner.proc.terminate()
            try:
                tuner.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                tuner.proc.kill()
                tuner.proc.wait()


@functools.lru_cache(maxsize=8)
def storage_of(url: str):
    """One Optuna storage per database for the tests' own reads. A storage made per call
    (a URL passed to Optuna) opens a pool of its own: polled every 0.2 s for a tuner that
    a CPU hog slows, they used up PostgreSQL's 100 connections. Pre-ping: a connection the
    pool kept through a server restart (a test restarts PostgreSQL) is replaced, not used."""
    import optuna

    return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})


def study_of(url: str, name: str):
    import optuna

    return optuna.load_study(study_name=name, storage=storage_of(url))


def wait_until(condition, timeout: float = 240, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def check_invariants(url: str, tracking_uri: str, name: str, tuners: int, own_trials: int, confirm: int) -> None:
    """What must hold however many tuners ran the study, wherever they ran."""
    import optuna
    from mlflow import MlflowClient

    study = study_of(url, name)
    trials = study.get_trials()
    # unique trial numbers, all ended
    assert [t.number for t in trials] == list(range(len(trials)))
    assert all(t.state.is_finished() for t in trials), [(t.number, t.state) for t in trials]
    firsts = [t for t in trials if t.user_attrs["kind"] not in ("confirm", "remeasure")]
    assert len(firsts) == own_trials
    # one baseline
    assert sum(bool(t.user_attrs.get("baseline")) for t in firsts) == 1
    # one confirmation plan, each re-run claimed once: every planned config got exactly `confirm`
    # (a run measured again because it was noisy is not one of them, and follows a noisy run)
    reruns = Counter(t.user_attrs["of"] for t in trials if t.user_attrs["kind"] == "confirm")
    assert reruns and set(reruns.values()) == {confirm}, reruns
    for again in (t for t in trials if t.user_attrs["kind"] == "remeasure"):
        assert again.user_attrs["remeasure"] >= 1
        assert any((t.user_attrs.get("doubt") or "").startswith("noisy") and t.number < again.number
                   and again.user_attrs["of"] in (t.number, t.user_attrs.get("of")) for t in trials)
    assert firsts[0].number in reruns  # the baseline is among them
    markers = [s.study_name for s in optuna.get_all_study_summaries(storage_of(url)) if s.study_name.startswith(name + CLAIM_MARK)]
    assert len([m for m in markers if "confirm-after-" in m]) == 1, markers
    # every tuner registered once and left
    entries = [v for k, v in study._storage.get_study_system_attrs(study._study_id).items()
               if k.startswith(TUNER_KEY)]
    assert len(entries) == tuners and {e["phase"] for e in entries} == {"done"}
    # one experiment, one parent run, every Optuna trial exactly one MLflow child
    client = MlflowClient(tracking_uri)
    experiments = client.search_experiments(filter_string=f"name = '{name}'")
    assert len(experiments) == 1
    runs = client.search_runs([experiments[0].experiment_id], max_results=1000)
    parents = [r for r in runs if "autotune.trial" not in r.data.tags]
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.run_id == study.user_attrs["mlflow_parent_run_id"]
    assert parent.info.status == "FINISHED"  # closed, and only once the last tuner left
    assert parent.data.tags["autotune.ended"] == f"finished (last of {tuners} tuner(s))"
    children = Counter(r.data.tags["autotune.trial"] for r in runs if "autotune.trial" in r.data.tags)
    assert children == Counter(str(t.number) for t in trials)
    by_id = {r.info.run_id: r for r in runs}
    for t in trials:
        run = by_id[t.user_attrs["mlflow_run_id"]]
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.data.tags["autotune.outcome"] == t.user_attrs["outcome"]
        assert run.info.status != "RUNNING"


def test_tuners_started_together_on_a_new_study(postgres: str, mlflow_server, tmp_path: Path) -> None:
    tuners = 3  # (two is the same race with one racer fewer)
    name = f"together-{tuners}-{uuid.uuid4().hex[:6]}"
    args = ["--study", name, "--storage", postgres, "--tracking-uri", mlflow_server.url, "--trials", "2",
            "--confirm", "1", *FAST]
    folders = [tmp_path / f"host{i}" for i in range(tuners)]  # a store folder each, as on separate hosts
    for folder in folders:
        folder.mkdir()
    runs = [Tuner(folder, *args) for folder in folders]
    outputs = [run.wait() for run in runs]
    for run, out in zip(runs, outputs):
        assert run.proc.returncode == 0, out
        assert "Traceback" not in out
    check_invariants(postgres, mlflow_server.url, name, tuners, own_trials=2 * tuners, confirm=1)
    # the baseline ran once; the tuners that had none to run waited for it
    assert sum("waiting for the baseline (trial 0)" in out for out in outputs) >= 1


def test_the_parent_run_stays_open_until_the_last_tuner_leaves(postgres: str, mlflow_server, tmp_path: Path,
                                                              launch) -> None:
    """Deterministic, not a race on speed (a loaded machine starts a tuner in anything from 3 to
    30 s): each tuner's trials wait at a gate of its own, which the test opens in turn.

    A trial held at its gate holds its CPUs' measuring turn (``HostRegistry.turn``), so the
    tuners use a host folder of their own (no other test's tuner waits on them) and one CPU
    each (neither waits on the other's held trial)."""
    from mlflow import MlflowClient

    name = f"last-{uuid.uuid4().hex[:6]}"
    gate_a, gate_b = tmp_path / "gate-a", tmp_path / "gate-b"
    args = ["--study", name, "--storage", postgres, "--tracking-uri", mlflow_server.url, "--confirm", "1",
            "--startup-timeout", "300", *FAST]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    host = {HOST_DIR_ENV: str(tmp_path / "host")}
    cpus = sorted(os.sched_getaffinity(0))
    pin = [["taskset", "-c", str(cpu)] for cpu in cpus[:2]] if len(cpus) > 1 else [None, None]
    first = launch(tmp_path / "a", "--trials", "2", *args, env={"TEAM_GATE": str(gate_a), **host}, prefix=pin[0])
    wait_until(lambda: _study_exists(postgres, name) and any(
        t.state.name == "RUNNING" for t in study_of(postgres, name).get_trials()),
        what="the first tuner to claim the baseline")
    second = launch(tmp_path / "b", "--trials", "1", *args, env={"TEAM_GATE": str(gate_b), **host}, prefix=pin[1])
    wait_until(lambda: len(_tuners(postgres, name)) == 2, what="the second tuner to join")
    gate_a.write_text("open")  # the first runs its trials, while the second waits at its own gate
    out = first.wait()
    assert first.proc.returncode == 0, out
    assert "still run trials of study" in out and "the last one to finish plans the confirmation" in out
    assert "the study's MLflow parent run stays open" in out
    parent_id = study_of(postgres, name).user_attrs["mlflow_parent_run_id"]
    assert MlflowClient(mlflow_server.url).get_run(parent_id).info.status == "RUNNING"
    assert second.proc.poll() is None  # held at its gate
    gate_b.write_text("open")
    out = second.wait()
    assert second.proc.returncode == 0, out
    assert "confirming:" in out  # the last tuner planned the confirmation
    check_invariants(postgres, mlflow_server.url, name, tuners=2, own_trials=3, confirm=1)


def _tuners(url: str, name: str) -> list[dict]:
    study = study_of(url, name)
    return [v for k, v in study._storage.get_study_system_attrs(study._study_id).items() if k.startswith(TUNER_KEY)]


def _study_exists(url: str, name: str) -> bool:
    import optuna

    return name in {s.study_name for s in optuna.get_all_study_summaries(storage_of(url))}


def test_a_tracking_server_down_for_20_s_mid_trial_loses_nothing(postgres: str, own_mlflow_server,
                                                                 tmp_path: Path) -> None:
    name = f"outage-{uuid.uuid4().hex[:6]}"
    tuner = Tuner(tmp_path, "--study", name, "--storage", postgres, "--tracking-uri", own_mlflow_server.url,
                  "--trials", "3", *SLOW)
    # down while trial 1 measures: its end, and trial 2's start, meet a dead server
    wait_until(lambda: _study_exists(postgres, name) and any(
        t.number == 1 and t.intermediate_values for t in study_of(postgres, name).get_trials()),
        what="trial 1 to measure a window")
    own_mlflow_server.stop()
    time.sleep(20)
    own_mlflow_server.start()
    out = tuner.wait()
    assert tuner.proc.returncode == 0, out
    assert "Traceback" not in out
    assert "does not answer" in out and "answers again after" in out
    from mlflow import MlflowClient

    study = study_of(postgres, name)
    client = MlflowClient(own_mlflow_server.url)
    for t in study.get_trials():
        assert t.user_attrs["outcome"] == "complete"
        run = client.get_run(t.user_attrs["mlflow_run_id"])
        assert run.info.status == "FINISHED"
        assert run.data.metrics["samples_per_s"] == pytest.approx(t.value)
    assert not list((tmp_path / "mlflow" / "pending").rglob("*.json"))  # all delivered


def test_postgres_restarted_mid_study_loses_nothing(tmp_path: Path) -> None:
    cluster = PrivateCluster(_without_test_tag(os.environ))
    problem = cluster.problem()
    if problem is not None:
        pytest.skip(f"no private PostgreSQL cluster to restart here: {problem}")
    server = cluster.start()
    try:
        url = server.create_database()
        name = "restart"
        tuner = Tuner(tmp_path, "--study", name, "--storage", url, "--trials", "3", *SLOW)
        wait_until(lambda: _study_exists(url, name) and any(
            t.number == 1 and t.intermediate_values for t in study_of(url, name).get_trials()),
            what="trial 1 to measure a window")
        cluster.restart(down_s=8)
        out = tuner.wait()
        assert tuner.proc.returncode == 0, out
        assert "Traceback" not in out
        assert "the study storage" in out and "does not answer" in out and "answers again after" in out
        trials = study_of(url, name).get_trials()
        assert [t.user_attrs["outcome"] for t in trials] == ["complete"] * 3
    finally:
        cluster.stop()


def _skewed(folder: Path, offset_s: float) -> Path:
    """A sitecustomize that moves this process's wall clock (and its workers') by ``offset_s``:
    an injected time source, as on a host whose clock is off."""
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        "import time\n_real = time.time\n"
        f"time.time = lambda: _real() + {offset_s}\n")
    return folder


def test_hosts_with_clocks_minutes_apart_leave_each_others_trials_alone(postgres: str, mlflow_server,
                                                                        tmp_path: Path) -> None:
    if subprocess.run(["unshare", "-u", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare -u (a host name of its own) is not permitted here")
    name = f"skew-{uuid.uuid4().hex[:6]}"
    args = ["--study", name, "--storage", postgres, "--tracking-uri", mlflow_server.url, "--trials", "2",
            "--confirm", "1", *FAST]
    tuners = []
    for host, offset in (("host-ahead", 600.0), ("host-behind", -600.0)):
        folder = tmp_path / host
        folder.mkdir()
        site = _skewed(tmp_path / f"site-{host}", offset)
        env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
        tuners.append(Tuner(folder, *args, env=env,
                            prefix=["unshare", "-u", "sh", "-c", f'hostname {host} && exec "$@"', "sh"]))
    outputs = [t.wait() for t in tuners]
    for tuner, out in zip(tuners, outputs):
        assert tuner.proc.returncode == 0, out
        assert "Traceback" not in out and "left RUNNING" not in out
    study = study_of(postgres, name)
    assert {t.user_attrs["owner"]["host"] for t in study.get_trials()} == {"host-ahead", "host-behind"}
    assert "interrupted" not in {t.user_attrs["outcome"] for t in study.get_trials()}
    check_invariants(postgres, mlflow_server.url, name, tuners=2, own_trials=4, confirm=1)


def test_two_tuners_retry_a_diverged_config_once_at_the_baselines_seed(postgres: str, mlflow_server,
                                                                        tmp_path: Path, launch) -> None:
    """A fast config diverged on its lr (lr_train.py: 2x the batch, lr as is) while a second
    tuner works on the study: its config runs again with lr_scaling linear exactly once,
    whichever tuner claims it, and every trial trains from the baseline's seed whatever seed
    its tuner was given.

    Every trial is enqueued (the tuners draw none): their samplers mostly drew that config
    with linear, which leaves nothing to retry (``_retry_lr``; test_safety.py checks that),
    and when they let the tuners draw, this test raced on which trial ended first (it
    failed once in CI and in 1 of 9 runs beside a CPU hog)."""
    import optuna

    target = f"{FIXTURES / 'lr_train.py'}:train"
    space = tmp_path / "lr.yaml"
    space.write_text("knobs:\n  batch_size: [1x, 2x]\n  lr_scaling: [none, linear]\n")
    name = f"retry-{uuid.uuid4().hex[:6]}"
    args = ["--study", name, "--storage", postgres, "--tracking-uri", mlflow_server.url, "--space", str(space),
            "--warmup", "0.1", "--window", "0.3", "--windows", "4", "--ceiling-windows", "0", "--prune", "0",
            "--confirm", "0"]
    folders = [tmp_path / f"host{i}" for i in range(3)]
    for folder in folders:
        folder.mkdir()
    first = launch(folders[0], "--trials", "1", "--seed", "0", *args, target=target)
    out = first.wait()
    assert first.proc.returncode == 0, out
    # four own trials in all: the diverging one, two at the code's batch (slower than it, so
    # its retry is worth running) and the retry, claimed by whichever tuner asks first
    for batch_size, lr_scaling in (("2x", "none"), ("1x", "linear"), ("1x", "none")):
        study_of(postgres, name).enqueue_trial({"batch_size": batch_size, "lr_scaling": lr_scaling})
    tuners = [launch(folder, "--trials", "2", "--seed", seed, *args, target=target)
              for folder, seed in zip(folders[1:], ("5", "9"))]
    outputs = [tuner.wait() for tuner in tuners]
    for tuner, out in zip(tuners, outputs):
        assert tuner.proc.returncode == 0, out
    trials = study_of(postgres, name).get_trials()
    assert all(t.state.is_finished() for t in trials), [(t.number, t.state) for t in trials]
    assert {t.user_attrs["seed"] for t in trials} == {0}  # the baseline's, not the tuners' 5 and 9
    diverged = trials[1]
    assert diverged.params == {"batch_size": "2x", "lr_scaling": "none"}
    assert diverged.user_attrs["outcome"] == "diverged", diverged.user_attrs["reason"]
    retries = [t for t in trials if t.user_attrs["kind"] == "retry"]
    assert [t.user_attrs["of"] for t in retries] == [diverged.number], outputs
    retry, = retries
    assert retry.number == 4 and len(trials) == 5
    assert retry.params == {"batch_size": "2x", "lr_scaling": "linear"}
    assert retry.user_attrs["outcome"] == "complete", retry.user_attrs["reason"]
    assert retry.state == optuna.trial.TrialState.COMPLETE
