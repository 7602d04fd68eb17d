"""The tests' forked ``autotune`` commands (tests/lib/forked_cli.py) behave as new interpreters do."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

from conftest import TAG, tagged

import forked_cli
from autotune.machine._launch import TRIAL_TAG_ENV
from helpers import FIXTURES, SHORT_TRIALS, cli, cli_env


def both(*args: str, cwd, env: dict | None = None):
    """The command's result forked from the template, then as a real subprocess."""
    forked = forked_cli.run(cli(*args), cwd=cwd, env=cli_env(env), capture_output=True, text=True, timeout=120)
    real = subprocess.run(
        cli(*args),
        cwd=cwd,
        env=cli_env({**(env or {}), "AUTOTUNE_TEST_FORK": "0"}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return forked, real


def test_a_forked_command_prints_and_exits_as_a_new_interpreter(tmp_path) -> None:
    (tmp_path / "bad.py").write_text("def train():\n    pass\n")
    for args in (
        ("--help",),
        ("show", "--help"),
        ("run", "bad.py:train"),
        ("run", "missing.py:train"),
        ("show", "--store", "nowhere"),
    ):
        forked, real = both(*args, cwd=tmp_path, env={"COLUMNS": "90"})
        assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr), args


def test_which_commands_fork() -> None:
    argv = cli("show")
    assert forked_cli.forkable(argv, env=cli_env(), cwd=".", stdout=subprocess.PIPE, text=True)
    assert not forked_cli.forkable(["taskset", "-c", "0", *argv], env=cli_env())  # a prefix
    assert not forked_cli.forkable([sys.executable, "-c", "pass"], env=cli_env())
    assert not forked_cli.forkable(argv, env=cli_env({"PYTHONHASHSEED": "1"}))  # read at start
    assert not forked_cli.forkable(argv, env=cli_env({"LD_PRELOAD": "x.so"}))
    assert not forked_cli.forkable(argv, env=cli_env(), stdin=subprocess.PIPE)
    assert not forked_cli.forkable(argv, env=cli_env(), start_new_session=True)  # an option it does not emulate
    assert not forked_cli.forkable(argv, env=cli_env({"AUTOTUNE_TEST_FORK": "0"}))
    assert forked_cli.forkable(argv, env=cli_env({"COLUMNS": "80", "MLFLOW_TRACKING_URI": "sqlite:///x.db"}))


def start(tmp_path) -> tuple[forked_cli.ForkedCLI, object]:
    """A forked tuner of a long study, once its baseline runs: the process, its stderr's file."""
    import psutil

    err = tmp_path / "stderr"
    with open(err, "w") as out:
        proc = forked_cli.popen(
            cli("run", f"{FIXTURES / 'tiny_train.py'}:train", "--trials", "20", "--store", "st", *SHORT_TRIALS),
            cwd=tmp_path,
            env=cli_env(),
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
    assert isinstance(proc, forked_cli.ForkedCLI)
    assert psutil.Process(proc.pid).cwd() == str(tmp_path)  # set up before popen returns, as Popen's is
    deadline = time.monotonic() + 120
    while "trial 0: baseline" not in err.read_text() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, err.read_text()
    return proc, err


def test_a_forked_tuner_is_a_process_of_its_own_that_signals_reach(tmp_path) -> None:
    """Its pid is its own, its environment and its warm worker's are theirs where /proc shows them,
    and a signal sent to it ends the study as the CLI ends it (128 + N), read back through the
    template; a second signal after the exit is dropped, not sent to a pid the kernel may have
    reused."""
    proc, err = start(tmp_path)
    tag = os.environ[TAG]
    # its /proc/PID/environ shows its own environment (the test's tag), and its warm worker's too
    found = tagged(tag)
    assert proc.pid in {p.pid for p in found} and len(found) > 1, ("the tuner started no worker", found)
    # its warm worker: a fork of this process's template of warm workers, with the tuner's tag for it
    warm = [
        p for p in found if p.parent() and p.parent().cmdline()[-1:] == ["warm"] and p.parent().ppid() == os.getpid()
    ]
    assert len(warm) == 1, found
    assert warm[0].environ()[TRIAL_TAG_ENV].startswith(f"{proc.pid}-")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM, err.read_text()
    assert "stopped by SIGTERM" in err.read_text()
    proc.kill()  # gone already: nothing is sent
    assert proc.wait() == 128 + signal.SIGTERM
    assert proc.pid not in {p.pid for p in tagged(tag)}


def test_sigkill_reads_as_popen_reads_it(tmp_path) -> None:
    import psutil

    proc, _ = start(tmp_path)
    proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL
    # a tuner killed so leaves its workers and trials (and their loader workers) to the next one
    # on the study: stopped here by this test's tag, until none is left
    for _ in range(20):
        left = tagged(os.environ[TAG])
        if not left:
            break
        for child in left:
            with contextlib.suppress(psutil.NoSuchProcess):  # (it may end between the listing and the kill)
                child.kill()
        psutil.wait_procs(left, timeout=3)


def test_a_command_whose_template_dies_is_still_waited_for_and_killed(tmp_path) -> None:
    """The template reaps the command and sends its exit code; where the template dies first, the
    command's exit is read through its pidfd (and reads as killed, -9: its code went with the
    template), and a kill still reaches it."""
    (tmp_path / "sleeper.py").write_text("import time\ntime.sleep(120)\n")
    template = forked_cli._Template("bare")
    try:
        template.wait_ready()
        proc = forked_cli.ForkedCLI(
            [sys.executable, "-m", "sleeper"], cwd=tmp_path, env=cli_env(), template=template.path
        )
        template.proc.kill()
        template.proc.wait()
        try:
            proc.wait(timeout=0.5)
            raise AssertionError("the command ended with its template")
        except subprocess.TimeoutExpired:
            pass
        proc.kill()
        assert proc.wait(timeout=30) == -signal.SIGKILL
        # a template that is gone answers no more: the launcher can tell, and falls back
        try:
            forked_cli.ForkedCLI([sys.executable, "-m", "sleeper"], cwd=tmp_path, env=cli_env(), template=template.path)
            raise AssertionError("a dead template started a command")
        except forked_cli.NotStarted:
            pass
    finally:
        template.stop()


def test_a_template_that_dies_before_it_is_ready_is_not_waited_for(tmp_path) -> None:
    """A tuner waits for the warm workers' template to be ready (up to a minute): not when it has
    exited, zombie or reaped, which it reads through the pid its folder names."""
    dead = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
    (tmp_path / "pid").write_text(str(dead.pid))
    os.waitid(os.P_PID, dead.pid, os.WEXITED | os.WNOWAIT)  # its end, as a zombie: not reaped
    for _ in ("zombie", "reaped"):
        started = time.monotonic()
        assert not forked_cli._ready(str(tmp_path), 60)
        assert time.monotonic() - started < 5
        dead.wait()
    (tmp_path / "pid").unlink()  # a folder without its template's pid: nothing to wait for
    assert not forked_cli._ready(str(tmp_path), 60)
    (tmp_path / "ready").touch()
    (tmp_path / "pid").write_text(str(os.getpid()))
    assert forked_cli._ready(str(tmp_path), 60)
