"""The real-server fixtures are real: databases come and go; MLflow stores, serves, restarts."""

from __future__ import annotations

import urllib.error
import urllib.request
import uuid
from pathlib import Path

import psycopg
import pytest

from conftest import tagged
from servers import fresh_database


def _databases(server) -> set[str]:
    with server.connect() as conn:
        return {row[0] for row in conn.execute("SELECT datname FROM pg_database")}


def test_fresh_database_is_created_empty_and_dropped_even_while_connected(postgres_server):
    before = _databases(postgres_server)
    with fresh_database(postgres_server) as url:
        name = url.rsplit("/", 1)[1]
        assert url == f"postgresql://postgres@{postgres_server.host}:{postgres_server.port}/{name}"
        assert name.startswith("autotune_") and name not in before
        assert name in _databases(postgres_server)
        # Left open on purpose, as a tuner subprocess may leave one: the drop must still work.
        held = postgres_server.connect(name)
        tables = held.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
        assert tables.fetchone()[0] == 0
    assert name not in _databases(postgres_server)
    with held, pytest.raises(psycopg.OperationalError):  # FORCE closed it from the server's side
        held.execute("SELECT 1")


def test_optuna_rdb_storage_creates_a_study_on_the_postgres_url(postgres):
    import optuna

    study = optuna.create_study(study_name="servers", storage=postgres)
    study.optimize(lambda trial: trial.suggest_float("x", -1, 1) ** 2, n_trials=2)
    reloaded = optuna.load_study(study_name="servers", storage=postgres)
    assert [t.state for t in reloaded.trials] == [optuna.trial.TrialState.COMPLETE] * 2


def _log_run(url: str, experiment: str):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=url)
    experiment_id = client.create_experiment(experiment)
    run = client.create_run(experiment_id)
    client.log_metric(run.info.run_id, "samples_per_s", 123.5, step=1)
    client.log_text(run.info.run_id, "hello from a test\n", "notes/hello.txt")
    client.set_terminated(run.info.run_id)
    return client, experiment_id, run.info.run_id


def test_mlflow_server_stores_metrics_and_serves_artifacts(mlflow_server, tmp_path):
    # A unique name: the session's server is shared.
    client, experiment_id, run_id = _log_run(mlflow_server.url, f"servers-{uuid.uuid4().hex[:8]}")
    run = client.get_run(run_id)
    assert run.data.metrics == {"samples_per_s": 123.5}
    # Proxied: the client only knows an mlflow-artifacts URI; the file lands in the server's folder.
    assert run.info.artifact_uri.startswith("mlflow-artifacts:")
    local = client.download_artifacts(run_id, "notes/hello.txt", str(tmp_path))
    assert Path(local).read_text() == "hello from a test\n"
    stored = list((mlflow_server.folder / "artifacts").rglob("hello.txt"))
    assert len(stored) == 1 and experiment_id in stored[0].parts


def test_mlflow_server_restarts_with_its_stores(own_mlflow_server, tmp_path,
                                                no_process_left_behind):
    server = own_mlflow_server
    url = server.url
    _, experiment_id, run_id = _log_run(url, "restarted")

    assert len(tagged(no_process_left_behind)) == 2  # mlflow's CLI and its uvicorn child
    server.stop()
    assert not server.running
    assert tagged(no_process_left_behind) == []
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{url}/health", timeout=5)

    server.start()
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=url)  # the same address as before the restart
    assert client.get_experiment_by_name("restarted").experiment_id == experiment_id
    assert [m.value for m in client.get_metric_history(run_id, "samples_per_s")] == [123.5]
    local = client.download_artifacts(run_id, "notes/hello.txt", str(tmp_path))
    assert Path(local).read_text() == "hello from a test\n"
