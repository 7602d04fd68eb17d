"""A study: the loop that runs a tuner's trials, from the planner's requests, in its slots.

The path of one trial: the scheduler gives a slot this tuner's next trial (``take_own``);
``_next_trial`` claims the baseline while the study has none, else asks Optuna (``ask``
hands out the queue's requests first, then samples); ``_one_trial`` sets its config by
its kind (a draw from the space as of now, under its holds and caps), the recorder begins
it, the runner runs it in its worker process, the recorder ends it (spool, Optuna,
MLflow); the planner's decisions on it (``after_trial``) go into the queue. After its
trials, the last slot plans the confirmation, every slot runs re-runs until none is left,
and the finish exports the winner and closes the parent run.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from autotune.core._kinds import Kind, Line, Request
from autotune.core._outcome import Outcome
from autotune.machine._launch import new_tag
from autotune.machine._margin import RAM_BUDGET_FRACTION
from autotune.machine._reap import sweep_orphans
from autotune.machine._slots import Slot
from autotune.stores._optuna_io import frozen_trial
from autotune.stores._records import ATTR_BASELINE, ATTR_OWNER, kind_of
from autotune.stores._stores import Spool, open_storage
from autotune.tuner._finish import finish, leave
from autotune.tuner._join import StudyFacts, join
from autotune.tuner._options import Reporter, StudyOptions, baseline_failed, default_study_name
from autotune.tuner._pace import CostWatch
from autotune.tuner._planner import (
    Failed,
    Settings,
    after_quiet_wait,
    after_trial,
    confirmation,
    without_baseline,
)
from autotune.tuner._profiling import run_profiles
from autotune.tuner._queue import claim, claim_waiting, write
from autotune.tuner._recorder import Recorder
from autotune.tuner._scheduler import Heartbeat, Scheduler
from autotune.tuner._standing import Standing, read_standing
from autotune.tuner._trial_steps import TrialSteps, recover
from autotune.tuner._tuners import (
    HostRegistry,
    Liveness,
    Registry,
    TunerPhase,
    describe,
    neighbours_line,
    this_process,
)

if TYPE_CHECKING:
    import optuna

    from autotune.machine._launch import Launcher
    from autotune.machine._probe import Fingerprint
    from autotune.stores._tracking import Tracker
    from autotune.tuner._space import Space

#: Seconds between looks at the study while waiting on another tuner (its baseline).
POLL_S = 2.0


class StudyRunner(TrialSteps):
    """Runs ``options.trials`` trials of one study, beside any number of other tuners on the
    same study (``autotune.tuner._tuners``)."""

    def __init__(
        self,
        options: StudyOptions,
        fingerprint: Fingerprint,
        space: Space,
        tracker: Tracker,
        reporter: Reporter | None = None,
        storage=None,
        slots: list[Slot] | None = None,
        warm: Mapping[int, Launcher] | None = None,
    ) -> None:
        import optuna

        self.options, self.fingerprint, self.space = options, fingerprint, space
        self.reporter = reporter or Reporter()
        self.name = options.stores.study or default_study_name(options.target)
        storage = storage or open_storage(
            options.store, options.stores.storage, options.stores.store_patience, self.reporter.note
        )
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        joined = join(
            storage,
            self.name,
            optuna.samplers.TPESampler(seed=options.seed),
            StudyFacts(
                options.label, space.name, fingerprint, script=options.argv is not None, horizon_h=options.judge.horizon
            ),
            tracker,
            self.reporter.note,
            warm_start=options.warm_start,
        )
        self.study = joined.study
        self._owner = this_process()
        self._liveness = Liveness(self._owner["host"])
        self.registry = Registry(self.study, self._owner)
        self.registry.enter(TunerPhase.SAMPLING)
        self.slots = slots or [Slot(0, (), fingerprint.cpus, fingerprint.device)]
        self.host = HostRegistry()
        neighbours = self.host.join(self._owner, self.name, "; ".join(s.share() for s in self.slots))
        # The default budget is shared with the other tuners on this host, and split over --jobs slots.
        self.ram_budget = (
            int((options.options.limits.ram_budget or 0) * 2**30)
            or int(fingerprint.ram_available_gib * 2**30 * RAM_BUDGET_FRACTION) // (1 + len(neighbours))
        ) // len(self.slots)
        if neighbours:
            self.reporter.note(neighbours_line(neighbours))
        self.scheduler = Scheduler(self.slots, options.trials, self.reporter.note)
        self.recorder = Recorder(
            joined,
            tracker,
            Spool(options.store / "pending", self.name),
            space,
            self.reporter.note,
            options.store / "trials" / self.name,
            options.noise,
        )
        self._warm = dict(warm or {})  # slot index -> its warm worker (autotune.worker._warm), started early
        self._started = 0.0
        self._holding = threading.Lock()  # the slots' threads draw configs at once
        self._settled_by: int | None = None  # the trial whose loader knobs are held, once said
        self._cost = CostWatch(options, self.reporter.note)  # the cost it says, then its pace

    @property
    def interrupted_by(self) -> int | None:
        """The signal that stopped the study early, if one did."""
        return self.scheduler.signum

    def run(self) -> Standing:
        """Close stale trials, run this tuner's trials, confirm the top configs; return the standing.

        The baseline runs first, once per study: a tuner that has none to run waits
        for the one another tuner runs. After ``options.trials`` trials of its own,
        the last tuner still sampling plans the confirmation: the top ``CONFIRM_TOP``
        feasible configs and the baseline are re-run until each has ``1 +
        options.judge.confirm`` runs, enqueued so that each re-run is claimed by one tuner;
        the winner is chosen on the medians (``autotune.tuner._confirm``).

        The first SIGINT or SIGTERM stops the running trial, which is recorded as
        ``interrupted`` (a baseline or re-run is enqueued again, for whoever resumes);
        the study then finishes as usual (export, parent run closed as KILLED if
        this was its last tuner) and ``interrupted_by`` names the signal. A second
        one raises KeyboardInterrupt at once.
        """
        from autotune.worker._warm import WarmWorker

        self._started = time.monotonic()
        # One warm worker per slot (autotune.worker._warm), if the caller started none: its trials fork from it.
        for slot in self.slots:
            if slot.index not in self._warm:
                self._warm[slot.index] = WarmWorker(os.environ, new_tag(), slot.cpus)
        try:
            self.recorder.replay()  # before recover(): a trial whose result waits here is not stale
            self.recover()  # kills the processes of the trials it closes, and says so in their reason
            swept = sweep_orphans()  # those of trials another host closed
            if swept:
                self.reporter.note(f"killed {swept} trial process(es) that tuners now gone left on this host")
            with self.scheduler.signals(), Heartbeat(self.registry.beat, "this tuner", self.reporter.note):
                self.scheduler.run(self._work)
                run_profiles(self, read_standing(self.study))  # (--profile on, not interrupted, the last tuner)
        except BaseException as exc:  # the parent run must not stay RUNNING if this was its last tuner
            with contextlib.suppress(Exception):  # a store that is down must not hide why we stop
                leave(self.registry, self._liveness, f"stopped: {exc!r}", self.recorder, killed=True)
            raise
        finally:
            self.host.leave()
            for warm in self._warm.values():
                warm.close()
        return finish(
            self.study,
            self.options.store,
            self.registry,
            self._liveness,
            self.recorder,
            self.scheduler.signum,
            self.reporter.note,
        )

    def _work(self, slot: Slot) -> None:
        """One slot's share of the work: trials of this tuner's own until ``options.trials``
        are taken, then (once every slot is done sampling) the confirmation re-runs."""
        standing = read_standing(self.study)
        while (index := self.scheduler.take_own()) is not None:
            trial = self._next_trial(standing)
            if trial is None:
                self.scheduler.give_back_own()
                break
            own = not kind_of(trial.user_attrs).closing
            if not own:  # a re-run that ask() handed out first: not one of this tuner's trials
                self.scheduler.give_back_own()
            standing = self._trial_and_report(
                trial, slot, standing, index if own else 0, self.options.trials if own else 1, self._started
            )
        if self.scheduler.interrupt.is_set():
            return
        self.scheduler.done_sampling(self._plan_confirmation)
        self._confirm(slot, standing)

    def _plan_confirmation(self) -> None:
        """This tuner is done sampling: enter the confirmation, and plan its round if no other
        tuner still samples (the last one to finish plans it), once however many tuners get
        here together (``Round.once``; re-runs already enqueued or running count as done)."""
        self.registry.enter(TunerPhase.CONFIRMING)
        sampling = self.registry.live_others(self._liveness, (TunerPhase.SAMPLING,))
        if sampling:
            self.reporter.note(
                f"this tuner's trials are done; {describe(sampling)} still run trials "
                f"of study {self.name}: the last one to finish plans the confirmation"
            )
        elif self.options.judge.confirm:
            round_ = confirmation(read_standing(self.study), self.options.judge.confirm, self.options.judge.prune)
            if claim(self.study, round_.once):
                for request in round_.requests:
                    write(self.study, request)
                if round_.why:
                    self.reporter.note(round_.why)

    def _next_trial(self, standing: Standing) -> optuna.Trial | None:
        """The next trial to run: the study's baseline while none has completed, else ``ask``'s
        (the queue first, then a draw). None once interrupted.

        While another tuner runs the baseline this one waits (every trial's divergence
        check and speedup need it); if that baseline fails, so does this tuner, as the
        tuner that ran it does.

        Raises:
            BaselineFailed: a baseline this tuner waited for did not complete.
        """
        watched: int | None = None
        while not self.scheduler.interrupt.is_set():
            if standing.base is not None:
                return self.study.ask()
            trial = claim_waiting(self.study, lambda t: bool(t.user_attrs.get(ATTR_BASELINE)))
            if trial is not None:
                return trial
            standing = read_standing(self.study)  # what the claim found: another tuner or slot may have just taken it
            if standing.base is not None:
                continue
            step = without_baseline(standing, watched)
            if isinstance(step, Failed):
                raise baseline_failed(step.row)
            if isinstance(step, Request):
                write(self.study, step)
                continue
            watched = step.number
            owner = frozen_trial(self.study, watched).user_attrs.get(ATTR_OWNER) or {}
            line = f"waiting for the baseline (trial {watched}), run by " + (
                describe([owner]) if owner else "another tuner"
            )
            self.scheduler.say(Line(line, line))
            self.scheduler.interrupt.wait(POLL_S)
            self.recover()
            standing = read_standing(self.study)
        return None

    def _confirm(self, slot: Slot, standing: Standing) -> None:
        """Run enqueued re-runs (of any tuner's plan) until none is left."""
        import optuna

        started, index = time.monotonic(), 0
        while not self.scheduler.interrupt.is_set():
            trial = claim_waiting(self.study, lambda t: kind_of(t.user_attrs).closing)
            if trial is None:
                break
            left = sum(
                kind_of(w.user_attrs).closing
                for w in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
            )
            standing = self._trial_and_report(trial, slot, standing, index, index + 1 + left, started)
            index += 1

    def _trial_and_report(
        self, trial: optuna.Trial, slot: Slot, standing: Standing, index: int, total: int, started: float
    ) -> Standing:
        """Run one claimed trial, report it, act on what the planner decides of it; return the
        new standing.

        Raises:
            BaselineFailed: this was the baseline and it did not complete.
        """
        number, recorded = self._one_trial(trial, slot, index, total, standing)
        standing = read_standing(self.study)
        row = next(r for r in standing.rows if r.number == number)
        left = (time.monotonic() - started) / (index + 1) * (total - index - 1)
        self.reporter.trial_done(row, standing, left)
        if recorded:  # (else another tuner closed it, and owes what it owed)
            settings = Settings(
                self._space_now(standing),
                self.fingerprint.cpus,
                self.options.judge.divergence_tolerance,
                self.options.budget.windows,
                self.options.noise.remeasure,
                self.scheduler.trials_left(),
                self.options.judge.confirm,
            )
            for decision in after_trial(row, standing, settings):
                self._act(decision, slot)
        if row.kind is Kind.BASELINE and row.outcome not in (Outcome.COMPLETE.value, Outcome.INTERRUPTED.value):
            raise baseline_failed(row)
        self._cost.after(row, recorded)
        return standing

    def _act(self, decision: Request | Line, slot: Slot) -> None:
        """Say a line; write a request (a remeasure once the machine is quiet)."""
        if isinstance(decision, Request) and decision.kind is Kind.REMEASURE:
            if self.scheduler.interrupt.is_set():
                return
            quiet, load, waited = self.scheduler.wait_quiet(
                slot.runs_on, self.options.noise.max_load, self.options.noise.quiet_wait
            )
            if self.scheduler.interrupt.is_set():
                return
            decision = after_quiet_wait(decision, quiet, load, waited, self.options.noise.remeasure)
        if isinstance(decision, Line):
            self.scheduler.say(decision)
        elif write(self.study, decision) and decision.why:
            self.reporter.note(decision.why)

    def recover(self) -> list[int]:
        """Close the trials that gone tuners left RUNNING (``recover``); return their numbers."""
        return recover(self.study, self._liveness, self.recorder, self.reporter.note)
