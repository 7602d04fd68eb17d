"""What a study shows on the terminal while it runs and when it ends (rich, imported on use)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from autotune.core._kinds import Kind
from autotune.core._knobs import show_value
from autotune.core._outcome import Outcome, headline
from autotune.stores._records import signed_share
from autotune.tuner._live import Board, Notes, changed, status_line
from autotune.tuner._options import LOGGER, Reporter


def console(stderr: bool = False):
    """A rich console that wraps lines at the terminal's width, and not at all when piped
    (a log or ``grep`` wants whole lines, not rich's 80 columns)."""
    from rich.console import Console

    found = Console(stderr=stderr)
    if not found.is_terminal:
        found.soft_wrap = True
    return found


def interactive(out) -> bool:
    """Whether ``out`` draws for a person at a terminal: the live table and the short summary. Not a
    pipe, a log or CI, even with ``FORCE_COLOR`` set (colours there, but no cursor moves), nor a dumb
    terminal or ``TTY_INTERACTIVE=0`` (rich's ``is_interactive``)."""
    isatty = getattr(out.file, "isatty", None)
    try:
        return bool(out.is_interactive and isatty is not None and isatty())
    except ValueError:  # (a closed stream)
        return False


def summary_lines(name: str, standing, store: Path) -> list[str]:
    """The summary a study ends with: its findings (the first, ``best: ...``, or what stopped
    every figure from ranking), the data wait, the winner's config, the export and what next."""
    from autotune.tuner._standing import findings

    best = standing.best
    first, *rest = findings(standing)
    if best is None:  # nothing complete, or nothing believed: findings says which
        return [f"study {name}: {first}"]
    lines = [f"best: {first}", *rest]
    base = standing.base.first if standing.base else None
    if base:
        lines.append(
            f"data wait: {base.metrics.get('data_wait_frac', 0):.0%} of the baseline's "
            f"step time -> {best.metrics.get('data_wait_frac', 0):.0%}"
        )
    return [
        *lines,
        "config: " + (changed(best.config, base.config if base else {}) or "(the baseline's)"),
        f"exported: {store / 'exports' / (name + '.yaml')}  (autotune export -o best.yaml)",
        "trials: autotune show   |   MLflow UI: autotune ui",
    ]


def print_summary(name: str, standing, store: Path, verbose: bool = False) -> None:
    """The summary on stdout: about a dozen lines on a terminal (``autotune.tuner._live.short_summary``),
    every line with ``verbose`` (``run -v``) or without a terminal (a pipe, a log, CI)."""
    from rich.markup import escape

    from autotune.tuner._live import short_summary

    out = console()
    brief = interactive(out) and not verbose
    first, *rest = (short_summary if brief else summary_lines)(name, standing, store)
    if standing.best is None:
        out.print(f"[red]{escape(first)}[/red]")
        return
    out.print(f"\n[bold]{escape(first)}[/bold]")
    for line in rest:
        out.print(escape(line))


class _ConsoleHandler(logging.Handler):
    """Prints the ``autotune`` logger's records dim on a rich console, as the notes always were."""

    def __init__(self, console, shown: Callable[[str], list[str]] | None = None) -> None:
        super().__init__(logging.INFO)
        self.console = console
        self.shown = shown or (lambda line: [line])

    def emit(self, record: logging.LogRecord) -> None:
        from rich.markup import escape

        try:
            for line in self.shown(record.getMessage()):
                self.console.print(f"[dim]{escape(line)}[/dim]")
        except Exception:  # noqa: BLE001 (logging's rule: a handler reports its failure, never raises)
            self.handleError(record)


@contextlib.contextmanager
def notes_on(out, shown: Callable[[str], list[str]] | None = None) -> Iterator[None]:
    """The ``autotune`` logger's notes printed on the rich console ``out`` while the block runs
    (``autotune run``'s terminal, ``tune(progress=True)``'s), and only there: not propagated to
    the root logger, whose handlers an application set would print each line again. ``shown``:
    the lines to print for a note (``Progress.shown``: the live view prints each kind once)."""
    handler = _ConsoleHandler(out, shown)
    level, propagate = LOGGER.level, LOGGER.propagate
    LOGGER.addHandler(handler)
    LOGGER.setLevel(logging.INFO)
    LOGGER.propagate = False
    try:
        yield
    finally:
        LOGGER.removeHandler(handler)
        LOGGER.setLevel(level)
        LOGGER.propagate = propagate


class _View:
    """One frame of the live table: its rows as drawn, and a status line whose seconds are read
    when rich draws it (from its own thread: nothing here changes after it is built)."""

    def __init__(self, lines: list, board: Board, width: int) -> None:
        self.lines, self.width = lines, width
        self.best, self.ends, self.since = board.best, board.ends, dict(board.since)

    def __rich__(self):
        import time

        from rich.console import Group
        from rich.text import Text

        said = status_line(self.best, self.ends, self.since, time.monotonic(), self.width)
        return Group(*self.lines, Text(said, style="dim"))


class Progress(Reporter):
    """Progress on the terminal. On a terminal, a live table (``autotune.tuner._live.Board``):
    a row per config, each kind of note once. With ``verbose`` (``run -v``) or without a
    terminal (a pipe, a log, CI): every trial's full lines, as plain text.

    The full lines: trial n of N, each running trial's windows, best, time left. With ``--jobs``
    several trials run at once: the live status has a line for each, and a finished trial's lines
    are printed whole, never interleaved. Its notes go through the ``autotune`` logger, which
    ``notes_on`` prints on its console.
    """

    def __init__(self, verbose: bool = False) -> None:
        """``verbose``: every trial's full lines, and a line per measured window (``run -v``)."""
        import threading

        self.console = console(stderr=True)
        self._verbose = verbose
        self._status: Any = None  # (a rich Status while trials run, in the full lines' view)
        self._heads: dict[int, str] = {}  # running trial -> its head line
        self._states: dict[int, str] = {}
        self._lock = threading.Lock()  # slots report from their own threads
        self._board: Board | None = Board() if interactive(self.console) and not verbose else None
        self._notes = Notes()
        self._live: Any = None  # (a rich Live, once the first trial starts)

    def shown(self, note: str) -> list[str]:
        """The lines to print for ``note``: in the live table's view, each kind once."""
        return self._notes.admit(note) if self._board is not None else [note]

    def _redraw(self) -> None:
        """The live table, cut to the terminal's height and width (called with the lock held)."""
        from rich.live import Live
        from rich.text import Text

        board = self._board
        if board is None:
            return
        width, height = self.console.size
        lines = [Text(line, style="bold" if best else "") for line, best in board.table(width, height - 4)]
        view = _View(lines, board, width)
        if self._live is None:  # (redrawn each second too: the running trials' seconds move)
            self._live = Live(
                view,
                console=self.console,
                refresh_per_second=1,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()
        self._live.update(view, refresh=True)

    def _draw(self) -> None:
        text = "\n".join(f"{head} {self._states.get(n, '')}" for n, head in self._heads.items())
        if self._status is None:
            self._status = self.console.status(text)
            self._status.start()
        self._status.update(text)

    def trial_started(
        self,
        number: int,
        index: int,
        total: int,
        config,
        share: str | None = None,
        kind: Kind = Kind.SAMPLED,
        of: int | None = None,
    ) -> None:
        from rich.markup import escape

        knobs = " ".join(f"{k}={show_value(v)}" for k, v in config.set_values().items()) or "baseline"
        if kind.repeats:
            what = f"trial {number} = trial {of} again"
        elif kind in (Kind.SAMPLED, Kind.BASELINE):
            what = f"trial {number}"
        else:
            what = f"trial {number} ({kind.label} of {of})"
        where = f" [{share}]" if share else ""
        with self._lock:
            if self._board is not None:
                for line in self._notes.flush():
                    self.console.print(f"[dim]{escape(line)}[/dim]")
                self._board.started(number, kind, of, config.set_values(), index, total)
                self._redraw()
                return
            self._heads[number] = escape(
                f"[{kind.value + ' ' if kind.repeats else ''}{index + 1}/{total}] {what}{where}: {knobs}"
            )
            self._states[number] = "(starting)"
            self._draw()

    def event(self, event: Mapping[str, Any]) -> None:
        with self._lock:
            number = event.get("trial")
            if self._board is not None:
                if event["event"] in ("warmup", "window") and number is not None:
                    self._board.window(number, event.get("index") if event["event"] == "window" else None)
                    self._redraw()
                return
            if number not in self._heads:
                return
            if event["event"] == "warmup":
                self._states[number] = "(measuring)"
            elif event["event"] == "window":
                rate = event["samples"] / event["seconds"]
                others = max(event.get("foreign_cpu", 0.0), event.get("foreign_gpu", 0.0))
                busy = f", others use {others:.0%}" if others >= 0.05 else ""  # a quiet machine reads 0-5%
                self._states[number] = f"(window {event['index'] + 1}: {rate:,.0f} samples/s{busy})"
                if self._verbose:
                    wait = event["data_wait"] / event["seconds"] if event.get("seconds") else 0.0
                    loss = f", loss {event['loss']:.4g}" if event.get("loss") is not None else ""
                    self.console.print(
                        f"[dim]trial {number} window {event['index'] + 1}: {rate:,.0f} samples/s, "
                        f"data wait {wait:.0%}{loss}{busy}[/dim]"
                    )
            else:
                return
            self._draw()

    def trial_done(self, row, standing, seconds_left: float) -> None:
        from rich.markup import escape

        if self._board is not None:
            with self._lock:
                self._board.done(row, standing, seconds_left)
                self._redraw()
            return
        sps = f"{row.samples_per_s:10,.1f} samples/s" if row.samples_per_s else " " * 20
        if row.run_s:  # a whole run: what it ranks on is its wall time
            sps = ", ".join(filter(None, [f"{row.run_s:6.1f} s whole run", sps.strip()]))
        speed = f"{row.speedup:5.2f}x" if row.speedup else "      "
        wait = row.metrics.get("data_wait_frac")
        wait_text = f"data-wait {wait:4.0%}" if wait is not None else ""
        excess = row.metrics.get("loss_excess")
        if excess is not None and row.outcome == Outcome.COMPLETE.value:  # a diverged one's reason says it
            wait_text += f"  loss {signed_share(excess)}"
            if row.to_loss and row.speedup:  # another batch: its speedup is in time to the baseline's loss
                over = "" if row.metrics.get("to_loss_ratio") else "over "  # (not there by its last sample)
                wait_text += (
                    f", {over}{row.to_loss:.2f}x the samples to it ({row.speedup * row.to_loss:.2f}x "
                    f"{'as fast a run' if row.run_s else 'samples/s'})"
                )
        bound = row.bottleneck
        # The share of the model's own rate (fed from the device), as the summary's bottleneck line
        # says it: a data-bound loop far under it shows how much its loading costs.
        bound_text = (
            f"  {bound.efficiency:4.0%} of data-on-device ceiling, {bound.verdict}"
            if bound and bound.efficiency
            else f"  {bound.verdict}"
            if bound
            else ""
        )
        if bound and bound.unreliable:
            bound_text += f" ({', '.join(bound.unreliable)} bound unreliable)"
        others = row.metrics.get("foreign_cpu")
        if others is not None and others >= 0.05:  # a quiet machine reads 0-5%: said when it is not
            bound_text += f"  others {others:.0%}"
        with self._lock:
            head = self._heads.pop(row.number, f"trial {row.number}")
            self._states.pop(row.number, None)
            line = f"{head}\n    {row.outcome:9} {sps} {speed} {wait_text}{bound_text}"
            if row.outcome != Outcome.COMPLETE.value and row.reason:
                line += f"  [red]{escape(headline(row.reason))}[/red]"
            elif row.doubt:
                line += f"  [yellow]not ranked: {escape(row.doubt)}[/yellow]"
            left = f"~{int(seconds_left // 60)}m{int(seconds_left % 60):02d}s left" if seconds_left else "done"
            win = standing.decision.winner  # the figures the summary and the export give
            speedup = standing.speedup(win) if win else None
            best_text = f"best {speedup:.2f}x (trial {win.first.number})" if speedup else ""
            self.console.print(f"{line}   [dim]{best_text} {left}[/dim]")
            if self._heads:
                self._draw()

    def stop(self) -> None:
        """Ends the live view: the whole table stays on the terminal, each row cut to its width."""
        from rich.markup import escape

        if self._status is not None:
            self._status.stop()
            self._status = None
        with self._lock:
            if self._board is None:
                return
            if self._live is not None:
                self._live.stop()
                self._live = None
                for line, best in self._board.table(self.console.size.width):
                    self.console.print(line, style="bold" if best else None, markup=False, highlight=False)
            for line in self._notes.flush():  # (drops held by a study that stopped before its first trial)
                self.console.print(f"[dim]{escape(line)}[/dim]")
            held, self._notes.held = self._notes.held, 0
            if held:
                self.console.print(
                    f"({held} more note{'s' if held > 1 else ''} of the kinds above: autotune run -v prints each)",
                    style="dim",
                    markup=False,
                    highlight=False,
                )
