"""Tuners run as users run them, for the tests of many tuners on one study: ``autotune run`` in
a subprocess, and the tests' own reads of a study in PostgreSQL."""

from __future__ import annotations

import functools
import subprocess
import time
import uuid
from pathlib import Path

import pytest

import forked_cli
from helpers import FIXTURES, cli, cli_env

#: The training function of the team's tests: a small loop every config trains the same way.
TARGET = f"{FIXTURES / 'team_train.py'}:train"


class Tuner:
    """``autotune run`` in a process of its own (forked from the template where it can be:
    tests/lib/forked_cli.py), its output in a file (a pipe could fill and block it)."""

    def __init__(
        self, cwd: Path, *args: str, env: dict | None = None, prefix: list[str] | None = None, target: str = TARGET
    ) -> None:
        self.args, self.cwd = args, cwd
        self.log = cwd / f"tuner-{uuid.uuid4().hex[:6]}.log"
        with open(self.log, "w") as out:
            self.proc = forked_cli.popen(
                [*(prefix or []), *cli("run", target, *args)],
                cwd=cwd,
                env=cli_env(env),
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def wait(self, timeout: float = 400) -> str:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"tuner still running after {timeout} s:\n{self.output}") from None
        if self.proc.returncode == 0:  # (its study ran to its end: issue 62's rule, tests/conftest.py)
            import lost_values

            lost_values.check_run(("run", *self.args), self.cwd)
        return self.output

    @property
    def output(self) -> str:
        return self.log.read_text()


@pytest.fixture
def launch():
    """Starts tuners; any still running when the test ends (it failed) is stopped as Ctrl-C would."""
    started: list[Tuner] = []

    def start(
        cwd: Path, *args: str, env: dict | None = None, prefix: list[str] | None = None, target: str = TARGET
    ) -> Tuner:
        started.append(Tuner(cwd, *args, env=env, prefix=prefix, target=target))
        return started[-1]

    yield start
    for tuner in started:
        if tuner.proc.poll() is None:
            tuner.proc.terminate()
            try:
                tuner.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                tuner.proc.kill()
                tuner.proc.wait()


@functools.lru_cache(maxsize=8)
def storage_of(url: str):
    """One Optuna storage per database for the tests' own reads. A storage made per call
    (a URL passed to Optuna) opens a pool of its own: polled every 0.2 s for a tuner that
    a CPU hog slows, they used up PostgreSQL's 100 connections. Pre-ping: a connection the
    pool kept through a server restart (a test restarts PostgreSQL) is replaced, not used. Made
    while a tuner makes the schema of a new database, it can lose that race (a duplicate key,
    CI 2026-11-28): it tries again, as the tuners do."""
    from autotune.stores._stores import _rdb_storage

    return _rdb_storage(url, {"pool_pre_ping": True})


def study_of(url: str, name: str):
    import optuna

    return optuna.load_study(study_name=name, storage=storage_of(url))


def wait_until(condition, timeout: float = 240, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def study_exists(url: str, name: str) -> bool:
    import optuna

    return name in {s.study_name for s in optuna.get_all_study_summaries(storage_of(url))}
