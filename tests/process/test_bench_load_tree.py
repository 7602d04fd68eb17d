"""benchmarks/_host_load.py on real processes: a child's CPU time is the benchmark's own, not a load
from outside."""

from __future__ import annotations

import subprocess
import sys

from bench_modules import BENCH, load_module

host = load_module("host_load_bench", BENCH / "_host_load.py")

BURN = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass\n"


def test_a_childs_cpu_time_counts_as_the_benchmarks_own():
    start = host.reading()
    subprocess.run([sys.executable, "-c", BURN], check=True)
    end = host.reading()
    # the child's 0.6 s of CPU (and its interpreter's start) in the tree: reaped, in our cutime
    assert end.own - start.own >= 0.6
    assert end.busy - start.busy >= 0.6 * 0.9  # (the CPUs saw it too: busy counts every process)
