"""A precision this machine runs far slower than another: stop drawing it.

Precision acts on nearly every step the model takes, so its cost multiplies whatever
the other knobs do. On a CPU without native bf16 (AVX2, no ``avx512_bf16``) bf16
autocast ran jpeg about 4x and the ResNet runner about 8x slower than fp32
(benchmarks/results/reach.md), and a 16-trial study that drew bf16 in 11 of its
trials (its first ten draws are random) spent them on configs that could not win.

So once ``DOMINATED_AFTER`` trials of one ``amp`` value have a believed figure (complete,
judged diverged, or pruned: each is a real speed) and the fastest of them is under
``DOMINATED_BELOW`` of the fastest trial of another value that could win (complete,
believed, not diverged), that value is done. When one value is left, the study holds
``amp`` at it for its later trials, and says so once. With three values (on a GPU: off,
bf16, fp16) and one done, the other two are still drawn (an Optuna categorical keeps its
choices for the whole study), until a second one is done too.

It reads only the study's records, so every tuner on a study agrees on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from autotune.core._outcome import Outcome

KNOB = "amp"
#: Trials of a value, each with a believed figure, before it can be done.
DOMINATED_AFTER = 3
#: Share of the fastest winnable trial of another value under which a value's fastest
#: trial has it done. Other knobs move a figure too (batch size, workers): half leaves
#: them room, and bf16 without native support runs at an eighth to a quarter.
DOMINATED_BELOW = 0.5

_FIGURES = (Outcome.COMPLETE.value, Outcome.DIVERGED.value, Outcome.PRUNED.value)


@dataclasses.dataclass(frozen=True)
class Hold:
    """``amp`` held at ``value`` from now on, and why."""

    value: str
    why: str


def value_of(row: Any) -> Any:
    """The ``amp`` a trial ran with: what it drew, else its config's (a held or own value)."""
    return row.sampled.get(KNOB, row.config.get(KNOB))


def precision_hold(rows: Iterable[Any], choices: Sequence[str], believed: Callable[[Any], bool]) -> Hold | None:
    """The value to hold ``amp`` at, when every other of ``choices`` is done (see the
    module), else None. ``believed(row)``: whether a row's figure may count (a noisy one
    may not)."""
    rows = [r for r in rows if r.samples_per_s and r.outcome in _FIGURES and believed(r)]
    done: dict[str, str] = {}
    for value in choices:
        mine = [r for r in rows if value_of(r) == value]
        rivals = [r for r in rows if r.reliable and value_of(r) not in (value, None)]
        if len(mine) < DOMINATED_AFTER or not rivals:
            continue
        best_mine = max(mine, key=lambda r: r.samples_per_s)
        rival = max(rivals, key=lambda r: r.samples_per_s)
        if best_mine.samples_per_s < DOMINATED_BELOW * rival.samples_per_s:
            done[value] = (
                f"its {len(mine)} {value} trials ran at most {best_mine.samples_per_s:,.0f} samples/s, "
                f"{best_mine.samples_per_s / rival.samples_per_s:.0%} of trial {rival.number}'s "
                f"{rival.samples_per_s:,.0f} ({KNOB}={value_of(rival)})"
            )
    left = [value for value in choices if value not in done]
    if len(left) != 1 or not done:
        return None
    return Hold(left[0], f"{KNOB} held at {left[0]}: " + "; ".join(done.values()))
