"""How a trial is stored in Optuna (its user attrs) and read back as a row."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.core._ceilings import CEILING_NOISE, Bottleneck, Ceilings, bottleneck, cpu_roof
from autotune.core._kinds import Kind
from autotune.core._outcome import RUNNING, Outcome, headline
from autotune.core._whole_runs import loss_cost

if TYPE_CHECKING:
    import optuna

#: Characters of a reason kept in Optuna's user attrs (its headline always).
REASON_LIMIT = 2000

# Optuna user attrs of a trial (the MLflow run holds the same facts). ``baseline``: it runs the
# user's code as written (the baseline trial, or a re-run of it).
ATTR_BASELINE, ATTR_OUTCOME, ATTR_REASON = "baseline", "outcome", "reason"
ATTR_METRICS, ATTR_CONFIG, ATTR_RUN = "metrics", "config", "mlflow_run_id"
ATTR_BASE_BATCH, ATTR_LR, ATTR_LOSSES = "base_batch_size", "lr", "losses"
# Who runs a trial, for resuming after a tuner was killed: the tuner process
# (host, pid, start time), its worker process group, and a heartbeat.
ATTR_OWNER, ATTR_WORKER, ATTR_HEARTBEAT = "owner", "worker", "heartbeat"
# The config as sampled (relative values kept, so a re-run samples nothing), and the
# ceilings the trial measured.
ATTR_SAMPLED, ATTR_CEILINGS = "sampled", "ceilings"
#: Why a trial runs (``autotune.core._kinds.Kind``), and the trial whose config it runs again or
#: starts from (a re-run's first trial, a retry's diverged config, a climb's leader).
ATTR_KIND, ATTR_OF = "kind", "of"
#: The name of the study's objective in Optuna (``set_metric_names``): what each trial's value is.
OBJECTIVE = "samples_per_s"
#: Study user attr: the MLflow parent run (set last by the tuner that creates the study).
ATTR_PARENT = "mlflow_parent_run_id"
#: Where a trial ran: its slot, CPU set and device (``autotune.machine._slots.Slot.record``).
ATTR_SLOT = "slot"
#: Why a complete trial's figure is not believed (``autotune.machine._noise.doubt``), and, on a
#: trial that measures a noisy one again, which attempt it is (1, 2, ...).
ATTR_DOUBT, ATTR_REMEASURE = "doubt", "remeasure"
#: A trial's loss curve (``autotune.core._guard.loss_curve``): the baseline's judges every trial's.
ATTR_CURVE = "curve"
#: What a trial's code built (``Run.facts``): its loader's dataset class, its batches per epoch at
#: the trial's batch size (useful workers stop there), whether it fetches in batches; its optimizers.
ATTR_DATASET = "dataset"
#: The seed a trial trained with: the baseline's, for every trial of a study (common random
#: numbers: the loss verdict then compares configs, not seeds).
ATTR_SEED = "seed"
#: Where a trial's warmup and windows ended in samples, and whether its code returned by itself
#: (``autotune.tuner._watch.shape_of_run``): the baseline's set every later trial's (``autotune.tuner._training_shape``).
ATTR_SHAPE = "shape"
#: The study's production hours (``--horizon``; absent: the script's whole run as given), in its user attrs.
ATTR_HORIZON = "horizon_h"


@dataclasses.dataclass(frozen=True)
class TrialRow:
    """One trial as ``show`` and ``export`` see it."""

    number: int
    baseline: bool
    outcome: str
    reason: str
    metrics: dict[str, float]
    config: dict[str, Any]
    base_batch_size: int | None
    speedup: float | None
    losses: list[tuple[float, float]] = dataclasses.field(default_factory=list)
    sampled: dict[str, Any] = dataclasses.field(default_factory=dict)
    kind: Kind = Kind.SAMPLED
    bottleneck: Bottleneck | None = None
    slot: dict[str, Any] = dataclasses.field(default_factory=dict)
    doubt: str | None = None
    remeasure: int = 0
    curve: list[tuple[float, float, float, int]] = dataclasses.field(default_factory=list)
    run_id: str | None = None  # its MLflow run
    dataset: dict[str, Any] = dataclasses.field(default_factory=dict)
    lr: float | None = None  # the lr run.optimizer set (None: the function passes it none)
    of: int | None = None  # ATTR_OF
    seed: int | None = None  # ATTR_SEED (None: a study from before it was recorded)
    workers_high: int | None = None  # the num_workers range's high end when it drew (None: not drawn)
    shape: dict[str, Any] = dataclasses.field(default_factory=dict)  # ATTR_SHAPE
    #: A whole run of the baseline's training: the baseline's samples over its wall time, what it
    #: ranks on (``autotune.core._whole_runs.wall_rate``), or under ``--horizon`` the production
    #: samples over its projected time (``horizon_rate``); set by the standing, which knows the baseline.
    wall_rate: float | None = None

    @property
    def samples_per_s(self) -> float | None:
        """Its training loop's samples/s: the median of its windows."""
        return self.metrics.get("samples_per_s")

    @property
    def rate(self) -> float | None:
        """The figure it ranks on before time to loss (``ranked_rate``): for a run of the code
        to its end (a study of a short script, ``autotune.tuner._training_shape``), its wall time, start-up
        included, as :attr:`wall_rate` (else, read without the baseline, the samples it trained
        over it); else its loop's samples/s."""
        return self.wall_rate or rate_of(self.metrics)

    @property
    def run_s(self) -> float | None:
        """Its whole run's wall time, process start to exit (None: not run whole)."""
        return self.metrics.get("run_s")

    @property
    def ranked_rate(self) -> float | None:
        """The rate it ranks on (``ranked_rate``): its samples/s, over the samples it needed for
        the baseline's loss against the baseline's where it trains on another batch size."""
        rate, ratio = self.rate, self.to_loss
        return rate / ratio if rate and ratio else rate

    @property
    def to_loss(self) -> float | None:
        """See ``batch_to_loss``."""
        return batch_to_loss(self.metrics, self.config.get("batch_size"), self.base_batch_size)

    @property
    def measured(self) -> bool:
        """Complete, with a figure (believed or not: see ``doubt``)."""
        return self.outcome == Outcome.COMPLETE.value and bool(self.rate)

    @property
    def reliable(self) -> bool:
        """Complete, with a figure that ranks (not noisy, not a short measure)."""
        return self.measured and self.doubt is None


def changes_batch(batch: Any, base_batch: int | None) -> bool:
    """Whether a run trained on another batch size than the code's."""
    return isinstance(batch, int) and isinstance(base_batch, int) and batch != base_batch


def batch_to_loss(metrics: Mapping[str, float], batch: Any, base_batch: int | None) -> float | None:
    """Where a run trained on another batch size than the code's: the samples it took to the
    baseline's loss over the baseline's (``to_loss_ratio``; a lower bound, ``to_loss_beyond``,
    where it did not get there); None on the code's batch size, or where nothing was compared.
    A whole run (``run_s``) counts it only as a cost (``autotune.core._whole_runs.loss_cost``): it
    ranks on the wall time of the production run, which trains all its samples.

    >>> batch_to_loss({"to_loss_ratio": 0.75}, 128, 32), batch_to_loss({"to_loss_ratio": 0.75, "run_s": 9.0}, 128, 32)
    (0.75, None)
    >>> batch_to_loss({"to_loss_beyond": 1.4, "run_s": 9.0}, 128, 32)
    1.4
    """
    if not changes_batch(batch, base_batch):
        return None
    ratio = metrics.get("to_loss_ratio") or metrics.get("to_loss_beyond")
    return loss_cost(ratio) if metrics.get("run_s") else ratio


def rate_of(metrics: Mapping[str, float]) -> float | None:
    """What a run ranks on before time to loss: under ``--horizon``, a whole run's projected
    production figure (``production_samples_per_s``: ``autotune.core._whole_runs.with_production_rate``);
    else ``run_samples_per_s`` where it ran whole (what the user waits for: a config's start-up
    costs, more workers or compiling, count), else its loop's ``samples_per_s``.

    >>> rate_of({"samples_per_s": 900.0, "run_samples_per_s": 300.0}), rate_of({"samples_per_s": 900.0})
    (300.0, 900.0)
    >>> rate_of({"samples_per_s": 900.0, "run_samples_per_s": 300.0, "production_samples_per_s": 850.0})
    850.0
    """
    return metrics.get("production_samples_per_s") or metrics.get("run_samples_per_s") or metrics.get("samples_per_s")


def ranked_rate(metrics: Mapping[str, float], batch: Any, base_batch: int | None) -> float | None:
    """The rate a run ranks on: its samples/s; where it trains on another batch size than the
    code's, its samples/s over the samples it took to the baseline's loss against the baseline's
    (``to_loss_ratio``, or ``to_loss_beyond`` where it did not get there: a bound), so that it
    ranks on its time to the same loss. A larger batch takes fewer steps a sample and often
    needs more samples: on an MLP, 8x the batch ran 2.40x the samples/s and reached the
    baseline's loss 1.23x as fast (README, "Time to the baseline's loss").

    >>> ranked_rate({"samples_per_s": 200.0, "to_loss_ratio": 2.0}, 256, 32), ranked_rate({"samples_per_s": 200.0}, 256, 32)
    (100.0, 200.0)
    >>> ranked_rate({"samples_per_s": 200.0, "to_loss_ratio": 2.0}, 32, 32)
    200.0
    """
    rate = rate_of(metrics)
    ratio = batch_to_loss(metrics, batch, base_batch)
    return rate / ratio if rate and ratio else rate


def told_rate(
    outcome: str, metrics: Mapping[str, float], config: Mapping[str, Any], base_batch: int | None
) -> float | None:
    """The value Optuna's sampler learns for a finished trial: what a complete one ranks on
    (``ranked_rate``); a diverged one's real samples/s (it is infeasible by its constraint: a fast
    region, whose lr may be worth another try).

    >>> m = {"samples_per_s": 200.0, "to_loss_ratio": 2.0}
    >>> told_rate("complete", m, {"batch_size": 64}, 32), told_rate("diverged", m, {"batch_size": 64}, 32)
    (100.0, 200.0)
    """
    if outcome == Outcome.COMPLETE.value:
        return ranked_rate(metrics, config.get("batch_size"), base_batch)
    return rate_of(metrics)


def row_of(trial: optuna.trial.FrozenTrial, ceilings: Ceilings) -> TrialRow:
    """Read one Optuna trial back as a row (speedup left for ``standing`` to fill)."""
    attrs = trial.user_attrs
    metrics = attrs.get(ATTR_METRICS, {})
    outcome = attrs.get(ATTR_OUTCOME) or (RUNNING if trial.state.name == "RUNNING" else trial.state.name.lower())
    config = attrs.get(ATTR_CONFIG) or dict(trial.params)
    bound = None
    if outcome in (Outcome.COMPLETE.value, Outcome.DIVERGED.value) and "samples_per_s" in metrics:
        bound = bottleneck_of(metrics, config, ceilings, attrs.get(ATTR_CEILINGS, []))
    return TrialRow(
        trial.number,
        bool(attrs.get(ATTR_BASELINE)),
        outcome,
        attrs.get(ATTR_REASON, ""),
        metrics,
        config,
        attrs.get(ATTR_BASE_BATCH),
        None,
        losses=[tuple(p) for p in attrs.get(ATTR_LOSSES, [])],
        sampled=attrs.get(ATTR_SAMPLED, {}),
        kind=kind_of(attrs),
        bottleneck=bound,
        slot=attrs.get(ATTR_SLOT, {}),
        doubt=attrs.get(ATTR_DOUBT),
        remeasure=attrs.get(ATTR_REMEASURE, 0),
        curve=[tuple(c) for c in attrs.get(ATTR_CURVE, [])],
        run_id=attrs.get(ATTR_RUN),
        dataset=attrs.get(ATTR_DATASET) or {},
        lr=attrs.get(ATTR_LR),
        of=attrs.get(ATTR_OF),
        seed=attrs.get(ATTR_SEED),
        workers_high=getattr(trial.distributions.get("num_workers"), "high", None),
        shape=attrs.get(ATTR_SHAPE) or {},
    )


def kind_of(attrs: Mapping[str, Any]) -> Kind:
    """A trial's kind from its user attrs: a trial ``ask`` made, with none yet, is sampled."""
    return Kind(attrs.get(ATTR_KIND, Kind.SAMPLED.value))


def kind_label(row: TrialRow, of: bool = True) -> str:
    """How a table names a trial's kind: ``baseline``, ``confirm of 0``, ``retry of 3``; empty for a
    sampled one (most trials). ``of=False`` leaves out a repeat's first trial (where the table
    marks it ``(= 0)``)."""
    if row.kind is Kind.SAMPLED:
        return ""
    return row.kind.label + (f" of {row.of}" if row.of is not None and (of or not row.kind.repeats) else "")


def run_name(row: TrialRow, winner: bool) -> str:
    """A trial's MLflow run name, which the runs page shows without picking columns, in the
    room its name column gives (about 24 characters): ``#3 WINNER 2.13x 10,535/s``,
    ``#0 base 1.00x 4,946/s``, ``#4 1.21x 6,010/s`` (complete), ``#5 pruned 1,200/s``,
    ``#7 1.90x 9,400/s (= #3)`` (a repeat): its speedup as it ranks, its samples/s as measured
    (a whole run: its wall time, ``#3 WINNER 2.18x 4.6 s``).
    """
    what = ["WINNER"] if winner else []
    if row.baseline:
        what.append("base")
    if row.outcome != Outcome.COMPLETE.value:
        what.append(row.outcome)
    speedup = row.speedup if row.outcome == Outcome.COMPLETE.value else None
    figure = f"{row.run_s:.1f} s" if row.run_s else f"{row.samples_per_s:,.0f}/s" if row.samples_per_s else None
    figures = ([f"{speedup:.2f}x"] if speedup else []) + ([figure] if figure else [])
    again = [f"(= #{row.of})"] if row.kind.repeats else []
    doubt = [f"({row.doubt.partition(':')[0]})"] if row.doubt else []
    return " ".join([f"#{row.number}", *what, *figures, *doubt, *again])


def signed_share(x: float) -> str:
    """A share with its sign, whole percents: "+12%", "-5%", and "+0%" (never "-0%")."""
    return f"{round(x, 2) or 0.0:+.0%}"


#: What a trial's loss cell (``loss_cell``) means, for the legend under a table of trials.
LOSS_LEGEND = (
    "loss: its loss against the baseline's on the same samples, for a trial judged to its end "
    "(past the divergence tolerance, diverged)"
)


def loss_cell(metrics: Mapping[str, float]) -> str:
    """A trial's loss against the baseline's as a table cell: "+12%", or "-" where not judged."""
    return signed_share(metrics["loss_excess"]) if "loss_excess" in metrics else "-"


def loss_against_baseline(excess: float, tolerance: float | None, each: Sequence[float] = ()) -> str:
    """A judged loss in words, after "loss" or "loss:": "+12% against the baseline's on the
    same samples (each run: +9%, +12%, +15%; diverged past +50%)".

    Args:
        excess: Its loss over the baseline's there, less one (``TrialResult.judged``).
        tolerance: The tolerance it was held to, if known.
        each: Every run's excess, where it is a median (said when there are two or more).
    """
    notes = ([f"each run: {', '.join(map(signed_share, each))}"] if len(each) > 1 else []) + (
        [f"diverged past {signed_share(tolerance)}"] if tolerance is not None else []
    )
    return f"{signed_share(excess)} against the baseline's on the same samples" + (
        f" ({'; '.join(notes)})" if notes else ""
    )


def trial_note(
    number: int,
    outcome: Outcome,
    reason: str,
    doubt: str | None,
    metrics: Mapping[str, Any],
    baseline: float | None,
    bottleneck: str | None,
    attrs: Mapping[str, Any],
) -> str:
    """A trial's MLflow description (its note): what it ran, how it ended and why, its speed
    (``metrics``' ``samples_per_s``) against the baseline's at the time, its loss against the
    baseline's (its ``loss_excess`` and ``loss_tolerance``, said where the reason does not), its
    bottleneck; one paragraph a person reads."""
    kind, of = kind_of(attrs), attrs.get(ATTR_OF)
    samples_per_s = metrics.get("samples_per_s")
    loss = (metrics["loss_excess"], metrics.get("loss_tolerance")) if "loss_excess" in metrics else None
    what = {
        Kind.BASELINE: "the baseline: your code as written",
        Kind.SAMPLED: "a config the study drew",
        Kind.CONFIRM: f"trial {of}'s config again, to confirm it",
        Kind.REMEASURE: f"trial {of}'s config again, measured on a quiet machine",
        Kind.RETRY: f"trial {of}'s config, whose lr held it back, with lr_scaling "
        f"{attrs.get(ATTR_SAMPLED, {}).get('lr_scaling')}",
        Kind.MORE_WORKERS: f"trial {of}'s config with more DataLoader workers",
        Kind.SMALLER_BATCH: f"trial {of}'s config at a smaller batch size with more DataLoader workers",
        Kind.WARM_START: "a top config of an earlier study of this target, run first (warm start)",
        Kind.TRIM: f"the winner, trial {of}, with the knobs beside its shape as your code has them",
    }[kind]
    parts = [f"Trial {number} ({what}): {outcome.value}."]
    if samples_per_s:
        parts.append(
            f"{samples_per_s:,.0f} samples/s"
            + (f", {samples_per_s / baseline:.2f}x the baseline's {baseline:,.0f}" if baseline else "")
            + "."
        )
    if doubt:
        parts.append(f"Not ranked: {doubt}.")
    if reason:
        parts.append(headline(reason).rstrip(".") + ".")
    if loss and outcome != Outcome.DIVERGED:  # a diverged trial's reason says it
        parts.append(f"Loss {loss_against_baseline(*loss)}.")
    if bottleneck:
        parts.append(f"Bottleneck: {bottleneck}.")
    return " ".join(parts)


def bottleneck_of(
    metrics: Mapping[str, float], config: Mapping[str, Any], ceilings: Ceilings, own: list[dict[str, Any]]
) -> Bottleneck:
    """A measured trial's bottleneck, from its figures and its ceilings.

    A ceiling the trial measured itself (``own``) comes first: taken seconds after
    its windows, it shares their moment of a drifting machine (the speed of a
    shared VM wanders by 10% and more over minutes). Else the study's median for
    its config.
    """
    from autotune.core._knobs import Part

    mine = {entry["part"]: entry for entry in own}
    # Its own ceilings found wrong (under load, or run past), and the study's it ran past.
    doubted = {
        part: entry.get("doubt") or entry["distrust"]
        for part, entry in mine.items()
        if entry.get("doubt") or entry.get("distrust")
    }

    def measured(part: Part, key: str) -> float | None:
        if part.value in doubted:
            return None
        value = mine.get(part.value, {}).get(key)
        if value is not None:
            return value
        return ceilings.get(part, config) if key == "samples_per_s" else ceilings.cpu(part, config)

    cpus = next((e["cpus"] for e in own if e.get("cpus")), None) or ceilings.cpus
    # Past a ceiling by more than the two measurements' noise together shows it wrong.
    spreads = [metrics.get("samples_per_s_spread", 0.0), *(e.get("spread", 0.0) for e in own)]
    return bottleneck(
        metrics["samples_per_s"],
        metrics.get("data_wait_frac", 0.0),
        measured(Part.COMPUTE, "samples_per_s"),
        measured(Part.LOADER, "samples_per_s"),
        cpu_roof(measured(Part.COMPUTE, "cpu_per_sample"), measured(Part.LOADER, "cpu_per_sample"), cpus),
        noise=max(CEILING_NOISE, sum(spreads) / 2),
        doubted=doubted,
        main=metrics.get("main_roof"),
    )
