"""Trial run names (autotune.stores._records.run_name): what the MLflow runs page shows of each trial
in the room its name column gives."""

from __future__ import annotations

import dataclasses

from autotune.core._kinds import Kind
from autotune.stores._records import run_name
from standings import trial


def named(row, winner: bool = False, speedup: float | None = None) -> str:
    return run_name(dataclasses.replace(row, speedup=speedup), winner)


def test_a_run_name_says_outcome_speedup_and_samples_per_second_in_about_24_characters() -> None:
    assert named(trial(3, 10535.0), winner=True, speedup=2.13) == "#3 WINNER 2.13x 10,535/s"
    assert named(trial(0, 4946.0), speedup=1.0) == "#0 base 1.00x 4,946/s"
    assert named(trial(0, 4946.0), winner=True, speedup=1.0) == "#0 WINNER base 1.00x 4,946/s"
    assert named(trial(4, 6010.0), speedup=1.21) == "#4 1.21x 6,010/s"  # complete: its figures say so
    assert named(trial(5, 1200.0, "pruned")) == "#5 pruned 1,200/s"
    assert named(trial(6, None, "crashed")) == "#6 crashed"
    assert named(trial(7, 9400.0, kind=Kind.CONFIRM, of=3), speedup=1.9) == "#7 1.90x 9,400/s (= #3)"
    noisy = trial(8, 900.0, doubt="noisy: other processes used 48% of its CPUs")
    assert named(noisy, speedup=0.9) == "#8 0.90x 900/s (noisy)"
    assert len(named(trial(13, 123456.0), winner=True, speedup=12.34)) <= 28  # a rare extreme
