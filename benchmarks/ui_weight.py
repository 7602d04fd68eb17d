"""How heavy `autotune ui` is: seconds until its page answers, then its process tree's
processes and RSS (benchmarks/results/ui-weight.md).

    python benchmarks/ui_weight.py PORT COMMAND...    # e.g. 5072 autotune ui --port 5072
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request

import psutil

SETTLE_S = 5.0


def main() -> None:
    port, argv = int(sys.argv[1]), sys.argv[2:]
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1).read()
                break
            except OSError:
                time.sleep(0.2)
        ready = time.monotonic() - started
        time.sleep(SETTLE_S)
        root = psutil.Process(proc.pid)
        tree = [root, *root.children(recursive=True)]
        rss = sum(p.memory_info().rss for p in tree if p.is_running())
        print(f"ready {ready:.1f} s, {len(tree)} processes, {rss / 2**30:.2f} GiB RSS")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()


if __name__ == "__main__":
    main()
