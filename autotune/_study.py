"""A study: the baseline, then sampled trials, each run in a worker and recorded in Optuna and MLflow."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune._ceilings import Ceilings
from autotune._config import Config, ConfigError
from autotune._confirm import PENDING, plan
from autotune._guard import (
    DIVERGENCE_TOLERANCE,
    PRUNE_FRACTION,
    blew_up,
    flat_reference,
    learned_share,
    lr_retry,
    prune_reason,
)
from autotune._judge import checked_ceilings
from autotune._knobs import batch_of, show_value
from autotune._monitor import Background
from autotune._noise import (
    FOREIGN_LOAD_MAX,
    QUIET_LOOK_S,
    QUIET_WAIT_S,
    REMEASURES,
    SPREAD_MAX,
    doubt,
    is_noisy,
)
from autotune._outcome import Outcome, clip, headline
from autotune._records import (
    ATTR_BASE_BATCH,
    ATTR_BASELINE,
    ATTR_CEILINGS,
    ATTR_CONFIG,
    ATTR_CONFIRMS,
    ATTR_CURVE,
    ATTR_DATASET,
    ATTR_DOUBT,
    ATTR_HEARTBEAT,
    ATTR_LOSSES,
    ATTR_LR,
    ATTR_METRICS,
    ATTR_OUTCOME,
    ATTR_OWNER,
    ATTR_PARENT,
    ATTR_REASON,
    ATTR_REMEASURE,
    ATTR_RETRIES,
    ATTR_RUN,
    ATTR_SAMPLED,
    ATTR_SEED,
    ATTR_SLOT,
    ATTR_WORKER,
    OBJECTIVE,
    REASON_LIMIT,
    TrialRow,
    bottleneck_of,
    run_name,
    trial_note,
)
from autotune._runner import (
    Budget,
    TrialResult,
    TrialSpec,
    Verdict,
    kill_orphans,
    new_tag,
    run_trial,
    sweep_orphans,
)
from autotune._slots import Slot
from autotune._standing import (
    Standing,
    export_text,
    findings,
    held_loader_knobs,
    standing,
    throughput_figure,
)
from autotune._stores import (
    STORE_PATIENCE_S,
    Patience,
    Pending,
    first_line,
    patient_storage,
)
from autotune._tuners import (
    HEARTBEAT_S,
    STALE_AFTER_S,
    HostRegistry,
    Liveness,
    Phase,
    Registry,
    claim,
    claim_waiting,
    describe,
    found_or_join,
    this_process,
)

if TYPE_CHECKING:
    import optuna

    from autotune._probe import Fingerprint
    from autotune._space import Cap, Space
    from autotune._tracking import Tracker

#: Default store folder (relative to where autotune runs): the Optuna journal,
#: the MLflow database and artifacts, and the trials' logs.
DEFAULT_STORE = Path("mlflow")
#: Share of the RAM available at the start that one trial's processes may use.
RAM_BUDGET_FRACTION = 0.75

#: Seconds between looks at the study while waiting on another tuner (its baseline).
POLL_S = 2.0
#: Seconds a tuner joining a new study waits for its founder to finish setting it
#: up (the MLflow parent run) before doing it itself.
SETUP_WAIT_S = 120.0


@dataclasses.dataclass(frozen=True)
class StudyOptions:
    """What ``autotune run`` was asked to do."""

    target: str
    trials: int = 12
    study: str | None = None
    storage: str | None = None
    tracking_uri: str | None = None
    store: Path = DEFAULT_STORE
    device: str = "auto"
    budget: Budget = Budget()
    ram_budget: int | None = None
    seed: int | None = None
    tolerance: float = DIVERGENCE_TOLERANCE
    prune: float = PRUNE_FRACTION
    confirm: int = 2
    store_patience: float = STORE_PATIENCE_S
    max_load: float = FOREIGN_LOAD_MAX
    remeasure: int = REMEASURES
    quiet_wait: float = QUIET_WAIT_S
    max_spread: float = SPREAD_MAX


class Reporter:
    """Receives a study's progress (the CLI draws it; the default ignores it)."""

    def note(self, line: str) -> None:
        """A line worth showing once (capability drops, paths)."""

    def trial_started(self, number: int, index: int, total: int, config: Config,  # type: ignore[valid-type]
                      rerun: int | None = None, share: str | None = None) -> None:
        """Trial ``index`` of ``total`` of this invocation is starting (a re-run of trial
        ``rerun``, when confirming; on ``share`` of the host, with ``--jobs``)."""

    def event(self, event: Mapping[str, Any]) -> None:
        """An event from a running worker (``event["trial"]`` says whose)."""

    def trial_done(self, row: TrialRow, found: Standing, seconds_left: float) -> None:
        """A trial ended; ``found`` is the study's standing with it (its winner so far)."""


class BaselineFailed(RuntimeError):
    """The user's code as written does not run, so no trial can: stop the study."""


def _baseline_failed(row: TrialRow) -> BaselineFailed:
    return BaselineFailed(f"the baseline (trial {row.number}: your code as written) ended as "
                          f"{row.outcome}; every trial would fail the same way:\n{row.reason}")


def _all_cpus() -> tuple[int, ...]:
    return tuple(sorted(os.sched_getaffinity(0)))


def default_study_name(target: str) -> str:
    """``runners/mnist.py:train`` -> ``mnist``; another function name is appended."""
    module, _, func = target.rpartition(":")
    stem = Path(module).stem if module.endswith(".py") else module.rsplit(".", 1)[-1]
    return stem if func == "train" else f"{stem}.{func}"


def _rdb_storage(url: str, engine_kwargs: dict[str, Any] | None, attempts: int = 5):
    """Optuna's RDB storage; tuners starting together on a new database race through its
    schema creation (a duplicate key in ``alembic_version``): the losers retry once the
    winner's tables are there."""
    import optuna
    import sqlalchemy.exc

    for attempt in range(attempts - 1):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError):
            time.sleep(0.5 + attempt)
    return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)


#: How to get the driver SQLAlchemy picks for a plain URL of each backend.
DRIVER_HINTS = {"postgresql": "pip install 'autotune[postgres]'"}


def open_storage(store: Path, url: str | None, patience: float | None = None,
                 on_wait: Callable[[str], None] | None = None):
    """An Optuna storage: ``url`` (an RDB URL, or a journal file), else a journal in ``store``.

    Nothing is created when the URL is bad or its driver is missing. With
    ``patience``, every call that fails for want of the database (a restart, a
    full disk) is retried for up to that many seconds (``autotune._stores``).

    Raises:
        ConfigError: naming the storage (password hidden) when it cannot be opened or reached.
    """
    import optuna
    from optuna.storages.journal import JournalFileBackend

    shown = url
    try:
        if url and "://" in url:
            from sqlalchemy.engine import make_url

            parsed = make_url(url)
            shown = parsed.render_as_string(hide_password=True)
            try:
                parsed.get_dialect().import_dbapi()
            except ImportError as exc:
                hint = DRIVER_HINTS.get(parsed.get_backend_name(), f"install a driver for {parsed.drivername}")
                raise ConfigError(f"--storage {shown!r}: the database driver is not installed ({exc}); "
                                  f"{hint}") from None
            # A server that does not answer should fail in seconds, not hang the tuner; a
            # pooled connection that a server restart broke is replaced, not used.
            kwargs = ({"connect_args": {"connect_timeout": 10}, "pool_pre_ping": True}
                      if parsed.get_backend_name() in ("postgresql", "mysql") else None)
            storage = _rdb_storage(url, kwargs)
        else:
            path = Path(url) if url else store / "optuna.journal"
            shown = str(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            storage = optuna.storages.JournalStorage(JournalFileBackend(str(path)))
        if patience is None:
            return storage
        return patient_storage(storage, Patience(f"the study storage {shown}", patience, on_wait=on_wait))
    except ConfigError:
        raise
    except Exception as exc:  # every failure here means: no study can start
        raise ConfigError(f"--storage {shown!r}: cannot be opened: {first_line(exc)}") from None


class _Heartbeat(Background):
    """Calls ``beat`` every ``HEARTBEAT_S`` on a thread (the tuner's registry entry, a
    running trial's counter): a storage hiccup skips one beat, the next one retries.

    It cannot die quietly: a failed beat is said once per run of failures (other
    tuners close a trial whose heartbeat stops for ``STALE_AFTER_S`` as stale), and
    the next success is said too.
    """

    def __init__(self, beat: Callable[[], None], what: str = "", note: Callable[[str], None] | None = None) -> None:
        self._beat, self._what, self._note = beat, what, note
        super().__init__("autotune-heartbeat")

    def _loop(self) -> None:
        failing = False
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._beat()
            except Exception as exc:  # a storage hiccup must not kill the trial; the next beat retries
                if not failing and self._note:
                    self._note(f"{self._what}: a heartbeat failed ({first_line(exc)}); retrying every "
                               f"{HEARTBEAT_S:.0f} s (other tuners close it as stale after {STALE_AFTER_S:.0f} s "
                               "without one)")
                failing = True
                continue
            if failing and self._note:
                self._note(f"{self._what}: heartbeats go through again")
            failing = False


class StudyRunner:
    """Runs ``options.trials`` trials of one study (see DESIGN 4), beside any number of
    other tuners on the same study (``autotune._tuners``)."""

    def __init__(self, options: StudyOptions, fingerprint: Fingerprint, space: Space,
                 tracker: Tracker, reporter: Reporter | None = None, storage=None,
                 slots: list[Slot] | None = None) -> None:
        import optuna

        self.options, self.fingerprint, self.space, self.tracker = options, fingerprint, space, tracker
        self.reporter = reporter or Reporter()
        self._warm: dict = {}  # slot index -> its WarmWorker, while run() runs
        self.name = options.study or default_study_name(options.target)
        storage = storage or open_storage(options.store, options.storage, options.store_patience,
                                          self.reporter.note)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.study, founder = found_or_join(storage, self.name, optuna.samplers.TPESampler(seed=options.seed))
        self._owner = this_process()
        self._liveness = Liveness(self._owner["host"])
        if founder:
            self._set_up(enqueue_baseline=True)
        else:
            self._wait_for_set_up()
        self._check_same_target()
        self.experiment_id = tracker.experiment(self.name)
        self.parent_id = tracker.parent_run(self.experiment_id, self.study.user_attrs[ATTR_PARENT], {})
        self.registry = Registry(self.study, self._owner)
        self.registry.enter(Phase.SAMPLING)
        self.slots = slots or [Slot(0, (), fingerprint.cpus, fingerprint.device)]
        self.host = HostRegistry()
        neighbours = self.host.join(self._owner, self.name, "; ".join(s.share() for s in self.slots))
        # The default budget is shared with the other tuners on this host, and split over --jobs slots.
        self.ram_budget = (options.ram_budget or int(
            fingerprint.ram_available_gib * 2**30 * RAM_BUDGET_FRACTION) // (1 + len(neighbours))) // len(self.slots)
        if neighbours:
            self.reporter.note(
                f"{len(neighbours)} other tuner(s) run on this host ("
                + "; ".join(f"pid {n['pid']}: study {n['study']} on {n['cpus']}" for n in neighbours)
                + "): their trials and these take turns on each CPU (beside another, a trial read 9% of alone on "
                "2 cores), and the RAM budget "
                f"is split {1 + len(neighbours)} ways. One tuner with --jobs N runs trials at once, each on CPUs of its own")
        self.log_dir = options.store / "trials" / self.name
        self.pending = Pending(options.store / "pending", self.name)
        self._interrupt = threading.Event()
        self._signum: int | None = None
        self._settled_by: int | None = None  # the trial whose loader knobs are held, once noted
        self._busy = False  # the last wait for a quiet machine timed out: look once, not wait
        self._noted: set[str] = set()  # notes said once per tuner
        # The slots' shared count of own trials taken, and the wait before confirming.
        self._turn = threading.Condition()
        self._taken, self._sampling, self._planned, self._started = 0, len(self.slots), False, 0.0

    def _set_up(self, enqueue_baseline: bool) -> None:
        """Record what the study tunes, enqueue its baseline, start its MLflow parent run.

        The parent run's id goes last: tuners joining the study wait for it.
        """
        self.study.set_user_attr("target", self.options.target)
        self.study.set_user_attr("space", self.space.name)
        self.study.set_user_attr("fingerprint", {**dataclasses.asdict(self.fingerprint),
                                                 "summary": self.fingerprint.summary()})
        self.study.set_metric_names([OBJECTIVE])  # what optuna-dashboard and its plots call the value
        if enqueue_baseline:
            self.study.enqueue_trial({}, user_attrs={ATTR_BASELINE: True})
        experiment_id = self.tracker.experiment(self.name)
        parent = self.tracker.parent_run(experiment_id, None, {
            "autotune.study": self.name, "autotune.target": self.options.target,
            "autotune.fingerprint": self.fingerprint.summary()})
        self.study.set_user_attr(ATTR_PARENT, parent)

    def _wait_for_set_up(self) -> None:
        """Wait for the tuner that created the study to set it up; do it here if it never does
        (it died in between: its baseline is then enqueued by ``_next_trial``)."""
        deadline = time.monotonic() + SETUP_WAIT_S
        while ATTR_PARENT not in self.study.user_attrs:
            if time.monotonic() > deadline:
                self.reporter.note(f"study {self.name}: the tuner that created it did not set it up "
                                   f"within {SETUP_WAIT_S:.0f} s; setting it up here")
                self._set_up(enqueue_baseline=False)
                return
            time.sleep(0.5)

    def _check_same_target(self) -> None:
        known = self.study.user_attrs.get("target")
        if known and known != self.options.target:
            raise ConfigError(f"--study {self.name!r} tunes {known}, not {self.options.target}; "
                              "give another --study name")

    def _note_once(self, line: str, kind: str | None = None) -> None:
        """Say ``line`` once per tuner (once per ``kind``, when given)."""
        if (kind or line) not in self._noted:
            self._noted.add(kind or line)
            self.reporter.note(line)

    def run(self) -> Standing:
        """Close stale trials, run this tuner's trials, confirm the top configs; return the standing.

        The baseline runs first, once per study: a tuner that has none to run waits
        for the one another tuner runs. After ``options.trials`` trials of its own,
        the last tuner still sampling plans the confirmation: the top ``CONFIRM_TOP``
        feasible configs and the baseline are re-run until each has ``1 +
        options.confirm`` runs, enqueued so that each re-run is claimed by one tuner;
        the winner is chosen on the medians (``autotune._confirm``).

        The first SIGINT or SIGTERM stops the running trial, which is recorded as
        ``interrupted`` (a baseline or re-run is enqueued again, for whoever resumes);
        the study then finishes as usual (export, parent run closed as KILLED if
        this was its last tuner) and ``interrupted_by`` names the signal. A second
        one raises KeyboardInterrupt at once.
        """
        from autotune._pool import WarmWorker

        self._started = time.monotonic()
        # One warm worker per slot (autotune._pool), started first: its imports overlap the
        # tuner's own set-up, and every trial of the slot is forked from it.
        self._warm = {slot.index: WarmWorker(os.environ, new_tag(), slot.cpus) for slot in self.slots}
        try:
            self._replay_pending()  # before recover(): a trial whose result waits here is not stale
            self.recover()  # kills the processes of the trials it closes, and says so in their reason
            swept = sweep_orphans()  # those of trials another host closed
            if swept:
                self.reporter.note(f"killed {swept} trial process(es) that tuners now gone left on this host")
            with self._signals(), _Heartbeat(self.registry.beat, "this tuner", self.reporter.note):
                if len(self.slots) == 1:
                    self._work(self.slots[0])
                else:
                    self._work_in_threads()
        except BaseException as exc:  # the parent run must not stay RUNNING if this was its last tuner
            with contextlib.suppress(Exception):  # a store that is down must not hide why we stop
                self._leave(f"stopped: {exc!r}", "KILLED")
            raise
        finally:
            self.host.leave()
            for warm in self._warm.values():
                warm.close()
        return self._finish()

    def _work_in_threads(self) -> None:
        """``_work`` in one thread per slot; the main thread stays free for the signal handlers.

        A slot that raises stops the others (as an interrupt: their running trials
        are recorded), and its exception is raised here once they have stopped.
        """
        errors: list[BaseException] = []

        def work(slot: Slot) -> None:
            try:
                self._work(slot)
            except BaseException as exc:  # handed to the main thread below
                errors.append(exc)
                self._interrupt.set()
                with self._turn:
                    self._turn.notify_all()

        threads = [threading.Thread(target=work, args=(slot,), name=f"autotune-slot-{slot.index}", daemon=True)
                   for slot in self.slots]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)
        except BaseException:  # a second Ctrl-C: stop every slot's worker before leaving
            self._interrupt.set()
            for thread in threads:
                thread.join(10)
            raise
        if errors:
            raise errors[0]

    def _work(self, slot: Slot) -> None:
        """One slot's share of the work: trials of this tuner's own until ``options.trials``
        are taken, then (once every slot is done sampling) the confirmation re-runs."""
        found = standing(self.study)
        while (index := self._take_own()) is not None:
            trial = self._next_trial(found)
            if trial is None:
                self._give_back_own()
                break
            own = ATTR_CONFIRMS not in trial.user_attrs
            if not own:  # a re-run that ask() handed out first: not one of this tuner's trials
                self._give_back_own()
            found = self._trial_and_report(trial, slot, found, index if own else 0,
                                           self.options.trials if own else 1, self._started)
        if self._interrupt.is_set():
            return
        self._done_sampling(found)
        self._confirm(slot, found)

    def _take_own(self) -> int | None:
        """The index of this tuner's next own trial, or None once all are taken (or interrupted)."""
        with self._turn:
            if self._taken >= self.options.trials or self._interrupt.is_set():
                return None
            self._taken += 1
            return self._taken - 1

    def _give_back_own(self) -> None:
        with self._turn:
            self._taken -= 1

    def _done_sampling(self, found: Standing) -> None:
        """Wait for this tuner's other slots to finish sampling; the last one plans the
        confirmation if no other tuner still samples (see ``_plan``)."""
        with self._turn:
            self._sampling -= 1
            if self._sampling > 0:
                self._turn.wait_for(lambda: self._planned or self._interrupt.is_set())
                return
            self.registry.enter(Phase.CONFIRMING)
            sampling = self.registry.live_others(self._liveness, (Phase.SAMPLING,))
            if sampling:
                self.reporter.note(f"this tuner's trials are done; {describe(sampling)} still run trials "
                                   f"of study {self.name}: the last one to finish plans the confirmation")
            elif self.options.confirm:
                self._plan(standing(self.study))
            self._planned = True
            self._turn.notify_all()

    def _next_trial(self, found: Standing) -> optuna.Trial | None:
        """The next trial to run: the study's baseline while none has completed, else a
        sampled one (or an enqueued one, which ``ask`` hands out first). None once
        interrupted.

        While another tuner runs the baseline this one waits (every trial's
        divergence check and speedup need it); if that baseline fails, so does this
        tuner, as the tuner that ran it does.

        Raises:
            BaselineFailed: a baseline this tuner waited for did not complete.
        """
        watched: int | None = None
        while not self._interrupt.is_set():
            if found.base is not None:
                return self.study.ask()
            firsts = {r.number for r in found.rows if r.baseline and r.confirms is None}
            trial = claim_waiting(self.study, lambda t, firsts=firsts: bool(t.user_attrs.get(ATTR_BASELINE))
                                  or t.user_attrs.get(ATTR_CONFIRMS) in firsts)
            if trial is not None:
                return trial
            found = standing(self.study)  # what the claim found: another tuner or slot may have just taken it
            if found.base is not None:
                continue
            baselines = [r for r in found.rows if r.baseline and r.confirms is None]
            firsts = {r.number for r in baselines}
            # a baseline enqueued or running, or one measured again (it was noisy)
            pending = [r for r in found.rows if r.outcome in PENDING and (r.baseline or r.confirms in firsts)]
            if pending:
                watched = pending[-1].number
                owner = self.study._storage.get_trial(self._trial_id(watched)).user_attrs.get(ATTR_OWNER) or {}
                self._note_once(f"waiting for the baseline (trial {watched}), run by "
                                f"{describe([owner]) if owner else 'another tuner'}")
            elif watched is not None and baselines[-1].outcome != Outcome.INTERRUPTED.value:
                raise _baseline_failed(baselines[-1])
            else:  # none enqueued: an older study, or the tuner that owed it died
                self._enqueue_baseline(len(baselines))
                continue
            self._interrupt.wait(POLL_S)
            self.recover()
            found = standing(self.study)
        return None

    def _trial_id(self, number: int) -> int:
        return self.study._storage.get_trial_id_from_study_id_trial_number(self.study._study_id, number)

    def _enqueue_baseline(self, generation: int) -> None:
        """Enqueue the baseline again (after ``generation`` baseline trials), once however
        many tuners find it missing at the same time."""
        if claim(self.study, f"baseline-{generation}"):
            self.study.enqueue_trial({}, user_attrs={ATTR_BASELINE: True})

    def _confirm(self, slot: Slot, found: Standing) -> None:
        """Run enqueued re-runs (of any tuner's plan) until none is left."""
        import optuna

        started, index = time.monotonic(), 0
        while not self._interrupt.is_set():
            trial = claim_waiting(self.study, lambda t: ATTR_CONFIRMS in t.user_attrs)
            if trial is None:
                break
            left = sum(ATTR_CONFIRMS in w.user_attrs for w in self.study.get_trials(
                deepcopy=False, states=(optuna.trial.TrialState.WAITING,)))
            found = self._trial_and_report(trial, slot, found, index, index + 1 + left, started)
            index += 1

    def _plan(self, found: Standing) -> None:
        """Enqueue this round's confirmation re-runs, once however many tuners get here
        together: the round is named after the configs run so far, the same for all of
        them, and re-runs already enqueued or running count as done."""
        if not claim(self.study, f"confirm-after-{len(found.groups)}"):
            return
        reruns = plan(found.groups, self.options.confirm)
        firsts = {g.first.number: g.first for g in found.groups}
        for number in reruns:
            self.study.enqueue_trial({}, user_attrs={ATTR_CONFIRMS: number, ATTR_BASELINE: False,
                                                     ATTR_SAMPLED: firsts[number].sampled})
        if reruns:
            self.reporter.note(f"confirming: {len(reruns)} re-runs of trials "
                               f"{', '.join(str(n) for n in dict.fromkeys(reruns))} "
                               "(the winner is chosen on the median of its runs)")

    def _trial_and_report(self, trial: optuna.Trial, slot: Slot, found: Standing, index: int, total: int,
                          started: float) -> Standing:
        """Run one claimed trial, report it; return the new standing.

        A baseline or re-run that was interrupted is enqueued again by the tuner
        that recorded it (one tuner: a trial is finished once).

        Raises:
            BaselineFailed: this was the baseline and it did not complete.
        """
        number, recorded = self._one_trial(trial, slot, index, total, found)
        found = standing(self.study)
        row = next(r for r in found.rows if r.number == number)
        left = (time.monotonic() - started) / (index + 1) * (total - index - 1)
        self.reporter.trial_done(row, found, left)
        if recorded and row.outcome == Outcome.INTERRUPTED.value:
            self._enqueue_again(row, found)
        if recorded and is_noisy(row.doubt):
            self._measure_again(row, slot)
        if recorded and row.outcome == Outcome.DIVERGED.value and not row.baseline and row.confirms is None:
            self._retry_lr(row, found)
        if recorded and row.reliable and not row.baseline and row.confirms is None:
            self._more_workers(row, found)
        if recorded and row.baseline and row.confirms is None and row.measured:
            self._note_baseline_curve(row)
        if row.baseline and row.outcome not in (Outcome.COMPLETE.value, Outcome.INTERRUPTED.value):
            raise _baseline_failed(row)
        return found

    def _note_baseline_curve(self, row: TrialRow) -> None:
        """Say how far the baseline measured for the divergence check, when not as planned."""
        tolerance, planned = self.options.tolerance, self.options.budget.windows
        flat = flat_reference(row.losses, row.curve, tolerance)
        added = len(row.losses) - 1 - planned  # its warmup, then a point per window
        if flat:
            self.reporter.note(f"{flat}, in {planned + max(added, 0)} windows: a config that learns nothing "
                               f"may pass as complete; only a loss over {tolerance:.0%} worse than the "
                               "baseline's shows as divergence. Longer windows (--window) give it more")
        elif added > 0:
            self.reporter.note(f"the baseline measured {added} more window{'s' if added > 1 else ''} than "
                               f"planned, until its loss fell to {learned_share(tolerance):.0%} of its "
                               "warmup's: every config's divergence is judged against its curve")

    def _measure_again(self, row: TrialRow, slot: Slot) -> None:
        """A noisy trial: wait (bounded) for the machine to be quiet on this slot's CPUs, then
        enqueue its config again, up to ``options.remeasure`` times. If the wait runs out,
        its figure stays noisy (shown, never ranked); the next noisy trial looks once
        instead of waiting again, until the machine is found quiet."""
        from autotune._noise import wait_for_quiet

        if row.remeasure >= self.options.remeasure or self._interrupt.is_set():
            if self.options.remeasure:
                self.reporter.note(f"trial {row.number}: {row.doubt}; measured {row.remeasure + 1} times, "
                                   "never quietly: its figure is not ranked")
            return
        patience = QUIET_LOOK_S if self._busy else self.options.quiet_wait
        quiet, load, waited = wait_for_quiet(slot.cpus or _all_cpus(),
                                             self.options.max_load, patience, self._interrupt)
        if self._interrupt.is_set():
            return
        self._busy = not quiet
        if not quiet:
            self.reporter.note(f"trial {row.number}: {row.doubt}; the machine is still busy (others use "
                               f"{load:.0%} of its CPUs after {waited:.0f} s): its figure is not ranked")
            return
        first = row.number if row.confirms is None else row.confirms
        self.study.enqueue_trial({}, user_attrs={ATTR_CONFIRMS: first, ATTR_BASELINE: False,
                                                 ATTR_SAMPLED: row.sampled, ATTR_REMEASURE: row.remeasure + 1})
        self.reporter.note(f"trial {row.number}: {row.doubt}; measuring it again"
                           + (f" after {waited:.0f} s, once the machine was quiet" if waited >= 2 else "")
                           + f" (attempt {row.remeasure + 2} of {self.options.remeasure + 1})")

    def _retry_lr(self, row: TrialRow, found: Standing) -> None:
        """A drawn config judged diverged that ran faster than the best so far: enqueue it
        again with the next ``lr_scaling`` (``autotune._guard.lr_retry``), while this tuner
        has trials of its own left, and say so. Not when a trial has drawn that config with
        that ``lr_scaling`` already (another slot's or tuner's, running or done): two tuners
        on the lr_train fixture ran it twice in 8 of 9 studies, once drawn and once retried.

        Its speed does not depend on its lr, so its other knobs are fast: without this, a
        study whose first fast draws diverged at batches past the user's (lr not scaled up
        enough) left that region for good, as TPE counts an infeasible trial against every
        knob it drew, and settled on a config at a quarter of the machine's speed (the jpeg
        runner, benchmarks/RESULTS.md, "Reach").
        """
        from autotune._space import Choice

        domain = self.space.domains.get("lr_scaling")
        rate, size = row.samples_per_s, row.config.get("batch_size")
        base = found.base.median if found.base and found.base.rates else None
        best = found.decision.winner.median if found.decision.winner else base
        if not isinstance(domain, Choice) or row.lr is None or not rate or not best or rate <= best \
                or not row.base_batch_size or not isinstance(size, int):
            return
        first = row.retries if row.retries is not None else row.number
        tried = {r.sampled.get("lr_scaling") for r in found.rows if first in (r.number, r.retries)}
        scaling = row.sampled.get("lr_scaling")
        step = lr_retry(scaling, size / row.base_batch_size, blew_up(row.losses, row.curve) is not None,
                        tried, domain.choices)
        with self._turn:
            left = self._taken < self.options.trials
        if step is None or not left or self._interrupt.is_set():
            return
        wanted = {**row.sampled, "lr_scaling": step}
        said = (f"trial {row.number} diverged at batch size {size} ({size / row.base_batch_size:g}x the code's) "
                f"with lr_scaling {scaling}, but ran at {rate:,.0f} samples/s, past the best so far ({best:,.0f})")
        # drawn by this tuner's sampler, another slot or another tuner: it is judged on its own
        other = next((r for r in found.rows if r.sampled == wanted), None)
        if other is not None:
            self.reporter.note(f"{said}; its config with lr_scaling {step} "
                               + ("runs already" if other.outcome in PENDING else "ran already")
                               + f" (trial {other.number}): not run again")
            return
        self.study.enqueue_trial({}, user_attrs={ATTR_RETRIES: first, ATTR_BASELINE: False, ATTR_SAMPLED: wanted})
        self.reporter.note(f"{said}: its config runs again with lr_scaling {step} (its speed does not depend "
                           "on the lr)")

    def _more_workers(self, row: TrialRow, found: Standing) -> None:
        """A leading trial that still waits on data with fewer workers than could help: enqueue
        its config again with more (``autotune._workers.more_workers``), while this tuner has
        trials of its own left, once per trial however many tuners see it, and say so."""
        from autotune._space import Choice, IntRange
        from autotune._workers import climbed, epoch_samples, more_workers, useful_workers

        domains = self._space_now(found).domains
        domain = domains.get("num_workers")
        if not isinstance(domain, IntRange):
            return
        base, samples = self._base_batch_size(found), epoch_samples(found.rows)
        drawn = row.sampled.get("batch_size")
        useful = useful_workers(drawn, base, samples)
        persist = domains.get("persistent_workers")
        below = self._smaller_batch(drawn, base, domains.get("batch_size"))
        smaller = None if below is None else (below, useful_workers(below, base, samples))
        more = more_workers(row, found.rows, found.ceilings, found.ceilings.cpus or self.fingerprint.cpus,
                            domain.high, useful, can_persist=isinstance(persist, Choice) and True in persist.choices,
                            smaller=smaller)
        if more is None:
            return
        # (an epoch's batches at the batch size it runs at: its own, or the smaller one)
        params = climbed(row.sampled, more, useful if more.batch_size is None else smaller[1])
        if any(r.sampled == params for r in found.rows):
            return  # drawn already
        with self._turn:
            left = self._taken < self.options.trials
        if not left or self._interrupt.is_set() or not claim(self.study, f"more-workers-{row.number}"):
            return
        self.study.enqueue_trial(params)
        self.reporter.note(more.why)

    @staticmethod
    def _smaller_batch(drawn: Any, base: int | None, domain: Any) -> Any:
        """The largest of the space's batch sizes (``domain``, a Choice) below ``drawn`` in
        samples, or None (none is, or either is unknown)."""
        from autotune._space import Choice

        size = batch_of(drawn, base) if drawn is not None else None
        if not isinstance(domain, Choice) or size is None:
            return None
        below = [(batch_of(c, base), c) for c in domain.choices]
        below = [(n, c) for n, c in below if n is not None and n < size]
        return max(below, key=lambda nc: nc[0])[1] if below else None

    def _enqueue_again(self, row: TrialRow, found: Standing) -> None:
        """Owe the study an interrupted baseline or re-run again (a sampled trial is not owed)."""
        if row.baseline:
            self._enqueue_baseline(sum(1 for r in found.rows if r.baseline and r.confirms is None))
        elif row.confirms is not None:
            self.study.enqueue_trial({}, user_attrs={ATTR_CONFIRMS: row.confirms, ATTR_BASELINE: False,
                                                     ATTR_SAMPLED: row.sampled})

    @property
    def interrupted_by(self) -> int | None:
        """The signal that stopped the study early, if one did."""
        return self._signum

    def recover(self) -> list[int]:
        """Close the trials that gone tuners left RUNNING; return their numbers.

        On this host a trial is stale when its tuner process is gone; elsewhere,
        when its heartbeat has not moved for ``STALE_AFTER_S`` while this tuner
        watched (``Liveness``: no two hosts' clocks are compared). A stale trial's
        worker processes are killed if they still run here, its MLflow run is
        closed as KILLED (with its log) and it is failed in Optuna as
        ``interrupted``; the tuner whose Optuna update lands (one: a trial is
        finished once) enqueues again the baseline or re-run it owed. MLflow goes
        first: if this is killed midway, the trial is still RUNNING next time.
        """
        import optuna

        closed = []
        for frozen in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            attrs = frozen.user_attrs
            why = self._liveness.stale(f"trial {frozen.number}", attrs.get(ATTR_OWNER), attrs.get(ATTR_HEARTBEAT))
            if why is None:
                continue
            worker = attrs.get(ATTR_WORKER)
            killed = 0
            if worker and attrs.get(ATTR_OWNER, {}).get("host") == self._liveness.host:
                killed = kill_orphans(worker["pid"], worker["started"], worker.get("tag"))
            reason = (f"left RUNNING: {why}; closed by pid {os.getpid()} on {self._liveness.host}"
                      + (f", which killed {killed} orphaned worker process(es)" if killed else ""))
            run_id = attrs.get(ATTR_RUN)
            if run_id:
                self.tracker.kill(run_id, reason, self.log_dir / f"trial-{frozen.number}.log")
            trial = optuna.trial.Trial(self.study, frozen._trial_id)  # no public handle by number
            try:
                trial.set_user_attr(ATTR_OUTCOME, Outcome.INTERRUPTED.value)
                trial.set_user_attr(ATTR_REASON, reason)
                self.study.tell(frozen.number, state=optuna.trial.TrialState.FAIL)
            except optuna.exceptions.UpdateFinishedTrialError:
                continue  # another tuner closed it first, and owes what it owed
            self.reporter.note(f"trial {frozen.number}: {reason}")
            closed.append(frozen.number)
            found = standing(self.study)
            self._enqueue_again(next(r for r in found.rows if r.number == frozen.number), found)
        return closed

    def _signals(self):
        """While the study runs, SIGINT and SIGTERM ask it to stop (see ``run``)."""
        import contextlib

        @contextlib.contextmanager
        def handlers():
            if threading.current_thread() is not threading.main_thread():
                yield  # signal handlers can only be set from the main thread
                return

            def stop(signum, frame):
                if self._interrupt.is_set():  # asked twice: stop now
                    raise KeyboardInterrupt
                self._signum = signum
                self._interrupt.set()

            previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

        return handlers()

    def _one_trial(self, trial: optuna.Trial, slot: Slot, index: int, total: int,
                   found: Standing) -> tuple[int, bool]:
        """Run one claimed trial to its end in both stores; return its number, and whether
        this tuner recorded it (False: another tuner closed it as stale meanwhile).

        An enqueued baseline runs the user's code as written; an enqueued re-run
        (``ATTR_CONFIRMS``) runs that trial's config again, unpruned (a
        confirmation); an enqueued retry (``ATTR_RETRIES``, see ``_retry_lr``) runs the
        config it holds. Otherwise the space is sampled, with the loader knobs held at
        the best trial's once that trial is compute-bound at high efficiency.
        """
        import optuna

        attrs = trial.user_attrs
        trial.set_user_attr(ATTR_OWNER, self._owner)
        rerun, retry = attrs.get(ATTR_CONFIRMS), attrs.get(ATTR_RETRIES)
        baseline = rerun is None and bool(attrs.get(ATTR_BASELINE))
        holding: dict[str, str] = {}
        if rerun is not None or retry is not None:
            config = Config(**attrs.get(ATTR_SAMPLED, {}))
        elif baseline:
            config = Config()
        else:
            space = self._space_now(found)
            held, holding = self._settled(found)
            config = space.sample(trial, held, self._useful_workers(found, space))
        base = found.base.first if found.base else None
        # Every trial trains from the baseline's seed (common random numbers): the same initial
        # weights and data order, so the loss verdict compares configs, not seeds. On jpeg, a
        # trial's own seed moved its excess by up to 16 points and flipped one verdict in 18
        # (benchmarks/RESULTS.md, "Reach": benchmarks/reach_judged.py).
        seed = base.seed if base and base.seed is not None else (self.options.seed or 0)
        trial.set_user_attr(ATTR_BASELINE, baseline)
        trial.set_user_attr(ATTR_SAMPLED, config.set_values())
        trial.set_user_attr(ATTR_SLOT, slot.record())
        trial.set_user_attr(ATTR_SEED, seed)
        tags = {"autotune.baseline": str(baseline).lower(), "autotune.fingerprint": self.fingerprint.summary(),
                "autotune.slot": str(slot.index), "autotune.share": slot.share(), "autotune.seed": str(seed)}
        if rerun is not None:
            tags["autotune.confirms"] = str(rerun)
        if retry is not None:
            tags["autotune.retries"] = str(retry)
        tags.update({f"autotune.held.{knob}": why for knob, why in holding.items()})  # (the MLflow UI shows why)
        run_id = self.tracker.start_trial(self.experiment_id, self.parent_id, trial.number,
                                          config.set_values(), tags)
        trial.set_user_attr(ATTR_RUN, run_id)
        self.reporter.trial_started(trial.number, index, total, config, rerun,
                                    slot.share() if len(self.slots) > 1 else None)
        budget = self.options.budget
        if baseline:  # every trial's divergence is judged against its curve: it measures until it learns
            budget = budget.learning(self.options.tolerance)
        spec = TrialSpec(self.options.target, config, slot.device, budget,
                         seed=seed,
                         # a re-run measures its own: the winner's efficiency is then paired in every run
                         known_ceilings={} if rerun is not None else found.ceilings.known(), cpus=slot.cpus)
        log_path = self.log_dir / f"trial-{trial.number}.log"
        prune_below = found.decision.winner.median if found.decision.winner and not baseline \
            and rerun is None else None
        beats = itertools.count(1)
        try:
            with _Heartbeat(lambda: trial.set_user_attr(ATTR_HEARTBEAT, next(beats)), f"trial {trial.number}",
                            self.reporter.note), \
                    self.host.turn(slot.cpus or _all_cpus(), f"trial {trial.number} of study {self.name} "
                                   f"(tuner pid {os.getpid()})", lambda line: self._note_once(line, "turn"),
                                   self._interrupt):
                result = run_trial(spec, log_path, self.ram_budget, self._watch(trial, prune_below),
                                   interrupt=self._interrupt, reference=base.losses if base else (),
                                   tolerance=self.options.tolerance, reference_curve=base.curve if base else (),
                                   warm=self._warm.get(slot.index))
        except BaseException as exc:  # a second Ctrl-C, or our own bug: close both records, go on raising
            self.tracker.kill(run_id, f"the tuner stopped: {exc!r}", log_path)
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
            raise
        # False: closed as stale by another tuner (this one stalled past STALE_AFTER_S); both
        # stores already say so, with that tuner's reason, and are not contradicted.
        base_rate = found.base.median if found.base and found.base.rates else None
        return trial.number, self._record(trial, run_id, result, found.ceilings, base_rate)

    def _space_now(self, found: Standing) -> Space:
        """The space, with an ``auto`` worker range widened as far as the measured loaders ask
        (``autotune._workers``); each new range said once."""
        from autotune._space import IntRange
        from autotune._workers import epoch_samples, useful_workers, widened_range

        domain = self.space.domains.get("num_workers")
        if not isinstance(domain, IntRange) or not domain.auto:
            return self.space
        # At the space's smallest batch size an epoch has the most batches: no more workers help.
        epoch = {}
        samples, base = epoch_samples(found.rows), self._base_batch_size(found)
        sizes = self.space.domains.get("batch_size")
        counts = {b: useful_workers(b, base, samples) for b in (sizes.values() if sizes else (None,))}
        if all(counts.values()):
            size, most = max(counts.items(), key=lambda kv: kv[1])
            epoch[f"an epoch's {most} batches at batch size {batch_of(size, base)}"] = most
        wider = widened_range(domain.high, domain.low, [r for r in found.rows if r.measured], found.ceilings,
                              found.ceilings.cpus or self.fingerprint.cpus, self.ram_budget, also=epoch)
        if wider is None:
            return self.space
        self._note_once(wider.why, f"workers-{wider.high}")
        return self.space.with_high("num_workers", wider.high)

    @staticmethod
    def _base_batch_size(found: Standing) -> int | None:
        """The batch size the user's code passes (every trial's loader reports the same)."""
        return next((r.base_batch_size for r in found.rows if r.base_batch_size), None)

    def _useful_workers(self, found: Standing, space: Space) -> Cap | None:
        """Draw ``num_workers`` only up to the batches of an epoch at the batch size drawn
        (a worker makes whole batches; ``Run.dataloader`` would clamp the rest), and
        ``prefetch_factor`` only up to the batches each of those workers has in an epoch
        (the loader asks for at most an epoch's batches ahead); each said once."""
        from autotune._space import IntRange
        from autotune._workers import epoch_samples, prefetch_high, useful_workers

        samples, base = epoch_samples(found.rows), self._base_batch_size(found)
        if samples is None:
            return None

        def cap(name: str, values: Mapping[str, Any]) -> int | None:
            batches = useful_workers(values.get("batch_size"), base, samples)  # an epoch's, at this size
            workers = values.get("num_workers")
            domain = space.domains.get(name)  # (as widened)
            if batches is None or not isinstance(domain, IntRange):
                return None
            size = batch_of(values.get("batch_size"), base)
            if name == "num_workers":
                if batches < domain.high:
                    self._note_once(f"num_workers drawn up to the batches of an epoch ({samples:,} samples; "
                                    f"{batches} batches at batch size {size}): past one worker per batch, the "
                                    "rest would sit idle", "epoch-workers")
                return batches
            if name == "prefetch_factor" and isinstance(workers, int) and workers > 0:
                most = prefetch_high(batches, workers)
                if most < domain.high:
                    self._note_once(f"prefetch_factor drawn up to an epoch's batches per worker (e.g. {batches} "
                                    f"batches at batch size {size} over {workers} workers: {most}): the loader "
                                    "never asks for more than an epoch ahead, so a larger one holds nothing "
                                    "more", "epoch-prefetch")
                return most
            return None

        return cap

    def _settled(self, found: Standing) -> tuple[dict[str, Any], dict[str, str]]:
        """The knobs not to sample now: ``held_loader_knobs`` for the best trial (holding and
        releasing said once each), the model knobs when the function never hands its
        model to ``run.model`` (its baseline ran without them), and ``amp`` at the one
        precision this machine does not run far slower than another (``autotune._precision``).
        Also why, by knob, for the trial's MLflow tags (``autotune.held.<knob>``; the amp hold's
        for now: the others are said in the terminal)."""
        precision, why = self._precision_held(found)
        return {**self._model_held(found), **self._loader_held(found), **precision}, why

    def _precision_held(self, found: Standing) -> tuple[dict[str, Any], dict[str, str]]:
        from autotune._precision import KNOB, precision_hold
        from autotune._space import Choice

        domain = self.space.domains.get(KNOB)
        if not isinstance(domain, Choice):
            return {}, {}

        def believed(row: TrialRow) -> bool:  # a pruned or diverged figure was never doubted: judge it here
            return row.doubt is None and doubt(row.metrics, "", self.options.max_load,
                                                self.options.max_spread) is None

        hold = precision_hold(found.rows, domain.values(), believed)
        if hold is None:
            return {}, {}
        self._note_once(hold.why, f"precision-{hold.value}")
        return {KNOB: hold.value}, {KNOB: hold.why}

    def _model_held(self, found: Standing) -> dict[str, Any]:
        from autotune._knobs import MODEL_KNOBS

        tuned = [name for name in MODEL_KNOBS if name in self.space.domains]
        base = found.base.first if found.base else None
        if not tuned or base is None or not base.config or any(name in base.config for name in MODEL_KNOBS):
            return {}
        self._note_once(f"{' and '.join(tuned)} not tuned: your function does not hand its model to "
                        "run.model(...) (model = run.model(Net()) lets them act)", "model-knobs")
        return dict.fromkeys(tuned)

    def _loader_held(self, found: Standing) -> dict[str, Any]:
        held = held_loader_knobs(found.best, self.space.domains)
        best = found.best
        if held and best.number != self._settled_by:
            self._settled_by = best.number
            knobs = ", ".join(f"{k}={'as in your code' if v is None else show_value(v)}" for k, v in held.items())
            self.reporter.note(f"loader knobs held at trial {best.number}'s ({knobs}): it is compute-bound "
                               f"at {best.bottleneck.efficiency:.0%} of its data-on-device ceiling")
        elif not held and self._settled_by is not None:
            was, self._settled_by = self._settled_by, None
            now = f"the best is trial {best.number}, " if best is not None and best.number != was else ""
            self.reporter.note(f"loader knobs sampled again: {now}not compute-bound at high efficiency "
                               f"(trial {was}'s hold is lifted)")
        return held

    def _watch(self, trial, best: float | None) -> Callable[[dict[str, Any]], Verdict | None]:
        """The running trial's event handler: progress, its worker's identity, throughput
        reports to Optuna (its intermediate values) and the pruning rule."""
        rates: list[float] = []

        def on_event(event: dict[str, Any]) -> Verdict | None:
            self.reporter.event({**event, "trial": trial.number})
            if event["event"] == "spawned":
                from autotune._monitor import process_tree

                procs = process_tree(event["pid"])
                # Kept even if the worker is gone already: its tag still finds what it left.
                started = procs[0].create_time() if procs else time.time()
                trial.set_user_attr(ATTR_WORKER, {"pid": event["pid"], "started": started, "tag": event["tag"]})
            elif event["event"] == "window":
                rate = event["samples"] / event["seconds"]
                trial.report(rate, event["index"])
                # A window others slowed says nothing about the config: it never prunes.
                if max(event.get("foreign_cpu", 0.0), event.get("foreign_gpu", 0.0)) <= self.options.max_load:
                    rates.append(rate)
                reason = prune_reason(rates, best, self.options.prune)
                if reason:
                    return Outcome.PRUNED, reason
            return None

        return on_event

    def _record(self, trial: optuna.Trial, run_id: str, result: TrialResult, ceilings: Ceilings,
                base_rate: float | None = None) -> bool:
        """Record a finished trial in both stores; False if another tuner had closed it.

        The result is written to the store folder first (``Pending``) and removed
        once both stores hold it: a store that stays down, or a kill, leaves it for
        the next tuner on the study to replay (``_replay_pending``).
        """
        derived = {f"resolved.{k}": v for k, v in result.resolved.items()}
        derived.update(base_batch_size=result.base_batch_size, effective_lr=result.lr,
                       **{f"dataset.{k}": v for k, v in result.dataset.items()})
        # Every knob a param, as the space writes it: those the config did not set (the
        # baseline's every knob) at the code's own value, named in own_knobs.
        sampled = trial.user_attrs.get(ATTR_SAMPLED, {})
        own = {k: "1x" if k == "batch_size" and v == result.base_batch_size else v
               for k, v in result.resolved.items() if k not in sampled}
        derived.update(own, own_knobs=",".join(own) or "-")
        metrics, tags = dict(result.metrics), {}
        own = checked_ceilings(trial.number, result.outcome, result.reason, result.metrics, result.resolved,
                               result.ceilings, ceilings, self.options.max_load, self.options.max_spread)
        why = doubt(metrics, result.reason, self.options.max_load, self.options.max_spread) \
            if result.outcome == Outcome.COMPLETE and "samples_per_s" in metrics else None
        if why:
            tags["autotune.doubt"] = why
        bound = None
        if "samples_per_s" in metrics:
            bound = bottleneck_of(metrics, result.resolved, ceilings, own)
            tags.update({"autotune.bottleneck": bound.verdict, "autotune.bottleneck_why": bound.why})
            metrics.update({name: value for name, value in (
                ("efficiency", bound.efficiency), ("compute_ceiling", bound.compute),
                ("loader_ceiling", bound.loader), ("cpu_roof", bound.cpu), ("of_roof", bound.of_roof))
                if value is not None})
        tags["mlflow.note.content"] = trial_note(trial.number, result.outcome, result.reason, why,
                                                metrics.get("samples_per_s"), base_rate,
                                                bound.why if bound else None, trial.user_attrs,
                                                (metrics["loss_excess"], metrics.get("loss_tolerance"))
                                                if "loss_excess" in metrics else None)
        record = {
            "trial_id": trial._trial_id, "number": trial.number, "run_id": run_id,
            "optuna_params": self._params_of(trial, result),
            "attrs": {ATTR_OUTCOME: result.outcome.value, ATTR_REASON: clip(result.reason, REASON_LIMIT),
                      ATTR_METRICS: result.metrics, ATTR_CONFIG: result.resolved,
                      ATTR_BASE_BATCH: result.base_batch_size, ATTR_LR: result.lr,
                      ATTR_LOSSES: result.losses, ATTR_CEILINGS: own, ATTR_DOUBT: why, ATTR_CURVE: result.curve,
                      ATTR_DATASET: result.dataset},
            "mlflow": {"outcome": result.outcome.value, "reason": result.reason, "metrics": metrics,
                       "series": result.series, "params": {k: v for k, v in derived.items() if v is not None},
                       "log_path": str(result.log_path), "tags": tags},
        }
        try:
            path = self.pending.write(trial.number, record)
        except OSError as exc:  # the local disk is full: the stores may still take it
            self.reporter.note(f"trial {trial.number}: cannot keep its result in {self.pending.folder} "
                               f"({first_line(exc)}); recording it straight away")
            path = None
        applied = self._apply(record)
        if path is not None:
            self.pending.done(path)
        return applied

    def _params_of(self, trial: optuna.Trial, result: TrialResult) -> dict[str, list[Any]]:
        """Optuna params for a trial the sampler did not draw, so that every trial has them
        (optuna-dashboard, importances): a re-run gets its first trial's (a retry too, with its
        own ``lr_scaling``); the baseline the values its code ran with, for each knob whose
        domain holds that value (its batch size as ``1x``). Each as ``[distribution json, value]``."""
        import optuna

        from autotune._space import Choice, IntRange

        if trial.params:
            return {}
        attrs = trial.user_attrs
        of = attrs.get(ATTR_CONFIRMS, attrs.get(ATTR_RETRIES))
        if of is not None:  # as its first trial drew them (a retry with its own lr_scaling)
            first = self.study._storage.get_trial(self._trial_id(of))  # one trial, not the study
            sampled = attrs.get(ATTR_SAMPLED, {})
            return {name: [optuna.distributions.distribution_to_json(first.distributions[name]),
                           sampled.get(name, value)] for name, value in first.params.items()}
        params = {}
        for name, domain in self.space.domains.items():
            value = result.resolved.get(name)
            if name == "batch_size" and value is not None and value == result.base_batch_size:
                value = "1x"
            if isinstance(domain, Choice) and value in domain.choices:
                dist = optuna.distributions.CategoricalDistribution(list(domain.choices))
            elif isinstance(domain, IntRange) and isinstance(value, int) and domain.low <= value <= domain.high \
                    and (value - domain.low) % domain.step == 0:
                dist = optuna.distributions.IntDistribution(domain.low, domain.high, log=domain.log,
                                                            step=domain.step)
            else:
                continue
            params[name] = [optuna.distributions.distribution_to_json(dist), value]
        return params

    def _apply(self, record: Mapping[str, Any]) -> bool:
        """Put a pending result in Optuna, then MLflow; False if another tuner closed the
        trial meaning something else (both stores then keep what it wrote).

        Replaying a result that was already applied changes nothing: a finished trial
        with this result is left as it is, and MLflow gets the same values again.
        """
        import optuna

        storage, trial_id, attrs = self.study._storage, record["trial_id"], record["attrs"]
        frozen = storage.get_trial(trial_id)
        if frozen.state.is_finished():
            if frozen.user_attrs.get(ATTR_OUTCOME) != attrs[ATTR_OUTCOME] or \
                    frozen.user_attrs.get(ATTR_METRICS) != attrs[ATTR_METRICS]:
                reason = frozen.user_attrs.get(ATTR_REASON, "")
                self.reporter.note(f"trial {record['number']}: closed by another tuner while it ran "
                                   f"({headline(reason)}); its measurement is not used")
                return False
        else:
            trial = optuna.Trial(self.study, trial_id)
            # The outcome last: another tuner that reads it (waiting on this baseline, say)
            # then reads the figures, params and doubt with it, never a half-written trial.
            for key, value in attrs.items():
                if key != ATTR_OUTCOME:
                    trial.set_user_attr(key, value)
            for name, (dist, value) in record.get("optuna_params", {}).items():
                dist = optuna.distributions.json_to_distribution(dist)
                with contextlib.suppress(ValueError):  # a distribution the study's others contradict
                    storage.set_trial_param(trial_id, name, dist.to_internal_repr(value), dist)
            trial.set_user_attr(ATTR_OUTCOME, attrs[ATTR_OUTCOME])
            outcome, sps = Outcome(attrs[ATTR_OUTCOME]), attrs[ATTR_METRICS].get("samples_per_s")
            try:
                if is_noisy(attrs.get(ATTR_DOUBT)):
                    # A figure others slowed tells the sampler nothing (Optuna's samplers skip
                    # failed trials); its re-measure, with the same params, tells the real one.
                    self.study.tell(frozen.number, state=optuna.trial.TrialState.FAIL)
                elif outcome in (Outcome.COMPLETE, Outcome.DIVERGED) and sps:
                    # Constraints, not penalties: a diverged trial keeps its real speed
                    # for the sampler but is infeasible, so never the best (Optuna 5).
                    trial.set_constraint("diverged", float(outcome == Outcome.DIVERGED))
                    self.study.tell(frozen.number, sps)
                elif outcome == Outcome.PRUNED:
                    self.study.tell(frozen.number, state=optuna.trial.TrialState.PRUNED)
                else:
                    self.study.tell(frozen.number, state=optuna.trial.TrialState.FAIL)
            except optuna.exceptions.UpdateFinishedTrialError:
                return self._apply(record)  # closed meanwhile: judged as above
        logged = record["mlflow"]
        self.tracker.end_trial(record["run_id"], Outcome(logged["outcome"]), logged["reason"], logged["metrics"],
                               logged["series"], logged["params"], Path(logged["log_path"]), logged["tags"])
        return True

    def _replay_pending(self) -> None:
        """Apply the results a stopped or killed tuner left in this store folder (oldest first)."""
        for path, record in self.pending.all():
            applied = self._apply(record)
            self.pending.done(path)
            if applied:
                self.reporter.note(f"trial {record['number']}: its result, kept in {path.parent} while a "
                                   "store was down, is now recorded")

    def _leave(self, ended: str, status: str) -> list[dict[str, Any]]:
        """Mark this tuner done; return the other tuners still running the study.

        Marked done first, then the others read: of tuners leaving together at
        least one sees all done, so the parent run is always closed by someone.
        When none is left running, the parent is closed here with ``status``.
        """
        self.registry.enter(Phase.DONE, ended)
        others = self.registry.live_others(self._liveness, (Phase.SAMPLING, Phase.CONFIRMING))
        if not others and status == "KILLED":
            self.tracker.kill(self.parent_id)
        return others

    def _finish(self) -> Standing:
        """Export the winner; close the MLflow parent run with the study's figures if this is
        the last tuner running the study (else the last one does)."""
        found = standing(self.study)
        rows, best = found.rows, found.best
        from autotune._report import report_html

        artifacts = {"trials.json": json.dumps([dataclasses.asdict(r) for r in rows], indent=1),
                     "ceilings.json": json.dumps(found.ceilings.table(), indent=1),
                     "report.html": report_html(self.name, found, self.study.user_attrs.get("fingerprint"))}
        metrics: dict[str, float] = {"trials": float(len(rows)),
                                     "noisy_trials": float(sum(1 for r in rows if is_noisy(r.doubt)))}
        if best is not None:
            win = found.decision.winner
            text = export_text(self.study, found)
            artifacts["best.yaml"] = text
            path = self.options.store / "exports" / f"{self.name}.yaml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            metrics.update(best_samples_per_s=win.median, best_trial=float(best.number),
                           best_runs=float(len(win.rates)), best_spread=win.spread)
            if found.base is not None and found.base.rates:  # (none when every baseline run was noisy)
                metrics.update(best_speedup=found.speedup(win), baseline_samples_per_s=found.base.median,
                               baseline_spread=found.base.spread)
            if best.bottleneck is not None and best.bottleneck.efficiency is not None:
                metrics["best_efficiency"] = best.bottleneck.efficiency
            if win.loss_excess is not None and win is not found.base:  # (the baseline is judged against itself)
                metrics["best_loss_excess"] = win.loss_excess
        ended = f"interrupted by {signal.Signals(self._signum).name}" if self._signum else "finished"
        others = self._leave(ended, "FINISHED")
        if others:
            self.reporter.note(f"the study's MLflow parent run stays open: {describe(others)} still run "
                               f"study {self.name}, and the last one closes it")
            return found
        tuners = 1 + len(self.registry.others())
        winners = {r.number for r in found.decision.winner.runs} if found.decision.winner else set()
        # The runs page shows names by default: each says how its trial ended, and which won
        done = [r for r in rows if r.run_id and r.outcome not in PENDING]
        self.tracker.tag_runs({r.run_id: {"autotune.winner": str(r.number in winners).lower(),
                                          "mlflow.runName": run_name(r, r.number in winners)} for r in done})
        lines = findings(found)
        tags = {"autotune.ended": f"{ended} (last of {tuners} tuner(s))", "autotune.result": lines[0],
                "mlflow.note.content": f"Study {self.name}: " + "\n\n".join(lines)}
        if best is not None:
            tags.update({"autotune.winner_trial": str(best.number),
                         "autotune.winner_config": " ".join(f"{k}={show_value(v)}" for k, v in best.config.items())})
        if best is not None and found.base is not None and found.base.rates:
            tags["mlflow.runName"] = f"{self.name}: trial {best.number} wins, {found.speedup(found.decision.winner):.2f}x"
        self.tracker.finish_parent(self.parent_id, artifacts, metrics,
                                   {"throughput.png": throughput_figure(self.name, found)},
                                   status="KILLED" if self._signum else "FINISHED", tags=tags)
        return found
