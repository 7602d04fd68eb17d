"""The template process of tests/forked_cli.py: ``python tests/cli_template.py SOCKET``.

It imports what ``autotune run`` imports (``PRELOAD``), listens on the Unix socket ``SOCKET``, and
for each request (its length, then JSON: ``args``, ``cwd``, ``env``; with three fds for stdin,
stdout, stderr) forks a process that sets itself up as ``python -m autotune ARGS`` would start, then
runs it. The asker gets the pid and a pidfd of it once it is set up, and its exit code (N, or -N for
signal N, as ``Popen.returncode``) when this process reaps it. It ends within 1 s of its parent.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import threading

#: What the template imports: what ``autotune run`` imports before its first trial, but torch
#: (which a tuner does not import: its trials and warm workers are other interpreters).
PRELOAD = ("autotune._cli", "autotune._api", "autotune._study", "mlflow", "mlflow.store.tracking.sqlalchemy_store",
           "mlflow.store.db.utils", "optuna", "optuna.storages.journal", "matplotlib.figure", "matplotlib.ticker",
           "matplotlib.backends.backend_agg")


def _serve(path: str) -> None:
    import importlib

    parent = os.getppid()  # the pytest process: the loop below ends within 1 s of its end
    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() > 1:
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
    head, fds, _, _ = socket.recv_fds(conn, 8, 3)
    try:
        size = int.from_bytes(head, "big")
        body = b""
        while len(body) < size:
            chunk = conn.recv(size - len(body))
            if not chunk:
                raise ConnectionError("the request ended early")
            body += chunk
        request = json.loads(body)
        if len(fds) != 3:
            raise ValueError(f"3 fds expected, got {len(fds)}")
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
                code = _command()
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
    """In the fork: the streams, folder, environment and argv that ``python -m autotune ARGS``
    would start with."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = request["cwd"]  # where ``python -m`` puts it
    sys.argv = [os.path.join(os.path.dirname(sys.modules["autotune"].__file__), "__main__.py"), *request["args"]]
    if "numpy" in sys.modules:  # (random's own state is reseeded at every fork)
        sys.modules["numpy"].random.seed()


def _command() -> int:
    """In the fork, once set up: what ``python -m autotune`` does; its exit code."""
    import runpy
    import traceback

    try:
        runpy.run_module("autotune", run_name="__main__", alter_sys=True)
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
    _serve(sys.argv[1])
