"""A study read back: its trials as rows, grouped by config, the winner, and what it found
(``show``, ``export`` and the end of ``run`` use it)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from autotune.core._ceilings import Ceilings, Verdict
from autotune.core._compile_cost import cold_and_warm, compile_line, paid_compile
from autotune.core._knobs import KNOBS, show_value
from autotune.core._outcome import Outcome, headline
from autotune.core._whole_runs import horizon_rate, other_training, wall_rate
from autotune.stores._records import ATTR_CEILINGS, ATTR_HORIZON, TrialRow, row_of
from autotune.tuner._bursty import believed_bursts
from autotune.tuner._confirm import (
    REJECTED,
    UNFINISHED,
    Decision,
    Group,
    baseline_group,
    decide,
    group_runs,
    ruled_out,
    speed_only,
)
from autotune.tuner._loss_lines import to_loss_clause, to_loss_of, winner_loss_line
from autotune.tuner._training_shape import flat_runs, run_time_line
from autotune.tuner._trim import trim_line

if TYPE_CHECKING:
    import optuna


@dataclasses.dataclass(frozen=True)
class Standing:
    """A study's trials as rows, grouped by config, with the decision and the ceilings.

    Attributes:
        rows: Every trial; ``speedup`` is over the median of the baseline's runs.
        groups: The rows by config (a first trial and its confirmation re-runs).
        decision: The winner and how sure (``autotune.tuner._confirm``).
        ceilings: Every ceiling the study measured.
        horizon_h: See ``autotune.core._whole_runs.horizon_rate``.
    """

    rows: list[TrialRow]
    groups: list[Group]
    decision: Decision
    ceilings: Ceilings
    #: The production hours whole runs rank on (``--horizon``; None: the script's whole run as given).
    horizon_h: float | None = None

    @property
    def best(self) -> TrialRow | None:
        """The winning config's lead run (its first believed one): the one exported."""
        return self.decision.winner.lead if self.decision.winner else None

    @property
    def base(self) -> Group | None:
        return self.decision.baseline

    @property
    def first_of(self) -> dict[int, int]:
        """Each trial's config's first trial (itself, unless it ran a config again)."""
        return {r.number: g.first.number for g in self.groups for r in g.runs}

    def varied_knobs(self) -> list[str]:
        """The knobs whose value differs between trials (the rest say nothing in a table)."""
        return [k for k in KNOBS if len({show_value(r.config.get(k, "-")) for r in self.rows}) > 1]

    def seed(self, given: int | None) -> int:
        """The seed every trial trains from: the baseline's (common random numbers: the same initial
        weights and data order, so the loss verdict compares configs, not seeds; on jpeg a trial's
        own seed moved its excess by up to 16 points and flipped one verdict in 18), else ``given``
        (``--seed``), else 0."""
        base = self.base.first if self.base else None
        return base.seed if base is not None and base.seed is not None else (given or 0)

    def speedup(self, group: Group) -> float | None:
        """A config's median over the baseline's median (None while either has no believed figure)."""
        return group.ranked_median / self.base.ranked_median if self.base and self.base.rates and group.rates else None


def read_standing(study: optuna.Study) -> Standing:
    """Every trial as a row, grouped by config, and the winner (see ``Standing``)."""
    trials = study.get_trials(deepcopy=False)
    ceilings = Ceilings(entry for t in trials for entry in t.user_attrs.get(ATTR_CEILINGS, []))
    return standing_of([row_of(t, ceilings) for t in trials], ceilings, study.user_attrs.get(ATTR_HORIZON))


def standing_of(rows: Sequence[TrialRow], ceilings: Ceilings, horizon_h: float | None = None) -> Standing:
    """The standing of ``rows`` (in trial order) and the study's ``ceilings``: each row's
    speedup filled in, the groups, the decision; whole runs ranked for ``horizon_h`` hours of
    production where given (``--horizon``), else on their wall time; where the loss is no signal
    for the code, as its runs judged diverged on a finite loss rank (``speed_only``)."""
    rows = believed_bursts(speed_only(rows))
    groups = group_runs(rows)
    base = baseline_group(groups)
    if base is not None and base.first.run_s and base.first.shape.get("samples"):  # whole runs: on wall time
        production = (base.loop_median or base.first.samples_per_s, horizon_h) if horizon_h else None
        if production and any(
            horizon_rate(r.metrics, *production) is None
            for r in rows
            if r.outcome == Outcome.COMPLETE.value and r.run_s
        ):
            production = horizon_h = None  # (a run without the figures: all on wall time, one unit for all)
        colds = [(g, cold_and_warm(r.metrics for r in g.runs)[0]) for g in groups]  # (a config's cold compile)
        cold = {r.number: c for g, c in colds for r in g.runs}
        rows = [on_wall_time(r, base.first, production, cold.get(r.number)) for r in rows]
        groups = group_runs(rows)
        base = baseline_group(groups)
    if base is not None and base.rates:
        # One answer per config: a believed run shows its config's median speedup (the
        # baseline's are 1.00x); a doubted or diverged one its own figure's.
        medians = {r.number: g.ranked_median for g in groups if g.rates for r in g.runs}

        def speedup(row: TrialRow) -> float:  # (on another batch: in time to the baseline's loss)
            mine = medians.get(row.number) if row.reliable else None
            rate = mine or row.ranked_rate
            assert rate is not None  # (only rows with a rate get a speedup)
            return rate / base.ranked_median

        # (none for a distorted one: its figure is another training's, autotune.worker._streams)
        rows = [
            dataclasses.replace(r, speedup=speedup(r)) if r.rate and r.outcome != Outcome.DISTORTED.value else r
            for r in rows
        ]
        groups = group_runs(rows)
    return Standing(rows, groups, decide(groups), ceilings, horizon_h)


def on_wall_time(
    row: TrialRow,
    base: TrialRow,
    production: tuple[float | None, float] | None = None,
    cold_compile: float | None = None,
) -> TrialRow:
    """A complete whole run as it ranks against the baseline's (``base``: its first run): on its
    wall time (``TrialRow.wall_rate``), or on its projected time for ``production`` (the baseline's
    loop samples/s and the hours: ``autotune.core._whole_runs.horizon_rate``), or, where it trained
    other samples, as another training (``distorted``, never ranked, the reason said:
    ``autotune.core._whole_runs.other_training``). A warm run of a compiled config counts its
    config's ``cold_compile`` instead of its own, as production's first run pays it
    (``autotune.core._compile_cost.paid_compile``)."""
    if row.outcome != Outcome.COMPLETE.value or not row.run_s:
        return row
    why = other_training(row.shape, row.config.get("batch_size"), base.shape, base.config.get("batch_size"))
    if why is not None:
        return dataclasses.replace(row, outcome=Outcome.DISTORTED.value, reason=why)
    extra = paid_compile(row.metrics, cold_compile)
    metrics = {**row.metrics, "compile_s": row.metrics["compile_s"] + extra} if extra else row.metrics
    rate = horizon_rate(metrics, *production) if production else wall_rate(base.shape["samples"], row.run_s + extra)
    return dataclasses.replace(row, wall_rate=rate)


def throughput_figure(name: str, standing: Standing):
    """samples/s per trial, as a matplotlib figure: the baseline in gray, believed figures in blue,
    doubted (noisy, short) in orange, pruned in purple, diverged in red; trials with no figure (crashed, pruned
    early, timed out) as red crosses on the axis; the best so far as the median of the leading
    config's runs so far (the figure the summary gives, once confirmed)."""
    import statistics

    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a tuning host
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(8, 4.4), dpi=110)
    ax = fig.subplots()
    rows = standing.rows
    PRUNED, DISTORTED = Outcome.PRUNED.value, Outcome.DISTORTED.value  # noqa: N806
    finished = [r for r in rows if r.outcome not in UNFINISHED]
    done = [r for r in finished if r.samples_per_s]
    kinds = {
        "baseline": ("tab:gray", [r for r in done if r.baseline and r.reliable]),
        "believed": ("tab:blue", [r for r in done if not r.baseline and r.reliable]),
        "noisy or short (not ranked)": ("tab:orange", [r for r in done if r.measured and not r.reliable]),
        "pruned (its windows so far)": ("tab:purple", [r for r in done if r.outcome == PRUNED]),
        "distorted (another training, not ranked)": ("tab:brown", [r for r in done if r.outcome == DISTORTED]),
        "diverged": ("tab:red", [r for r in done if not r.measured and r.outcome not in (PRUNED, DISTORTED)]),
    }
    for label, (color, those) in kinds.items():
        if those:
            ax.scatter(
                [r.number for r in those], [r.samples_per_s or 0.0 for r in those], c=color, s=20, zorder=3, label=label
            )
    failed = [r for r in finished if not r.samples_per_s]
    if failed:
        ax.scatter(
            [r.number for r in failed],
            [0] * len(failed),
            marker="x",
            c="tab:red",
            s=30,
            zorder=3,
            clip_on=False,
            label="no figure (" + ", ".join(sorted({r.outcome for r in failed})) + ")",
        )
    group_of = standing.first_of
    runs: dict[int, list[float]] = {}
    xs, best = [], []
    for r in finished:
        if r.reliable and r.samples_per_s is not None:  # (a believed run has its windows' figure)
            runs.setdefault(group_of.get(r.number, r.number), []).append(r.samples_per_s)
        xs.append(r.number)
        best.append(max((statistics.median(v) for v in runs.values()), default=float("nan")))
    ax.step(xs, best, where="post", color="tab:green", label="best so far (median of its runs)")
    ax.set(title=f"study {name}", xlabel="trial", ylabel="samples/s")
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    # under the plot, never over the last points
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3, fontsize="small", frameon=False)
    fig.tight_layout()
    return fig


def _runs(group: Group) -> str:
    numbers = ", ".join(str(r.number) for r in group.runs if r.reliable)
    doubted = ", ".join(str(r.number) for r in group.doubted)
    return f"median of {len(group.rates)} runs ({numbers}), ±{group.spread / 2:.0%}" + (
        f"; not counted: {doubted} (noisy or short)" if doubted else ""
    )


def _doubts(rows: list[TrialRow], numbers: bool = False, most: int = 4) -> str:
    """What is wrong with doubted runs' figures, e.g. "noisy (3: 48% ...), short measure (5)"."""
    kinds: dict[str, list[TrialRow]] = {}
    for row in rows:
        kinds.setdefault((row.doubt or "").partition(":")[0], []).append(row)
    parts = []
    for kind, those in kinds.items():
        which = ", ".join(str(r.number) for r in those[:most]) + (", ..." if len(those) > most else "")
        parts.append(
            f"{kind} (trial {which}: {(those[0].doubt or '').partition(': ')[2] or those[0].doubt})"
            if numbers or len(kinds) == 1
            else f"{kind} ({len(those)})"
        )
    return "; ".join(parts)


def findings(standing: Standing) -> list[str]:
    """What a study found, as plain lines: the export's header and the run's summary.

    The first line names the winner and its speedup (medians, with ± half the
    spread of its runs, or of its windows when it ran once); the next say how sure
    that is and what limits it.
    """
    decision, base = standing.decision, standing.base
    win = decision.winner
    doubted = [r for g in standing.groups for r in g.doubted if not g.rates]
    if win is None:
        if not doubted:
            return ["no complete trial"]
        return [
            f"unreliable: no figure to rank; {len(doubted)} trial(s) completed, but each was "
            f"{_doubts(doubted)}. Run again on a quiet machine (and with enough data for every window)"
        ]
    if win is base and not win.rates:  # (every other config ruled out: ``autotune.tuner._confirm.only_as_written``)
        others = ruled_out(standing.groups)
        outcomes = ", ".join(
            f"{sum(r.outcome == o for r in others)} {o}" for o in REJECTED if any(r.outcome == o for r in others)
        )
        return [
            f"trial {win.first.number} (the baseline: your code as written): every other config tried was ruled out "
            f"({outcomes}: trial {', '.join(str(r.number) for r in others[:6])}{', ...' if len(others) > 6 else ''}); "
            f"no speed figure: every run of it was {_doubts(win.doubted)}"
        ]
    spread = win.spread if win.confirmed else win.lead.metrics.get("samples_per_s_spread", 0.0)
    whole = base is not None and bool(base.run_s) and bool(win.run_s)  # whole runs: said in seconds
    if base is not None and not base.rates:
        lines = [
            f"trial {win.first.number}, {_figure(win)}, ±{spread / 2:.0%}; no speedup: "
            f"unreliable baseline, every run of it was {_doubts(base.doubted)}"
        ]
    elif base is not None and win is not base and to_loss_of(win):
        measured = (
            f"its whole run {base.run_s / win.run_s:.2f}x as fast ({win.run_s:.1f} s against "
            f"{base.run_s:.1f} s as written"
            if whole and base.run_s and win.run_s
            else f"{win.median / base.median:.2f}x its samples/s ({win.median:,.0f} vs {base.median:,.0f}"
        )
        lines = [
            f"trial {win.first.number}, {standing.speedup(win):.2f}x the baseline in time to its loss: "
            f"{measured}, ±{spread / 2:.0%}) at {to_loss_of(win):.2f}x the samples for the baseline's loss "
            f"(batch size {win.lead.config.get('batch_size')}, the code's {win.lead.base_batch_size})"
        ]
    elif base is not None and win is not base:
        measured = (
            f"your script's whole run in {win.run_s:.1f} s against {base.run_s:.1f} s as written"
            if whole
            else f"{win.median:,.0f} vs {base.median:,.0f} samples/s"
        )
        if whole and standing.horizon_h and win.loop_median and base.loop_median:  # (ranked on the projection)
            measured = (
                f"in {standing.horizon_h:g} h of production (--horizon): start-up + compile + the loop at "
                f"{win.loop_median:,.0f} vs {base.loop_median:,.0f} samples/s; {measured}"
            )
        lines = [f"trial {win.first.number}, {standing.speedup(win):.2f}x the baseline ({measured}, ±{spread / 2:.0%})"]
    else:
        lines = [f"trial {win.first.number} (the baseline: your code as written), {_figure(win)}, ±{spread / 2:.0%}"]
    if decision.no_win and decision.fastest is not None:  # (a winner: there is a fastest)
        fastest = decision.fastest
        lines.append(
            f"no config beat the baseline beyond the run-to-run noise: the fastest, trial "
            f"{fastest.first.number} ({standing.speedup(fastest):.2f}x, {_runs(fastest)}), "
            f"has runs as slow as the baseline's fastest"
        )
    if win.confirmed and (base is None or base.confirmed):
        lines.append(f"runs: {_runs(win)}" + (f"; the baseline's: {_runs(base)}" if base not in (None, win) else ""))
    else:
        lines.append(
            "runs: one each, not confirmed by re-runs (--confirm 0, or the study stopped "
            "first); ± is half the spread of its windows"
        )
    lines += filter(None, [run_time_line(base, win)])
    if decision.untrimmed is not None:
        lines.append(trim_line(win, decision.untrimmed))
    if decision.ties and not decision.no_win:
        lines.append(
            "inside the noise of it: " + ", ".join(f"trial {g.first.number} ({_figure(g)})" for g in decision.ties)
        )
    if doubted:
        lines.append(f"not ranked, figure not believed: {_doubts(doubted, numbers=True)}")
    distorted = [r for r in standing.rows if r.outcome == Outcome.DISTORTED.value]
    if distorted:  # their figures are another training's (autotune.worker._streams): the first one's why
        lines.append(
            f"not ranked, another training: trial{'s' if len(distorted) > 1 else ''} "
            f"{', '.join(str(r.number) for r in distorted)}: {headline(distorted[0].reason)}"
        )
    loss = winner_loss_line(win)
    if loss is not None and win is not base:
        lines.append(loss + to_loss_clause(win))
    lines += filter(None, [flat_runs(standing.rows)])
    if win.lead.bottleneck is not None:
        lines.append(f"bottleneck: {win.lead.bottleneck.why}")
        each = [r.bottleneck.efficiency for r in win.runs if r.reliable and r.bottleneck and r.bottleneck.efficiency]
        if len(each) > 1:
            lines[-1] += f" (each run: {', '.join(f'{e:.0%}' for e in each)})"
    lines += filter(None, [compile_payback(win, base), fetch_hint(win.lead), rank_hint(win.lead)])
    return lines


def _figure(group: Group) -> str:
    """A config's figure as it ranks: its whole run's wall time (a study of whole runs) or its
    loop's samples/s; medians of its believed runs."""
    return f"{group.run_s:.1f} s a whole run" if group.run_s else f"{group.median:,.0f} samples/s"


def fetch_hint(lead: TrialRow) -> str | None:
    """For a winner limited by its loader or its main thread whose map-style dataset
    fetches sample by sample: the batched fetch (``__getitems__``) that no knob can give."""
    bound = lead.bottleneck
    if lead.dataset.get("batched_fetch") is not False or bound is None:
        return None
    if bound.verdict != Verdict.DATA.value and bound.limit not in ("loader", "main"):
        return None
    return (
        f"hint: {lead.dataset.get('name', 'your dataset')} fetches one sample per call; a "
        "__getitems__(self, indices) method returning the batch's samples lets the DataLoader fetch "
        "each batch in one call (one read, one lock, one index), which no knob can do"
    )


def rank_hint(lead: TrialRow) -> str | None:
    """For a job on several ranks whose sampler does not split the dataset by rank (each rank
    reads every row: ``autotune.core._loaders.dataset_facts``): what its samples/s counts, and the fix."""
    if lead.dataset.get("splits_ranks") is not False:
        return None
    ranks = lead.dataset.get("ranks", 2)
    return (
        f"note: each of the {ranks} ranks reads every row of {lead.dataset.get('name', 'your dataset')} "
        f"an epoch (its sampler does not split it by rank): samples/s counts each row {ranks} times, "
        f"{ranks}x the rows training sees; a torch.utils.data.DistributedSampler gives each rank its share "
        "(the speedups compare configs of the same code, and hold)"
    )


def compile_payback(win: Group, base: Group | None) -> str | None:
    """For a winner that compiles its model: what compiling cost, cold and warm
    (``autotune.core._compile_cost``), and after how many steps production has won the cold cost
    back against the baseline's speed (at the winner's batch size)."""
    cold, warm = cold_and_warm(r.metrics for r in win.runs if r.reliable)
    cost = cold if cold is not None else warm  # (a user pays cold once a machine)
    if cost is None:
        return None
    line = compile_line(cold, warm, bool(win.run_s))
    batch = win.lead.config.get("batch_size")
    base_loop, win_loop = base.loop_median if base is not None else None, win.loop_median
    saved = 1 / base_loop - 1 / win_loop if base_loop and win_loop else 0.0  # s per sample
    if saved <= 0 or not isinstance(batch, int) or not batch:  # (no batch in samples: a loop without a loader)
        return line
    return line + f"; it pays back after {math.ceil(cost / saved / batch):,} steps of {batch} samples"
