"""Reaping what a trial leaves: its process group, and every process carrying its tag.

A trial's DataLoader workers, and whatever it started that called ``setsid``, can outlive
its worker; a tuner killed mid-trial leaves them all. They are found by process group, and
by the tag every process of the trial inherits in its environment (``TRIAL_TAG_ENV``).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from autotune.machine._launch import TRIAL_TAG_ENV

if TYPE_CHECKING:
    import psutil


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_processes(
    victims: Sequence[psutil.Process], tag: str | None = None, timeout: float = 5.0, spare: int | None = None
) -> int:
    """SIGKILL ``victims`` and, given a ``tag``, every live process whose environment
    carries it but ``spare`` (a warm worker, whose tag its trials share); wait until
    they are dead; return how many were killed, each once.

    One scan of the process table: a few milliseconds. A process that emptied its
    environment, or runs as another user (its environment unreadable), escapes the tag.
    """
    import psutil

    found = {proc.pid: proc for proc in victims}
    if tag is not None:
        for proc in psutil.process_iter():
            if proc.pid in (os.getpid(), spare) or proc.pid in found:
                continue
            try:
                if proc.environ().get(TRIAL_TAG_ENV) == tag and proc.status() != psutil.STATUS_ZOMBIE:
                    found[proc.pid] = proc
            except psutil.Error:  # gone, a zombie, or not ours to read
                continue
    killed = []
    for proc in found.values():
        try:
            proc.kill()  # psutil checks the pid still names the same process first
            killed.append(proc)
        except psutil.Error:  # gone since, or not ours to kill
            continue
    # Dead means gone or a zombie, not psutil.wait_procs's gone: a killed orphan stays a
    # zombie until PID 1 reaps it, which some inits do only every 2 s.
    deadline = time.monotonic() + timeout
    left = killed
    while left and time.monotonic() < deadline:
        time.sleep(0.01)
        left = [proc for proc in left if _running(proc)]
    return len(killed)


def _running(proc: psutil.Process) -> bool:
    import psutil

    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_orphans(pgid: int, started: float, tag: str | None = None) -> int:
    """Kill what is left of a worker (by a tuner that was killed); return how many.

    The group's leader may be gone while its DataLoader workers live on, so its
    members are found by group id, and only those started with it or later count
    (a group id, like a pid, can be reused after every member has exited). Given
    the trial's ``tag`` (from its ``spawned`` event), the processes that left the
    group (``setsid``) are found by their environment and killed too.
    """
    import psutil

    members = []
    for proc in psutil.process_iter(["create_time"]):
        try:
            if (
                os.getpgid(proc.pid) == pgid
                and proc.info["create_time"] >= started - 1.0
                and proc.status() != psutil.STATUS_ZOMBIE
            ):  # a zombie is dead already
                members.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return kill_processes(members, tag)


def sweep_orphans() -> int:
    """Kill the trial processes on this host whose tuner is gone; return how many.

    A trial's tag starts with its tuner's pid (``run_trial``). Its processes outlive a
    tuner that was killed; when another host then closes the trial as stale, no
    RUNNING trial is left to find them by, so every tuner sweeps its host at start.
    A tuner counts as gone when no process has its pid, or the one that has it
    started after the trial's process did (the pid was reused).
    """
    import psutil

    orphans = []
    for proc in psutil.process_iter(["create_time"]):
        try:
            tag = proc.environ().get(TRIAL_TAG_ENV, "")
            if not tag or proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            tuner = int(tag.partition("-")[0])
        except (psutil.Error, ValueError):
            continue
        try:
            if psutil.Process(tuner).create_time() <= proc.info["create_time"]:
                continue  # its tuner lives
        except psutil.NoSuchProcess:
            pass
        orphans.append(proc)
    return kill_processes(orphans) if orphans else 0
