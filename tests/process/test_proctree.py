"""Reading a real process tree: every descendant, found through /proc or psutil's way."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

#: A process whose thread starts a child that starts a grandchild, all sleeping.
TREE = """
import subprocess, sys, threading, time
def start():
    subprocess.Popen([sys.executable, "-c",
                      "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; "
                      "time.sleep(60)']); time.sleep(60)"])
threading.Thread(target=start).start()
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
time.sleep(60)
"""


def test_the_process_tree_holds_every_descendant_read_either_way(monkeypatch) -> None:
    import psutil

    from autotune.machine import _proctree

    root = subprocess.Popen([sys.executable, "-c", TREE], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while len(psutil.Process(root.pid).children(recursive=True)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        expected = sorted([root.pid, *(p.pid for p in psutil.Process(root.pid).children(recursive=True))])
        assert len(expected) == 4
        assert sorted(p.pid for p in _proctree.process_tree(root.pid)) == expected  # /proc/PID/task/TID/children
        # read_tree: the same processes, and each one's CPU time and RSS from its /proc/N/stat, as psutil
        # reads them (its RSS from statm: the same pages, but the youngest may still be starting)
        fast = _proctree.read_tree(root.pid)
        procs = [psutil.Process(pid) for pid in expected]
        assert sorted(fast.pids) == expected and fast.pids[0] == root.pid
        assert fast.rss == pytest.approx(_proctree.tree_rss(procs), rel=0.1) and fast.rss > 4 * 2**20
        assert fast.cpu == pytest.approx(_proctree.tree_cpu(procs), abs=0.05) and fast.cpu > 0
        monkeypatch.setattr(_proctree, "_proc_children", lambda: False)  # a kernel without those files
        assert sorted(p.pid for p in _proctree.process_tree(root.pid)) == expected
        slow = _proctree.read_tree(root.pid)
        assert sorted(slow.pids) == expected and slow.rss == pytest.approx(fast.rss, rel=0.1)
        assert slow.cpu == pytest.approx(fast.cpu, abs=0.05)
    finally:
        os.killpg(root.pid, 9)
        root.wait()
    assert _proctree.process_tree(root.pid) == []
    monkeypatch.undo()
    assert _proctree.read_tree(root.pid) == _proctree.TreeReading((), 0.0, 0)


def test_shared_memory_held_open_and_mapped_by_none_is_counted_once(tmp_path) -> None:
    import mmap

    from autotune.machine._proctree import held_unmapped

    name = f"/dev/shm/autotune-test-{os.getpid()}"
    fd = os.open(name, os.O_CREAT | os.O_RDWR, 0o600)
    os.unlink(name)
    os.write(fd, b"x" * (8 << 20))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], pass_fds=(fd,))
    try:
        me = (os.getpid(),)
        assert held_unmapped(me) == 8 << 20
        assert held_unmapped((*me, child.pid)) == 8 << 20  # held by two: counted once
        assert held_unmapped((child.pid,)) == 8 << 20
        mapped = mmap.mmap(fd, 8 << 20)  # in this process's PSS now: not counted again
        assert held_unmapped((*me, child.pid)) == 0
        mapped.close()
        assert held_unmapped(me) == 8 << 20
    finally:
        child.kill()
        child.wait()
        os.close(fd)
    assert held_unmapped(me) == 0


def test_batches_a_loader_holds_in_flight_are_in_the_trees_memory() -> None:
    """A batch a DataLoader worker has made and the loop has not taken is a shared-memory file the
    worker holds open for the loop to ask for: in RAM, in no process's PSS, so the tree's memory
    counts it (one worker x prefetch 8 of 8 MiB batches here: one worker, so that the loop holds
    no batch that came early, which it would map)."""
    import psutil
    import torch
    from torch.utils.data import DataLoader

    from autotune.machine._proctree import held_unmapped, tree_memory

    class Items(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 64

        def __getitem__(self, i):
            return torch.ones(1 << 20)  # 4 MiB

    before = {p.pid for p in psutil.Process().children()}  # (the test process's other children stay out)
    loader = iter(DataLoader(Items(), batch_size=2, num_workers=1, prefetch_factor=8))
    try:
        next(loader)  # then 8 batches asked for, none taken
        pids = (os.getpid(), *(p.pid for p in psutil.Process().children() if p.pid not in before))
        assert len(pids) == 2
        batches = 8 << 20
        deadline = time.monotonic() + 60
        while held_unmapped(pids) < 8 * batches and time.monotonic() < deadline:
            time.sleep(0.1)
        assert 8 * batches <= held_unmapped(pids) < 9 * batches
        pss = sum(psutil.Process(pid).memory_full_info().pss for pid in pids)
        assert tree_memory(pids) >= pss + 8 * batches - (4 << 20)  # (PSS moves a little between readings)
    finally:
        del loader
