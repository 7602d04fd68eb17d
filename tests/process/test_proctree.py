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

    from autotune import _proctree

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
