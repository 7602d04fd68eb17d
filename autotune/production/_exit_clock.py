"""The wall time ``autotune exec`` reports, to the process's real exit: what a stopwatch and the
study's whole runs measure (a trial's parent sees its process end: ``autotune.tuner._watch``).

A process cannot time its own exit: the interpreter's teardown after the last exit handler
(freeing modules; 0.6-1.0 s with torch loaded on a loaded 2-CPU host, 2026-11-29) comes after
any code it runs. So before the script starts, exec forks a watcher that holds nothing of the
script's (no stdout, no file, no signal of its own), waits on a pidfd for this process to exit,
and only then writes the line to stderr. The script's process, its pid, its children, its exit
status and its signals are untouched; the line arrives after everything the script wrote. Where a pidfd is not
available (not Linux 5.3+), the line is said from the last exit handler instead, and says so.
"""

from __future__ import annotations

import json
import os
import select
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

#: How long the watcher waits for the script's process (a guard: it ends with it).
WATCH_LIMIT_S = 30 * 24 * 3600.0


def boot_seconds_of(pid: int) -> float:
    """When process ``pid`` started, in seconds of ``CLOCK_BOOTTIME`` (to the clock's 10 ms tick)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")


def start_watcher(line: Callable[[Mapping[str, Any], float], str]) -> Callable[[Mapping[str, Any]], None] | None:
    """Fork the watcher of this process's exit; return what arms it (call it with the facts
    ``line`` needs, once the script ended as it should: the watcher then writes
    ``line(facts, seconds)`` after this process exits, ``seconds`` from its start to its exit),
    or None where it cannot watch (no pidfd), for the caller to say the line itself."""
    if not hasattr(os, "pidfd_open"):
        return None
    parent = os.getpid()
    try:
        started = boot_seconds_of(parent)
        pidfd = os.pidfd_open(parent)
    except OSError:
        return None
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # forked twice: the watcher is no child of the script's (its os.wait(), its kill of
        try:  # its children), and in a session of its own (no Ctrl-C or group signal of the script's)
            os.setsid()
            if os.fork() == 0:
                os.close(write_end)
                _watch(pidfd, read_end, started, line)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    os.close(pidfd)
    os.close(read_end)
    os.set_inheritable(write_end, False)

    def arm(facts: Mapping[str, Any]) -> None:
        os.write(write_end, json.dumps(dict(facts)).encode() + b"\n")

    return arm


def _watch(pidfd: int, read_end: int, started: float, line: Callable[[Mapping[str, Any], float], str]) -> None:
    """In the watcher: wait for the script's process to exit, then say the line if it was armed."""
    keep = {pidfd, read_end, 2}
    for fd in range(3, _fd_limit()):
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)  # (a reader of the script's stdout sees its end when the script ends)
    select.select([pidfd], [], [], WATCH_LIMIT_S)
    seconds = time.clock_gettime(time.CLOCK_BOOTTIME) - started
    os.set_blocking(read_end, False)
    try:
        said = os.read(read_end, 1 << 16)
    except BlockingIOError:
        said = b""
    if said.strip():
        os.write(2, (line(json.loads(said.splitlines()[0]), seconds) + "\n").encode())


def _fd_limit() -> int:
    try:
        return min(os.sysconf("SC_OPEN_MAX"), 4096)
    except (OSError, ValueError):
        return 256
