"""``autotune show``'s table: a study's trials in the terminal's width, with their reasons,
the knobs every trial shares, a legend and the findings.

rich is imported inside, as the command line's heavy modules are (``autotune._cli``).
"""

from __future__ import annotations

from autotune.core._knobs import KNOBS, show_value
from autotune.core._outcome import headline

#: The least width the "knobs that varied" column may have; on a narrower terminal (or a pipe,
#: which rich gives 80 columns) each trial's knobs go on a line of their own under the table.
KNOBS_MIN_WIDTH = 36


def show_table(result, wide: bool) -> None:
    """The table, in the terminal's width: the knobs that varied in one wrapped column (those
    that never did on a line below; where the terminal leaves that column under
    ``KNOBS_MIN_WIDTH``, a line per trial under the table), then each reason whole. ``wide``: a
    column per knob, the measurement columns and the reasons in the table, however wide that is."""
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from autotune.core._kinds import Kind
    from autotune.stores._records import LOSS_LEGEND, kind_label, loss_cell

    found = result._found
    rows, best = found.rows, found.best
    keys = found.varied_knobs()
    same = {k: rows[0].config[k] for k in KNOBS if k not in keys and rows and k in rows[0].config}
    console = Console()
    extra = ("of roof", "others", "main busy", "step p50", "RAM peak") if wide else ()
    whole = any(r.run_s for r in rows)  # a study of whole runs: each run's wall time, which ranks
    heads = ["#", "outcome", *(["run s"] if whole else []), "samples/s", "speedup", "loss", "bound", "data-wait", *extra,
             *(keys if wide else ["knobs that varied"] if keys else []), *(["reason"] if wide else [])]
    first_of = found.first_of
    reasons, cells, knob_lines = [], [], []
    for r in rows:
        m, bound = r.metrics, r.bottleneck
        mark = " *" if best is not None and r.number == best.number else ""
        again = f" (= {first_of[r.number]})" if first_of.get(r.number, r.number) != r.number else ""
        if r.kind not in (Kind.SAMPLED, Kind.BASELINE, Kind.CONFIRM):  # a remeasure, retry or climb
            again = f" ({kind_label(r, of=False)})" + again
        doubted = f" ({r.doubt.partition(':')[0]})" if r.doubt else ""
        more = (f"{bound.of_roof:.0%} {bound.limit}" if bound and bound.of_roof is not None else "-",
                f"{max(m.get('foreign_cpu', 0), m.get('foreign_gpu', 0)):.0%}" if "foreign_cpu" in m else "-",
                f"{m['main_thread_busy']:.0%}" if "main_thread_busy" in m else "-",
                f"{m['step_time_p50'] * 1000:.1f} ms" if "step_time_p50" in m else "-",
                f"{m['ram_peak'] / 2**30:.2f} GiB" if "ram_peak" in m else "-") if wide else ()
        values = [show_value(r.config.get(k, "-")) for k in keys]
        why = headline(r.doubt or r.reason)
        if why and not wide:
            reasons.append(f"{r.number} {r.outcome}{doubted}: {why}")
        number = f"{'base ' if r.baseline else ''}{r.number}{mark}"
        knobs = " ".join(f"{k}={v}" for k, v in zip(keys, values))
        knob_lines.append(f"{number}: {knobs}")
        cells.append([
            number, r.outcome + doubted + again, *([f"{r.run_s:.2f}" if r.run_s else "-"] if whole else []),
            (f"{r.samples_per_s:,.0f}" + ("?" if r.doubt else "")) if r.samples_per_s else "-",
            f"{r.speedup:.2f}x" if r.speedup else "-",
            loss_cell(m),
            (f"{bound.verdict.split('-')[0]} {bound.efficiency:.0%}" if bound.efficiency is not None
             else bound.verdict.split("-")[0]) if bound else "-",
            f"{m['data_wait_frac']:.0%}" if "data_wait_frac" in m else "-", *more,
            *(values if wide else [escape(knobs)] if keys else []),
            *([escape(why)] if wide else [])])

    def table_of(columns: list[str]) -> Table:
        table = Table(title=f"study {result.study}: {len(rows)} trial{'s' if len(rows) != 1 else ''}",
                      box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
        for head in columns:
            wraps = head in ("knobs that varied", "reason")
            table.add_column(head.replace("_", "_\n") if head in keys else head,
                             justify="right" if head in ("#", "run s", "samples/s", "speedup", "loss") else "left",
                             no_wrap=not wraps, ratio=1 if wraps else None)
        for row in cells:
            table.add_row(*row[:len(columns)])
        return table

    knobs_below = False
    if keys and not wide:  # what the other columns leave the knobs (2 spaces between columns)
        others = Console(width=1 << 16).measure(table_of(heads[:-1])).maximum
        knobs_below = console.width - others - 2 < KNOBS_MIN_WIDTH
    table = table_of(heads[:-1] if knobs_below else heads)
    if wide:  # as wide as it needs: for a wide terminal, or `less -S`
        console = Console(width=max(console.width, Console(width=1 << 16).measure(table).maximum))
    console.print(table)
    if knobs_below:
        import textwrap

        console.print("knobs that varied:")
        for line in knob_lines:
            console.print(escape(textwrap.fill(line, console.width - 1, initial_indent="  ", subsequent_indent="      ",
                                               break_long_words=False, break_on_hyphens=False)))
    for line in reasons:
        console.print(escape(line))
    if same:
        console.print(escape("same in every trial: " + " ".join(f"{k}={show_value(v)}" for k, v in same.items())))
    console.print("base: the baseline (your code as written); *: the winner; (= N): trial N's config again (a "
                  "confirmation or a re-measure); ?: a figure not believed (noisy or short), never ranked; "
                  + ("run s: the whole run's wall time, process start to exit (what ranks; speedup: the "
                     "baseline's over it); samples/s: the training loop's; " if whole else "")
                  + f"{LOSS_LEGEND}; bound: compute- or data-bound and samples/s as a share of that ceiling"
                  + ("; others: the share of the trial's CPUs (or GPU) other processes used; main busy: the "
                     "share of the time the loop's thread was on a CPU" if wide
                     else "; --wide: a column per knob and more figures"), style="dim")
    if best is not None:
        first, *rest = result.findings
        console.print(escape(f"best: {first}"))
        for line in rest:
            console.print(escape(f"  {line}"))
