"""The ``autotune`` command in processes forked from a template that has done its imports.

Each ``python -m autotune run`` the suite starts spent about 4.6 s of CPU before its first trial
on the 2-core CI machine (2026-11-28, a slow day), most of it importing MLflow, Optuna,
SQLAlchemy, alembic and matplotlib: 58 tuners, 268 s of a suite's 1,200 s of CPU. Here one
template process per pytest process imports them once, and each command is a ``fork()`` of it
that then runs the command exactly as ``python -m autotune`` runs it (``runpy``, ``__main__``):
its own pid, working folder, environment, argv and standard streams, its own children, its exit
status or signal. Only the interpreter's start and the imports are shared.

Where a fork could differ from a new interpreter, the command starts as a real subprocess
instead (:func:`forkable`): a prefix (``taskset``), a terminal, input on stdin, or an environment
that differs in a variable read at start or at import (``PYTHON*``, locale, ``LD_*``, thread
counts, MLflow's logging and telemetry). ``AUTOTUNE_TEST_FORK=0`` starts every command as a
real subprocess, and tests of the interpreter's start (the installed ``autotune`` script, a
script's imports) run one regardless.

The tuners forked so also fork their warm workers (``autotune.worker._warm``, one per study's slot) from
a second template, which has imported torch and torch._dynamo once (:func:`fork_warm_workers`):
each warm worker a tuner starts spent about 4.2 s of CPU importing them on a slow day of the 2-core
CI host, 300 s of a suite's 1,100 s (71 warm workers, most serving 1-3 trials). A warm worker is
started as a real process where its environment differs from that template's (but in the tags
and other ``AUTOTUNE_``, ``MLFLOW_`` and ``PYTEST_`` variables, which neither torch nor the warm
worker reads at start), and in the tests of the warm worker itself (tests/process/test_warm.py
starts its own). A warm worker pinned to some of the CPUs (a ``--jobs`` slot's) is forked too and
pins itself there: torch sized its intra-op pool for the template's CPUs when imported (2 where
a process pinned first gets 1), but a pinned trial sets its threads to its CPUs itself
(``autotune.worker._trial_main``), so its trials run as a real warm worker's do.

A forked process writes its environment into the block ``/proc/PID/environ`` shows
(``cli_template.show_environ``), so that a test's tag and a trial's tag find it as they find a
process exec'd with them.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading

#: Variables read when the interpreter starts or when the template's modules are imported: a
#: command whose environment differs from the template's in one of these starts as a real
#: subprocess.
STARTUP_PREFIXES = (
    "PYTHON",
    "LC_",
    "LANG",
    "LD_",
    "MALLOC_",
    "TZ",
    "OMP_",
    "OPENBLAS_",
    "MKL_",
    "MPL",
    "MLFLOW_CONFIGURE_LOGGING",
    "MLFLOW_LOGGING",
    "MLFLOW_DISABLE_TELEMETRY",
    "DO_NOT_TRACK",
    "SQLALCHEMY",
    "AUTOTUNE_TEST_FORK",
)
#: The template's program.
TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cli_template.py")
#: Where a forked tuner finds the warm workers' template (its folder): set in the forked commands'
#: environment.
WARM_ENV = "AUTOTUNE_TEST_WARM_TEMPLATE"
#: Variables of a warm worker's environment that may differ from its template's: read neither by
#: the interpreter nor by torch when they start, nor by the warm worker before a trial.
WARM_FREE = ("AUTOTUNE_", "MLFLOW_", "PYTEST_")
#: How long a tuner waits for the warm workers' template to be ready before it starts a warm
#: worker as a real process (which would import as long).
WARM_READY_S = 60.0
#: The variable a template is started with last, and its size: the room for a forked process's
#: environment (cli_template.show_environ).
PAD, PAD_BYTES = "AUTOTUNE_TEST_TEMPLATE_PAD", 1 << 16
_templates: dict[str, _Template] = {}
_template_lock = threading.Lock()


def _startup(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES)}


def forkable(argv, *, env=None, stdin=None, **kwargs) -> bool:
    """Whether ``argv`` (``helpers.cli``'s) can run as a fork of the template: the ``autotune``
    module with no prefix, not ``exec`` (the script it runs exits as Python exits, which a fork of
    the template cannot), nothing on stdin, no terminal on its streams, only ``cwd``/``env``/
    ``stdout``/``stderr``/``text`` given, an environment the template's agrees with at start."""
    if os.environ.get("AUTOTUNE_TEST_FORK") == "0":
        return False
    if list(argv[:3]) != [sys.executable, "-m", "autotune"] or stdin not in (None, subprocess.DEVNULL):
        return False
    if "exec" in argv[3:4]:  # the user's script ends through the interpreter's shutdown, which a fork ends by os._exit
        return False
    if set(kwargs) - {"cwd", "stdout", "stderr", "text"}:
        return False
    for stream in (kwargs.get("stdout"), kwargs.get("stderr")):
        fd = stream if isinstance(stream, int) and stream >= 0 else getattr(stream, "fileno", lambda: None)()
        if fd is not None and os.isatty(fd):
            return False
    env = os.environ if env is None else env
    return _fits(env) and _startup(env) == _startup(_template_of("cli").env)


def _fits(env) -> bool:
    """Whether ``env`` fits the block a forked process writes its environment into (cli_template);
    False where a name or value cannot be sent as JSON text (not UTF-8: a real process takes it)."""
    try:
        return sum(len(f"{k}={v}".encode()) + 1 for k, v in env.items()) < PAD_BYTES
    except UnicodeEncodeError:
        return False


def _template_env() -> dict:
    """The commands' environment without the test's tag (conftest.TAG): the template outlives
    the test that starts it, and is no test's leftover."""
    from helpers import cli_env

    return {k: v for k, v in cli_env().items() if k != "AUTOTUNE_TEST_TAG"}


def popen(argv, **kwargs):
    """``subprocess.Popen(argv, **kwargs)``, as a fork of the template where :func:`forkable`."""
    if forkable(argv, **kwargs):
        return ForkedCLI(argv, **kwargs)
    return subprocess.Popen(argv, **kwargs)


def run(argv, *, timeout: float | None = None, capture_output: bool = False, check: bool = False, **kwargs):
    """``subprocess.run(argv, ...)``, as a fork of the template where :func:`forkable`."""
    if capture_output:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if not forkable(argv, **kwargs):
        return subprocess.run(argv, timeout=timeout, check=check, **kwargs)
    with ForkedCLI(argv, **kwargs) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    done = subprocess.CompletedProcess(argv, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


class ForkedCLI:
    """The part of ``subprocess.Popen``'s interface the tests use, for a command forked from the
    template: ``pid``, ``args``, ``returncode``, ``stdout``/``stderr`` (with ``PIPE``), ``poll``,
    ``wait``, ``communicate``, ``send_signal``/``terminate``/``kill`` (through a pidfd: a pid the
    kernel reused is never signalled), and ``with``."""

    def __init__(
        self,
        argv,
        *,
        cwd=None,
        env=None,
        stdout=None,
        stderr=None,
        text: bool = False,
        stdin=None,
        pass_fds=(),
        start_new_session: bool = False,
        template: str | None = None,
    ) -> None:
        self.args, self.returncode = list(argv), None
        self.stdout = self.stderr = None
        self._output: dict[str, list] = {}
        theirs: list[int] = []  # what the child gets as its fds 0-2
        try:
            theirs.append(os.open(os.devnull, os.O_RDONLY))
            for name, stream in (("stdout", stdout), ("stderr", stderr)):
                if stream == subprocess.PIPE:
                    read, write = os.pipe()
                    setattr(self, name, open(read, "r" if text else "rb"))  # ours: the read end
                    theirs.append(write)
                elif stream == subprocess.STDOUT:
                    theirs.append(os.dup(theirs[1]))
                elif stream == subprocess.DEVNULL:
                    theirs.append(os.open(os.devnull, os.O_WRONLY))
                elif stream is None:
                    theirs.append(os.dup(1 if name == "stdout" else 2))
                else:
                    theirs.append(os.dup(stream if isinstance(stream, int) else stream.fileno()))
            self.env = dict(os.environ if env is None else env)
            request = {
                "module": self.args[2],
                "args": self.args[3:],
                "cwd": os.path.abspath(cwd or os.getcwd()),
                "env": self.env,
                "setsid": start_new_session,
                "fd_arg": None,
            }
            for fd in pass_fds:  # (one at most: the template takes a fourth fd, named in the args)
                request["fd_arg"] = request["args"].index(str(fd))
                theirs.append(os.dup(fd))
            if template is None:
                template = _template_of("cli").path
                request["env"] = {**self.env, WARM_ENV: _template_of("warm").folder}
            self._conn, self.pid, self._pidfd = _spawn(template, request, theirs)
        except BaseException:
            for stream in (self.stdout, self.stderr):
                if stream is not None:
                    stream.close()
            raise
        finally:
            for fd in theirs:
                os.close(fd)

    def __enter__(self) -> ForkedCLI:
        return self

    def __exit__(self, *exc) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()

    def __del__(self) -> None:
        if getattr(self, "_pidfd", None) is not None:  # (None where the start failed)
            os.close(self._pidfd)
            self._pidfd = None

    def poll(self) -> int | None:
        return self._wait(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._wait(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return code

    def _wait(self, timeout: float | None) -> int | None:
        """The exit code the template sends when it reaps the process: N for ``exit(N)``, -N
        for signal N, as ``Popen.returncode``. Where the template died first, its exit code went
        with it: the process is waited for through its pidfd and reads as killed (-9), as
        ``autotune.worker._warm.ForkedTrial`` reads a trial whose warm worker died."""
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        if self.returncode is None and select.select([self._conn], [], [], timeout)[0]:
            line = b""
            while not line.endswith(b"\n"):
                chunk = self._conn.recv(64)
                if not chunk:
                    break
                line += chunk
            if line.endswith(b"\n"):
                self.returncode = int(line)
            elif select.select(
                [self._pidfd], [], [], None if deadline is None else max(0.0, deadline - time.monotonic())
            )[0]:  # (readable once it has exited)
                self.returncode = -signal.SIGKILL
            else:
                return None
            self._conn.close()
        return self.returncode

    def communicate(self, input=None, timeout: float | None = None):
        """Reads stdout and stderr (those that are ``PIPE``) to their ends, then waits."""
        if input:
            raise ValueError("a forked command takes nothing on stdin")
        for name in ("stdout", "stderr"):
            stream = getattr(self, name)
            if stream is not None and name not in self._output:
                box: list = []
                reader = threading.Thread(target=lambda s=stream, b=box: b.append(s.read()), daemon=True)
                reader.start()
                self._output[name] = [reader, box]
        for reader, _ in self._output.values():
            reader.join(timeout)  # (a timeout per stream: the whole can take twice, as Popen's can)
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(timeout)
        said = {}
        for name in ("stdout", "stderr"):
            if name in self._output:
                said[name] = self._output[name][1][0]
                getattr(self, name).close()
        return said.get("stdout"), said.get("stderr")

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:  # (a pidfd never signals a pid the kernel reused)
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:
                pass  # it has exited

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Template:
    """A template process (tests/lib/cli_template.py, in ``role``) and its folder: the Unix socket it
    listens on, ``env.json`` (its environment), ``pid`` (written before anyone can read the
    folder's name) and ``ready`` (once it listens)."""

    def __init__(self, role: str) -> None:
        self.folder = tempfile.mkdtemp(prefix=f"autotune-template-{role}-")
        self.path = os.path.join(self.folder, "socket")
        self.log = open(os.path.join(self.folder, "log"), "w")
        self.env = _template_env() if role == "cli" else _warm_template_env()
        with open(os.path.join(self.folder, "env.json"), "w") as saved:
            json.dump(self.env, saved)
        self.proc = subprocess.Popen(
            [sys.executable, TEMPLATE, self.path, role],
            env={**self.env, PAD: "x" * PAD_BYTES},
            cwd=self.folder,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        with open(os.path.join(self.folder, "pid.tmp"), "w") as pid:
            pid.write(str(self.proc.pid))
        os.rename(os.path.join(self.folder, "pid.tmp"), os.path.join(self.folder, "pid"))

    def wait_ready(self) -> None:
        if not _ready(self.folder, 600):
            raise RuntimeError(f"the template process exited: {open(self.log.name).read()}")

    def failed(self) -> bool:
        """Whether it exited before it was ready (``ready`` stays until ``stop``): it would again, so
        it is not started again."""
        return self.proc.poll() is not None and not os.path.exists(os.path.join(self.folder, "ready"))

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.log.close()
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)


def _ready(folder: str, timeout: float) -> bool:
    """Wait until the template in ``folder`` listens; False at once if it has exited (its ``pid``,
    through a pidfd, which works from any process: a forked tuner is not its parent) or its folder
    is gone, False on timeout."""
    import time

    ready, deadline = os.path.join(folder, "ready"), time.monotonic() + timeout
    try:
        with open(os.path.join(folder, "pid")) as saved:
            pidfd = os.pidfd_open(int(saved.read()))
    except (OSError, ValueError):
        return False  # (its folder is gone, or the process is: nothing to wait for)
    try:
        while not os.path.exists(ready):
            if select.select([pidfd], [], [], 0.05)[0] or time.monotonic() > deadline:
                return os.path.exists(ready)  # (readable: it exited, or is a zombie not yet reaped)
        return True
    finally:
        os.close(pidfd)


class NotStarted(RuntimeError):
    """The template started no process for the request: it could not be reached, or it answered
    that the command could not be set up (and reaped what it forked)."""


def _spawn(path: str, request: dict, fds: list[int]):
    """Asks the template listening on ``path`` for a fork that runs ``request`` with ``fds`` as its
    stdin, stdout and stderr (and the fd to pass): the connection its exit code comes back on, its
    pid, a pidfd of it. Raises :class:`NotStarted` where no process runs for it; any other error
    where one may (its answer was lost)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        body = json.dumps(request).encode()
        try:
            conn.connect(path)
            socket.send_fds(conn, [len(body).to_bytes(8, "big")], fds)
            conn.sendall(body)
        except OSError as exc:
            raise NotStarted(f"the template at {path} could not be asked: {exc}") from exc
        data, pidfds, _, _ = socket.recv_fds(conn, 64, 1)
        if not data:  # (it closes the connection when the set-up fails, after reaping the fork)
            raise NotStarted(f"the template did not start the command: see {os.path.dirname(path)}/log")
        if not data.endswith(b"\n") or len(pidfds) != 1:
            raise RuntimeError(f"the template's answer is incomplete: {data!r}, {len(pidfds)} pidfds")
        return conn, int(data), pidfds[0]
    except BaseException:
        conn.close()
        raise


def _template_of(role: str) -> _Template:
    """This process's template in ``role``, started if none runs; the ``cli`` one ready. (The
    ``warm`` one starts with the ``cli`` one: the tuners wait for it themselves.)"""
    with _template_lock:
        for name in ("cli", "warm"):
            if name not in _templates or (_templates[name].proc.poll() is not None and not _templates[name].failed()):
                import atexit

                _templates[name] = _Template(name)
                atexit.register(_templates[name].stop)
        if role == "cli":
            _templates[role].wait_ready()
        return _templates[role]


# --- the warm workers of forked tuners -----------------------------------------------------------


def _warm_template_env() -> dict:
    """The environment of the warm workers' template: a warm worker's (``worker_environ``) of a
    forked command's, without a tag."""
    from autotune.machine._launch import TRIAL_TAG_ENV, worker_environ

    env = worker_environ(_template_env(), "")
    del env[TRIAL_TAG_ENV]
    return env


def _warm_startup(env) -> dict:
    return {k: v for k, v in env.items() if not k.startswith(WARM_FREE)}


def fork_warm_workers(folder: str) -> None:
    """In a forked tuner: its warm workers are forks of the template in ``folder`` where they can
    be (the module's docstring), real processes elsewhere."""
    import autotune.worker._warm

    autotune.worker._warm.WarmWorker._launch = _forked_launch(folder, autotune.worker._warm.WarmWorker._launch)


def warm_worker(environ, tag: str):
    """A ``WarmWorker(environ, tag)`` forked from this process's template where it can be."""
    from autotune.worker._warm import WarmWorker

    if os.environ.get("AUTOTUNE_TEST_FORK") == "0":
        return WarmWorker(environ, tag)
    folder = _template_of("warm").folder
    forked = type("ForkedWarmWorker", (WarmWorker,), {"_launch": _forked_launch(folder, WarmWorker._launch)})
    return forked(environ, tag)


def _forked_launch(folder: str, launch):
    """``WarmWorker._launch`` as a fork of the template in ``folder``; ``launch`` where it cannot be."""

    def forked(worker, fd: int, cpus):
        if _warm_forkable(folder, worker.environ):
            try:
                return ForkedCLI(
                    [sys.executable, "-m", "autotune.worker._warm", str(fd), ",".join(map(str, cpus))],
                    env=worker.environ,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    pass_fds=(fd,),
                    start_new_session=True,
                    template=os.path.join(folder, "socket"),
                )
            except NotStarted:
                pass  # (the template died): a real process. (Where a fork may run, never a second.)
        return launch(worker, fd, cpus)

    return forked


def _warm_forkable(folder: str, env) -> bool:
    if os.environ.get("AUTOTUNE_TEST_FORK") == "0":
        return False
    try:
        with open(os.path.join(folder, "env.json")) as saved:
            template = json.load(saved)
    except OSError:
        return False
    if not _fits(env) or _warm_startup(env) != _warm_startup(template):
        return False
    return _ready(folder, WARM_READY_S)
