"""What a study said it would cost, and a line as soon as it is on pace for much more.

Once the baseline has run, the study says what its trials will cost (``cost_line``: every
run about as long as the baseline's). Runs take longer than that for reasons the study
learns as it goes: a config slower than the baseline measures the same samples for longer, a
compile, a trial that runs to its deadline, other tuners' turns. After each run the study
projects its own pace (its runs so far, over the time since the line); the first time that
projection passes ``OVER`` times what it said, it says so once, with the runs that took longest.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from autotune.core._kinds import Kind
from autotune.core._whole_runs import objective_lines
from autotune.tuner._confirm import CONFIRM_TOP
from autotune.tuner._training_shape import cost_line, cost_s, duration, shape_of

if TYPE_CHECKING:
    from autotune.stores._records import TrialRow
    from autotune.tuner._options import StudyOptions

#: A study on pace for more than this many times the cost it said, says so (issue 58: the cost
#: line holds within 1.5x of what the study takes, or the study says why as soon as it knows).
OVER = 1.5
#: Runs a projection needs before it speaks (one slow run alone may be the slowest there is).
MIN_RUNS = 2


def pace_line(said_s: float, runs: int, elapsed_s: float, done: Sequence[TrialRow], base_s: float | None) -> str | None:
    """One line where the study's runs since its cost line (``done``, in ``elapsed_s``) put it on
    pace for over ``OVER`` times the ``said_s`` it said for ``runs`` runs; None while it is not.
    ``base_s``: the baseline's own run time, to say which runs took longest against it.

    >>> from autotune.stores._records import TrialRow
    >>> rows = [TrialRow(n, False, "complete", "", {"duration_s": d}, {}, None, None) for n, d in ((1, 40.0), (2, 10.0))]
    >>> pace_line(100.0, 10, 50.0, rows, 10.0) is None  # 250 s on pace: 2.5x
    False
    >>> print(pace_line(100.0, 10, 50.0, rows, 10.0))
    this study is on pace for about 4.2 min, not the 1.7 min it said (2 of 10 runs took 50 s): trial 1 ran 4.0x the baseline's time
    >>> pace_line(100.0, 10, 20.0, rows, 10.0) is None  # 100 s on pace
    True
    """
    if not done or said_s <= 0 or (len(done) < MIN_RUNS and elapsed_s <= OVER * said_s):
        return None
    projected = max(elapsed_s, elapsed_s / len(done) * runs)
    if projected <= OVER * said_s:
        return None
    line = (
        f"this study is on pace for about {duration(projected)}, not the {duration(said_s)} it said "
        f"({len(done)} of {runs} runs took {duration(elapsed_s)})"
    )
    timed = [(r.metrics["duration_s"] / base_s, r) for r in done if base_s and r.metrics.get("duration_s")]
    slow = sorted((t for t in timed if t[0] >= OVER), key=lambda t: -t[0])[:2]
    if slow:
        line += ": " + ", ".join(
            f"trial {r.number} ran {ratio:.1f}x the baseline's time"
            + (f" ({r.outcome})" if r.outcome != "complete" else "")
            for ratio, r in slow
        )
    return line


@dataclasses.dataclass
class CostWatch:
    """Says the study's cost once its baseline has run (and, for whole runs, what they rank on),
    then its pace once it is on pace for over ``OVER`` times that (once)."""

    options: StudyOptions
    note: Callable[[str], None]
    said_s: float | None = None
    runs: int = 0
    since: float = 0.0
    base_s: float | None = None
    done: list[TrialRow] = dataclasses.field(default_factory=list)
    told: bool = False

    def after(self, row: TrialRow, recorded: bool) -> None:
        """After each run of this tuner: the cost line once the baseline (``row``, recorded by this
        tuner) has told the training's shape; then the pace, once."""
        shape = shape_of(row) if row.kind is Kind.BASELINE and recorded else None
        if shape is not None:
            trials = max(0, self.options.trials - 1)  # (its re-runs: of the top configs there can be, and of it)
            reruns = self.options.judge.confirm * (min(CONFIRM_TOP, trials) + 1)
            self.note(cost_line(shape, self.options.budget, trials, reruns))
            self.said_s, self.runs, self.since = (
                cost_s(shape, self.options.budget, trials + reruns),
                trials + reruns,
                time.monotonic(),
            )
            self.base_s = row.metrics.get("duration_s")
            for line in objective_lines(row.metrics, self.options.judge.horizon) if row.run_s else ():
                self.note(line)
            return
        if self.said_s is None or self.told:
            return
        self.done.append(row)
        paced = pace_line(self.said_s, self.runs, time.monotonic() - self.since, self.done, self.base_s)
        if paced is not None:
            self.told = True
            self.note(paced)
