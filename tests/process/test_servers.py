"""The real-server fixtures are real: databases come and go; MLflow stores, serves, restarts."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import psycopg
import pytest
from conftest import tagged

from helpers import LIB
from servers import PrivateCluster, fresh_database


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


def test_mlflow_server_restarts_with_its_stores(own_mlflow_server, tmp_path, no_process_left_behind):
    server = own_mlflow_server
    url = server.url
    _, experiment_id, run_id = _log_run(url, "restarted")

    assert len(tagged(no_process_left_behind)) == 3  # the watchdog, mlflow's CLI, its uvicorn
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


# --- Servers die with the test process, even one killed with SIGKILL ---------------------------


def _start_child(program: str, *, env=None, timeout: float = 60.0) -> tuple[subprocess.Popen, dict]:
    """Run ``program`` in a child python (as a test process would) and return it with the JSON
    object it prints on its first line of output once it has started what it starts."""
    child = subprocess.Popen(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(LIB)!r})\n" + program],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    ready, _, _ = select.select([child.stdout], [], [], timeout)
    line = child.stdout.readline() if ready else ""
    if not line:
        child.kill()
        child.wait()
        pytest.fail(f"the child printed nothing within {timeout:.0f} s (exit code {child.returncode})")
    return child, json.loads(line)


def _connections(server, database: str) -> int:
    with server.connect() as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,)).fetchone()[0]


def _within(seconds: float, condition) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_an_mlflow_server_and_its_connections_die_with_a_test_process_killed_by_sigkill(
    postgres_server, tmp_path, no_process_left_behind
):
    # The child inherits this test's tag, and so do the server's processes it starts.
    child, started = _start_child(f"""
import json, time
from pathlib import Path
from servers import PgServer, _database_name, running_mlflow_server
with running_mlflow_server(PgServer({postgres_server.host!r}, {postgres_server.port}),
                           Path({str(tmp_path / "server")!r})) as server:
    print(json.dumps({{"database": _database_name(server.backend_uri), "url": server.url}}),
          flush=True)
    time.sleep(600)
""")
    database = started["database"]
    try:
        server = [p for p in tagged(no_process_left_behind) if p.pid != child.pid]
        assert len(server) >= 2, server  # mlflow's CLI and its uvicorn child at least
        assert _connections(postgres_server, database) > 0  # the server's pool holds some

        child.send_signal(signal.SIGKILL)  # no teardown runs: the fixture's process is gone
        child.wait()
        assert _within(5, lambda: not tagged(no_process_left_behind)), [
            (p.pid, p.cmdline()[:4]) for p in tagged(no_process_left_behind)
        ]
        assert _within(5, lambda: _connections(postgres_server, database) == 0)
        # The database stays, as the process that was to drop it is gone: the next session drops it.
        assert database in _databases(postgres_server)
        postgres_server.drop_stale_databases()
        assert database not in _databases(postgres_server)
    finally:
        child.kill()
        child.wait()
        for proc in tagged(no_process_left_behind):  # the leftovers, if the test failed
            proc.kill()
        postgres_server.drop_database(postgres_server.url(database))


def test_only_the_databases_of_dead_creators_are_stale(postgres_server):
    child, started = _start_child(f"""
import json, time
from servers import PgServer, _database_name
url = PgServer({postgres_server.host!r}, {postgres_server.port}).create_database()
print(json.dumps({{"database": _database_name(url)}}), flush=True)
time.sleep(600)
""")
    theirs = started["database"]
    try:
        with fresh_database(postgres_server) as url:
            mine = url.rsplit("/", 1)[1]
            # Not == []: another test's may be stale at this moment (under pytest-xdist).
            assert {mine, theirs}.isdisjoint(postgres_server.drop_stale_databases())
            assert {mine, theirs} <= _databases(postgres_server)  # both creators are alive
            child.kill()
            child.wait()
            postgres_server.drop_stale_databases()
            assert mine in _databases(postgres_server) and theirs not in _databases(postgres_server)
    finally:
        child.kill()
        child.wait()
        postgres_server.drop_database(postgres_server.url(theirs))


# A server that does what a daemon does: a child in a session of its own, and a grandchild
# that double-forks away from it and from its group.
_FAKE_SERVER = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
if os.fork() == 0:
    if os.fork() == 0:
        os.setsid()
        time.sleep(600)
    os._exit(0)
time.sleep(600)
"""

_TEST_PROCESS = f"""
import json, os, sys, time
from servers import start_watched
proc = start_watched([sys.executable, "-c", {_FAKE_SERVER!r}], env=os.environ)
print(json.dumps({{"test_process": os.getpid(), "watchdog": proc.pid}}), flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("killed", ["test process", "xdist controller"])
def test_a_watched_server_dies_with_all_it_started_when_the_test_process_is_killed(killed, no_process_left_behind):
    program = _TEST_PROCESS
    if killed == "xdist controller":  # the test process is an xdist worker that lingers on
        worker = f"import sys; sys.path.insert(0, {str(LIB)!r})\n" + _TEST_PROCESS
        program = f"""
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", {worker!r}],
                 env={{**os.environ, "PYTEST_XDIST_WORKER": "gw0"}})
time.sleep(600)
"""
    child, started = _start_child(program)
    try:
        test_process = started["test_process"]
        ours = {child.pid, test_process}
        # the watchdog, the server, its child in a session of its own and the double-forked one
        assert _within(10, lambda: len([p for p in tagged(no_process_left_behind) if p.pid not in ours]) == 4)
        child.send_signal(signal.SIGKILL)
        child.wait()

        def server():
            return [p for p in tagged(no_process_left_behind) if p.pid != test_process]

        assert _within(5, lambda: not server()), f"left alive: {[(p.pid, p.cmdline()[:3]) for p in server()]}"
        if killed == "xdist controller":
            assert [p.pid for p in tagged(no_process_left_behind)] == [test_process]
    finally:
        child.kill()
        child.wait()
        for proc in tagged(no_process_left_behind):
            proc.kill()


def test_a_private_cluster_is_stopped_and_deleted_when_the_test_process_is_killed(no_process_left_behind):
    import psutil

    problem = PrivateCluster(os.environ).problem()
    if problem is not None:
        pytest.skip(f"no private PostgreSQL cluster here: {problem}")
    child, started = _start_child(
        """
import json, os, time
from servers import PrivateCluster
cluster = PrivateCluster(os.environ)
server = cluster.start()
postmaster = int((cluster.folder / "data" / "postmaster.pid").read_text().split()[0])
print(json.dumps({"folder": str(cluster.folder), "postmaster": postmaster}), flush=True)
time.sleep(600)
""",
        timeout=120,
    )
    folder, postmaster = Path(started["folder"]), psutil.Process(started["postmaster"])
    try:
        assert folder.is_dir() and postmaster.is_running()
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert _within(10, lambda: not postmaster.is_running() and not folder.exists())
        assert _within(5, lambda: not tagged(no_process_left_behind))
    finally:
        child.kill()
        child.wait()
        if postmaster.is_running():
            postmaster.kill()
        shutil.rmtree(folder, ignore_errors=True)
