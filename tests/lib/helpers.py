"""Helpers for the tests that drive the real CLI and read both stores back."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

#: The tests' folder, their fixtures (real training functions) and the repository.
#: This folder: the suite's helpers (a test run puts it on sys.path: pyproject.toml, pythonpath).
LIB = Path(__file__).resolve().parent
TESTS = LIB.parent
FIXTURES = TESTS / "fixtures"
ROOT = TESTS.parent


def cli_env(env: dict | None = None) -> dict:
    """This environment, telemetry off, the default tracking store, plus ``env``."""
    full = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", **(env or {})}
    full.pop("MLFLOW_TRACKING_URI", None)
    return full


def cli(*args: str) -> list[str]:
    """The real CLI's argv. A study believes any figure (``--max-load 1 --max-spread 1000``)
    unless the test says otherwise: the suite must pass beside a CPU hog, where the short
    windows of its tiny trials disagree, and what a test checks is its feature, not the
    machine's quiet (tests/study/test_noisy_study.py checks that). Nor does it run the profile runs
    (``--profile off``: two more runs, 3-4 s a study), start from an earlier study of the same
    target in the store (``--warm-start off``: tests run several) or run the code whole
    (``--whole-run 0``: the baseline of a fixture that trains for ever would run on for the
    minute it may take; tests/study/test_whole_runs.py runs short code whole) unless the test
    asks for them."""
    if args[:1] == ("run",):
        ours, script = (args[: args.index("--")], args[args.index("--") :]) if "--" in args else (args, ())
        for option, value in (
            ("--max-load", "1"),
            ("--max-spread", "1000"),
            ("--profile", "off"),
            ("--warm-start", "off"),
            ("--whole-run", "0"),
        ):
            if option not in ours:
                ours = (*ours, option, value)
        args = (*ours, *script)  # a script's own command line stays last, after --
    return [sys.executable, "-m", "autotune", *args]


def built_once(tmp_path_factory, name: str, build) -> Path:
    """A folder ``build(folder)`` fills once per test session, however many pytest-xdist
    processes ask for it: the first builds it under a lock, the others wait and share it (a
    whole study that a module's tests read took 30-45 s on the 2-core CI machine, built once per
    process that ran one of them before). A build that fails is tried again by the next asker."""
    import fcntl

    import lost_values

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by the session's processes
    folder, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            lost_values.check_journals(folder)  # (issue 62's rule, as a test's own studies: tests/conftest.py)
            done.write_text("built\n")
    return folder


def autotune(*args: str, cwd: Path, env: dict | None = None, timeout: float = 240):
    """Run the real CLI in a process of its own (see ``cli``), as a user would: forked from a template
    that has done its imports, where that cannot differ from a new interpreter (tests/lib/forked_cli.py)."""
    import forked_cli
    import lost_values

    done = forked_cli.run(cli(*args), cwd=cwd, env=cli_env(env), capture_output=True, text=True, timeout=timeout)
    if done.returncode == 0:  # (a study run to its end, on a --storage: issue 62's rule, tests/conftest.py)
        lost_values.check_run(args, cwd)
    return done


def load_study(store: Path, name: str, url: str | None = None):
    """The study from an RDB ``url``, else from the store's journal."""
    import optuna
    from optuna.storages.journal import JournalFileBackend

    storage = url or optuna.storages.JournalStorage(JournalFileBackend(str(store / "optuna.journal")))
    return optuna.load_study(study_name=name, storage=storage)


def mlflow_runs(store: Path, name: str):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{store}/mlflow.db")
    experiment = client.get_experiment_by_name(name)
    return client, client.search_runs([experiment.experiment_id], max_results=1000)


#: tests/fixtures/faulty_train.py, whose ``num_workers`` picks a fault (``faults_space``,
#: ``enqueue_workers``).
FAULTY = f"{FIXTURES / 'faulty_train.py'}:train"
#: Short trials at one seed, without confirmation re-runs or ceilings: for studies whose point
#: is what happens to a trial, not what it measures. Two windows: a median needs no more, and the
#: suite is CPU-bound on the 2-core CI machine (a third window was 0.3 s of a CPU per trial).
SHORT_TRIALS = [
    "--warmup",
    "0.2",
    "--window",
    "0.3",
    "--windows",
    "2",
    "--seed",
    "0",
    "--confirm",
    "0",
    "--ceiling-windows",
    "0",
]

#: Short trials that still measure each config's ceilings (a window each), unpruned: for the studies
#: of tests/fixtures/io_train.py's waiting loader, whose point is what its figures lead to (the
#: worker range, the climb, the trim).
LOADER_TRIALS = ["--warmup", "0.3", "--window", "0.4", "--windows", "2", "--ceiling-windows", "1", "--prune", "0"]
#: Every figure believed, whatever the host's load and the spread of a trial's windows: for studies
#: whose loader's reads are sleeps, so that the order of its configs holds beside the suite.
ALL_BELIEVED = ["--max-load", "1", "--max-spread", "1000"]


def faults_space(folder: Path, values) -> Path:
    """A space for tests/fixtures/faulty_train.py: its num_workers values pick the faults."""
    path = folder / "faults.yaml"
    path.write_text(f"knobs:\n  num_workers: {list(values)}\n")
    return path


def enqueue_workers(store: Path, name: str, *values: int, url: str | None = None) -> None:
    """Enqueue trials of these num_workers values (the faults they pick, in that order)."""
    study = load_study(store, name, url)
    for value in values:
        study.enqueue_trial({"num_workers": value})
