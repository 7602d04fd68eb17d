"""The planner: what a study runs next, decided from its standing and returned as requests.

Each rule is a pure function of the standing (every trial so far, read back from the store)
and a few settings. It returns a ``Request`` (its kind, its config, the trial it starts
from, and the line that says why) or a ``Line`` saying why not, and acts on nothing: the
study's loop writes what it returns into the study (``autotune.tuner._queue``), so that every
rule is tested on a hand-built standing in milliseconds.

After a trial (``after_trial``), in this order: an interrupted baseline or re-run is owed
again; a noisy figure is measured again once the machine is quiet; a fast config that
diverged runs again with the next ``lr_scaling``; a leader that waits on data runs again
with more workers (or at a smaller batch size); the baseline says how far it measured; once
the confirmation has ended, the winner runs without the knobs beside its shape, and that
config is confirmed where it ran as fast (``autotune.tuner._trim``).
After the trials, the confirmation (``confirmation``) re-runs the top configs.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from autotune.core._guard import blew_up, flat_reference, learned_share, lr_retry
from autotune.core._kinds import Kind, Line, Request, baseline_request
from autotune.core._knobs import batch_of
from autotune.core._outcome import WAITING, Outcome
from autotune.core._prune import PRUNE_FRACTION
from autotune.machine._noise import is_noisy
from autotune.tuner._confirm import UNFINISHED, noisy_loss, plan
from autotune.tuner._loader_workers import epoch_samples, useful_workers
from autotune.tuner._space import Choice, IntRange, Space
from autotune.tuner._space_now import base_batch_size
from autotune.tuner._trim import confirm_trim, trim
from autotune.tuner._worker_climb import climbed, more_workers
from autotune.worker._streams import duplicating

if TYPE_CHECKING:
    from autotune.stores._records import TrialRow
    from autotune.tuner._standing import Standing

Decision = Request | Line


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the rules need besides the standing.

    Attributes:
        space: The space as of now (``autotune.tuner._space_now.space_now``).
        cpus: CPUs of a trial's share, where the study measured none.
        tolerance: The divergence tolerance (``--divergence-tolerance``).
        windows: Measured windows per trial, as planned (``--windows``).
        remeasure: Times a noisy trial is measured again at most (``--remeasure``).
        trials_left: This tuner's own trials still to run (``--trials`` less those taken): a
            follow-up the sampling enqueues takes one of them.
        confirm: Re-runs of each top config in the confirmation (``--confirm``).
    """

    space: Space
    cpus: int
    tolerance: float
    windows: int
    remeasure: int
    trials_left: int
    confirm: int = 0


@dataclasses.dataclass(frozen=True)
class Wait:
    """No complete baseline yet, and trial ``number`` (a baseline, or a re-run of one) is
    enqueued or running: wait for it."""

    number: int


@dataclasses.dataclass(frozen=True)
class Failed:
    """The baseline this tuner watched ended without a figure: every trial would fail too."""

    row: TrialRow


def without_baseline(standing: Standing, watched: int | None) -> Wait | Failed | Request:
    """What a tuner does while the study has no complete baseline (every trial's divergence
    check and speedup need one) and none was left for it to claim: wait for the one another
    tuner or slot runs; stop, when the one it ``watched`` ended otherwise than interrupted;
    else ask for it again (an older study, or the tuner that owed it died)."""
    baselines = [r for r in standing.rows if r.kind is Kind.BASELINE]
    pending = [r for r in standing.rows if r.outcome in UNFINISHED and r.baseline]
    if pending:
        return Wait(pending[-1].number)
    if watched is not None and baselines and baselines[-1].outcome != Outcome.INTERRUPTED.value:
        return Failed(baselines[-1])
    return baseline_request(len(baselines))


def after_trial(row: TrialRow, standing: Standing, settings: Settings) -> list[Decision]:
    """What this trial's end asks for, in order (see the module)."""
    decisions = [owed_again(row, standing), measure_again(row, settings.remeasure)]
    if row.kind.explores and (row.outcome == Outcome.DIVERGED.value or slow_learner(row)):
        decisions.append(retry_lr(row, standing, settings.space, settings.trials_left > 0))
    if row.kind.explores and row.reliable and settings.trials_left:
        decisions.append(climb(row, standing, settings.space, settings.cpus))
    if row.kind is Kind.BASELINE and row.measured:
        decisions.append(baseline_curve(row, settings.tolerance, settings.windows))
    decisions.append(loss_unit(row))
    if not settings.trials_left:
        decisions += [
            trim(row, standing.rows, standing.decision, settings.space, settings.confirm),
            *confirm_trim(row, standing.groups, settings.confirm),
        ]
    return within_trials([d for d in decisions if d is not None], row, standing, settings.trials_left)


def within_trials(decisions: list[Decision], row: TrialRow, standing: Standing, left: int) -> list[Decision]:
    """``decisions`` with no more follow-ups of the sampling (a retry, more workers, a smaller
    batch: each takes one of the tuner's own trials) than its trials left hold, counting the
    follow-ups and warm starts already enqueued; each one past them becomes the line that says so.
    Enqueued past them, one would wait in the store unclaimed forever (an empty row in ``show``), as
    three did after a sweep study's trial 14 with one trial left (2026-11-29). (A config enqueued
    from outside, with Optuna's ``enqueue_trial``, is claimed by whichever tuner asks first and is
    not counted: other tuners of the study may hold the trials for it.)"""
    room = left - sum(
        1 for r in standing.rows if r.outcome == WAITING and r.kind.explores and r.kind is not Kind.SAMPLED
    )
    kept: list[Decision] = []
    for decision in decisions:
        if isinstance(decision, Request) and decision.kind.explores:
            if room <= 0:
                asked = decision.why or f"trial {row.number} asked for a {decision.kind.label}"
                decision = Line(f"{asked}; not run: no trial of --trials is left for it")
            room -= 1
        kept.append(decision)
    return kept


def loss_unit(row: TrialRow) -> Line | None:
    """The line that says the loss is no signal for this script (``row`` re-ran the code as written
    and its loss disagreed with the first run's), or that a loss summed over the batch is compared
    per sample (``row`` was found so); each said once (``Line.once``)."""
    said = "no signal" if noisy_loss([row]) is row else "per sample" if "loss_per_sample" in row.metrics else None
    return next(
        (Line(f"trial {row.number}: {ln}", f"loss-{said}") for ln in row.reason.splitlines() if said and said in ln),
        None,
    )


def owed_again(row: TrialRow, standing: Standing) -> Request | None:
    """An interrupted baseline or re-run, owed to the study again (a sampled trial is not)."""
    if row.outcome != Outcome.INTERRUPTED.value:
        return None
    if row.kind is Kind.BASELINE:
        return baseline_request(sum(1 for r in standing.rows if r.kind is Kind.BASELINE))
    if row.kind.repeats:
        return Request(row.kind, row.sampled, row.of, baseline=row.baseline, attempt=row.remeasure)
    return None


def measure_again(row: TrialRow, limit: int) -> Decision | None:
    """A noisy trial's config, to run again once the machine is quiet (``Request.kind`` is
    ``remeasure``: the loop waits first, see ``after_quiet_wait``), up to ``limit`` times;
    past it, the line that says its figure stays unranked."""
    if not is_noisy(row.doubt):
        return None
    if row.remeasure >= limit:
        return (
            Line(
                f"trial {row.number}: {row.doubt}; measured {row.remeasure + 1} times, never quietly: its "
                "figure is not ranked"
            )
            if limit
            else None
        )
    first = row.of if row.kind.repeats else row.number
    return Request(
        Kind.REMEASURE,
        row.sampled,
        first,
        f"trial {row.number}: {row.doubt}; measuring it again",
        baseline=row.baseline,
        attempt=row.remeasure + 1,
    )


def after_quiet_wait(request: Request, quiet: bool, load: float, waited: float, limit: int) -> Request | Line:
    """The remeasure ``request`` once the wait for a quiet machine ended: written with the
    line that says how long it waited, or, when the machine stayed busy, a line instead."""
    if not quiet:
        return Line(
            f"{request.why.removesuffix('; measuring it again')}; the machine is still busy (others use "
            f"{load:.0%} of its CPUs after {waited:.0f} s): its figure is not ranked"
        )
    return dataclasses.replace(
        request,
        why=request.why
        + (f" after {waited:.0f} s, once the machine was quiet" if waited >= 2 else "")
        + f" (attempt {request.attempt + 1} of {limit + 1})",
    )


#: A complete run at a larger batch that took at least this many times the baseline's samples
#: to the baseline's loss learns too little per sample for its lr: its config is worth a
#: larger one (``retry_lr``), as a diverged one's is.
SLOW_LEARNER = 1.5


def slow_learner(row: TrialRow) -> bool:
    """A complete run at a larger batch than the code's that needed ``SLOW_LEARNER`` times the
    baseline's samples (or more: not there by its end) to the baseline's loss."""
    ratio = row.to_loss
    return (
        row.outcome == Outcome.COMPLETE.value
        and ratio is not None
        and ratio >= SLOW_LEARNER
        and isinstance(row.config.get("batch_size"), int)
        and bool(row.base_batch_size)
        and row.config["batch_size"] > row.base_batch_size
    )


def retry_lr(row: TrialRow, standing: Standing, space: Space, trials_left: bool) -> Decision | None:
    """A drawn config judged diverged (or, at a larger batch, complete but a ``slow_learner``)
    that ran faster than the best so far: its config again
    with the next ``lr_scaling`` (``autotune.core._guard.lr_retry``), while this tuner has trials
    of its own left. Not when a trial has drawn that config with that ``lr_scaling`` already
    (another slot's or tuner's, running or done: it is judged on its own, and the line says
    so): two tuners on the lr_train fixture ran it twice in 8 of 9 studies, once drawn and
    once retried.

    Its speed does not depend on its lr, so its other knobs are fast: without this, a study
    whose first fast draws diverged at batches past the user's (lr not scaled up enough)
    left that region for good, as TPE counts an infeasible trial against every knob it
    drew, and settled on a config at a quarter of the machine's speed (the jpeg runner).
    """
    domain = space.domains.get("lr_scaling")
    rate, size = row.rate, row.config.get("batch_size")  # (as it ranks before time to loss: a whole run's)
    base = standing.base.median if standing.base and standing.base.rates else None
    winner = standing.decision.winner
    best = winner.ranked_median if winner is not None and winner.ranked else base
    if (
        not isinstance(domain, Choice)
        or row.lr is None
        or not rate
        or not best
        or rate <= best
        or not row.base_batch_size
        or not isinstance(size, int)
    ):
        return None
    first = row.of if row.kind is Kind.RETRY else row.number
    tried = {
        r.sampled.get("lr_scaling")
        for r in standing.rows
        if r.number == first or (r.kind is Kind.RETRY and r.of == first)
    }
    scaling = row.sampled.get("lr_scaling")
    step = lr_retry(
        scaling, size / row.base_batch_size, blew_up(row.losses, row.curve) is not None, tried, domain.choices
    )
    if step is None or not trials_left:
        return None
    wanted = {**row.sampled, "lr_scaling": step}
    what = (
        "diverged"
        if row.outcome == Outcome.DIVERGED.value
        else f"took {row.to_loss:.2g}x the baseline's samples to its loss"
    )
    said = (
        f"trial {row.number} {what} at batch size {size} ({size / row.base_batch_size:g}x the code's) "
        f"with lr_scaling {scaling}, but ran at {rate:,.0f} samples/s{' over its whole run' if row.run_s else ''}, "
        f"past the best so far ({best:,.0f})"
    )
    other = next((r for r in standing.rows if r.sampled == wanted), None)
    if other is not None:
        return Line(
            f"{said}; its config with lr_scaling {step} "
            + ("runs already" if other.outcome in UNFINISHED else "ran already")
            + f" (trial {other.number}): not run again"
        )
    return Request(
        Kind.RETRY,
        wanted,
        first,
        f"{said}: its config runs again with lr_scaling {step} (its speed does not depend on the lr)",
    )


def climb(row: TrialRow, standing: Standing, space: Space, cpus: int) -> Request | None:
    """A leading trial that still waits on data with fewer workers than could help: its
    config again with more (``autotune.tuner._worker_climb.more_workers``), or at the next smaller
    batch size where it has a worker per batch already; once per trial, however many
    tuners see it (``Request.once``). None when the result was drawn already."""
    domains = space.domains
    domain = domains.get("num_workers")
    if not isinstance(domain, IntRange):
        return None
    base, samples = base_batch_size(standing), epoch_samples(standing.rows)
    drawn = row.sampled.get("batch_size")
    useful = useful_workers(drawn, base, samples)
    persist = domains.get("persistent_workers")
    below = smaller_batch(drawn, base, domains.get("batch_size"))
    smaller = None if below is None else (below, useful_workers(below, base, samples))
    high = 1 if duplicating(standing.rows) else domain.high  # (a stream every worker yields whole)
    more = more_workers(
        row,
        standing.rows,
        standing.ceilings,
        standing.ceilings.cpus or cpus,
        high,
        useful,
        can_persist=isinstance(persist, Choice) and True in persist.choices,
        smaller=smaller,
    )
    if more is None:
        return None
    # (an epoch's batches at the batch size it runs at: its own, or the smaller one)
    params = climbed(row.sampled, more, useful if more.batch_size is None or smaller is None else smaller[1])
    if any(r.sampled == params for r in standing.rows):
        return None  # drawn already
    kind = Kind.MORE_WORKERS if more.batch_size is None else Kind.SMALLER_BATCH
    return Request(kind, params, row.number, more.why, once=f"more-workers-{row.number}", enqueue_params=True)


def smaller_batch(drawn: Any, base: int | None, domain: Any) -> Any:
    """The largest of the space's batch sizes (``domain``, a Choice) below ``drawn`` in
    samples, or None (none is, or either is unknown)."""
    size = batch_of(drawn, base) if drawn is not None else None
    if not isinstance(domain, Choice) or size is None:
        return None
    sizes = [(batch_of(c, base), c) for c in domain.choices]
    below = [(n, c) for n, c in sizes if n is not None and n < size]
    return max(below, key=lambda nc: nc[0])[1] if below else None


def baseline_curve(row: TrialRow, tolerance: float, planned: int) -> Line | None:
    """How far the baseline measured for the divergence check, when not as planned."""
    flat = flat_reference(row.losses, row.curve, tolerance)
    # its warmup, then a point per window (a whole run's windows are the whole run, none added)
    added = 0 if row.run_s else len(row.losses) - 1 - planned
    if flat:
        return Line(
            f"{flat}, in {planned + max(added, 0)} windows: a config that learns nothing may pass as "
            f"complete; only a loss over {tolerance:.0%} worse than the baseline's shows as divergence. "
            "Longer windows (--window) give it more"
        )
    if added > 0:
        return Line(
            f"the baseline measured {added} more window{'s' if added > 1 else ''} than planned, until "
            f"its loss fell to {learned_share(tolerance):.0%} of its warmup's: every config's divergence "
            "is judged against its curve"
        )
    return None


@dataclasses.dataclass(frozen=True)
class Round:
    """A confirmation round: its re-runs, written once per study under ``once``."""

    once: str
    requests: tuple[Request, ...]
    why: str


def confirmation(standing: Standing, runs: int, prune: float = PRUNE_FRACTION) -> Round:
    """The re-runs that give the top configs and the baseline ``1 + runs`` believed runs each
    (``autotune.tuner._confirm.plan``; none of a config under ``prune`` of the baseline's speed), in
    turns. The round is named after the configs run so far, the same for every tuner that gets
    here, and re-runs already enqueued or running count."""
    firsts = {g.first.number: g.first for g in standing.groups}
    numbers = plan(standing.groups, runs, prune=prune)
    requests = tuple(Request(Kind.CONFIRM, firsts[n].sampled, n, baseline=firsts[n].baseline) for n in numbers)
    why = (
        (
            f"confirming: {len(numbers)} re-runs of trials {', '.join(str(n) for n in dict.fromkeys(numbers))} "
            "(the winner is chosen on the median of its runs)"
        )
        if numbers
        else ""
    )
    return Round(f"confirm-after-{len(standing.groups)}", requests, why)
