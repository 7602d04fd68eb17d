"""Read a process tree from outside: who is in it, their CPU time and their memory.

On Linux through ``/proc`` (each thread's ``children`` file, each process's ``stat``),
psutil's way where the kernel has no such files. ``autotune.machine._monitor`` samples a trial's
tree with these, and the worker counts its own CPU time (``tree_cpu_s``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class TreeReading:
    """One reading of a process tree: who is in it, and what it has used so far.

    Attributes:
        pids: The root, then its descendants.
        cpu: CPU seconds (user + system) of the live processes, with what each of them
            reaped (a DataLoader worker that exited counts in its parent's, once).
        rss: Sum of RSS: cheap, and an upper bound of the tree's real use.
    """

    pids: tuple[int, ...]
    cpu: float
    rss: int


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def read_tree(pid: int) -> TreeReading:
    """``pid``'s tree, its CPU time and RSS (all empty once it is gone).

    On Linux one read of ``/proc/N/stat`` a process gives both figures, and the tree is
    found through each thread's ``/proc/PID/task/TID/children``: 2.6 ms for a trial with
    32 workers on the 2-core CI machine, against 5.8 ms through psutil (a Process object,
    then its statm and its stat, for each), and a reading costs what the tree holds, not
    what the machine runs (psutil's ``children()`` reads every process's stat). Where the
    kernel has no such files, psutil's way."""
    if not _proc_children():
        procs = process_tree(pid)
        return TreeReading(tuple(p.pid for p in procs), tree_cpu(procs), tree_rss(procs))

    def reading(child: int) -> tuple[int, float, int] | None:
        stat = _stat(child)
        return None if stat is None else (child, *stat)

    found = _walk(pid, reading)
    return TreeReading(
        tuple(child for child, _, _ in found), sum(cpu for _, cpu, _ in found), sum(rss for _, _, rss in found)
    )


def read_known(pids: tuple[int, ...]) -> TreeReading | None:
    """``read_tree`` of the processes ``pids`` alone, without looking for others (a third
    of its cost); None once one of them is gone, or where the kernel has no ``/proc/N/stat``."""
    if not _proc_children():
        return None
    cpu, rss = 0.0, 0
    for pid in pids:
        stat = _stat(pid)
        if stat is None:
            return None
        cpu, rss = cpu + stat[0], rss + stat[1]
    return TreeReading(pids, cpu, rss)


def _walk(pid: int, read: Callable[[int], Any]) -> list:
    """``read`` of ``pid`` and of each of its descendants, found through their threads'
    ``/proc/PID/task/TID/children``, root first; a process ``read`` finds gone (None) is
    left out, with its children."""
    found, todo = [], [pid]
    while todo:
        child = todo.pop()
        item = read(child)
        if item is None:
            continue  # gone between the two reads: no longer in the tree
        found.append(item)
        todo += _children_of(child)
    return found


def _stat(pid: int) -> tuple[float, int] | None:
    """CPU seconds (its own and its reaped children's) and RSS bytes of one process, from
    ``/proc/PID/stat``; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()  # after the command name, which may hold anything
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return (utime + stime + cutime + cstime) / _TICK, int(fields[21]) * _PAGE


def process_tree(pid: int) -> list:
    """``pid`` and all its descendants as psutil processes (empty once it is gone); found as
    ``read_tree`` finds them, or psutil's way where the kernel cannot."""
    import psutil

    if not _proc_children():
        try:
            root = psutil.Process(pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def process(child: int):
        try:
            return psutil.Process(child)
        except psutil.NoSuchProcess:
            return None

    return _walk(pid, process)


def _children_of(pid: int) -> list[int]:
    """The pids ``pid``'s threads started (empty once it is gone)."""
    children: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return children
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                children += map(int, f.read().split())
        except OSError:  # the thread ended
            continue
    return children


@functools.cache
def _proc_children() -> bool:
    """Whether this kernel has ``/proc/PID/task/TID/children`` (CONFIG_PROC_CHILDREN)."""
    return os.path.exists(f"/proc/self/task/{threading.get_native_id()}/children")


def tree_cpu_s() -> float:
    """CPU seconds (user + system) this process and its descendants have used so far.

    The live tree is read through psutil; descendants already gone and reaped (a
    DataLoader's workers at the end of an epoch) count through ``os.times()``, read
    first so that one reaped in between is missed rather than counted twice.
    """
    import psutil

    own = os.times()
    total = own.children_user + own.children_system
    for proc in process_tree(os.getpid()):
        try:
            times = proc.cpu_times()
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
        total += times.user + times.system
    return total


def tree_cpu(procs: list) -> float:
    """CPU seconds of a live process tree, with what its members reaped (a DataLoader
    worker that exited counts in its parent's ``children_*`` times, once)."""
    import psutil

    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def tree_rss(procs: list) -> int:
    """Sum of RSS: cheap, and an upper bound of the tree's real use."""
    import psutil

    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
    return total


def tree_memory(pids: tuple[int, ...]) -> int:
    """Bytes used by a process tree: PSS where the platform has it, so pages
    shared by forked DataLoader workers count once in total (RSS elsewhere), plus
    the shared memory the tree holds open that none of it maps (``held_unmapped``)."""
    import psutil

    total = 0
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            info = proc.memory_full_info()
            total += getattr(info, "pss", info.rss)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        except psutil.AccessDenied:
            total += proc.memory_info().rss
    return total + held_unmapped(pids)


#: Where an open file's link says it is memory (tmpfs under /dev/shm; ``memfd_create``'s).
_SHARED_MEMORY = ("/dev/shm/", "/memfd:")


def held_unmapped(pids: tuple[int, ...], proc: str = "/proc") -> int:
    """Bytes of shared-memory files the processes ``pids`` hold open but none of them maps.

    A batch a DataLoader worker has made and the loop has not yet taken is such a file
    (torch's ``file_descriptor`` sharing: made in ``/dev/shm``, unlinked, its fd kept for
    the loop to ask for): in RAM, in no process's PSS. 4 workers x prefetch 4 of 16 MiB
    batches held 256 MiB so while the tree's PSS read 401 MiB (2-core host, torch 2.13).
    Files a process of the tree maps are in its PSS already and are not counted again.
    Where ``/proc`` has no fd folders (not Linux), 0."""
    held: dict[tuple[int, int], int] = {}
    for pid in pids:
        folder = f"{proc}/{pid}/fd"
        try:
            fds = os.listdir(folder)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{folder}/{fd}").startswith(_SHARED_MEMORY):
                    st = os.stat(f"{folder}/{fd}")
                    held[(st.st_dev, st.st_ino)] = st.st_blocks * 512  # pages it has, not its length
            except OSError:
                continue  # closed since the listing
    if not held:
        return 0
    for pid in pids:
        for key in _mapped(f"{proc}/{pid}/maps"):
            held.pop(key, None)
    return sum(held.values())


def _mapped(maps: str) -> set[tuple[int, int]]:
    """(device, inode) of the shared-memory files a ``/proc/PID/maps`` maps."""
    found = set()
    try:
        with open(maps) as lines:
            for line in lines:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[5].startswith(_SHARED_MEMORY):
                    major, minor = fields[3].split(":")
                    found.add((os.makedev(int(major, 16), int(minor, 16)), int(fields[4])))
    except OSError:
        pass
    return found
