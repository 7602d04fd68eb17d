"""Tuners on one host, as real processes: they see each other, tidy up after the dead, and take turns on each CPU."""

from __future__ import annotations

import threading
from pathlib import Path

from autotune.tuner._tuners import HostRegistry
from helpers import ROOT


def test_tuners_on_one_host_see_each_other_and_tidy_up_after_the_dead(tmp_path: Path) -> None:
    import os
    import subprocess

    import psutil

    from autotune.tuner._tuners import HostRegistry, this_process

    registry = HostRegistry(tmp_path)
    gone = subprocess.Popen(["true"])
    gone.wait()
    (tmp_path / f"{gone.pid}.json").write_text(
        '{"pid": %d, "started": 1.0, "host": "here", "study": "old", "cpus": "all 2 CPUs"}' % gone.pid
    )
    parent = psutil.Process(os.getppid())  # a live process playing another tuner
    (tmp_path / f"{parent.pid}.json").write_text(
        '{"pid": %d, "started": %r, "host": "here", "study": "mnist", "cpus": "all 2 CPUs"}'
        % (parent.pid, parent.create_time())
    )
    others = registry.join(this_process(), "jpeg", "all 2 CPUs")
    assert [(o["pid"], o["study"]) for o in others] == [(parent.pid, "mnist")]
    assert not (tmp_path / f"{gone.pid}.json").exists()  # the dead one's file is tidied away
    assert (tmp_path / f"{os.getpid()}.json").exists()
    registry.leave()
    assert not (tmp_path / f"{os.getpid()}.json").exists()


def test_trials_on_one_host_take_turns_per_cpu_and_a_dead_holder_frees_its_cpus(tmp_path) -> None:
    import subprocess
    import sys
    import time

    registry = HostRegistry(tmp_path)
    # another tuner's trial on CPUs 0 and 1, in a process of its own that is then killed
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; sys.path.insert(0, %r)\n"
                "from pathlib import Path\nfrom autotune.tuner._tuners import HostRegistry\n"
                "with HostRegistry(Path(%r)).turn((0, 1), 'trial 3 of study other (tuner pid 1)'):\n"
                "    print('held', flush=True); time.sleep(60)\n"
            )
            % (str(ROOT), str(tmp_path)),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        said: list[str] = []
        entered = threading.Event()

        def mine() -> None:
            with registry.turn((1,), "trial 0 of study mine", on_wait=said.append):
                entered.set()

        waiter = threading.Thread(target=mine)
        waiter.start()
        time.sleep(0.5)
        assert not entered.is_set()  # CPU 1 is the other trial's
        assert said == [
            "waiting for CPU 1: trial 3 of study other (tuner pid 1) runs on it (trials on this "
            "host take turns on a CPU, so none measures another)"
        ]
        # a --jobs slot on another CPU does not wait
        with registry.turn((2,), "slot 1"):
            pass
        holder.kill()  # a tuner killed mid-trial: the kernel drops its locks
        waiter.join(10)
        assert entered.is_set()
    finally:
        holder.kill()
        holder.wait()
