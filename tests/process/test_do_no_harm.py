"""Do no harm: a script under ``autotune exec`` (and in a trial that runs it whole) leaves what
``python`` leaves: its files byte for byte (a log it never closes, a checkpoint a non-daemon thread
saves after training, an atexit handler's file, a SIGTERM handler's checkpoint), its printed
metrics and its exit status. Checked against ``python`` on the same script, in real processes."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune import Config, Outcome
from autotune.core._knobs import KNOBS
from autotune.machine._launch import Budget, TrialSpec
from autotune.production._export import render
from autotune.tuner._watch import run_trial
from helpers import FIXTURES

SCRIPT = FIXTURES / "scripts" / "harm_probe.py"
#: The script's own config, as a study exports it: every knob at the value the script runs with.
OWN = render({**{name: knob.default for name, knob in KNOBS.items()}, "batch_size": 16}, 16, ["the code as written"])
#: Loader knobs only: the same batches in the same order, from two persistent workers.
LOADER = "dataloader: {num_workers: 2, persistent_workers: true, prefetch_factor: 4}\n"
ENV = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}


def run(folder: Path, *args: str, export: str | None = None, term: bool = False) -> subprocess.CompletedProcess:
    """The script run in ``folder``, by ``python`` or (``export``) under ``autotune exec``; with
    ``term``, stopped by SIGTERM once it says it waits."""
    folder.mkdir()
    if export is None:
        command = [sys.executable, str(SCRIPT), *args]
    else:
        (folder.parent / f"{folder.name}.yaml").write_text(export)
        command = [
            sys.executable,
            "-m",
            "autotune",
            "exec",
            str(folder.parent / f"{folder.name}.yaml"),
            str(SCRIPT),
            "--",
            *args,
        ]
    proc = subprocess.Popen(command, cwd=folder, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if term:
        deadline = time.monotonic() + 120
        while not (folder / "waiting").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=180)
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("export", [OWN, LOADER], ids=["own-config", "loader-only"])
def test_exec_leaves_the_files_output_and_status_python_leaves(tmp_path: Path, export: str) -> None:
    plain = run(tmp_path / "python", "--exit-status", "3")
    under = run(tmp_path / "exec", "--exit-status", "3", export=export)
    assert plain.returncode == under.returncode == 3, under.stderr
    assert plain.stdout == under.stdout and plain.stdout.startswith("final loss ")
    # the unclosed log, the thread's checkpoint, the atexit handler's file
    assert set(files(tmp_path / "python")) == {"train.log", "checkpoint.pt", "atexit.txt"}
    assert files(tmp_path / "exec") == files(tmp_path / "python")
    # the script finds the garbage collector as under python (exec pauses it while it starts)
    assert (tmp_path / "exec" / "train.log").read_text().startswith("collector on: True, thresholds (700, 10, 10)")


def test_exec_keeps_the_scripts_sigterm_handler_and_its_checkpoint(tmp_path: Path) -> None:
    plain = run(tmp_path / "python", "--wait-for-term", term=True)
    under = run(tmp_path / "exec", "--wait-for-term", export=OWN, term=True)
    assert plain.returncode == under.returncode == 143, under.stderr
    assert "term_checkpoint.pt" in files(tmp_path / "python")
    assert files(tmp_path / "exec") == files(tmp_path / "python")


def test_exec_reports_the_scripts_error_as_python_does(tmp_path: Path) -> None:
    plain = run(tmp_path / "python", "--fail")
    under = run(tmp_path / "exec", "--fail", export=OWN)
    assert plain.returncode == under.returncode == 1
    assert under.stderr.rstrip().endswith("RuntimeError: a check after training failed")
    # the traceback starts at the script's own frame, as python's does: no autotune or runpy frame
    traceback = under.stderr[under.stderr.index("Traceback") :]
    assert "autotune" not in traceback and "runpy" not in traceback, traceback
    assert files(tmp_path / "exec") == files(tmp_path / "python")


def test_exec_passes_a_message_to_sys_exit_on_as_python_does(tmp_path: Path) -> None:
    message = tmp_path / "message.py"
    message.write_text("import sys\nsys.exit('not this time')\n")
    (tmp_path / "own.yaml").write_text(OWN)
    plain = subprocess.run([sys.executable, str(message)], capture_output=True, text=True, env=ENV)
    under = subprocess.run(
        [sys.executable, "-m", "autotune", "exec", str(tmp_path / "own.yaml"), str(message)],
        capture_output=True,
        text=True,
        env=ENV,
    )
    assert plain.returncode == under.returncode == 1
    assert under.stderr.rstrip().endswith("not this time")


def imported(command: list[str], cwd: Path) -> set[str]:
    """Every module the process imports from its start to its exit (``python -X importtime``)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *command], capture_output=True, text=True, env=ENV, cwd=cwd, timeout=180
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return {line.split("|")[2].strip() for line in done.stderr.splitlines() if line.startswith("import time:")} - {
        "imported package"
    }


def test_exec_imports_nothing_into_the_scripts_process_but_its_own(tmp_path: Path) -> None:
    """From its start to its exit, ``autotune exec`` adds to what ``python`` imports for the script
    only autotune, what reads its command line and export (click, yaml) and the standard library:
    no psutil (the machine check reads /proc/meminfo), no other part of torch (the exit's machine check imported torch._dynamo, 1 s of CPU,
    for a script that builds no torch.optim optimizer), nor the study's optuna, mlflow or rich."""
    script = FIXTURES / "scripts" / "no_step.py"
    measured = {"device": "cpu", "gpu": None, "cpus": 2, "torch": "2.13.0", "date": "2026-11-29", "run_s": 3.0}
    (tmp_path / "own.yaml").write_text(
        render({**{name: knob.default for name, knob in KNOBS.items()}, "batch_size": 32}, 32, ["own"], measured)
    )
    plain = imported([str(script)], tmp_path)
    under = imported(["-m", "autotune", "exec", str(tmp_path / "own.yaml"), str(script)], tmp_path)
    assert "torch.utils.data" in plain and "torch._dynamo" not in plain
    ours = {"autotune", "click", "yaml", "_yaml"}
    added = sorted(m for m in under - plain if m.split(".")[0] not in ours | sys.stdlib_module_names)
    assert not added, added


#: A script that finds the watcher of its own exit: the process given a pidfd of this one.
FIND_WATCHER = """import json, os, time
import psutil

me, found = os.getpid(), []
for _ in range(50):
    for p in psutil.process_iter(["cmdline", "ppid"]):
        cmd = p.info["cmdline"] or []
        try:
            if cmd[1:4] == ["-I", "-S", "-c"] and f"Pid:\\t{me}\\n" in open(f"/proc/{p.pid}/fdinfo/{cmd[5]}").read():
                fds = {fd: os.readlink(f"/proc/{p.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{p.pid}/fd")}
                found.append({"ppid": p.info["ppid"], "sid": os.getsid(p.pid), "fds": fds})
        except (OSError, IndexError, psutil.Error):
            pass
    if found:
        break
    time.sleep(0.1)
print(json.dumps({"me": me, "sid": os.getsid(me), "stderr": os.readlink("/proc/self/fd/2"), "found": found}))
"""


def test_execs_exit_watcher_is_a_program_of_its_own_that_holds_only_stderr(tmp_path: Path) -> None:
    """The watcher that says exec's last line is spawned, not forked (a fork shares the process's
    pages, and each page the script wrote to was copied: 5,000 page faults more than python's on a
    10-step script, benchmarks/results/exec-vs-python.md), no child of the script's, in a session of
    its own, holding nothing of the script's but stderr, where its line goes after the script's own."""
    script = tmp_path / "find_watcher.py"
    script.write_text(FIND_WATCHER)
    (tmp_path / "own.yaml").write_text(OWN)
    stderr = tmp_path / "stderr.txt"
    with open(stderr, "w") as err:
        done = subprocess.run(
            [sys.executable, "-m", "autotune", "exec", "own.yaml", str(script)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=ENV,
            cwd=tmp_path,
            timeout=120,
        )
    assert done.returncode == 0, stderr.read_text()
    seen = json.loads(done.stdout)
    (watcher,) = seen["found"]
    assert watcher["ppid"] != seen["me"] and watcher["sid"] != seen["sid"]
    fds = watcher["fds"]
    assert fds["0"] == fds["1"] == os.devnull and fds["2"] == seen["stderr"] == str(stderr)
    assert len(fds) == 5  # (and the pidfd and the pipe it is armed through)
    deadline = time.monotonic() + 10  # (the line comes once the process has exited)
    while "process start to its exit" not in stderr.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stderr.read_text().splitlines()[-1].startswith(f"autotune: ran {script} in "), stderr.read_text()


def test_a_trial_that_runs_the_script_whole_exits_as_python_does(tmp_path: Path, monkeypatch) -> None:
    """A whole run in a trial (started cold) leaves the files ``python`` leaves, and its wall time
    counts the thread's checkpoint, which ends half a second after the script's last line."""
    monkeypatch.chdir(tmp_path)
    spec = TrialSpec(
        target=str(SCRIPT),
        config=Config(),
        device="cpu",
        argv=("--steps", "60"),
        budget=dataclasses.replace(Budget(warmup_s=0.1, window_s=0.1, windows=2, ceiling_windows=0), whole=True),
    )
    result = run_trial(spec, tmp_path / "logs" / "whole.log")
    assert result.outcome is Outcome.COMPLETE, result.reason
    assert (tmp_path / "train.log").read_text().splitlines()[1].startswith("trained 60 steps")
    assert (tmp_path / "checkpoint.pt").stat().st_size > 0 and (tmp_path / "atexit.txt").exists()
    metrics = result.metrics
    assert metrics["run_s"] - metrics["startup_s"] - metrics["loop_s"] - metrics["outside_s"] >= 0.5


def test_execs_wall_time_counts_the_interpreters_teardown_as_a_stopwatch_does(tmp_path: Path) -> None:
    """An object freed at the interpreter's teardown (after every exit handler) that takes 1.5 s:
    ``time python train.py`` counts it, and so does exec's line, said once the process has exited
    (autotune.production._exit_clock); the script's output still comes first, the status is its own."""
    script = tmp_path / "slow_exit.py"
    script.write_text(
        "import json, time\n\nclass Slow:\n    def __del__(self):\n        time.sleep(1.5)\n\n"
        "json.keep = Slow()  # freed with the module, at teardown\nprint('trained')\n"
    )
    (tmp_path / "own.yaml").write_text(OWN)
    started = time.monotonic()
    under = subprocess.run(
        [sys.executable, "-m", "autotune", "exec", str(tmp_path / "own.yaml"), str(script)],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=tmp_path,
    )
    stopwatch = time.monotonic() - started
    assert under.returncode == 0 and under.stdout == "trained\n", under.stderr
    last = under.stderr.strip().splitlines()[-1]
    took = float(re.search(r"in ([\d.]+) s \(process start to its exit\)", last).group(1))
    assert stopwatch - 0.5 < took <= stopwatch + 0.05, (took, stopwatch, last)  # (the old line lacked the 1.5 s)
