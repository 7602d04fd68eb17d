"""A script as a target (autotune.training._script) and how ``run``/``exec`` read their command lines:
pure rules, and the CLI in this process (click's runner), no trial started."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune._cli import cli
from autotune.core._config import ConfigError
from autotune.training._script import check_script, is_script, label
from autotune.tuner._options import default_study_name


@pytest.mark.parametrize(
    ("target", "script", "name"),
    [
        ("train.py", True, "train"),
        ("runs/train_net.py", True, "train_net"),
        ("-m pkg.train", True, "train"),
        ("train.py:train", False, "train"),
        ("train.py:fit", False, "train.fit"),
        ("pkg.mod:train", False, "mod"),
    ],
)
def test_a_target_without_a_function_is_a_script(target: str, script: bool, name: str) -> None:
    assert is_script(target) is script
    assert default_study_name(target) == name


def test_a_scripts_label_is_its_command_line() -> None:
    assert label("train.py", ["--lr", "0.1", "--name", "a b"]) == "train.py -- --lr 0.1 --name 'a b'"
    assert label("-m pkg.train", []) == "-m pkg.train"


def test_a_script_is_checked_before_anything_runs(tmp_path: Path) -> None:
    good = tmp_path / "train.py"
    good.write_text("import sys\nprint(sys.argv)\n")
    check_script(str(good))
    check_script("-m json.tool")
    bad = tmp_path / "bad.py"
    bad.write_text("def f(:\n")
    with pytest.raises(ConfigError, match=r"bad.py, line 1: "):
        check_script(str(bad))
    with pytest.raises(ConfigError, match=r"script nope: no such file; a training function that takes the Run"):
        check_script("nope")
    with pytest.raises(ConfigError, match=r"-m no_such_pkg.mod: no module named"):
        check_script("-m no_such_pkg.mod")
    with pytest.raises(ConfigError, match=r"-m '1x': expected a module name"):
        check_script("-m 1x")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["run", "tests/fixtures/tiny_train.py:train", "--", "--lr", "1"], "is a function that takes the Run"),
        (["run"], "TARGET: missing"),
        (["exec", "best.yaml", "tests/fixtures/tiny_train.py:train"], "exec runs a script"),
        (["run", "no_such_script.py"], "script no_such_script.py: no such file"),
    ],
)
def test_a_command_line_that_cannot_run_is_answered_with_status_2(args: list[str], says: str) -> None:
    done = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert done.exit_code == 2, done.output
    assert says in done.output


def test_a_baseline_the_input_failed_is_bad_input_in_one_line_and_one_the_code_failed_is_not() -> None:
    import dataclasses

    from autotune.tuner._options import baseline_failed
    from standings import trial

    said = "train.py has no training loop: it built no DataLoader, ... (autotune measures ...); its last lines: done"
    row = dataclasses.replace(trial(0, None, "crashed"), reason=f"NotTunable: {said}\nTraceback (most recent ...")
    bad = baseline_failed(row)
    assert bad.status == 2 and str(bad) == said  # the traceback is autotune's, not news to the user
    exited = dataclasses.replace(row, reason="ScriptExited: train.py -- --bogus exited with status 2; its last ...")
    assert baseline_failed(exited).status == 2
    code = dataclasses.replace(row, reason="ZeroDivisionError: division by zero\nTraceback ...")
    failed = baseline_failed(code)
    assert failed.status == 1 and "your code as written" in str(failed) and "Traceback" in str(failed)


def test_an_error_inside_autotune_is_one_line_with_its_own_status_and_the_saved_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import autotune.production._export

    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path))

    def broken(*args, **kwargs):
        raise TypeError("unsupported operand type(s) for /: 'float' and 'NoneType'")

    monkeypatch.setattr(autotune.production._export, "load", broken)
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    done = CliRunner().invoke(cli, ["exec", "best.yaml", str(script)])
    assert done.exit_code == 4
    (line,) = [text for text in done.output.splitlines() if text.startswith("autotune: internal error")]
    assert "TypeError: unsupported operand type(s) for /" in line
    saved = Path(line.split("the traceback is in ")[1].split(": please")[0])
    assert saved.parent == tmp_path / "errors" and "Traceback (most recent call last)" in saved.read_text()
