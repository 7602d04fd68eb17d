"""Helpers for the tests that drive the real CLI and read both stores back."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: The tests' folder, their fixtures (real training functions) and the repository.
TESTS = Path(__file__).resolve().parent
FIXTURES = TESTS / "fixtures"
ROOT = TESTS.parent

_TEMPLATE: list[Path] = []  # the session's empty MLflow store, made on first use


def cli_env(env: dict | None = None) -> dict:
    """This environment, telemetry off, the default tracking store, plus ``env``."""
    full = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", **(env or {})}
    full.pop("MLFLOW_TRACKING_URI", None)
    return full


def cli(*args: str) -> list[str]:
    """The real CLI's argv. A study believes any figure (``--max-load 1 --max-spread 1000``)
    unless the test says otherwise: the suite must pass beside a CPU hog, where the short
    windows of its tiny trials disagree, and what a test checks is its feature, not the
    machine's quiet (tests/test_noise.py checks that)."""
    if args[:1] == ("run",):
        for option, value in (("--max-load", "1"), ("--max-spread", "1000")):
            if option not in args:
                args = (*args, option, value)
    return [sys.executable, "-m", "autotune", *args]


def seed_store(cwd: Path, args: tuple[str, ...] | list[str], env: dict | None = None) -> None:
    """Give a ``run`` on the default store (``cwd/mlflow``) an empty MLflow database copied
    from one made once per session: a new SQLite store spends about 1.5 s creating and
    migrating its tables (2-core CI machine), a copy 0.03 s. What the tests check of the
    store is what the study writes into it; a test of store creation names ``--store``."""
    if list(args[:1]) != ["run"] or "--store" in args or "--tracking-uri" in args \
            or "MLFLOW_TRACKING_URI" in (env or {}):
        return
    target = cwd / "mlflow" / "mlflow.db"
    if target.exists():
        return
    if not _TEMPLATE:
        from mlflow import MlflowClient

        folder = Path(tempfile.mkdtemp(prefix="autotune-test-mlflow-"))
        atexit.register(shutil.rmtree, folder, True)
        MlflowClient(tracking_uri=f"sqlite:///{folder}/mlflow.db").search_experiments()
        _TEMPLATE.append(folder / "mlflow.db")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_TEMPLATE[0], target)


def autotune(*args: str, cwd: Path, env: dict | None = None, timeout: float = 240, seed: bool = True):
    """Run the real CLI in a subprocess (see ``cli``), as a user would. ``seed=False`` for a
    test that checks what the run creates in the store (``seed_store``)."""
    if seed:
        seed_store(cwd, args, env)
    return subprocess.run(cli(*args), cwd=cwd, env=cli_env(env), capture_output=True, text=True, timeout=timeout)


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
