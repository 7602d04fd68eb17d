"""autotune.tune from Python: a real study from a user's script, its Result, bad arguments."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import autotune
from autotune import ConfigError
from helpers import FIXTURES, cli_env

FIXTURE = FIXTURES / "tiny_train.py"
QUICK = dict(
    warmup=0.2, window=0.3, windows=2, ceiling_windows=0, confirm=0, max_load=1.0, max_spread=1000.0, whole_run=0
)  # (its fixture trains for ever: a baseline would run on for the minute it may run whole)


def _docstring_example() -> str:
    """The example in ``tune``'s docstring, as code (its ``>>>`` lines, comments dropped)."""
    lines = [line.strip()[4:] for line in autotune.tune.__doc__.splitlines() if line.strip().startswith(">>> ")]
    return "\n".join(re.sub(r"\s+# .*$", "", line) for line in lines)


def test_the_docstring_example_runs_a_study_from_a_script(tmp_path: Path) -> None:
    """The docstring's calls, in a user's script, on a tiny function the script imports:
    each trial imports that script again, which the ``__main__`` guard keeps from recursing."""
    example = _docstring_example()
    assert "autotune.tune(" in example and ".export(" in example
    example = example.replace('"runners/mnist.py:train", trials=8', f"train, trials=3, store='store', **{QUICK!r}")
    script = tmp_path / "tune_it.py"
    report = (
        'print("RESULT", json.dumps({"speedup": result.speedup, "spread": result.spread, '
        '"rows": result.rows, "str": str(result), "table": result.table(), '
        '"winner": result.winner.config.set_values(), "config": result.config}))'
    )
    script.write_text(
        "\n".join(
            [
                "import json, sys",
                "import autotune",
                f"sys.path.insert(0, {str(FIXTURE.parent)!r})",
                "from tiny_train import train",
                "",
                'if __name__ == "__main__":',
                textwrap.indent(example, "    "),
                "    " + report,
                "",
            ]
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert len(found["rows"]) == 3 and found["rows"][0]["baseline"]
    assert found["rows"][0]["outcome"] == "complete", found["table"]
    winners = [r for r in found["rows"] if r["winner"]]
    assert len(winners) == 1 and found["speedup"] == pytest.approx(winners[0]["speedup"])
    assert found["str"].startswith("study tiny_train:") and "samples/s" in found["str"]
    assert found["table"].splitlines()[0].split()[:4] == ["#", "outcome", "samples/s", "speedup"]
    assert len(found["table"].splitlines()) == 4
    assert (tmp_path / "best.yaml").exists()
    assert autotune.load(tmp_path / "best.yaml").config.set_values() == found["winner"]
    assert "best:" in done.stdout  # progress=True prints run's summary, too


def test_bad_arguments_name_the_argument_and_what_is_allowed(tmp_path: Path) -> None:
    for kwargs, said in [
        ({"trials": 0}, "trials=0: must be an integer >= 1"),
        ({"prune": 1.5}, "prune=1.5: must be a number >= 0 and <= 1"),
        ({"windows": 2.5}, "windows=2.5: must be an integer >= 1"),
        ({"divergence_tolerance": 0}, "divergence_tolerance=0: must be a number > 0"),
        # (nan passes every comparison: it once passed every bound)
        ({"window": float("nan")}, "window=nan: must be a finite number >= 0.05"),
        ({"ram_budget": float("inf")}, "ram_budget=inf: must be a finite number >= 0.01"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(said)):
            autotune.tune(f"{FIXTURE}:train", store=tmp_path, **kwargs)
    with pytest.raises(ConfigError, match="a lambda or a nested function"):
        autotune.tune(lambda run: None, store=tmp_path)
    with pytest.raises(ConfigError, match="defines no top-level 'nope'"):
        autotune.tune(f"{FIXTURE}:nope", store=tmp_path)
    assert not (tmp_path / "optuna.journal").exists()  # bad input creates nothing


def test_a_function_of_a_module_is_named_by_its_module() -> None:
    from autotune._api import target_of

    assert target_of(autotune.load) == "autotune.production._export:load"
    assert target_of("x.py:train") == "x.py:train"


def test_tune_inside_its_own_trial_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    """A script without the ``__main__`` guard would start a study in every trial."""
    from autotune.machine._launch import TRIAL_TAG_ENV

    monkeypatch.setenv(TRIAL_TAG_ENV, "some-trial")
    with pytest.raises(RuntimeError, match='if __name__ == "__main__"'):
        autotune.tune(f"{FIXTURE}:train")


def test_the_cli_has_tunes_options_and_defaults() -> None:
    """One source: ``autotune run`` takes exactly ``tune``'s options, with its defaults."""
    from autotune._api import DEFAULTS
    from autotune._cli import run

    context = run.make_context("run", ["x.py:train"])  # the values click passes when not given
    # target, args (a script's command line) and -m are the command line's way to say tune's target and args
    options = {
        name: value
        for name, value in context.params.items()
        if name not in ("target", "args", "module", "quiet", "verbose")
    }
    assert set(options) == set(DEFAULTS) - {"progress", "args"}
    assert {name: options[name] for name in options} == {name: DEFAULTS[name] for name in options}
    from autotune._api import LIMITS

    bounds = {p.name: (p.type.min, p.type.max) for p in run.params if p.name in LIMITS}
    assert bounds == {name: (low and low[0], high and high[0]) for name, (low, high) in LIMITS.items()}


def test_tune_without_progress_prints_nothing_and_logs_to_the_autotune_logger(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """``progress=False``: not a character on stdout or stderr (the trials' processes' included:
    captured at the file descriptors); the notes, each trial's end and the summary reach
    ``logging.getLogger("autotune")``, as Optuna's reach ``optuna``'s (issue 59)."""
    import logging

    caplog.set_level(logging.INFO, logger="autotune")
    result = autotune.tune(
        f"{FIXTURE}:train",
        trials=2,
        space="loader",
        seed=0,
        store=tmp_path / "store",
        progress=False,
        profile=False,
        warm_start=False,
        **QUICK,
    )
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    said = [record.getMessage() for record in caplog.records if record.name == "autotune"]
    assert any(line.startswith(f"study {result.study} on ") for line in said), said  # a note
    ends = [line for line in said if line.startswith(("trial 0 ", "trial 1 "))]
    assert [line.split()[:2] for line in ends] == [["trial", "0"], ["trial", "1"]], said  # each trial's end
    assert ends[0].startswith("trial 0 complete, ") and "samples/s" in ends[0], said
    assert said[-1] == "trials: autotune show   |   MLflow UI: autotune ui", said  # the summary's last
