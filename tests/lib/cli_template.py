"""The template processes of tests/lib/forked_cli.py: ``python tests/lib/cli_template.py SOCKET ROLE``.

A template imports what its commands import (``PRELOAD[ROLE]``), listens on the Unix socket
``SOCKET``, and for each request (its length, then JSON: ``module``, ``args``, ``cwd``, ``env``,
``setsid``, ``fd_arg``; with three fds for stdin, stdout, stderr, and a fourth to pass) forks a
process that sets itself up as ``python -m MODULE ARGS`` would start, then runs it. The asker gets
the pid and a pidfd of it once it is set up, and its exit code (N, or -N for signal N, as
``Popen.returncode``) when this process reaps it. It ends within 1 s of its parent.

Roles: ``cli`` serves the ``autotune`` commands the tests run (what ``autotune run`` imports, but
torch); ``warm`` serves the warm workers of the tuners forked from a ``cli`` template
(``autotune.worker._warm``: torch, torch._dynamo and the trial's modules, 4.2 s of CPU a warm worker on a
slow day of the 2-core CI host, 71 of them a suite).

``/proc/PID/environ`` shows the block of memory a process was exec'd with, which a fork shares
with its template: each fork writes its own environment into that block (``show_environ``), so
that the tags a test or a tuner finds processes by (``AUTOTUNE_TEST_TAG``, a trial's tag) are
there, as in a process exec'd with them. The template is started with room for it at the end of its
environment (``forked_cli.PAD``).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import threading

#: What a template imports, by its role. ``cli``: what ``autotune run`` imports before its first
#: trial, but torch (which a tuner does not import: its trials and warm workers are other
#: interpreters). ``warm``: what ``autotune.worker._warm`` imports before it says it is ready.
PRELOAD = {
    "cli": (
        "autotune._cli",
        "autotune._api",
        "autotune.tuner._study",
        "mlflow",
        "mlflow.store.tracking.sqlalchemy_store",
        "mlflow.store.db.utils",
        "optuna",
        "optuna.storages.journal",
        "matplotlib.figure",
        "matplotlib.ticker",
        "matplotlib.backends.backend_agg",
    ),
    "warm": (
        "torch",
        "torch._dynamo",
        "autotune.worker._trial",
        "autotune.worker._trial_main",
        "autotune.worker._warm",
    ),
    "bare": (),  # (tests/process/test_forked_cli.py: a template to kill)
}


def _serve(path: str, role: str) -> None:
    import importlib

    parent = os.getppid()  # the pytest process: the loop below ends within 1 s of its end
    for name in PRELOAD[role]:
        importlib.import_module(name)
    if role == "cli":
        import forked_cli  # noqa: F401  (the warm workers' launcher, set in the forks: _set_up)
    if threading.active_count() > 1:  # (native pools, as OpenBLAS's, mend themselves at a fork)
        raise RuntimeError(f"threads after the imports, a fork would lose them: {threading.enumerate()}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    open(os.path.join(os.path.dirname(path), "ready"), "w").close()
    running: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, the asker's connection)
    while os.getppid() == parent:
        ready, _, _ = select.select([listener, *running], [], [], 1.0)
        for item in ready:
            if item is listener:
                conn, _ = listener.accept()
                try:
                    pid, pidfd = _fork(conn, listener, running)
                except Exception as exc:  # a bad request: that asker hears of it, the others go on
                    print(f"template: {exc!r}", flush=True)
                    conn.close()
                    continue
                running[pidfd] = (pid, conn)
            else:
                pid, conn = running.pop(item)
                _, status = os.waitpid(pid, 0)
                os.close(item)
                try:
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                except OSError:
                    pass  # the asker is gone
                conn.close()


def _fork(conn: socket.socket, listener: socket.socket, running: dict) -> tuple[int, int]:
    head, fds, _, _ = socket.recv_fds(conn, 8, 4)
    try:
        size = int.from_bytes(head, "big")
        body = b""
        while len(body) < size:
            chunk = conn.recv(size - len(body))
            if not chunk:
                raise ConnectionError("the request ended early")
            body += chunk
        request = json.loads(body)
        if len(fds) != 3 + (request.get("fd_arg") is not None):
            raise ValueError(f"{len(fds)} fds for a request with fd_arg {request.get('fd_arg')}")
        sys.stdout.flush()  # (nothing buffered here may reach the command's streams)
        sys.stderr.flush()
        ready_read, ready_write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the command: never returns
            code = 127
            try:
                os.close(ready_read)
                listener.close()
                conn.close()
                for pidfd, (_, other) in running.items():
                    os.close(pidfd)
                    other.close()
                try:
                    _set_up(request, fds)
                except BaseException as exc:
                    os.write(ready_write, f"{type(exc).__name__}: {exc}".encode())
                    raise
                os.close(ready_write)
                code = _command(request["module"])
            finally:
                os._exit(code)
        os.close(ready_write)
        with open(ready_read, "rb") as ready:  # empty when the command is set up, as Popen returns after exec
            failed = ready.read().decode()
        if failed:
            os.waitpid(pid, 0)
            raise RuntimeError(f"the command could not start: {failed}")
        pidfd = os.pidfd_open(pid)
        socket.send_fds(conn, [f"{pid}\n".encode()], [pidfd])
        return pid, pidfd
    finally:
        for fd in fds:
            os.close(fd)


def _set_up(request: dict, fds: list[int]) -> None:
    """In the fork: the streams, session, folder, environment and argv that ``python -m MODULE
    ARGS`` would start with (with ``start_new_session`` and ``pass_fds`` where asked)."""
    import importlib.util

    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    for fd in set(fds[:3]) - {0, 1, 2}:
        os.close(fd)
    args = list(request["args"])
    if request.get("fd_arg") is not None:  # the passed fd, under its number here
        args[request["fd_arg"]] = str(fds[3])
    if request.get("setsid"):
        os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()  # first: libc's environment then points into the block no more
    os.environ.update(request["env"])
    show_environ(request["env"])
    if "AUTOTUNE_TEST_WARM_TEMPLATE" in request["env"] and "forked_cli" in sys.modules:
        sys.modules["forked_cli"].fork_warm_workers(request["env"]["AUTOTUNE_TEST_WARM_TEMPLATE"])
    sys.path[0] = request["cwd"]  # where ``python -m`` puts it
    spec = importlib.util.find_spec(request["module"])
    main = importlib.util.find_spec(f"{request['module']}.__main__") if spec.submodule_search_locations else spec
    sys.argv = [main.origin, *args]
    if "numpy" in sys.modules:  # (random's own state is reseeded at every fork)
        sys.modules["numpy"].random.seed()


def show_environ(env: dict) -> None:
    """Write ``env`` into the block ``/proc/self/environ`` shows (the exec'd environment, which
    this fork shares with its template), the rest of the block zeroed: a reader stops at the first
    empty entry (psutil does). Raises if it does not fit."""
    import ctypes

    with open("/proc/self/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()  # fields 3.. of proc(5)
    start, end = int(fields[50 - 3]), int(fields[51 - 3])  # env_start, env_end
    block = b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())
    if len(block) >= end - start:
        raise ValueError(f"an environment of {len(block)} bytes does not fit the template's {end - start}")
    ctypes.memmove(start, block + bytes(end - start - len(block)), end - start)


def _command(module: str) -> int:
    """In the fork, once set up: what ``python -m MODULE`` does; its exit code."""
    import runpy
    import traceback

    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    except KeyboardInterrupt:
        traceback.print_exc()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)  # as Python's own exit on an uncaught Ctrl-C
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return code


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2])
