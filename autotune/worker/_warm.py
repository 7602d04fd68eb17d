"""A warm worker: one process per slot with torch imported, from which each trial is forked.

A trial used to pay for a new interpreter, autotune and ``import torch`` (1.7-2.1 s
of its 3.6-3.9 s fixed cost on a 2-core host, benchmarks/results/overhead.md),
every time. The tuner now starts one *warm worker* per slot
(``python -m autotune.worker._warm``): it imports torch and the worker's modules, never
touches CUDA, and waits. For each trial the tuner sends the worker's payload and
environment over a Unix socket, with the trial's log and event-pipe descriptors
(``SCM_RIGHTS``); the warm worker forks, and the child becomes a new session, takes
the descriptors, the environment and the working folder, reseeds Python's and
NumPy's generators (a fork would otherwise hand every trial the same streams) and
runs ``autotune.worker._trial_main.main`` as a cold worker would. The user's module and set-up
still run per trial, in the child. A trial that may run the code to its end is not forked: it is
timed as ``python train.py`` is, from a cold start (``autotune.machine._launch.launch``). The warm worker reaps the child and reports its
exit status, so the tuner sees the same return code as from ``subprocess.Popen``.

Tags: ``/proc/PID/environ`` shows the environment a process was *exec*'d with, so a
forked trial (and whatever it forks) carries the warm worker's tag there, not one
of its own. A warm worker therefore has a tag of the tuner's form
(``TUNERPID-...``), each of its trials uses that same tag, and after a trial the
tuner kills every process carrying it except the warm worker itself: with one
trial at a time per warm worker, those are that trial's leftovers. A warm worker
exits when its tuner closes the socket or dies (end of file), and the sweep for a
gone tuner's processes (``autotune.tuner._watch.sweep_orphans``) catches it as well.

A trial that sets an environment knob read when torch starts cannot be forked from
a process that has torch already: it is spawned cold (``takes``). So is every
trial when the warm worker could not start; nothing else changes.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

from autotune.machine._launch import worker_environ

#: Seconds a spawn waits for the warm worker to finish its imports before the trial
#: is spawned cold instead (the imports take 1-2 s; a warm worker this slow is not).
READY_TIMEOUT_S = 60.0
#: Environment variables whose value is read when an interpreter starts: a forked
#: child keeps the warm worker's, so a trial that wants others is spawned cold.
_AT_STARTUP = (
    "PYTHONPATH",
    "PYTHONHASHSEED",
    "PYTHONUNBUFFERED",
    "PYTHONOPTIMIZE",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONWARNINGS",
    "PYTHONSAFEPATH",
    "PYTHONNOUSERSITE",
    "PYTHONMALLOC",
    "PYTHONDEVMODE",
    "PYTHONFAULTHANDLER",
    "PYTHONIOENCODING",
    "PYTHONUTF8",
)


class WarmWorker:
    """The tuner's side of one warm worker (see the module's docstring).

    Start it early (its imports then overlap the tuner's own set-up); ``spawn`` waits
    for it to be ready. Not thread-safe: one slot, one trial at a time.

    Args:
        environ: The environment trials start from (the tuner's); the warm worker
            is started with it plus what every worker gets (``worker_environ``).
        tag: Its tag (``autotune.tuner._watch.TRIAL_TAG_ENV``), which its trials share.
        cpus: Its slot's CPUs (``autotune.machine._slots``): it pins itself to them before
            torch starts, and its trials inherit the mask when forked.
    """

    def __init__(self, environ: Mapping[str, str], tag: str, cpus: Sequence[int] = ()) -> None:
        self.tag = tag
        self.environ = worker_environ(environ, tag)
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = self._launch(theirs.fileno(), cpus)
        finally:
            theirs.close()
        self._ready: bool | None = None  # None: not heard from yet; False: unusable

    def _launch(self, fd: int, cpus: Sequence[int]) -> subprocess.Popen:
        """Start ``python -m autotune.worker._warm FD CPUS`` with ``self.environ``, the socket ``fd`` passed.

        What the tuner uses of the process: ``pid``, ``wait(timeout)``, ``kill()`` (the suite's
        tuners fork it from a template that has done the imports: tests/lib/forked_cli.py)."""
        return subprocess.Popen(
            [sys.executable, "-m", "autotune.worker._warm", str(fd), ",".join(map(str, cpus))],
            env=self.environ,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(fd,),
            start_new_session=True,
        )  # Ctrl-C is the tuner's to handle

    @property
    def pid(self) -> int:
        return self._proc.pid

    def takes(self, env: Mapping[str, str]) -> bool:
        """Whether a trial with environment ``env`` can be forked from this warm worker:
        what an interpreter reads when it starts (and torch when it is imported) is the
        same as the warm worker's."""
        from autotune.core._knobs import KNOBS

        startup = (*_AT_STARTUP, *(k.env_var for k in KNOBS.values() if k.env_var))
        return all(env.get(name) == self.environ.get(name) for name in startup)

    def spawn(self, payload: str, env: Mapping[str, str], log_fd: int, event_fd: int) -> ForkedTrial | None:
        """Fork a trial that runs ``autotune.worker._trial_main.main([payload])`` with ``env``, its
        stdout and stderr on ``log_fd`` and its events on ``event_fd``. None when the
        warm worker is not usable (it failed to start, or died): spawn the trial cold."""
        if not self._wait_ready():
            return None
        request = json.dumps({"payload": payload, "env": dict(env), "cwd": os.getcwd()}).encode()
        try:
            socket.send_fds(self._sock, [request], [log_fd, event_fd])
            reply = self._sock.recv(1 << 16)
        except OSError:
            reply = b""
        if not reply:
            self._ready = False
            return None
        return ForkedTrial(json.loads(reply)["pid"], self._sock)

    def _wait_ready(self) -> bool:
        if self._ready is None:
            ready, _, _ = select.select([self._sock], [], [], READY_TIMEOUT_S)
            try:
                said = json.loads(self._sock.recv(1 << 16) or b"{}") if ready else {}
            except (OSError, ValueError):
                said = {}
            self._ready = bool(said.get("ready", False))
        return self._ready

    def close(self) -> None:
        """End the warm worker (end of file on its socket; killed if it lingers)."""
        self._sock.close()
        try:
            self._proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


class ForkedTrial:
    """A forked trial as ``subprocess.Popen`` shows a child: ``pid``, ``poll``, ``wait``,
    ``returncode`` (negative: the signal that ended it)."""

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._sock = sock

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                self._settle(self._sock.recv(1 << 16, socket.MSG_DONTWAIT))
            except BlockingIOError:
                pass
            except OSError:
                self._settle(b"")
        return self.returncode

    def wait(self) -> int:
        while self.returncode is None:
            try:
                self._settle(self._sock.recv(1 << 16))
            except OSError:
                self._settle(b"")
        return self.returncode

    def _settle(self, reply: bytes) -> None:
        if reply:
            self.returncode = json.loads(reply)["exit"]
            return
        # The warm worker died (killed from outside) while the trial ran: its exit status
        # went with it. The tuner kills the trial's group; wait for it to be gone.
        while _alive(self.pid):
            time.sleep(0.01)
        self.returncode = -signal.SIGKILL


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


# --- the warm worker itself -------------------------------------------------------


def _serve(sock: socket.socket, cpus: set[int]) -> None:
    """Pin to ``cpus`` (if any), import what every trial needs, say ready, then fork a trial
    per request, one at a time, until the tuner closes the socket."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    import torch  # noqa: F401  (the point: paid once, not per trial)

    # A training function's first optimizer imports torch._dynamo (about 1.1 s on a 2-core
    # host, torch 2.13): importing it here takes that out of every trial's set-up too.
    import torch._dynamo  # noqa: F401

    import autotune.worker._trial  # noqa: F401
    import autotune.worker._trial_main  # noqa: F401

    sock.send(json.dumps({"ready": True}).encode())
    while True:
        try:
            request, fds, _, _ = socket.recv_fds(sock, 1 << 20, 2)
        except OSError:
            return
        if not request:
            return  # the tuner closed the socket, or died
        pid = os.fork()
        if pid == 0:
            _child(sock, json.loads(request), fds)  # never returns
        for fd in fds:
            os.close(fd)
        sock.send(json.dumps({"pid": pid}).encode())
        code = _reap(pid, sock)
        if code is None:
            return  # the tuner is gone; the trial's group is the orphan sweep's to kill
        sock.send(json.dumps({"exit": code}).encode())


def _reap(pid: int, sock: socket.socket) -> int | None:
    """Wait for the child; its exit code as Popen gives it, or None if the tuner went away first."""
    waiter = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
    try:
        while True:
            readable, _, _ = select.select(
                [sock] + ([waiter] if waiter is not None else []), [], [], None if waiter is not None else 0.05
            )
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            if sock in readable and not sock.recv(1 << 16):  # nothing is sent mid-trial but the end
                return None
    finally:
        if waiter is not None:
            os.close(waiter)


def _child(sock: socket.socket, request: dict, fds: Sequence[int]) -> None:
    """In the forked trial: become what ``subprocess.Popen`` would have started, then run."""
    code = 1
    try:
        sock.close()
        os.setsid()
        log_fd, event_fd = fds
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(null)
        os.close(log_fd)
        os.set_inheritable(event_fd, True)  # as pass_fds leaves it for a cold worker
        env = dict(request["env"])
        from autotune.core._events import FD_ENV

        env[FD_ENV] = str(event_fd)
        os.environ.clear()
        os.environ.update(env)
        os.chdir(request["cwd"])
        _reseed()
        sys.argv = [sys.argv[0], request["payload"]]
        from autotune.worker._trial_main import _stopped, main

        code = main([request["payload"]])
        if not _stopped:  # the code ended by itself: its exit as the interpreter's shutdown begins it
            _shut_down()
    except BaseException:  # never back into the warm worker's loop
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _shut_down() -> None:
    """What the interpreter's normal shutdown does before its teardown, for a forked trial whose code
    ended by itself (one that may run whole starts cold and exits for real): the code's non-daemon
    threads joined, its ``atexit`` handlers run, its unreachable objects finalized (a file it never
    closed is flushed). A fork cannot leave by ``sys.exit``: it would unwind into the warm worker's loop."""
    import atexit
    import gc
    import threading

    threading._shutdown()  # type: ignore[attr-defined]  # private: what Py_FinalizeEx calls first
    atexit._run_exitfuncs()
    gc.collect()


def _reseed() -> None:
    """Fresh seeds for Python's and NumPy's global generators, as a new interpreter has."""
    import random

    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


if __name__ == "__main__":
    _serve(socket.socket(fileno=int(sys.argv[1])), {int(c) for c in sys.argv[2].split(",") if c})
    os._exit(0)
