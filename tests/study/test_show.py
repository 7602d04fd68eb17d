"""``autotune show`` reads anywhere (issue 59): at 80 columns, or in a pipe (which rich gives 80
columns), it wraps cells at their spaces or moves the knobs below instead of cutting a word
(``sampl…``, ``complete (noisy) (remeasure) (= …``), and writes plain text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import FIXTURES, SHORT_TRIALS, autotune

TARGET = f"{FIXTURES / 'tiny_train.py'}:train"


@pytest.fixture(scope="module")
def noisy_store(tmp_path_factory) -> Path:
    """A study whose every figure is noisy (``--max-spread 0``: two windows never run at one
    rate), each measured again at once: the longest outcome cells show writes, e.g.
    ``complete (noisy) (remeasure) (= 1)``."""
    cwd = tmp_path_factory.mktemp("show")
    done = autotune(
        "run",
        TARGET,
        "--trials",
        "3",
        "--study",
        "w",
        "--space",
        "loader",
        *SHORT_TRIALS,
        "--max-spread",
        "0",
        "--remeasure",
        "1",
        "--quiet-wait",
        "0",
        cwd=cwd,
    )
    assert done.returncode == 0, done.stderr
    return cwd


def _words(text: str) -> set[str]:
    """Its words, without the punctuation a line of its own adds (``base 0:``, ``varied:``) and
    the rule under the heads (as long as the table is wide)."""
    return {w.rstrip(":,;") for w in text.split() if set(w) != {"─"}}


def test_show_at_80_columns_or_in_a_pipe_cuts_no_word(noisy_store: Path) -> None:
    trials = json.loads(autotune("show", "--json", cwd=noisy_store).stdout)["trials"]
    whole = autotune("show", cwd=noisy_store, env={"COLUMNS": "400"}).stdout  # nothing to wrap at 400
    assert "(remeasure)" in whole and "(noisy)" in whole, whole  # the long cells are there to fit
    for columns in ("80", ""):  # COLUMNS=80, and a pipe without it (rich ignores an empty COLUMNS)
        out = autotune("show", cwd=noisy_store, env={"COLUMNS": columns})
        assert out.returncode == 0, out.stderr
        text = out.stdout
        assert "…" not in text and "\x1b" not in text, text  # no word cut, no control code
        assert max(len(line) for line in text.splitlines()) <= 80, text
        assert _words(whole) <= _words(text), sorted(_words(whole) - _words(text))
        for trial in trials:
            assert trial["outcome"] in _words(text)


def test_show_narrower_than_its_figures_gives_a_line_per_trial(noisy_store: Path) -> None:
    """At 50 columns the figures' columns do not fit even wrapped: a line per trial, each
    figure named, no word cut."""
    trials = json.loads(autotune("show", "--json", cwd=noisy_store).stdout)["trials"]
    text = autotune("show", cwd=noisy_store, env={"COLUMNS": "50"}).stdout
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 50, text
    for trial in trials:
        name = f"{'base ' if trial['baseline'] else ''}{trial['number']}"
        assert any(
            line.lstrip().startswith(f"{name}: {trial['outcome']}")
            or line.lstrip().startswith(f"{name} *: {trial['outcome']}")
            for line in text.splitlines()
        ), text
    assert "samples/s" in text and "knobs that varied:" in text
