"""A study's report: one self-contained HTML page (figures inlined), attached to the MLflow
parent run as ``report.html`` and written by ``autotune report``.

It answers what a user decides on: which config won and by how much (the
confirmed medians), what failed and why, what each knob did, how much the data
wait fell, whether the winner trains like the baseline (their loss at matched
samples), and what limits the winner now (its ceilings).
"""

from __future__ import annotations

import base64
import html
import io
import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.core._knobs import KNOBS, show_value
from autotune.core._outcome import Outcome, headline
from autotune.stores._records import LOSS_LEGEND, kind_label, loss_cell
from autotune.tuner._confirm import UNFINISHED

if TYPE_CHECKING:
    from autotune.stores._records import TrialRow
    from autotune.tuner._standing import Standing

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 70em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .5em 0; } td, th { padding: .2em .6em; text-align: left; }
th { background: #f3f3f3; } tr:nth-child(even) td { background: #fafafa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.complete { color: #1a7f37; } .pruned { color: #8250df; } .diverged, .crashed, .timeout, .oom_host,
.oom_gpu, .distorted { color: #cf222e; } .interrupted { color: #9a6700; } .winner td { font-weight: 600; }
.findings li { margin: .2em 0; } img { max-width: 100%; } .dim { color: #666; }
td.reason { min-width: 22em; }
"""


def report_html(
    name: str,
    standing: Standing,
    fingerprint: Mapping[str, Any] | None = None,
    profile: Mapping[str, Any] | None = None,
    throughput: bytes | None = None,
) -> str:
    """The study's report as one HTML page (no outside files: figures are inlined PNGs); with the
    profile runs' findings (``autotune.tuner._profiling``), the baseline's and the winner's steps.
    ``throughput``: the samples/s plot as PNG, if the caller rendered it already (``throughput_png``)."""
    from autotune.tuner._standing import findings

    rows, best, base = standing.rows, standing.best, standing.base
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>autotune: study {_e(name)}</title>"
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>autotune: study {_e(name)}</h1>",
        f"<p class='dim'>measured on {_e((fingerprint or {}).get('summary', 'an unknown machine'))}; "
        f"{len(rows)} trial{'s' if len(rows) != 1 else ''}</p>",
        "<h2 id='findings'>What it found</h2><ul class='findings'>",
        *(f"<li>{_e(line)}</li>" for line in findings(standing)),
        "</ul>",
    ]
    if best is not None and base is not None and base.rates:
        before = base.first.metrics.get("data_wait_frac")
        after = best.metrics.get("data_wait_frac")
        if before is not None and after is not None:
            parts.append(
                f"<p id='data-wait'>Data wait: <b>{before:.0%}</b> of the baseline's step time, "
                f"<b>{after:.0%}</b> of the winner's.</p>"
            )
    if profile:
        parts.append(step_parts_html(profile))
    parts += [
        "<h2 id='throughput'>samples/s per trial</h2>",
        _img(throughput or throughput_png(name, standing), "samples/s per trial"),
        "<h2 id='trials'>Every trial</h2>",
        _trials_table(standing),
    ]
    effects = knob_effects(rows)
    if effects:
        parts += [
            "<h2 id='knobs'>What each knob did</h2>",
            "<p class='dim'>For each value a knob took: the median samples/s of the believed complete "
            "trials that ran it, and how many; against the knob's best value. Knobs interact: a value "
            "seen in few trials says little.</p>",
            _effects_table(effects),
        ]
    if best is not None and base is not None and base.first.curve and best.curve and best is not base.first:
        parts += [
            "<h2 id='loss'>Does the winner train like the baseline?</h2>",
            "<p class='dim'>Their loss against the samples each had consumed: a config that needs more "
            "samples for the same loss is not a real speed-up (the divergence check compares these).</p>",
            _img(_png(_loss_figure(base.first, best)), "loss at matched samples"),
        ]
    if best is not None and best.bottleneck is not None:
        b = best.bottleneck
        cells = [
            ("compute ceiling (the loop on batches already on the device)", b.compute),
            ("loader ceiling (the loader alone, with the copy)", b.loader),
            ("CPU roof (the CPUs' time per sample of both)", b.cpu),
        ]
        parts += [
            "<h2 id='ceilings'>What limits the winner</h2>",
            f"<p>{_e(b.why)}</p><table>",
            *(
                f"<tr><td>{_e(what)}</td><td class='num'>{value:,.0f} samples/s</td></tr>"
                for what, value in cells
                if value
            ),
            "</table>",
        ]
        if b.unreliable:
            parts.append(f"<p class='dim'>Not used, the winner ran past them: {_e(', '.join(b.unreliable))}.</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


#: Each step part's colour in the report's bars.
_PART_COLOURS = {
    "data_wait": "#cf222e",
    "copy": "#bf8700",
    "forward": "#0969da",
    "backward": "#8250df",
    "optimizer": "#1a7f37",
    "other": "#8c959f",
}


def step_parts_html(profile: Mapping[str, Any]) -> str:
    """The baseline's and the winner's steps as stacked bars of their parts (widths to scale
    with the longer step), their milliseconds in a table, and where the traces are."""
    from autotune.worker._profile import LABELS, PARTS

    roles = [role for role in ("baseline", "winner", "baseline_expandable", "winner_expandable") if role in profile]
    longest = max(profile[r]["parts"].get("step", 0.0) for r in roles) or 1.0
    out = [
        "<h2 id='step'>Where a step's time goes</h2>",
        "<p class='dim'>Each step timed by part over one window of a profile run after the "
        "confirmation; a few steps after it were traced by torch.profiler: the parent run's "
        "<code>traces/</code> holds them (open in ui.perfetto.dev or TensorBoard).</p>",
        "<table><tr><th></th><th>step</th><th style='min-width:22em'></th>",
        *(f"<th>{_e(LABELS[p])}</th>" for p in PARTS),
        "</tr>",
    ]
    for role in roles:
        parts = profile[role]["parts"]
        step = parts.get("step", 0.0)
        bar = "".join(
            f"<span title='{_e(LABELS[p])} {parts.get(p, 0.0) * 1e3:.2f} ms' style='display:inline-block;"
            f"height:1.1em;width:{100 * parts.get(p, 0.0) / longest:.2f}%;background:{_PART_COLOURS[p]}'>"
            "</span>"
            for p in PARTS
            if parts.get(p, 0.0) > 0
        )
        out.append(
            f"<tr id='step-{role}'><td>{role} (trial {profile[role].get('trial')})</td>"
            f"<td class='num'>{step * 1e3:.2f} ms</td><td><div style='width:100%'>{bar}</div></td>"
            + "".join(
                f"<td class='num'>{parts.get(p, 0.0) * 1e3:.2f} ms<br><span class='dim'>"
                f"{parts.get(p, 0.0) / step if step else 0:.0%}</span></td>"
                for p in PARTS
            )
            + "</tr>"
        )
    from autotune.core._memline import memory_lines

    out.append(
        "</table>"
        + "".join(f"<p id='memory'>{_e(line)}</p>" for line in memory_lines(profile))
        + "<p class='dim'>"
        + " ".join(f"<span style='color:{_PART_COLOURS[p]}'>&#9632;</span> {_e(LABELS[p])}" for p in PARTS)
        + "</p>"
    )
    return "".join(out)


def knob_effects(rows: Sequence[TrialRow]) -> dict[str, list[tuple[str, float, int]]]:
    """Per knob that varied among believed complete trials: ``(value, median samples/s, trials)``
    for each value, best first."""
    ranked = [r for r in rows if r.reliable]
    effects = {}
    for knob in KNOBS:
        by_value: dict[str, list[float]] = {}
        for r in ranked:
            if knob in r.config and r.samples_per_s is not None:
                by_value.setdefault(show_value(r.config[knob]), []).append(r.samples_per_s)
        if len(by_value) > 1:
            effects[knob] = sorted(
                ((v, statistics.median(rates), len(rates)) for v, rates in by_value.items()), key=lambda e: -e[1]
            )
    return effects


def _trials_table(standing: Standing) -> str:
    best = standing.best
    rows = standing.rows
    keys, first_of = standing.varied_knobs(), standing.first_of
    # the reason beside its outcome, before the figures and the knob columns: why a trial
    # failed, was pruned or distorted is what a reader of a failed row looks for first
    head = ["#", "outcome", "reason", "samples/s", "speedup", "loss", "bound", "data wait", *keys]
    lines = ["<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for r in rows:
        again = f" (= {first_of[r.number]})" if first_of.get(r.number, r.number) != r.number else ""
        label = " ".join(filter(None, [str(r.number), kind_label(r, of=False)])) + again
        wait = r.metrics.get("data_wait_frac")
        cells = [
            (label, ""),
            (r.outcome + (f" ({r.doubt.partition(':')[0]})" if r.doubt else ""), r.outcome),
            (headline(r.doubt or r.reason), "reason"),
            (f"{r.samples_per_s:,.0f}" if r.samples_per_s else "-", "num"),
            (f"{r.speedup:.2f}x" if r.speedup else "-", "num"),
            (loss_cell(r.metrics), "num"),
            (r.bottleneck.verdict if r.bottleneck else "-", ""),
            (f"{wait:.0%}" if wait is not None else "-", "num"),
            *((show_value(r.config.get(k, "-")), "") for k in keys),
        ]
        winner = " class='winner'" if best is not None and r.number == best.number else ""
        lines.append(f"<tr{winner}>" + "".join(f"<td class='{c}'>{_e(v)}</td>" for v, c in cells) + "</tr>")
    lines.append(
        "</table><p class='dim'>Bold: the winner. (= N): trial N's config again (a confirmation or a "
        "re-measure). A figure marked noisy or short is shown, never ranked. "
        f"{LOSS_LEGEND[0].upper()}{LOSS_LEGEND[1:]}.</p>"
    )
    failed = [r for r in rows if r.outcome not in (Outcome.COMPLETE.value, *UNFINISHED)]
    if failed:
        lines.append(
            f"<p>{len(failed)} trial(s) did not complete: "
            + "; ".join(f"{r.number} <span class='{r.outcome}'>{_e(r.outcome)}</span>" for r in failed)
            + ".</p>"
        )
    return "\n".join(lines)


def _effects_table(effects: Mapping[str, list[tuple[str, float, int]]]) -> str:
    lines = [
        "<table><tr><th>knob</th><th>value</th><th>median samples/s</th><th>trials</th><th>vs its best value</th></tr>"
    ]
    for knob, values in effects.items():
        top = values[0][1]
        for i, (value, rate, count) in enumerate(values):
            lines.append(
                f"<tr><td>{_e(knob) if i == 0 else ''}</td><td>{_e(value)}</td>"
                f"<td class='num'>{rate:,.0f}</td><td class='num'>{count}</td>"
                f"<td class='num'>{rate / top:.0%}</td></tr>"
            )
    lines.append("</table>")
    return "\n".join(lines)


def _loss_figure(base: TrialRow, best: TrialRow):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.4), dpi=110)
    ax = fig.subplots()
    for row, label, color in (
        (base, f"baseline (trial {base.number})", "tab:gray"),
        (best, f"winner (trial {best.number})", "tab:green"),
    ):
        ax.plot([(c[0] + c[1]) / 2 for c in row.curve], [c[2] for c in row.curve], color=color, label=label)
    ax.set(xlabel="samples consumed", ylabel="loss")
    ax.grid(alpha=0.3)
    ax.legend(frameon=False)
    fig.tight_layout()
    return fig


def throughput_png(name: str, standing: Standing) -> bytes:
    """The samples/s plot (``throughput_figure``) as PNG: rendered once per finish, it goes both into
    the report and to the parent run (its rendering is most of what closing a study costs the tuner)."""
    from autotune.tuner._standing import throughput_figure

    return _png(throughput_figure(name, standing))


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f"<img alt='{_e(alt)}' src='data:image/png;base64,{data}'>"


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)
