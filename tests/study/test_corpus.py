"""The corpus's fast subset: public training scripts, unmodified, run by ``python`` and by
``autotune exec`` of two exports (the script's own config, loader knobs only) must print the
same results, write the same files byte for byte and exit alike (``benchmarks/corpus.py``).

The scripts come from a local git copy of pytorch/examples (``AUTOTUNE_CORPUS_EXAMPLES``, or
``benchmarks/corpus/upstream/examples``); without one the equivalence tests are skipped, saying so.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench_modules import BENCH, load_module

ROOT = Path(__file__).resolve().parents[2]
corpus = load_module("corpus_harness", BENCH / "corpus.py")

#: The fastest scripts that need no torchvision: a language model without a DataLoader (about 7 s
#: under python here) and a regression without an optimizer that seeds nothing (about 5 s).
#: time_sequence_prediction is left to the benchmark: 25 to 135 s a run here, as loaded as the host was.
FAST = ("word_language_model", "regression")
TABLE, ENTRIES = corpus.load_corpus()
BY_NAME = {e.name: e for e in ENTRIES}


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    source = corpus.examples_source(None)
    if source is None:
        pytest.skip(f"no copy of pytorch/examples: set {corpus.EXAMPLES_ENV} to a git clone of it")
    return corpus.Layout(TABLE, source, tmp_path_factory.mktemp("corpus"))


@pytest.mark.parametrize("name", FAST)
def test_a_public_script_runs_alike_under_python_and_autotune_exec(layout, name) -> None:
    entry = BY_NAME[name]
    assert not entry.torchvision and entry.fast
    result = corpus.check(entry, layout, sys.executable)
    assert result.rc["python"] == 0, result.tail["python"]
    assert result.diffs == {"own": [], "loader": []}, (result.diffs, result.tail)


def _ran(root: Path, rc: int, stdout: str, files: dict[str, bytes]) -> corpus.Ran:
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    return corpus.Ran(rc, stdout, "", {p: corpus.hashlib.sha256(d).hexdigest() for p, d in files.items()}, 1.0, root)


def test_the_comparison_names_what_differs(tmp_path) -> None:
    """autotune's lines and declared timings are left out; a different number, a missing or
    changed file and an exit status are each named."""
    entry = BY_NAME["word_language_model"]  # masks 'ms/batch N' and 'time: Ns'
    plain = _ran(
        tmp_path / "a",
        0,
        "| ms/batch 41.48 | loss 2.57\n| time:  3.68s |\n",
        {"run/model.pt": b"w", "run/log.txt": b"x"},
    )
    same = _ran(
        tmp_path / "b",
        0,
        "autotune: running main.py\n| ms/batch 210.74 | loss 2.57\n| time:  9.01s |\n",
        {"run/model.pt": b"w", "run/log.txt": b"x"},
    )
    assert corpus.compare(entry, sys.executable, plain, same) == []
    other = _ran(tmp_path / "c", 1, "| ms/batch 41.48 | loss 2.58\n| time:  3.68s |\n", {"run/model.pt": b"v"})
    diffs = corpus.compare(entry, sys.executable, plain, other)
    assert diffs[0] == "exit status 0 vs 1"
    assert diffs[1].startswith("stdout line 1: '| <t> | loss 2.57' vs '| <t> | loss 2.58'")
    assert diffs[2] == "files not written: run/log.txt"
    assert diffs[3].startswith("run/model.pt: bytes differ, 1 vs 1 B (its tensors unreadable)")
    # a script that seeds nothing: numbers masked, files compared by name only
    unseeded = BY_NAME["regression"]
    assert (
        corpus.compare(
            unseeded,
            sys.executable,
            plain,
            _ran(
                tmp_path / "d",
                0,
                "| ms/batch 1.0 | loss 9.99\n| time:  1.00s |\n",
                {"run/model.pt": b"v", "run/log.txt": b"y"},
            ),
        )
        == []
    )


def test_a_studys_end_is_judged_by_issue_58s_done_when() -> None:
    """An answer, or a one-line refusal within 30 s; never no complete trial, a traceback or a
    start-up timeout (seconds, text, answer line -> verdict)."""
    cases = [
        (0, 300.0, "best: trial 0 (the baseline: your code as written)", "best: trial 0", "an answer"),
        (2, 12.0, "autotune: error: main.py ended after 2 training steps", None, "a one-line refusal within 30 s"),
        (2, 72.0, "autotune: error: main.py trains in child processes", None, "**late**: a one-line refusal, in 72 s"),
        (1, 100.0, "timeout startup: no batch after 60 s (imports", None, "**bad**: a start-up timeout"),
        (0, 900.0, "study main: no complete trial", None, "**bad**: no complete trial"),
        (1, 5.0, "Traceback (most recent call last):\n  File", None, "**bad**: a traceback"),
        (0, 1333.0, "study main: unreliable: no figure to rank", None, "**no answer**: unreliable"),
    ]
    for rc, seconds, text, answer, verdict in cases:
        assert corpus._study_verdict(rc, seconds, text, answer).startswith(verdict), (text, verdict)


def test_the_studies_page_says_issue_62s_check_for_each_study(tmp_path, monkeypatch) -> None:
    """Each study's store is read by issue 62's check (benchmarks/_spent.py): a store with a study
    that spent nothing on a lost value says so; a folder without a store has nothing to say."""
    import optuna
    from optuna.storages.journal import JournalFileBackend

    monkeypatch.syspath_prepend(str(BENCH))  # (the harness imports _spent by bare name, as run from benchmarks/)
    from _spent import spent_in

    assert spent_in(tmp_path) == []
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(tmp_path / "optuna.journal")))
    optuna.create_study(study_name="main", storage=storage)
    assert spent_in(tmp_path) == []
    entry = SimpleNamespace(name="mnist", cls="a DataLoader")  # (what the page reads of an Entry)
    ended = corpus.Study(0, 165.0, "best: trial 0", "an answer", "1.2-1.4", tmp_path / "mnist.log", [])
    page = corpus.studies_page(
        [(entry, ended)],
        {"trials": "6", "date": "d", "machine": "m", "autotune": "a", "pythons": "p", "command": "c"},
    )
    assert "- mnist: no value that ran under half the baseline's speed was run again (issue 62's check)" in page
