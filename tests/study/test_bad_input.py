"""Bad input is answered before any trial runs: by the real CLI, with exit status 2 and a line naming what is wrong."""

from __future__ import annotations

import textwrap
from pathlib import Path

import forked_cli
from helpers import cli, cli_env


def target(tmp_path: Path, source: str, name: str = "train") -> str:
    path = tmp_path / "user_train.py"
    path.write_text(textwrap.dedent(source))
    return f"{path}:{name}"


def test_the_cli_answers_before_spawning_a_trial(tmp_path: Path) -> None:
    bad = target(tmp_path, "def train():\n    pass\n")
    done = forked_cli.run(cli("run", bad), cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "takes no argument" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "mlflow").exists()
