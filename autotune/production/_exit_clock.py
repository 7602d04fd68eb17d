"""The wall time ``autotune exec`` reports, to the process's real exit: what a stopwatch and the
study's whole runs measure (a trial's parent sees its process end: ``autotune.tuner._watch``).

A process cannot time its own exit: the interpreter's teardown after the last exit handler
(freeing modules; 0.6-1.0 s with torch loaded on a loaded 2-CPU host, 2026-11-29) comes after
any code it runs. So before the script starts, exec spawns a watcher, a small program of its own
that holds nothing of the script's (no stdout, no file, no signal of its own), waits on a pidfd
for this process to exit, and only then writes the line to stderr. The script's process, its pid,
its children, its exit status and its signals are untouched; the line arrives after everything
the script wrote. Where a pidfd is not available (not Linux 5.3+), the line is said from the last
exit handler instead, and says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator

#: How long the watcher waits for the script's process (a guard: it ends with it).
WATCH_LIMIT_S = 30 * 24 * 3600.0


def boot_seconds_of(pid: int) -> float:
    """When process ``pid`` started, in seconds of ``CLOCK_BOOTTIME`` (to the clock's 10 ms tick)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")


#: The watcher: a program of its own (``python -I -S``: no site, no module of the script's process),
#: given the script's process as a pidfd, the pipe exec arms it through, the process's start and a
#: limit. Once the process has exited it writes the armed line to stderr, its seconds filled in;
#: where exec closed the pipe unarmed (it stopped before the script ran), it ends at once.
WATCHER = """
import json, os, select, sys, time
pidfd, armed, started, limit = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
ready = select.select([pidfd, armed], [], [], limit)[0]
said = b""
if armed in ready and pidfd not in ready:
    said = os.read(armed, 1 << 16)
    if not said:
        raise SystemExit  # disarmed: exec ended before the script ran
    select.select([pidfd], [], [], limit)
seconds = time.clock_gettime(time.CLOCK_BOOTTIME) - started
if not said:
    os.set_blocking(armed, False)
    try:
        said = os.read(armed, 1 << 16)
    except BlockingIOError:
        pass
if said.strip():
    line, base = json.loads(said.splitlines()[0])
    os.write(2, (line.format(took=seconds, ratio=base / seconds if base else 0.0) + "\\n").encode())
"""


def start_watcher() -> Watcher | None:
    """Start the watcher of this process's exit (``Watcher``: what arms or disarms it), or None
    where it cannot watch (no pidfd), for the caller to say the line itself.

    The watcher is spawned, never forked: a fork shares the process's pages, and each page the
    script then writes is copied (5,000 more page faults than python's on a 10-step script). It is
    started through ``sh -c '... &'``, which exits at once: no child of the script's (its
    ``os.wait()``, its kill of its children), in a session of its own (no Ctrl-C or group signal
    of the script's), holding no stdout (a reader of the script's stdout sees its end when the
    script ends) and nothing else of the script's but stderr, where it writes."""
    if not hasattr(os, "pidfd_open") or not hasattr(os, "posix_spawn") or not sys.executable:
        return None
    parent = os.getpid()
    try:
        started = boot_seconds_of(parent)
        pidfd = os.pidfd_open(parent)
    except OSError:
        return None
    read_end, write_end = os.pipe()
    argv = [sys.executable, "-I", "-S", "-c", WATCHER, str(pidfd), str(read_end), repr(started), str(WATCH_LIMIT_S)]
    try:
        os.set_inheritable(pidfd, True)
        os.set_inheritable(read_end, True)
        sh = os.posix_spawn(
            "/bin/sh",
            ["sh", "-c", '"$@" &', "sh", *argv],
            os.environ,
            file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)],
            setsid=True,
        )
        os.waitpid(sh, 0)
    except OSError:
        os.close(write_end)
        return None
    finally:
        os.close(pidfd)
        os.close(read_end)

    return Watcher(write_end)


class Watcher:
    """What exec holds of its exit's watcher: the pipe's end it arms it through."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def arm(self, line: str, base: float | None) -> None:
        """Say ``line`` once this process has exited: ``{took}`` in it filled with the seconds from
        its start to its exit, ``{ratio}`` with ``base`` over them."""
        if self._fd is not None:
            os.write(self._fd, json.dumps([line, base]).encode() + b"\n")

    def disarm(self) -> None:
        """Exec stopped before the script ran: the watcher ends now, saying nothing (else it would
        wait for the process that called exec, a test's or a notebook's, to exit)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@contextlib.contextmanager
def watching(said: bool) -> Iterator[Watcher | None]:
    """``start_watcher`` where this process says the line (``said``), disarmed if what the block
    runs raises."""
    watcher = start_watcher() if said else None
    try:
        yield watcher
    except BaseException:
        if watcher is not None:
            watcher.disarm()
        raise
