"""Real servers for tests: fresh PostgreSQL databases and an ``mlflow server`` subprocess.

Fixtures (registered in ``conftest.py``):

* ``postgres_server`` (session): the PostgreSQL server tests talk to, as a :class:`PgServer`.
  The machine's own on 127.0.0.1:5432, else a private cluster started with ``initdb`` and
  ``pg_ctl``, else the tests skip, or fail under ``CI=true``.
* ``postgres`` (function): the URL of a fresh, empty database, dropped after the test.
* ``mlflow_server`` (session): one :class:`MlflowServer` that tests share; do not stop it,
  and name experiments uniquely since every test sees the same store.
* ``own_mlflow_server`` (function): a server of the test's own, free to ``stop()`` and
  ``start()`` (to play the team's server restarting); stopped after the test.

The servers die with the test process that started them, even when it is killed with SIGKILL
(a time limit) and no teardown runs: each is started under a watchdog (:func:`start_watched`)
that kills them when it is gone. Their PostgreSQL connections end with them; the databases such
a process created are dropped by the next session (:meth:`PgServer.drop_stale_databases`).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

#: Where the machine's PostgreSQL listens (on CI too).
PG_HOST = "127.0.0.1"
PG_PORT = 5432


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now.

    The OS picks it; another process may still take it before the caller binds, a race
    that tests accept.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _unavailable(reason: str):
    """Skip the test with ``reason``; under ``CI=true`` fail instead, since CI must run it."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: PostgreSQL tests must run, not skip)", pytrace=False)
    pytest.skip(reason)


def _watchdog(config: str) -> None:
    """The watchdog's whole program: :func:`start_watched` runs this source, then
    ``_watchdog(sys.argv[1])``, with ``python -I -c``.

    Started by :func:`start_watched`, in a session of its own. ``config`` (JSON) holds
    ``watch``: the test process's pid, then (under pytest-xdist) its parent's; ``command``: the
    server to run, or null; ``cleanup``: commands to run, then ``remove``: folders to delete,
    once the test process is gone.

    * It becomes a child subreaper: whatever the server starts stays its descendant, even a
      process that starts a session of its own or whose parent exits.
    * The test process is gone when this process's parent pid changes (the kernel reparents
      the children of a process when it exits, SIGKILL included), or, under pytest-xdist, when
      the worker's parent pid does. It also watches them with pidfds, to wake at once.
    * Then it SIGKILLs all its descendants, runs ``cleanup``, deletes ``remove`` and exits.
    * With a command: SIGTERM and SIGINT (a stop() signalling the server's process group) are
      for the server; when the server exits, the watchdog SIGKILLs what is left of its
      descendants and exits with the server's code (128 + N for signal N). The server gets
      PR_SET_PDEATHSIG SIGKILL: a SIGKILL of the watchdog itself still takes the server's
      first process along (though not what that one started).
    * Without one: it waits; SIGTERM ends it at once, with no cleanup.

    Only the standard library, and nothing from outside this function: it runs from its source.
    """
    import ctypes
    import itertools
    import json
    import os
    import select
    import shutil
    import signal
    import subprocess
    import time

    config = json.loads(config)
    watch, command = config["watch"], config["command"]
    me = os.getpid()
    stop_requested = []
    signal.signal(signal.SIGTERM, lambda *_: stop_requested.append(True))
    signal.signal(signal.SIGINT, lambda *_: stop_requested.append(True))
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)  # a signal (SIGCHLD above all) wakes the select below
    signal.signal(signal.SIGCHLD, lambda *_: None)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        libc = None
    pidfds = []
    for pid in watch:
        try:
            pidfds.append(os.pidfd_open(pid))
        except (OSError, AttributeError):
            pass  # no pidfds here: the 0.2 s poll below still notices

    def parent_of(pid):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None

    def watched_alive():
        # Checked after opening the pidfds: a pid reused since then cannot pass for the original.
        return os.getppid() == watch[0] and all(
            parent_of(child) == parent for child, parent in itertools.pairwise(watch)
        )

    def descendants():
        children = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as stat:
                        fields = stat.read().rsplit(")", 1)[1].split()
                except (OSError, IndexError):
                    continue
                if fields[0] not in "ZX":  # a zombie has no children left and is dead
                    children.setdefault(int(fields[1]), []).append(int(entry))
        found, todo = [], [me]
        while todo:
            kids = children.get(todo.pop(), [])
            found += kids
            todo += kids
        return found

    exits = {}

    def reap():
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            exits[pid] = status

    def kill_descendants():
        for _ in range(200):  # repeated: one may fork while the others die
            victims = descendants()
            if not victims:
                return
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)
            reap()

    def orphaned():
        kill_descendants()
        for argv in config["cleanup"]:
            try:
                subprocess.run(argv, stdin=subprocess.DEVNULL, timeout=60, check=False)
            except (OSError, subprocess.SubprocessError):
                pass
        for folder in config["remove"]:
            shutil.rmtree(folder, ignore_errors=True)
        os._exit(1)

    if not watched_alive():
        orphaned()
    server = None
    if command is not None:
        server = os.fork()
        if server == 0:  # the server: default signals, and it dies with the watchdog
            try:
                for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
                    signal.signal(signum, signal.SIG_DFL)
                if libc is not None:
                    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
                if os.getppid() == me:  # else the watchdog died before prctl: do not start
                    os.execvp(command[0], command)
            finally:
                os._exit(127)
    while True:
        try:
            select.select([wake_read, *pidfds], [], [], 0.2)
        except InterruptedError:
            pass
        try:
            while os.read(wake_read, 512):
                pass
        except BlockingIOError:
            pass
        reap()
        if not watched_alive():
            orphaned()
        if server is None and stop_requested:
            os._exit(0)
        if server in exits:
            kill_descendants()
            status = exits[server]
            os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


#: Carries the watchdog's program (see :func:`start_watched`).
_WATCHDOG_ENV = "AUTOTUNE_TEST_WATCHDOG_PROGRAM"


def _watched_pids() -> list[int]:
    """This process, and under pytest-xdist its parent too: killing the controller ends the
    session even where a worker lingers."""
    return [os.getpid(), *([os.getppid()] if os.environ.get("PYTEST_XDIST_WORKER") else [])]


def start_watched(
    command: Sequence[str] | None,
    *,
    env: Mapping[str, str],
    cleanup: Sequence[Sequence[str]] = (),
    remove: Sequence[str | Path] = (),
    **popen: object,
) -> subprocess.Popen:
    """Start ``command`` under a watchdog (:func:`_watchdog`) that kills it and all it starts
    when this process is gone, even killed with SIGKILL.

    The watchdog is returned; it leads a new session and process group, which the server joins,
    so ``os.killpg(proc.pid, SIGTERM)`` stops the server as before, and ``proc`` exits with the
    server's code once the server has exited. With ``command=None`` it only waits to run
    ``cleanup`` and delete ``remove`` after this process is gone; SIGTERM it when done.
    ``popen`` goes to :class:`subprocess.Popen` (stdout, stderr...).
    """
    config = {
        "watch": _watched_pids(),
        "command": None if command is None else list(command),
        "cleanup": [list(argv) for argv in cleanup],
        "remove": [str(f) for f in remove],
    }
    program = f"{inspect.getsource(_watchdog)}\nimport sys\n_watchdog(sys.argv[1])\n"
    # The program travels in the environment, and leaves it before the server starts: ps then
    # shows a short command line, with the server's in the config. -I: only the standard
    # library, whatever PYTHONPATH the server's environment sets.
    return subprocess.Popen(
        [sys.executable, "-I", "-c", f"import os; exec(os.environ.pop({_WATCHDOG_ENV!r}))", json.dumps(config)],
        env={**env, _WATCHDOG_ENV: program},
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        **popen,
    )


def _process_identity(pid: int) -> str | None:
    """``<boot id>/<pid namespace>/<pid>/<start time>``, which names one process for as long as
    the machine runs (a reused pid starts later); None where ``pid`` is not running (or there
    is no /proc)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.stat("/proc/self/ns/pid")
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    start = stat.rsplit(")", 1)[1].split()[19]  # field 22, counted from the state (field 3)
    return f"{boot}/{namespace.st_dev}:{namespace.st_ino}/{pid}/{start}"


#: A test database's comment: this, then the identity of the process that created it.
_CREATED_BY = "autotune test database, created by "


def _database_name(url: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    return conninfo_to_dict(url)["dbname"]


@dataclass(frozen=True)
class PgServer:
    """A PostgreSQL server that trusts ``user`` without a password.

    Example:
        >>> server = PgServer("127.0.0.1", 5432)
        >>> url = server.create_database()  # postgresql://postgres@127.0.0.1:5432/autotune_1f...
        >>> server.drop_database(url)
    """

    host: str
    port: int
    user: str = "postgres"

    def url(self, database: str) -> str:
        """The SQLAlchemy URL of ``database`` on this server."""
        return f"postgresql://{self.user}@{self.host}:{self.port}/{database}"

    def connect(self, database: str = "postgres"):
        """An autocommit connection: CREATE and DROP DATABASE refuse to run in a transaction."""
        import psycopg

        return psycopg.connect(
            host=self.host, port=self.port, user=self.user, dbname=database, autocommit=True, connect_timeout=10
        )

    def problem(self) -> str | None:
        """Why this server cannot be used, or None when it answers a query."""
        import psycopg

        try:
            with self.connect() as conn:
                conn.execute("SELECT 1")
        except psycopg.OperationalError as error:
            return f"PostgreSQL on {self.host}:{self.port} did not answer: {str(error).strip()}"
        return None

    def create_database(self) -> str:
        """Create an empty database named ``autotune_<random hex>``; return its URL.

        Its comment names this process, for :meth:`drop_stale_databases` to drop it should this
        process be killed before it drops it.
        """
        from psycopg import sql

        name = f"autotune_{uuid.uuid4().hex[:12]}"
        creator = _process_identity(os.getpid())
        with self.connect() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            if creator is not None:
                conn.execute(
                    sql.SQL("COMMENT ON DATABASE {} IS {}").format(
                        sql.Identifier(name), sql.Literal(_CREATED_BY + creator)
                    )
                )
        return self.url(name)

    def drop_stale_databases(self) -> list[str]:
        """Drop the test databases whose creator is gone: killed before it dropped them.

        Only those created by a process of this machine and pid namespace (the one in their
        comment, see :meth:`create_database`) that no longer runs; others' are left alone.
        FORCE: a leftover server of the dead process may still hold connections.

        Returns:
            The names of the databases dropped.
        """
        import psycopg
        from psycopg import sql

        mine = _process_identity(os.getpid())
        if mine is None:
            return []
        here = mine.rsplit("/", 2)[0]
        with self.connect() as conn:
            rows = conn.execute("SELECT datname, shobj_description(oid, 'pg_database') FROM pg_database").fetchall()
        stale = []
        for name, comment in rows:
            if not (comment or "").startswith(_CREATED_BY):
                continue
            creator = comment[len(_CREATED_BY) :]
            where, _, rest = creator.rpartition("/")[0].rpartition("/")
            if where != here or not rest.isdigit():
                continue  # another machine's or container's: whether it runs is not known here
            if _process_identity(int(rest)) != creator:
                stale.append(name)
        dropped = []
        for name in stale:
            # Another session may drop it at the same time.
            with contextlib.suppress(psycopg.Error), self.connect() as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
                dropped.append(name)
        return dropped

    def drop_database(self, url: str) -> None:
        """Drop the database at ``url``, closing whatever still holds a connection to it.

        FORCE (PostgreSQL 13+) because tuner subprocesses or a server may still be connected.
        """
        from psycopg import sql

        with self.connect() as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(_database_name(url))))


@contextlib.contextmanager
def fresh_database(server: PgServer) -> Iterator[str]:
    """The URL of a new empty database on ``server``, dropped on exit."""
    url = server.create_database()
    try:
        yield url
    finally:
        server.drop_database(url)


class PrivateCluster:
    """A throwaway PostgreSQL cluster in a folder of its own, on a free port.

    initdb refuses to run as root, so as root every command runs as the ``postgres`` OS user.
    pg_ctl detaches the server from this process; a watchdog (:func:`start_watched`) stops it
    (immediate) and deletes the folder if this process dies before ``stop()``.

    Args:
        env: The environment of ``initdb``, ``pg_ctl`` and so of the server they start.
    """

    def __init__(self, env: Mapping[str, str]):
        self.env = dict(env)
        self.port = free_port()
        self.folder: Path | None = None
        self._as_user: list[str] = []
        self._reaper: subprocess.Popen | None = None

    def problem(self) -> str | None:
        """Why this cluster cannot be started here, or None."""
        if not (shutil.which("initdb") and shutil.which("pg_ctl")):
            return "initdb and pg_ctl are not on PATH"
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                return "initdb refuses to run as root and there is no 'postgres' user to run it as"
            if not shutil.which("runuser"):
                return "initdb refuses to run as root and runuser is missing to run it as postgres"
        return None

    def start(self) -> PgServer:
        """initdb, then start the server and wait until it accepts connections."""
        # Not under pytest's basetemp: its pytest-of-<user> folder is private to us, and as
        # root the server runs as 'postgres', which must reach the data folder.
        self.folder = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.folder, user.pw_uid, user.pw_gid)
            self._as_user = ["runuser", "-u", "postgres", "--"]
        data = self.folder / "data"
        # Before initdb: a process killed at any point leaves neither the server nor the folder.
        self._reaper = start_watched(
            None,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cleanup=[[*self._as_user, "pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop"]],
            remove=[self.folder],
        )
        self._run("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
        # The socket goes in the folder: the default /var/run/postgresql may not be writable.
        options = f"-p {self.port} -k {self.folder} -c listen_addresses={PG_HOST} -c fsync=off"
        self._run(
            "pg_ctl", "-D", str(data), "-l", str(self.folder / "server.log"), "-w", "-t", "90", "-o", options, "start"
        )
        return PgServer(PG_HOST, self.port)

    def restart(self, down_s: float = 0.0) -> None:
        """Stop the server (as an operator's restart does: clients are cut off), stay down
        ``down_s`` seconds, start it again on the same port and data."""
        data = self.folder / "data"
        self._run("pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop")
        time.sleep(down_s)
        options = f"-p {self.port} -k {self.folder} -c listen_addresses={PG_HOST} -c fsync=off"
        self._run(
            "pg_ctl", "-D", str(data), "-l", str(self.folder / "server.log"), "-w", "-t", "90", "-o", options, "start"
        )

    def stop(self) -> None:
        """Stop the server at once and delete the folder; a no-op if never started."""
        if self.folder is None:
            return
        data = self.folder / "data"
        if (data / "postmaster.pid").exists():
            # immediate: the data is thrown away, so a clean shutdown buys nothing.
            self._run("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None
        if self._reaper is not None:  # nothing left for it to do
            self._reaper.terminate()
            self._reaper.wait()
            self._reaper = None

    def _run(self, *command: str) -> None:
        done = subprocess.run([*self._as_user, *command], env=self.env, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            log = self.folder / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}{done.stderr}{tail}")


def _without_test_tag(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without conftest's per-test tag, for processes that outlive one test.

    The autouse ``no_process_left_behind`` fails a test whose tagged processes are still
    alive; a session-scoped server is meant to be, so it must not carry the tag of the test
    that happened to start it.
    """
    from conftest import TAG  # at call time: conftest imports this module

    return {key: value for key, value in env.items() if key != TAG}


class MlflowServer:
    """A real ``mlflow server`` subprocess on 127.0.0.1 with one worker.

    Runs are stored in ``backend_uri``; artifacts are proxied (``--serve-artifacts``) into
    ``folder/artifacts``, so clients log them over HTTP as they would to a team's server. Its
    output goes to ``folder/mlflow-server.log``. ``stop()`` then ``start()`` brings it back on
    the same port with the same stores.

    Args:
        backend_uri: SQLAlchemy URL of the tracking store.
        folder: Folder for the artifacts and the log.
        env: Environment of the server; this process's by default.
        ready_timeout: Seconds ``start()`` waits for the server to answer an API call.

    Example:
        >>> server = MlflowServer(url, tmp_path)
        >>> server.start()
        >>> MlflowClient(tracking_uri=server.url).create_experiment("x")
        >>> server.stop()
    """

    def __init__(
        self, backend_uri: str, folder: Path, *, env: Mapping[str, str] | None = None, ready_timeout: float = 90.0
    ):
        self.backend_uri = backend_uri
        self.folder = Path(folder)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = self.folder / "mlflow-server.log"
        self.ready_timeout = ready_timeout
        self.env = {
            **(os.environ if env is None else env),
            "MLFLOW_DISABLE_TELEMETRY": "true",
            # Else it also starts a huey job consumer (for GenAI jobs) we never use.
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
            "PYTHONUNBUFFERED": "1",
        }
        self._proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        """The command line that starts the server."""
        return [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            self.backend_uri,
            "--serve-artifacts",
            "--artifacts-destination",
            str(self.folder / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            # Its default is 4 uvicorn workers, each importing mlflow: slow on 2 cores.
            "--workers",
            "1",
        ]

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Start the server and wait until it answers; raise with the log's tail if it does not."""
        if self.running:
            raise RuntimeError(f"mlflow server on {self.url} is already running")
        self.folder.mkdir(parents=True, exist_ok=True)
        with self.log.open("a") as log:
            log.write(f"--- {time.strftime('%H:%M:%S')} start: {' '.join(self.command())}\n")
            log.flush()
            # Under a watchdog that leads a session and process group of its own, which the
            # server and its uvicorn child join: stop() signals them all, and they die with
            # this process even if it is killed.
            self._proc = start_watched(self.command(), env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def stop(self) -> None:
        """Terminate the server's whole process group and wait for it; a no-op if not running.

        The watchdog ignores the SIGTERM and exits once the server has.
        """
        if self._proc is None:
            return
        pgid = self._proc.pid  # the watchdog leads the session: its pid is the group id
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        # SIGKILL whatever is left, the leader included if SIGTERM was not enough.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        self._proc.wait()
        self._proc = None

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the server's log."""
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def _wait_ready(self) -> None:
        # An API call rather than /health: it proves the worker reaches the tracking store.
        probe = f"{self.url}/api/2.0/mlflow/experiments/search?max_results=1"
        # No proxy: one set in the environment must not see a loopback probe.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                raise RuntimeError(f"mlflow server exited with {code} before it answered; log tail:\n{self.log_tail()}")
            try:
                with opener.open(probe, timeout=5) as response:
                    if response.status == 200:
                        return
            except OSError:  # refused, reset, timed out, or an HTTP error while it starts
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(
            f"mlflow server on {self.url} did not answer {probe} within"
            f" {self.ready_timeout:.0f} s; log tail:\n{self.log_tail()}"
        )


@contextlib.contextmanager
def running_mlflow_server(
    postgres: PgServer, folder: Path, env: Mapping[str, str] | None = None
) -> Iterator[MlflowServer]:
    """A started :class:`MlflowServer` on a fresh database; stopped and dropped on exit."""
    with fresh_database(postgres) as backend:
        server = MlflowServer(backend, folder, env=env)
        try:
            server.start()
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PgServer]:
    """The PostgreSQL server for this session: the machine's, else a private cluster."""
    machine = PgServer(PG_HOST, PG_PORT)
    problem = machine.problem()
    if problem is None:
        machine.drop_stale_databases()  # those of a session killed before its teardown
        yield machine
        return
    with socket.socket() as sock:
        sock.settimeout(3)
        answered = sock.connect_ex((PG_HOST, PG_PORT)) == 0
    if answered:  # something listens but will not serve us: a private cluster would hide that
        _unavailable(problem)
    cluster = PrivateCluster(_without_test_tag(os.environ))
    reason = cluster.problem()
    if reason is not None:
        _unavailable(f"nothing answers on {PG_HOST}:{PG_PORT} and no private cluster: {reason}")
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture
def postgres(postgres_server: PgServer) -> Iterator[str]:
    """URL of a fresh, empty database: ``postgresql://postgres@127.0.0.1:5432/autotune_<hex>``."""
    with fresh_database(postgres_server) as url:
        yield url


@pytest.fixture(scope="session")
def mlflow_server(postgres_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """One MLflow server for the session; tests share it, so they must not stop it."""
    with running_mlflow_server(
        postgres_server, tmp_path_factory.mktemp("mlflow-server"), env=_without_test_tag(os.environ)
    ) as server:
        yield server


@pytest.fixture
def own_mlflow_server(postgres_server: PgServer, tmp_path: Path) -> Iterator[MlflowServer]:
    """An MLflow server of this test's own, free to stop and restart."""
    # It keeps the test's tag: if stopping it left a process, no_process_left_behind says so.
    with running_mlflow_server(postgres_server, tmp_path / "mlflow-server") as server:
        yield server
