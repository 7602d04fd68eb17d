"""What the live view of a study shows, as data: one row per config (its re-runs update it), each
kind of note once, and a summary of about a dozen lines (``autotune._terminal`` draws them).

The full lines stay where they were: ``autotune run -v`` and a run without a terminal print them,
and ``autotune show``, the MLflow runs and ``autotune report`` hold every figure.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core._kinds import Kind
from autotune.core._knobs import show_value
from autotune.core._outcome import Outcome, headline
from autotune.tuner._confirm import UNFINISHED

if TYPE_CHECKING:
    from autotune.stores._records import TrialRow
    from autotune.tuner._confirm import Group
    from autotune.tuner._standing import Standing

#: The summary's length in the live view: the winner, its time, spread, limit, config, export, next.
SUMMARY_LINES = 12
_NUMBER = re.compile(r"\d[\d,.]*")
_DROPPED = re.compile(r"^(\w+): dropped (.+?) \(")


def note_kind(line: str) -> str:
    """What a note says, without its figures and trial numbers: the notes the live view prints once.

    >>> note_kind("trial 2: noisy: other processes used 30% of its CPUs") == note_kind("trial 13: noisy: "
    ...     "other processes used 88% of its CPUs")
    True
    """
    text = _NUMBER.sub("#", line.strip())
    text = re.sub(r"^trial #:? ", "", text)
    return " ".join(text.split()[:4])


class Notes:
    """Which notes the live view prints: the first of each kind (``note_kind``), and the capability
    drops at a study's start as one line (``autotune doctor`` says each one's why)."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._dropped: list[str] = []
        self.held = 0  # notes not printed: a kind already shown

    def admit(self, line: str) -> list[str]:
        """The lines to print now for the note ``line`` (none: a kind already shown, or a drop held)."""
        drop = _DROPPED.match(line)
        if drop:
            self._dropped.append(f"{drop[1]}={drop[2].strip(chr(39))}")
            return []
        shown = self.flush()
        kind = note_kind(line)
        if kind in self._seen:
            self.held += 1
            return shown
        self._seen.add(kind)
        return [*shown, line]

    def flush(self) -> list[str]:
        """The drops held so far, as one line (none held: none)."""
        if not self._dropped:
            return []
        line = f"not on this machine (autotune doctor says why): {', '.join(self._dropped)}"
        self._dropped = []
        return [line]


def changed(config: Mapping[str, Any], baseline: Mapping[str, Any]) -> str:
    """The knobs whose value differs from the baseline's, as ``name=value`` words."""
    diff = {k: v for k, v in config.items() if baseline.get(k) != v}
    return " ".join(f"{k}={show_value(v)}" for k, v in diff.items())


def outcome_of(row: TrialRow) -> str:
    """One word for how a run ended: its outcome, or why a complete run's figure is not believed
    (``noisy``, ``short``)."""
    if row.outcome != Outcome.COMPLETE.value or not row.doubt:
        return row.outcome
    return headline(row.doubt).partition(":")[0].strip() or row.outcome


@dataclasses.dataclass
class Line:
    """One row of the live table: a config, its runs so far, and where its latest stands."""

    number: int
    why: str = ""  # how it came to run, beside sampled: "baseline", "retry of 1"
    runs: int = 0
    outcome: str = "starting"
    speedup: str = ""
    limit: str = ""
    knobs: str = ""
    best: bool = False

    def cells(self) -> tuple[str, ...]:
        """The row as the table's columns: trial (and its runs), outcome, speedup, limit, knobs."""
        runs = f" x{self.runs}" if self.runs > 1 else ""
        knobs = f"({self.why}) {self.knobs}".strip() if self.why and self.why != "baseline" else self.knobs
        same = "(baseline)" if self.why == "baseline" else "(the baseline's values)"
        return f"{self.number}{runs}", self.outcome, self.speedup, self.limit, knobs or same


class Board:
    """The live table's rows: a trial that runs a config again (a confirmation, a re-measure)
    updates its first trial's row instead of adding one."""

    HEADS = ("trial", "outcome", "speedup", "limit", "knobs (vs baseline)")
    _RIGHT = 2  # the speedup column, aligned on its figures

    def __init__(self) -> None:
        self.lines: dict[int, Line] = {}
        self._row_of: dict[int, int] = {}  # trial -> the row that shows it
        self.since: dict[int, float] = {}  # running trial -> when it started (time.monotonic)
        self._base: dict[str, Any] | None = None  # the baseline's config, once it ended
        self.best = ""  # "best 2.01x (trial 4)"
        self.ends: float | None = None  # when the study should end (time.monotonic), as last estimated

    def started(
        self, number: int, kind: Kind, of: int | None, knobs: Mapping[str, Any], index: int, total: int
    ) -> None:
        key = of if kind.repeats and of is not None else number
        self._row_of[number] = key
        self.since[number] = time.monotonic()
        new = key not in self.lines  # (a re-run of a trial an earlier invocation ran: its row too)
        line = self.lines.setdefault(key, Line(key))
        if key == number:
            line.why = (
                "baseline"
                if kind is Kind.BASELINE
                else ""
                if kind is Kind.SAMPLED
                else f"{kind.label} of {of}"
                if of is not None
                else kind.label
            )
        if key == number or new:
            line.knobs = (
                changed(knobs, self._base)
                if self._base is not None
                else " ".join(f"{k}={show_value(v)}" for k, v in knobs.items())
            )
        line.outcome = f"{kind.value} {index + 1}/{total}" if kind.repeats else "starting"

    def window(self, number: int, index: int | None) -> None:
        """Trial ``number`` measured its window ``index`` (None: it is warming up)."""
        line = self.lines.get(self._row_of.get(number, -1))
        if line is not None:
            line.outcome = "warmup" if index is None else f"window {index + 1}"

    def done(self, row: TrialRow, standing: Standing, seconds_left: float = 0.0) -> None:
        key = self._row_of.pop(row.number, row.number)
        self.since.pop(row.number, None)
        self.ends = time.monotonic() + seconds_left if seconds_left else None
        line = self.lines.setdefault(key, Line(key))
        base = standing.base.first if standing.base else None
        if base is not None:
            self._base = base.config
        line.outcome = outcome_of(row)
        group = next((g for g in standing.groups if g.first.number == key), None)
        # its runs that ended, earlier invocations' included (a resumed study's)
        line.runs = sum(1 for r in group.runs if r.outcome not in UNFINISHED) if group else line.runs + 1
        speedup = standing.speedup(group) if group is not None and group.rates else None
        if speedup is None:  # not believed (yet): its own figure (over the baseline's median), marked
            own = next((r.speedup for r in standing.rows if r.number == row.number), None) or row.speedup
            line.speedup = f"({own:.2f}x)" if own else ""
        else:
            line.speedup = f"{speedup:.2f}x"
            if line.outcome != Outcome.COMPLETE.value and group is not None and group.rates:
                line.outcome = f"{line.outcome}, ranked"  # an earlier run of it is believed
        bound = (group.lead if group is not None else row).bottleneck or row.bottleneck
        line.limit = bound.verdict if bound is not None else ""
        if row.outcome != Outcome.COMPLETE.value and row.outcome not in (Outcome.PRUNED.value,):
            said = headline(row.reason).partition(":")[0]  # its kind, where the reason names one (oom_host: ...)
            line.limit = said if said and " " not in said else ""
        if base is not None:  # (a re-run runs its trial's config unchanged: the same knobs)
            line.knobs = changed(row.config, base.config) if key != base.number else ""
            line.why = "baseline" if key == base.number else line.why
        win = standing.decision.winner
        for each in self.lines.values():
            each.best = win is not None and each.number == win.first.number
        speedup = standing.speedup(win) if win else None
        self.best = f"best {speedup:.2f}x (trial {win.first.number})" if win and speedup else ""

    def table(self, width: int, last: int | None = None) -> list[tuple[str, bool]]:
        """The table as lines of at most ``width`` characters, each with whether it is the
        winner's; ``last``: only the header and the last rows (a terminal's height)."""
        lines = list(self.lines.values())
        rows = [self.HEADS, *(line.cells() for line in lines)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(self.HEADS) - 1)]
        said = []
        for row in rows:
            cells = [
                cell.rjust(w) if i == self._RIGHT else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))
            ]
            said.append(fit("  ".join([*cells, row[-1]]).rstrip(), width))
        marks = [False, *(line.best for line in lines)]
        shown = list(zip(said, marks))
        if last is not None and len(shown) > max(last, 2) + 1:  # (a very short terminal: still the last row)
            last = max(last, 2)
            hidden = len(shown) - last
            shown = [
                shown[0],
                (fit(f"... {hidden} more above (all of them at the end)", width), False),
                *shown[-(last - 1) :],
            ]
        return shown

    def status(self, width: int, now: float | None = None) -> str:
        """The line under the table (see ``status_line``), at ``now`` (time.monotonic)."""
        return status_line(self.best, self.ends, self.since, time.monotonic() if now is None else now, width)


def status_line(best: str, ends: float | None, since: Mapping[int, float], now: float, width: int) -> str:
    """Each running trial's seconds so far (``since``: when each started, on the clock of
    ``now``), the best so far and the time left until ``ends`` (none once past), in ``width``
    characters.

    >>> status_line("best 2.01x (trial 4)", 177.4, {5: 100.0}, 112.4, 80)
    'running: trial 5 12 s   best 2.01x (trial 4)   ~1m05s left'
    """
    running = ", ".join(f"trial {n} {now - at:.0f} s" for n, at in since.items())
    left = ends - now if ends is not None else 0.0
    said = f"~{int(left // 60)}m{int(left % 60):02d}s left" if left >= 1 else ""
    return fit("   ".join(filter(None, [f"running: {running}" if running else "", best, said])), width)


def fit(line: str, width: int) -> str:
    """``line`` in at most ``width`` characters: cut with an ellipsis where it is longer.

    >>> fit("num_workers=2 fused_optimizer=true", 20)
    'num_workers=2 fused…'
    """
    return line if len(line) <= width else line[: max(width - 1, 0)] + "…"


def short_summary(name: str, standing: Standing, store: Path) -> list[str]:
    """The summary the live view ends with, in at most ``SUMMARY_LINES`` lines: the winner and its
    gain in wall time, the spread, what limits it, its config, the export and the next commands
    (``autotune._terminal.summary_lines``: every line, with ``-v`` or without a terminal)."""
    from autotune.tuner._loss_lines import to_loss_of
    from autotune.tuner._standing import findings

    first, *rest = findings(standing)
    win, base = standing.decision.winner, standing.base
    if win is None:
        return [f"study {name}: {first}"]
    keep = ("no config beat", "not ranked", "unreliable")
    if base is None or win is base or not standing.speedup(win) or to_loss_of(win):  # findings says it best
        lines = [f"best: {first}"]
    else:
        lines = [_gain(win, base, standing)]
    lines += [line for line in rest if line.startswith(("runs:", *keep))]
    if win.lead.bottleneck is not None:
        lines.append(f"limit: {win.lead.bottleneck.why.partition('; ')[0]}")  # (the rest: which bounds went unused)
    if base is not None and win is not base:
        lines.append(f"config: {changed(win.lead.config, base.first.config) or '(the baseline)'}")
    lines += [
        f"exported: {store / 'exports' / (name + '.yaml')}",
        "next: autotune export -o best.yaml | autotune show | autotune report",
        "(every figure: autotune run -v, autotune show, autotune ui)",
    ]
    return lines[:SUMMARY_LINES]


def _gain(win: Group, base: Group, standing: Standing) -> str:
    """The winner's gain as the time a training takes: its whole run's, else the same samples'."""
    speedup = standing.speedup(win) or 1.0  # (the caller checked it has one)
    spread = win.spread if win.confirmed else win.lead.metrics.get("samples_per_s_spread", 0.0)
    if win.run_s and base.run_s:
        said = f"its whole run in {win.run_s:.1f} s against {base.run_s:.1f} s as written"
    else:
        said = f"the same training in {1 / speedup:.0%} of the time ({win.median:,.0f} vs {base.median:,.0f} samples/s)"
    return f"best: trial {win.first.number}, {speedup:.2f}x the baseline, ±{spread / 2:.0%}: {said}"
