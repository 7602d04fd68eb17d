"""Issue 62's check on a benchmark's study (tests/lib/lost_values.py, the check every study test
ends with): the trials it spent on a knob value after that value's first trial ran under half the
baseline's speed, and whether it said why. The benchmarks that run studies print it."""

from __future__ import annotations

import sys
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "tests" / "lib"


def spent(store: Path, study: str) -> list[dict]:
    """Per value the study ran again after it lost: ``line`` (one line a person reads) and
    ``unsaid`` (the trials it ran it in without saying why); empty: none. ``store``: the study's
    store folder (its ``optuna.journal``)."""
    import optuna
    from optuna.storages.journal import JournalFileBackend

    if str(LIB) not in sys.path:
        sys.path.insert(0, str(LIB))  # (the suite's helpers, imported by name as the tests do)
    from lost_values import spent_on_losses

    storage = optuna.storages.JournalStorage(JournalFileBackend(str(store / "optuna.journal")))
    found = spent_on_losses(optuna.load_study(study_name=study, storage=storage))
    return [{"line": s.line(), "unsaid": list(s.unsaid)} for s in found]


def spent_in(store: Path) -> list[dict]:
    """``spent`` for every study in the store folder ``store`` (none stored: empty)."""
    import optuna
    from optuna.storages.journal import JournalFileBackend

    journal = store / "optuna.journal"
    if not journal.exists():
        return []
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(journal)))
    return [s for name in optuna.get_all_study_names(storage) for s in spent(store, name)]


def said(found: list[dict]) -> str:
    """The check's verdict in a sentence, for a page or a log.

    >>> said([])
    "no value that ran under half the baseline's speed was run again (issue 62's check)"
    >>> said([{"line": "amp=bf16: trials 1 (15%; first), 3 (16%) ...; unsaid: 3", "unsaid": [3]}])
    "**a value run again after it ran under half the baseline's speed, unsaid** (issue 62's check): amp=bf16: trials 1 (15%; first), 3 (16%) ...; unsaid: 3"
    """
    if not found:
        return "no value that ran under half the baseline's speed was run again (issue 62's check)"
    head = (
        "**a value run again after it ran under half the baseline's speed, unsaid**"
        if any(s["unsaid"] for s in found)
        else "a value run again after it ran under half the baseline's speed, each time saying why"
    )
    return f"{head} (issue 62's check): " + "; ".join(s["line"] for s in found)
