"""Many tuners on one study, against a real PostgreSQL and a real MLflow server: one of each (study, parent run, baseline, confirmation), however many start together; hosts whose clocks disagree."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections import Counter
from pathlib import Path

import pytest

from autotune.core._kinds import Kind
from autotune.tuner._queue import CLAIM_MARK
from autotune.tuner._tuners import HOST_DIR_ENV, TUNER_KEY
from tuners import Tuner, storage_of, study_exists, study_of, wait_until

#: Windows of 0.15 s: every trial measures the baseline's samples (autotune.worker._marks), and these
#: tuners' trials run side by side on the 2 CPUs (the hosts of their own that the tests fake share
#: them), their drawn loader configs at a seventh of the baseline's speed: at 0.3 s two tests took 80
#: and 70 s instead of 16 and 28 (31 s now, with the slow windows' ceiling, autotune.worker._marks.SLOW_WINDOWS).
FAST = [
    "--warmup",
    "0.2",
    "--window",
    "0.15",
    "--windows",
    "2",
    "--ceiling-windows",
    "0",
    "--seed",
    "0",
    "--prune",
    "0",
]


def check_invariants(url: str, tracking_uri: str, name: str, tuners: int, own_trials: int, confirm: int) -> None:
    """What must hold however many tuners ran the study, wherever they ran."""
    import optuna
    from mlflow import MlflowClient

    study = study_of(url, name)
    trials = study.get_trials()
    # unique trial numbers, all ended
    assert [t.number for t in trials] == list(range(len(trials)))
    assert all(t.state.is_finished() for t in trials), [(t.number, t.state) for t in trials]
    firsts = [t for t in trials if not Kind(t.user_attrs["kind"]).closing]  # (not a re-run, nor the winner trimmed)
    assert len(firsts) == own_trials
    # one baseline; the winner trimmed once at most, however many tuners ended the confirmation
    assert sum(bool(t.user_attrs.get("baseline")) for t in firsts) == 1
    assert sum(t.user_attrs["kind"] == "trim" for t in trials) <= 1
    # one confirmation plan, each re-run claimed once: every planned config got exactly `confirm`
    # (a run measured again because it was noisy is not one of them, and follows a noisy run)
    reruns = Counter(t.user_attrs["of"] for t in trials if t.user_attrs["kind"] == "confirm")
    assert reruns and set(reruns.values()) == {confirm}, reruns
    for again in (t for t in trials if t.user_attrs["kind"] == "remeasure"):
        assert again.user_attrs["remeasure"] >= 1
        assert any(
            (t.user_attrs.get("doubt") or "").startswith("noisy")
            and t.number < again.number
            and again.user_attrs["of"] in (t.number, t.user_attrs.get("of"))
            for t in trials
        )
    assert firsts[0].number in reruns  # the baseline is among them
    markers = [
        s.study_name
        for s in optuna.get_all_study_summaries(storage_of(url))
        if s.study_name.startswith(name + CLAIM_MARK)
    ]
    assert len([m for m in markers if "confirm-after-" in m]) == 1, markers
    # every tuner registered once and left
    entries = [v for k, v in study._storage.get_study_system_attrs(study._study_id).items() if k.startswith(TUNER_KEY)]
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


def test_tuners_started_together_on_a_new_study(postgres: str, mlflow_server, tmp_path: Path, launch) -> None:
    """They race to create the study and to claim its baseline. The baseline's trial waits at a
    gate until every other tuner waits for it: a tuner that starts slower than a baseline runs
    (3 to 30 s on a loaded machine) would otherwise never see it running."""
    tuners = 3  # (two is the same race with one racer fewer)
    name = f"together-{tuners}-{uuid.uuid4().hex[:6]}"
    gate = tmp_path / "gate"
    args = [
        "--study",
        name,
        "--storage",
        postgres,
        "--tracking-uri",
        mlflow_server.url,
        "--trials",
        "2",
        "--confirm",
        "1",
        "--profile",
        "on",
        "--startup-timeout",
        "300",
        *FAST,
    ]
    folders = [tmp_path / f"host{i}" for i in range(tuners)]  # a store folder each, as on separate hosts
    for folder in folders:
        folder.mkdir()
    runs = [launch(folder, *args, env={"TEAM_GATE": str(gate)}) for folder in folders]
    # the baseline ran once; the tuners that had none to run waited for it
    wait_until(
        lambda: (
            sum("waiting for the baseline (trial 0)" in run.output for run in runs) == tuners - 1
            or any(run.proc.poll() is not None for run in runs)
        ),
        what="the other tuners to wait for the baseline",
    )
    gate.write_text("open")
    outputs = [run.wait() for run in runs]
    for run, out in zip(runs, outputs):
        assert run.proc.returncode == 0, out
        assert "Traceback" not in out
    check_invariants(postgres, mlflow_server.url, name, tuners, own_trials=2 * tuners, confirm=1)
    assert sum("waiting for the baseline (trial 0)" in out for out in outputs) == tuners - 1, outputs
    # one tuner ran the profile runs (the last one running the study), and its traces are the parent's
    assert sum("\nprofile: " in out for out in outputs) == 1, outputs
    from mlflow import MlflowClient

    client = MlflowClient(mlflow_server.url)
    parent = study_of(postgres, name).user_attrs["mlflow_parent_run_id"]
    assert "traces/baseline.pt.trace.json.gz" in {a.path for a in client.list_artifacts(parent, "traces")}


def test_the_parent_run_stays_open_until_the_last_tuner_leaves(
    postgres: str, mlflow_server, tmp_path: Path, launch
) -> None:
    """Deterministic, not a race on speed (a loaded machine starts a tuner in anything from 3 to
    30 s): each tuner's trials wait at a gate of its own, which the test opens in turn.

    A trial held at its gate holds its CPUs' measuring turn (``HostRegistry.turn``), so the
    tuners use a host folder of their own (no other test's tuner waits on them) and one CPU
    each (neither waits on the other's held trial)."""
    from mlflow import MlflowClient

    name = f"last-{uuid.uuid4().hex[:6]}"
    gate_a, gate_b = tmp_path / "gate-a", tmp_path / "gate-b"
    args = [
        "--study",
        name,
        "--storage",
        postgres,
        "--tracking-uri",
        mlflow_server.url,
        "--confirm",
        "1",
        "--startup-timeout",
        "300",
        *FAST,
    ]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    host = {HOST_DIR_ENV: str(tmp_path / "host")}
    cpus = sorted(os.sched_getaffinity(0))
    pin = [["taskset", "-c", str(cpu)] for cpu in cpus[:2]] if len(cpus) > 1 else [None, None]
    first = launch(tmp_path / "a", "--trials", "2", *args, env={"TEAM_GATE": str(gate_a), **host}, prefix=pin[0])
    wait_until(
        lambda: (
            study_exists(postgres, name)
            and any(t.state.name == "RUNNING" for t in study_of(postgres, name).get_trials())
        ),
        what="the first tuner to claim the baseline",
    )
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


def _skewed(folder: Path, offset_s: float) -> Path:
    """A sitecustomize that moves this process's wall clock (and its workers') by ``offset_s``:
    an injected time source, as on a host whose clock is off."""
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        f"import time\n_real = time.time\ntime.time = lambda: _real() + {offset_s}\n"
    )
    return folder


def test_hosts_with_clocks_minutes_apart_leave_each_others_trials_alone(
    postgres: str, mlflow_server, tmp_path: Path
) -> None:
    if subprocess.run(["unshare", "-u", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare -u (a host name of its own) is not permitted here")
    name = f"skew-{uuid.uuid4().hex[:6]}"
    args = [
        "--study",
        name,
        "--storage",
        postgres,
        "--tracking-uri",
        mlflow_server.url,
        "--trials",
        "2",
        "--confirm",
        "1",
        *FAST,
    ]
    tuners = []
    for host, offset in (("host-ahead", 600.0), ("host-behind", -600.0)):
        folder = tmp_path / host
        folder.mkdir()
        site = _skewed(tmp_path / f"site-{host}", offset)
        env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
        tuners.append(
            Tuner(folder, *args, env=env, prefix=["unshare", "-u", "sh", "-c", f'hostname {host} && exec "$@"', "sh"])
        )
    outputs = [t.wait() for t in tuners]
    for tuner, out in zip(tuners, outputs):
        assert tuner.proc.returncode == 0, out
        assert "Traceback" not in out and "left RUNNING" not in out
    study = study_of(postgres, name)
    assert {t.user_attrs["owner"]["host"] for t in study.get_trials()} == {"host-ahead", "host-behind"}
    assert "interrupted" not in {t.user_attrs["outcome"] for t in study.get_trials()}
    check_invariants(postgres, mlflow_server.url, name, tuners=2, own_trials=4, confirm=1)
