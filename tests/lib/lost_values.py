"""The check across studies (issue 62): no study spends more than one trial on a knob value that
ran under half the baseline's speed, unless it says why.

Read from a finished study's real Optuna storage, as ``autotune show`` reads it
(``autotune.tuner._standing.standing``): each trial's loop samples/s (user attr ``metrics``), the
values it ran (``sampled``, else ``config``), its kind, its doubt, and the params it was enqueued
with (Optuna's ``fixed_params``). It does not call the rule that holds such a value
(``autotune.tuner._one_loss``), whose terms it shares: it looks at what the study spent, with
hindsight (a value that ran fast anywhere in the study is no loss).

- A value is a categorical knob's (the storage's distributions: an int range's values are too
  many to repeat), other than the baseline's own.
- It lost when its first trial with a believed figure (no doubt recorded) ran under half the
  baseline's loop median, no trial with it ran at half or more, and no other knob explains
  that first trial: not compile (a loop still compiling is compile's to judge: the issue's own
  exception), nor another value of it that never ran at half or more either, where that one
  can explain this one: any value can explain a loader's, transfer's or optimizer's value (a
  prefetch thread beside 4 workers that start slowly on a small dataset), only another
  step-changing one (``autotune.tuner._one_loss.STEP_STAGES``: precision, the model, a
  backend flag) a step-changing one (bf16 is not explained by the workers drawn beside it).
- Every later trial that ran it is spent on it, but a repeat of one config (a confirmation, a
  measuring again) is not a trial of its own. A follow-up says why by its kind and the trial
  it starts from (``retry of 3``, ``more workers of 5``); a draw whose value was enqueued (a
  test's, a user's ``enqueue_trial``) says ``enqueued``; a draw made before the first trial
  ended (Optuna's ``datetime_start`` and ``datetime_complete``: tuners or ``--jobs`` slots side
  by side, which cannot know a loss not yet measured) says ``drawn while trial N ran``; any
  other draw says nothing.

Unit-tested on hand-built in-memory storages (tests/unit/test_lost_values.py); called on every
store a test in tests/study leaves (tests/conftest.py) and printed by the benchmarks that run
studies (benchmarks/_spent.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

#: Under this share of the baseline's loop samples/s, a first trial is a clear loss (the issue's "half").
HALF = 0.5


@dataclasses.dataclass(frozen=True)
class Spent:
    """Trials a study spent on ``knob=value`` after its first trial ran under half the baseline's speed.

    Attributes:
        knob, value: The knob and its value as people read it (``amp``, ``bf16``).
        trials: The first (slow) trial, then each later one that ran the value.
        speeds: Each one's loop samples/s over the baseline's (None: it measured none).
        why: Per later trial, why the study ran it (empty: it does not say).
        base: The baseline's loop samples/s.
    """

    knob: str
    value: str
    trials: tuple[int, ...]
    speeds: tuple[float | None, ...]
    why: tuple[str, ...]
    base: float

    @property
    def unsaid(self) -> tuple[int, ...]:
        """The later trials the study ran the value in without saying why."""
        return tuple(n for n, why in zip(self.trials[1:], self.why, strict=True) if not why)

    def line(self) -> str:
        """One line a person reads: ``amp=bf16: trials 1 (15%), 3 (16%), 5 (14%) of the
        baseline's 1,000 samples/s; unsaid: 3, 5``."""
        shares = ", ".join(
            f"{n} ({'-' if s is None else f'{s:.0%}'}{f'; {w}' if w else ''})"
            for n, s, w in zip(self.trials, self.speeds, ("first", *self.why), strict=True)
        )
        return f"{self.knob}={self.value}: trials {shares} of the baseline's {self.base:,.0f} samples/s" + (
            f"; unsaid: {', '.join(map(str, self.unsaid))}" if self.unsaid else ""
        )


def spent_on_losses(study: optuna.Study) -> list[Spent]:
    """Every value of ``study`` that lost (see the module) and was run again; the ones run again
    without a reason have a non-empty ``unsaid``."""
    from autotune.core._knobs import KNOBS, show_value
    from autotune.tuner._one_loss import STEP_STAGES
    from autotune.tuner._standing import read_standing

    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    standing = read_standing(study)
    base = standing.base
    rate = base and (base.loop_median or base.first.samples_per_s)
    if base is None or not rate:
        return []
    # (the baseline's values: its config's, PyTorch's defaults for the rest, and its batch as the space draws it)
    own = (
        {k: show_value(knob.default) for k, knob in KNOBS.items() if knob.default is not None}
        | {k: show_value(v) for k, v in base.first.config.items() if v is not None}
        | {"batch_size": "1x"}
    )
    categorical = {
        name
        for t in trials.values()
        for name, dist in t.distributions.items()
        if type(dist).__name__ == "CategoricalDistribution"
    }

    def value(row: Any, knob: str) -> str | None:
        v = row.sampled.get(knob, row.config.get(knob))
        return None if v is None else show_value(v)

    rows = [r for r in standing.rows if not r.baseline]

    def compiled(row: Any) -> bool:
        return value(row, "compile") not in (None, "off", own.get("compile"))

    fast = {
        (k, v)
        for r in rows
        if r.samples_per_s and r.doubt is None and r.samples_per_s >= HALF * rate
        for k in KNOBS
        if (v := value(r, k)) is not None
    }

    def cleared(knob: str, shown: str) -> bool:
        return (knob, shown) in fast

    def explained(row: Any, knob: str) -> bool:
        others = [
            k for k in KNOBS if k != knob and (v := value(row, k)) not in (None, own.get(k)) and not cleared(k, v)
        ]
        if KNOBS[knob].stage in STEP_STAGES:
            return any(KNOBS[k].stage in STEP_STAGES for k in others)
        return bool(others)

    out = []
    for knob in sorted(categorical):
        for shown in sorted({v for r in rows if (v := value(r, knob)) is not None and v != own.get(knob)}):
            runs = [r for r in rows if value(r, knob) == shown and not r.kind.repeats]
            first = next((r for r in runs if r.samples_per_s and r.doubt is None), None)
            if first is None or first.samples_per_s >= HALF * rate or compiled(first):
                continue
            if cleared(knob, shown) or explained(first, knob):
                continue
            later = [r for r in runs if r.number > first.number]
            if not later:
                continue
            fixed = [trials[r.number].system_attrs.get("fixed_params", {}) for r in later]
            known = trials[first.number].datetime_complete  # (when its loss could be known)
            out.append(
                Spent(
                    knob,
                    shown,
                    (first.number, *(r.number for r in later)),
                    tuple(r.samples_per_s / rate if r.samples_per_s else None for r in (first, *later)),
                    tuple(
                        _why(r, knob in f, first.number, known, trials[r.number].datetime_start)
                        for r, f in zip(later, fixed, strict=True)
                    ),
                    rate,
                )
            )
    return out


def _why(row: Any, enqueued: bool, first: int, known: Any, started: Any) -> str:
    """Why a study ran a lost value again, as its storage says: a follow-up's kind (``retry of 3``,
    ``more workers of 5``), a value enqueued (by a test, a user), a draw made before the first
    trial ended (``started`` before ``known``: tuners or slots side by side); empty where it
    does not say."""
    from autotune.core._kinds import Kind

    if row.kind is not Kind.SAMPLED:
        return row.kind.label + (f" of {row.of}" if row.of is not None else "")
    if enqueued:
        return "enqueued"
    if known is None or (started is not None and started < known):
        return f"drawn while trial {first} ran"
    return ""


def studies_in(storage: Any) -> Iterable[optuna.Study]:
    """Every study of an Optuna ``storage`` (a storage object or an RDB URL)."""
    import optuna

    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        yield optuna.load_study(study_name=summary.study_name, storage=storage)


def check_run(args: Iterable[str], cwd: Path) -> None:
    """Fail (AssertionError) where the study an ``autotune run`` command line ran in ``cwd`` to
    its end, on the ``--storage`` it was given, spent a trial on a lost value without saying why.
    Called as the run ends, while its storage answers (a test may stop its server next); a store
    folder's journal is checked when the test ends (``check_journals``)."""
    args = list(args)
    if "run" in args and "--storage" in args[:-1]:
        where = args[args.index("--storage") + 1]
        fail_on(_lines(where if "://" in where else cwd / where))


def check_journals(folder: Path | None) -> None:
    """Fail (AssertionError) where a study of a store folder under ``folder`` (its
    ``optuna.journal``) spent a trial on a lost value without saying why."""
    fail_on([line for path in sorted(folder.rglob("optuna.journal")) for line in _lines(path)] if folder else [])


def fail_on(lines: list[str]) -> None:
    assert not lines, "a study spent more than one trial on a value that ran under half the baseline's speed:\n" + (
        "\n".join(lines)
    )


def _lines(where: str | Path) -> list[str]:
    """One line per value a study of the storage ``where`` (a journal file, an RDB URL) ran again
    without saying why, named by its storage and study."""
    import optuna
    from optuna.storages.journal import JournalFileBackend

    if "://" in str(where):
        from tuners import storage_of  # (one pool per database: tests/lib/tuners.py)

        storage = storage_of(str(where))
    elif Path(where).exists():
        storage = optuna.storages.JournalStorage(JournalFileBackend(str(where)))
    else:
        return []  # (a journal the run never made: it stopped before its study)
    return [
        f"{where} {study.study_name}: {s.line()}"
        for study in studies_in(storage)
        for s in spent_on_losses(study)
        if s.unsaid
    ]
