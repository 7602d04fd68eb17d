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

A forked process's ``/proc/PID/environ`` shows the template's environment, not its own (the
kernel shows the block a process was exec'd with): :func:`alive` lists the forked commands still
running, for the suite's check that a test left no process behind.
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
import weakref

#: Variables read when the interpreter starts or when the template's modules are imported: a
#: command whose environment differs from the template's in one of these starts as a real
#: subprocess.
STARTUP_PREFIXES = ("PYTHON", "LC_", "LANG", "LD_", "MALLOC_", "TZ", "OMP_", "OPENBLAS_", "MKL_",
                    "MPL", "MLFLOW_CONFIGURE_LOGGING", "MLFLOW_LOGGING", "MLFLOW_DISABLE_TELEMETRY",
                    "DO_NOT_TRACK", "SQLALCHEMY", "AUTOTUNE_TEST_FORK")
#: The template's program.
TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cli_template.py")
_started: weakref.WeakSet[ForkedCLI] = weakref.WeakSet()
_template: _Template | None = None
_template_lock = threading.Lock()


def _startup(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES)}


def forkable(argv, *, env=None, stdin=None, **kwargs) -> bool:
    """Whether ``argv`` (``helpers.cli``'s) can run as a fork of the template: the ``autotune``
    module with no prefix, nothing on stdin, no terminal on its streams, only ``cwd``/``env``/
    ``stdout``/``stderr``/``text`` given, an environment the template's agrees with at start."""
    if os.environ.get("AUTOTUNE_TEST_FORK") == "0":
        return False
    if list(argv[:3]) != [sys.executable, "-m", "autotune"] or stdin not in (None, subprocess.DEVNULL):
        return False
    if set(kwargs) - {"cwd", "stdout", "stderr", "text"}:
        return False
    for stream in (kwargs.get("stdout"), kwargs.get("stderr")):
        fd = stream if isinstance(stream, int) and stream >= 0 else getattr(stream, "fileno", lambda: None)()
        if fd is not None and os.isatty(fd):
            return False
    return _startup(os.environ if env is None else env) == _startup(_template_env())


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


def alive(variable: str, value: str) -> list[int]:
    """The pids of the forked commands not yet reaped that were given ``variable=value`` (one that
    has exited may still be a zombie for a moment, until the template reaps it)."""
    return [proc.pid for proc in list(_started) if proc.env.get(variable) == value and proc.poll() is None]


class ForkedCLI:
    """The part of ``subprocess.Popen``'s interface the tests use, for a command forked from the
    template: ``pid``, ``args``, ``returncode``, ``stdout``/``stderr`` (with ``PIPE``), ``poll``,
    ``wait``, ``communicate``, ``send_signal``/``terminate``/``kill`` (through a pidfd: a pid the
    kernel reused is never signalled), and ``with``."""

    def __init__(self, argv, *, cwd=None, env=None, stdout=None, stderr=None, text: bool = False, stdin=None) -> None:
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
            request = {"args": self.args[3:], "cwd": os.path.abspath(cwd or os.getcwd()), "env": self.env}
            self._conn, self.pid, self._pidfd = _template_of().spawn(request, theirs)
        except BaseException:
            for stream in (self.stdout, self.stderr):
                if stream is not None:
                    stream.close()
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        _started.add(self)

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
        for signal N, as ``Popen.returncode``."""
        if self.returncode is None and select.select([self._conn], [], [], timeout)[0]:
            line = b""
            while not line.endswith(b"\n"):
                chunk = self._conn.recv(64)
                if not chunk:
                    raise RuntimeError(f"the template process died before pid {self.pid} exited")
                line += chunk
            self.returncode = int(line)
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
        for name, (reader, _) in self._output.items():
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
        if self.poll() is None:
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:
                pass  # it exited since the poll

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Template:
    """The template process (tests/cli_template.py) and the Unix socket it listens on."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="autotune-template-")
        self.path = os.path.join(self.folder, "socket")
        self.log = open(os.path.join(self.folder, "log"), "w")
        self.proc = subprocess.Popen([sys.executable, TEMPLATE, self.path], env=_template_env(), cwd=self.folder,
                                     stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        ready = os.path.join(self.folder, "ready")
        while not os.path.exists(ready):
            if self.proc.poll() is not None:
                raise RuntimeError(f"the template process exited: {open(self.log.name).read()}")
            select.select([], [], [], 0.05)

    def spawn(self, request: dict, fds: list[int]):
        """Asks for a fork that runs ``request`` with ``fds`` as its stdin, stdout and stderr:
        the connection its exit code comes back on, its pid, a pidfd of it."""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.path)
            body = json.dumps(request).encode()
            socket.send_fds(conn, [len(body).to_bytes(8, "big")], fds)
            conn.sendall(body)
            data, pidfds, _, _ = socket.recv_fds(conn, 64, 1)
            if not data.endswith(b"\n") or len(pidfds) != 1:
                raise RuntimeError(f"the template did not start the command: {data!r}")
            return conn, int(data), pidfds[0]
        except BaseException:
            conn.close()
            raise

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.log.close()
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)


def _template_of() -> _Template:
    global _template
    with _template_lock:
        if _template is None or _template.proc.poll() is not None:
            import atexit

            _template = _Template()
            atexit.register(_template.stop)
        return _template
