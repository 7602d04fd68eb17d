"""Every message the command line ends with ends its line, and with the documented exit status
(issue 59: an error ran into the shell's prompt): the real CLI, on bad input of each kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import autotune


@pytest.mark.parametrize(
    "args, status, said",
    [
        (("show", "--store", "nowhere"), 2, "autotune: error: --store nowhere: no studies here"),
        (("export", "--store", "nowhere"), 2, "autotune: error: --store nowhere: no studies here"),
        # YAML reads an unquoted off as false: the line the issue saw run into the prompt
        (("exec", "best.yaml", "train.py"), 2, "autotune: error: best.yaml: precision.amp: False is not allowed"),
        (("run", "train.py:train", "--trials", "0"), 2, "Error: Invalid value for '--trials'"),  # click's own
        (("bogus",), 2, "Error: No such command 'bogus'"),
    ],
)
def test_an_error_ends_its_line_with_its_status(tmp_path: Path, args: tuple[str, ...], status: int, said: str) -> None:
    (tmp_path / "best.yaml").write_text("precision: {amp: off}\n")
    (tmp_path / "train.py").write_text("print('trained')\n")
    done = autotune(*args, cwd=tmp_path, timeout=60)
    assert done.returncode == status, done.stderr
    assert said in done.stderr and done.stderr.endswith("\n"), repr(done.stderr)
    assert done.stdout == "" and "trained" not in done.stderr
