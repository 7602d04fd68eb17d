"""Confirmation: the top configs are run again; the winner is chosen on
the median of its runs, and a difference inside the run-to-run noise is no win.

A config's runs are its first trial and the trials that ran it again (a ``confirm`` or
``remeasure``, whose ``of`` names the first). "A beats B" needs every run of A to be faster
than every run of B: with 3 runs each, that happens by chance with probability
1/20 when A and B are equally fast (the exact one-sided Mann-Whitney test at
U = 0), and it needs no assumption about how the noise is distributed.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

from autotune.core._guard import blew_up
from autotune.core._kinds import Kind
from autotune.core._outcome import RUNNING, WAITING, Outcome
from autotune.core._prune import PRUNE_FRACTION
from autotune.machine._noise import is_noisy

if TYPE_CHECKING:
    from autotune.stores._records import TrialRow

#: Feasible configs re-run at the end of a study, besides the baseline.
CONFIRM_TOP = 3
#: Outcomes of trials not finished yet: Optuna's WAITING (enqueued, waiting to be claimed) and
#: RUNNING states.
UNFINISHED = (WAITING, RUNNING)


@dataclasses.dataclass(frozen=True)
class Group:
    """Every run of one config: its first trial, then its re-runs.

    Attributes:
        first: The trial that first ran the config (its number names the group).
        runs: All its trials, the first included, in order.
    """

    first: TrialRow
    runs: tuple[TrialRow, ...]

    @property
    def rates(self) -> list[float]:
        """What each complete run whose figure is believed (``TrialRow.reliable``) ran at
        (``TrialRow.rate``: its whole run's samples/s where it ran whole, else its loop's): a
        noisy run or a short measure never ranks a config."""
        return [rate for r in self.runs if r.reliable and (rate := r.rate) is not None]  # (reliable: it has one)

    @property
    def loop_median(self) -> float | None:
        """The median of its believed runs' loop samples/s (their windows'), whole runs or not."""
        loops = [r.samples_per_s for r in self.runs if r.reliable and r.samples_per_s]
        return statistics.median(loops) if loops else None

    @property
    def run_s(self) -> float | None:
        """The median of its believed runs' whole-run wall times (None: not run whole)."""
        runs = [r.run_s for r in self.runs if r.reliable and r.run_s]
        return statistics.median(runs) if runs else None

    @property
    def ranked(self) -> list[float]:
        """What each believed run ranks on (``TrialRow.ranked_rate``): :attr:`rates`, or where the
        config trains on another batch size, its time to the baseline's loss as a rate."""
        return [rate for r in self.runs if r.reliable and (rate := r.ranked_rate) is not None]  # (as rates)

    @property
    def ranked_median(self) -> float:
        """The median of :attr:`ranked`: the config's place in the study."""
        return statistics.median(self.ranked)

    @property
    def lead(self) -> TrialRow:
        """The run that speaks for the config: its first believed one, else its first."""
        return next((r for r in self.runs if r.reliable), self.first)

    @property
    def doubted(self) -> list[TrialRow]:
        """Its complete runs whose figure is not believed (see ``autotune.machine._noise``)."""
        return [r for r in self.runs if r.measured and not r.reliable]

    @property
    def ended(self) -> list[TrialRow]:
        """Its runs that ended (not running, waiting, or interrupted by the tuner)."""
        return [r for r in self.runs if r.outcome not in (Outcome.INTERRUPTED.value, *UNFINISHED)]

    @property
    def feasible(self) -> bool:
        """It ran to the end every time (runs the tuner interrupted do not count)."""
        return bool(self.rates) and all(r.outcome == Outcome.COMPLETE.value for r in self.ended)

    @property
    def pending(self) -> int:
        """Runs enqueued or running now (re-runs another tuner may be measuring)."""
        return sum(1 for r in self.runs if r.outcome in UNFINISHED)

    @property
    def median(self) -> float:
        return statistics.median(self.rates)

    @property
    def losses(self) -> list[float]:
        """Its runs' loss against the baseline's on the same samples (``loss_excess``), those
        judged: a noisy run's speed is not believed, its loss is."""
        return [r.metrics["loss_excess"] for r in self.runs if "loss_excess" in r.metrics]

    @property
    def loss_excess(self) -> float | None:
        """The median of :attr:`losses`; None when no run was judged."""
        losses = self.losses
        return statistics.median(losses) if losses else None

    @property
    def spread(self) -> float:
        """(max - min) / median of its runs; 0 for a single run."""
        rates = self.rates
        return (max(rates) - min(rates)) / statistics.median(rates) if len(rates) > 1 else 0.0

    @property
    def confirmed(self) -> bool:
        return len(self.rates) >= 2


def beats(a: Group, b: Group) -> bool:
    """Whether ``a`` is faster than ``b`` beyond the noise: each of its runs beats each of b's."""
    return a.confirmed and b.confirmed and min(a.ranked) > max(b.ranked)


#: How far under the winner's median its trimmed config (``autotune.tuner._trim``) may run and
#: still be the answer: about what one config's median moves between confirmations on these
#: machines (4-5% on the sweep, benchmarks/results/sweep.md).
TRIM_WITHIN = 0.03


def lighter(winner: Group, groups: Sequence[Group], base: Group | None) -> Group | None:
    """The trimmed config of ``winner`` (``autotune.tuner._trim``) to answer with instead: run to
    the end every time, confirmed, not beaten by the winner beyond the noise, its median within
    ``TRIM_WITHIN`` of the winner's, and beating the baseline as the winner must (``base``
    confirmed); None otherwise."""
    for group in groups:
        if (
            group is not winner
            and untrimmed_of(group, [winner]) is winner
            and group.feasible
            and group.confirmed
            and winner.confirmed
            and not beats(winner, group)
            and (base is None or not base.confirmed or beats(group, base))
            and group.ranked_median >= (1 - TRIM_WITHIN) * winner.ranked_median
        ):
            return group
    return None


def untrimmed_of(group: Group, groups: Sequence[Group]) -> Group | None:
    """The config among ``groups`` that ``group`` is the trimmed config of (its trim run's ``of``), or None."""
    first = trim_run(group)
    return next((g for g in groups if first is not None and g.first.number == first.of), None)


def trim_run(group: Group) -> TrialRow | None:
    """The run of kind ``trim`` among ``group``'s (it is some config's trimmed one), or None."""
    return next((r for r in group.runs if r.kind is Kind.TRIM), None)


#: The metrics that rank a run on its time to the baseline's loss (``TrialRow.to_loss``).
_TO_LOSS = ("to_loss_ratio", "to_loss_beyond", "to_loss_flat")


def noisy_loss(rows: Sequence[TrialRow]) -> TrialRow | None:
    """The first re-run of the code as written whose loss disagreed with its first run's past the
    tolerance (``loss_noise``, ``autotune.core._loss_signal.self_disagreement``), or None."""
    return next((r for r in rows if r.baseline and "loss_noise" in r.metrics), None)


def speed_only(rows: Sequence[TrialRow]) -> list[TrialRow]:
    """``rows`` as they rank where the loss is no signal (``noisy_loss``): on speed of the same
    training. A run judged diverged on a finite loss is complete (its verdict came from a loss the
    code as written misses by as much), and none ranks on its time to the baseline's loss; a nan
    or inf loss stays diverged. Unchanged where the loss is a signal."""
    if noisy_loss(rows) is None:
        return list(rows)
    out = []
    for row in rows:
        metrics = {k: v for k, v in row.metrics.items() if k not in _TO_LOSS}
        if row.outcome == Outcome.DIVERGED.value and blew_up(row.losses, row.curve) is None:
            row = dataclasses.replace(
                row,
                outcome=Outcome.COMPLETE.value,
                reason=f"not diverged: the loss is no signal for this script ({row.reason})",
            )
        out.append(dataclasses.replace(row, metrics=metrics))
    return out


def group_runs(rows: Sequence[TrialRow]) -> list[Group]:
    """The study's trials grouped by config (by first trial number, in order).

    A config is one group however it came to run again: a re-run names its first
    trial (``of``), and a sampled trial that drew a config already run joins
    that config's group, so that each config has one answer. Where the loss is no
    signal, the runs are as they rank then (``speed_only``).
    """
    rows = speed_only(rows)
    firsts: dict[int, list[TrialRow]] = {}
    seen: dict[str, int] = {}  # sampled config -> its first trial
    alias: dict[int, int] = {}  # a trial that drew a config again -> that config's first
    for row in rows:
        if row.kind.repeats:
            if row.of is None:  # (a re-run that names no first trial: in no group)
                continue
            key = alias.get(row.of, row.of)
        elif row.sampled and row.outcome not in UNFINISHED:  # an enqueued trial has drawn nothing yet
            key = seen.setdefault(json.dumps(row.sampled, sort_keys=True), row.number)
            if key != row.number:
                alias[row.number] = key
        else:
            key = row.number
        firsts.setdefault(key, []).append(row)
    by_number = {r.number: r for r in rows}
    return [Group(by_number[n], tuple(runs)) for n, runs in firsts.items() if n in by_number]


def baseline_group(groups: Sequence[Group]) -> Group | None:
    """The first baseline trial that completed, with its re-runs. Its figures may all be
    doubted (``rates`` empty): it is still every trial's loss reference."""
    return next((g for g in groups if g.first.baseline and any(r.measured for r in g.runs)), None)


@dataclasses.dataclass(frozen=True)
class Decision:
    """Which config won, and how sure that is.

    Attributes:
        winner: The fastest feasible config by median (``Group.ranked_median``: on another batch
            size, in time to the baseline's loss) that beats the baseline
            (when both are confirmed), else the baseline; None with no feasible run.
        baseline: The baseline's group.
        fastest: The feasible config with the highest (ranked) median, winner or not.
        ties: Confirmed configs the winner does not beat: inside the noise of it.
        untrimmed: Where the winner is another config's trimmed one (``autotune.tuner._trim``), that config.
    """

    winner: Group | None
    baseline: Group | None
    fastest: Group | None
    ties: tuple[Group, ...]
    untrimmed: Group | None = None

    @property
    def no_win(self) -> bool:
        """The fastest config is not faster than the baseline beyond the noise."""
        return self.winner is not None and self.winner is self.baseline and self.fastest is not self.baseline


def decide(groups: Sequence[Group]) -> Decision:
    """Pick the winner (see ``Decision``).

    Until the baseline is confirmed (``--confirm 0``, or before the confirmation),
    every config competes on its runs as they are. Once it is, only confirmed
    configs that beat it can win: a config with one run cannot be shown faster
    beyond the noise (the confirmation re-ran the top configs when it was planned;
    one that ranked lower then, or that another's divergence left unconfirmed,
    does not win on a single run). The winner's trimmed config, confirmed and inside the noise
    of it, wins in its place (``autotune.tuner._trim.lighter``).
    """
    base = baseline_group(groups)
    feasible = [g for g in groups if g.feasible]
    if not feasible:
        return Decision(base if only_as_written(groups, base) else None, base, None, ())
    fastest = max(feasible, key=lambda g: g.ranked_median)
    judged = base is not None and base.confirmed  # (a baseline with no believed figure is not)
    contenders = [g for g in feasible if g is base or not judged or (base is not None and beats(g, base))]
    winner = max(contenders, key=lambda g: g.ranked_median)
    winner = lighter(winner, feasible, base) or winner  # (its riders paid nothing: left out)
    untrimmed = untrimmed_of(winner, feasible)
    ties = tuple(g for g in feasible if g is not winner and g.confirmed and winner.confirmed and not beats(winner, g))
    return Decision(winner, base, fastest, ties, untrimmed)


#: Outcomes that rule a config out whatever its speed: a config that ran the code to another end.
REJECTED = (Outcome.DIVERGED.value, Outcome.CRASHED.value, Outcome.OOM_HOST.value, Outcome.OOM_GPU.value)


def only_as_written(groups: Sequence[Group], base: Group | None) -> bool:
    """Whether the code as written is the answer with no figure to rank: it ran to its end every
    time (each of its figures doubted: a loaded host), and every other config that ended was ruled
    out whatever its speed (``REJECTED``: diverged, crashed, out of memory), none only noisy.
    Each config tried gives the code something else to train on or breaks it: there is nothing
    to change, and no speed claimed (a study of siamese_network on a loaded host said "no figure
    to rank" where every config but the code's own had diverged)."""
    if base is None or not all(r.outcome == Outcome.COMPLETE.value for r in base.ended):
        return False
    others = _tried(groups)
    return bool(others) and all(any(r.outcome in REJECTED for r in g.runs) for g in others)


def ruled_out(groups: Sequence[Group]) -> list[TrialRow]:
    """The runs of the configs tried that ruled them out (``REJECTED``), in trial order by config."""
    return [r for g in _tried(groups) for r in g.runs if r.outcome in REJECTED]


def _tried(groups: Sequence[Group]) -> list[Group]:
    """The configs tried that ended (not the code as written: its own failed runs rule nothing out)."""
    return [g for g in groups if not g.first.baseline and g.ended]


def _only_noisy(group: Group) -> bool:
    """Ran to the end every time, but others slowed every run: worth measuring again."""
    ended = group.ended
    return not group.rates and bool(ended) and all(r.measured and is_noisy(r.doubt) for r in ended)


def _diverged_on_loss(group: Group, than: float) -> bool:
    """One of its runs ran faster than ``than`` and was judged diverged on a finite loss (not a nan or inf)."""
    return any(
        r.outcome == Outcome.DIVERGED.value and (r.rate or 0) > than and blew_up(r.losses, r.curve) is None
        for r in group.runs
    )


def _rank(group: Group) -> float:
    """Its median, or for a config with noisy runs only, their best: a lower bound, mostly
    (others slow a run down more often than they speed it up)."""
    return (
        group.ranked_median if group.rates else max(rate for r in group.doubted if (rate := r.ranked_rate) is not None)
    )  # (measured: all)


def plan(groups: Sequence[Group], runs: int, top: int = CONFIRM_TOP, prune: float = PRUNE_FRACTION) -> list[int]:
    """The first-trial numbers to re-run so that the top ``top`` feasible configs and
    the baseline have ``1 + runs`` believed runs each, taken in turns (so that a
    slow drift of the machine spreads over all of them). Runs enqueued or running
    already count: a round planned while another's re-runs are under way adds
    none of them again. A config whose runs were all noisy competes on its best one:
    measured again here, it gets believed figures if the machine is quiet now. A config under
    ``prune`` (the study's ``--prune``; 0: none) of the baseline's believed median is not run
    again: it cannot win (dcgan's 8x batch ran 0.23x the baseline, yet as one of three feasible
    configs was confirmed twice)."""
    base = baseline_group(groups)
    floor = prune * base.ranked_median if base is not None and base.rates else 0.0
    ranked = sorted(
        (g for g in groups if (g.feasible or _only_noisy(g)) and g is not base and _rank(g) >= floor),
        key=_rank,
        reverse=True,
    )[:top]
    if not ranked:  # nothing to compare the baseline with; but a faster config judged diverged on
        # a finite loss may be one the loss's own noise condemned: one re-run of the baseline tells
        return (
            [base.first.number]
            if runs
            and base is not None
            and len(base.runs) == 1
            and base.feasible
            and any(_diverged_on_loss(g, base.median) for g in groups)
            else []
        )
    targets = ranked + ([base] if base is not None and (base.feasible or _only_noisy(base)) else [])
    need = {g.first.number: max(0, 1 + runs - len(g.rates) - g.pending) for g in targets}
    order = []
    for turn in range(max(need.values(), default=0)):
        order += [number for number, n in need.items() if n > turn]
    return order
