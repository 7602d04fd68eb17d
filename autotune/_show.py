"""``autotune show``'s table: a study's trials in the terminal's width, with their reasons,
the knobs every trial shares, a legend and the findings.

No word is cut, in a terminal of any width or a pipe: the columns whose cells hold spaces wrap
at them (``fit_widths``), the knobs that varied go on lines of their own where the figures leave
them too little room, and a terminal too narrow for the figures gets a line per trial. rich is
imported inside, as the command line's heavy modules are (``autotune._cli``).
"""

from __future__ import annotations

from autotune.core._knobs import KNOBS, show_value
from autotune.core._outcome import headline

#: The least width the "knobs that varied" column may have; on a narrower terminal (or a pipe,
#: which rich gives 80 columns) each trial's knobs go on a line of their own under the table.
KNOBS_MIN_WIDTH = 36
#: Columns between two columns: a cell's right padding and the box's divider.
GAP = 2
#: The columns that wrap at their spaces ("complete (noisy) (= 3)", "compute 94%"); the others
#: hold one word or figure each.
WRAPS = ("outcome", "bound", "knobs that varied", "reason")
#: The columns whose figures align right.
RIGHT = ("#", "run s", "samples/s", "speedup", "loss")


def fit_widths(least: list[int], most: list[int], room: int) -> list[int] | None:
    """Each column's width in a row of ``room`` columns (gaps left out): each its ``most`` where
    they all fit, else the widest narrowed first and none under its ``least`` (its longest word;
    the whole of a column that does not wrap); None where even that does not fit.

    >>> fit_widths([9, 8, 7], [9, 22, 11], 40)  # the outcome column gives 2 of its 22
    [9, 20, 11]
    >>> fit_widths([9, 8, 7], [9, 22, 11], 26)  # 42 - 26 = 16: 22 -> 11, then the two widest in turn
    [9, 8, 9]
    >>> fit_widths([9, 11, 7], [9, 22, 11], 26) is None  # 9 + 11 + 7 = 27 > 26: a word would be cut
    True
    """
    widths = list(most)
    for _ in range(max(0, sum(widths) - room)):
        narrowable = [i for i, (width, low) in enumerate(zip(widths, least)) if width > low]
        if not narrowable:
            return None
        widths[max(narrowable, key=lambda i: widths[i])] -= 1
    return widths


def _cells(result, wide: bool):
    """The table's heads and rows as plain text, each trial's reason and its knobs as a line."""
    from autotune.core._kinds import Kind
    from autotune.stores._records import kind_label, loss_cell

    standing = result._standing
    rows, best, keys = standing.rows, standing.best, standing.varied_knobs()
    extra = ("of roof", "others", "main busy", "step p50", "RAM peak") if wide else ()
    whole = any(r.run_s for r in rows)  # a study of whole runs: each run's wall time, which ranks
    heads = [
        "#",
        "outcome",
        *(["run s"] if whole else []),
        "samples/s",
        "speedup",
        "loss",
        "bound",
        "data-wait",
        *extra,
        *(keys if wide else ["knobs that varied"] if keys else []),
        *(["reason"] if wide else []),
    ]
    first_of = standing.first_of
    reasons, cells, knob_lines = [], [], []
    for r in rows:
        m, bound = r.metrics, r.bottleneck
        mark = " *" if best is not None and r.number == best.number else ""
        again = f" (= {first_of[r.number]})" if first_of.get(r.number, r.number) != r.number else ""
        if r.kind not in (Kind.SAMPLED, Kind.BASELINE, Kind.CONFIRM):  # a remeasure, retry or climb
            again = f" ({kind_label(r, of=False)})" + again
        doubted = f" ({r.doubt.partition(':')[0]})" if r.doubt else ""
        more = (
            (
                f"{bound.of_roof:.0%} {bound.limit}" if bound and bound.of_roof is not None else "-",
                f"{max(m.get('foreign_cpu', 0), m.get('foreign_gpu', 0)):.0%}" if "foreign_cpu" in m else "-",
                f"{m['main_thread_busy']:.0%}" if "main_thread_busy" in m else "-",
                f"{m['step_time_p50'] * 1000:.1f} ms" if "step_time_p50" in m else "-",
                f"{m['ram_peak'] / 2**30:.2f} GiB" if "ram_peak" in m else "-",
            )
            if wide
            else ()
        )
        values = [show_value(r.config.get(k, "-")) for k in keys]
        why = headline(r.doubt or r.reason)
        if why and not wide:
            reasons.append(f"{r.number} {r.outcome}{doubted}: {why}")
        number = f"{'base ' if r.baseline else ''}{r.number}{mark}"
        knobs = " ".join(f"{k}={v}" for k, v in zip(keys, values))
        knob_lines.append(f"{number}: {knobs}")
        cells.append(
            [
                number,
                r.outcome + doubted + again,
                *([f"{r.run_s:.2f}" if r.run_s else "-"] if whole else []),
                (f"{r.samples_per_s:,.0f}" + ("?" if r.doubt else "")) if r.samples_per_s else "-",
                f"{r.speedup:.2f}x" if r.speedup else "-",
                loss_cell(m),
                (
                    f"{bound.verdict.split('-')[0]} {bound.efficiency:.0%}"
                    if bound.efficiency is not None
                    else bound.verdict.split("-")[0]
                )
                if bound
                else "-",
                f"{m['data_wait_frac']:.0%}" if "data_wait_frac" in m else "-",
                *more,
                *(values if wide else [knobs] if keys else []),
                *([why] if wide else []),
            ]
        )
    return heads, cells, reasons, knob_lines, whole


def _widths(heads: list[str], cells: list[list[str]], room: int, keys, wraps=WRAPS) -> list[int] | None:
    """``fit_widths`` for these columns (gaps taken from ``room``; a knob's head shows on two lines):
    a column in ``wraps`` may narrow to its longest word (the knobs column to ``KNOBS_MIN_WIDTH``)."""
    from rich.cells import cell_len

    least, most = [], []
    for i, head in enumerate(heads):
        texts = [*_shown(head, keys).split("\n"), *(row[i] for row in cells)]
        most.append(max(cell_len(t) for t in texts))
        words = max(cell_len(w) for t in texts for w in t.split()) if head in wraps else most[-1]
        least.append(max(words, KNOBS_MIN_WIDTH) if head == "knobs that varied" else words)
    return fit_widths(least, most, room - GAP * (len(heads) - 1))


def _shown(head: str, keys) -> str:
    return head.replace("_", "_\n") if head in keys else head


def _table(title: str, heads: list[str], cells: list[list[str]], widths: list[int], keys):
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    table = Table(
        title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0), title_justify="left"
    )
    for head, width in zip(heads, widths):
        table.add_column(
            _shown(head, keys), width=width, justify="right" if head in RIGHT else "left", no_wrap=head not in WRAPS
        )
    for row in cells:
        table.add_row(*(escape(cell) for cell in row[: len(heads)]))
    return table


def _fill(line: str, width: int) -> str:
    """``line`` wrapped at its spaces to ``width``, its later lines indented under its first."""
    import textwrap

    return textwrap.fill(
        line,
        max(width - 1, 20),
        initial_indent="  ",
        subsequent_indent="      ",
        break_long_words=False,
        break_on_hyphens=False,
    )


def show_table(result, wide: bool) -> None:
    """The table, in the terminal's width: the knobs that varied in one wrapped column (those
    that never did on a line below; where the terminal leaves that column under
    ``KNOBS_MIN_WIDTH``, a line per trial under the table), then each reason whole; a terminal
    too narrow for the figures' columns, a line per trial. ``wide``: a column per knob, the
    measurement columns and the reasons in the table, however wide that is. Lines end without
    trailing spaces, and a pipe gets plain text (rich writes no control codes where the output
    is not a terminal)."""
    import sys

    from rich.console import Console
    from rich.markup import escape

    from autotune.stores._records import LOSS_LEGEND

    standing = result._standing
    rows, best, keys = standing.rows, standing.best, standing.varied_knobs()
    same = {k: rows[0].config[k] for k in KNOBS if k not in keys and rows and k in rows[0].config}
    heads, cells, reasons, knob_lines, whole = _cells(result, wide)
    console = Console()
    title = f"study {result.study}: {len(rows)} trial{'s' if len(rows) != 1 else ''}"
    knobs_below = False
    # The knobs go on lines of their own before a figure's column wraps; a table too narrow for
    # the figures even wrapped, a line per trial.
    widths = _widths(heads, cells, 1 << 16 if wide else console.width, keys, wraps=("knobs that varied",))
    if widths is None:
        knobs_below, heads = bool(keys), heads[:-1] if keys else heads
        widths = _widths(heads, cells, console.width, keys)
    if wide and widths is not None:  # as wide as it needs: for a wide terminal, or `less -S`
        console = Console(width=max(console.width, sum(widths) + GAP * (len(widths) - 1)))
    with console.capture() as captured:
        if widths is None:  # too narrow even for the figures: a line per trial, at its spaces
            console.print(title)
            for row in cells:
                figures = ", ".join(f"{head} {cell}" for head, cell in zip(heads[2:], row[2:]) if cell != "-")
                console.print(escape(_fill(f"{row[0]}: {row[1]}" + (f"; {figures}" if figures else ""), console.width)))
        else:
            console.print(_table(title, heads, cells, widths, keys))
        if knobs_below:
            console.print("knobs that varied:")
            for line in knob_lines:
                console.print(escape(_fill(line, console.width)))
        for line in reasons:
            console.print(escape(line))
        if same:
            console.print(escape("same in every trial: " + " ".join(f"{k}={show_value(v)}" for k, v in same.items())))
        console.print(
            "base: the baseline (your code as written); *: the winner; (= N): trial N's config again (a "
            "confirmation or a re-measure); ?: a figure not believed (noisy or short), never ranked; "
            + (
                "run s: the whole run's wall time, process start to exit (what ranks; speedup: the "
                "baseline's over it); samples/s: the training loop's; "
                if whole
                else ""
            )
            + f"{LOSS_LEGEND}; bound: compute- or data-bound and samples/s as a share of that ceiling"
            + (
                "; others: the share of the trial's CPUs (or GPU) other processes used; main busy: the "
                "share of the time the loop's thread was on a CPU"
                if wide
                else "; --wide: a column per knob and more figures"
            ),
            style="dim",
        )
        if best is not None:
            first, *rest = result.findings
            console.print(escape(f"best: {first}"))
            for line in rest:
                console.print(escape(f"  {line}"))
    # rich pads each line of a table to its width: trailing spaces a pipe or a diff would keep
    sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
    sys.stdout.flush()
