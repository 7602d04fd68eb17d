"""benchmarks/_host_load.py on real processes: a child's CPU time is the benchmark's own, not a load
from outside."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "host_load_bench", Path(__file__).resolve().parents[2] / "benchmarks" / "_host_load.py"
)
host = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = host  # (its dataclasses look their module up)
_SPEC.loader.exec_module(host)

BURN = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass\n"


def test_a_childs_cpu_time_counts_as_the_benchmarks_own():
    start = host.reading()
    subprocess.run([sys.executable, "-c", BURN], check=True)
    end = host.reading()
    # the child's 0.6 s of CPU (and its interpreter's start) in the tree: reaped, in our cutime
    assert end.own - start.own >= 0.6
    assert end.busy - start.busy >= 0.6 * 0.9  # (the CPUs saw it too: busy counts every process)
