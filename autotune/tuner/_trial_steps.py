"""One claimed trial of a study, run to its end in both stores (``TrialSteps``, the part of
``autotune.tuner._study.StudyRunner`` that sets a trial's config by its kind and runs it), and the
closing of trials that gone tuners left running (``recover``)."""

from __future__ import annotations

import dataclasses
import itertools
import os
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from autotune.core._config import Config
from autotune.core._guard import LossReference
from autotune.core._kinds import Kind, Line
from autotune.core._whole_runs import with_production_rate
from autotune.machine._launch import TrialSpec
from autotune.stores._records import ATTR_OF, ATTR_SAMPLED, kind_of
from autotune.tuner._broke import BROKE_ATTR
from autotune.tuner._ceiling_run import with_ceilings
from autotune.tuner._confirm import noisy_loss
from autotune.tuner._planner import owed_again
from autotune.tuner._queue import write
from autotune.tuner._recorder import Recorder, watcher
from autotune.tuner._scheduler import Heartbeat, Scheduler
from autotune.tuner._space_now import draw_caps, holds, space_now
from autotune.tuner._standing import Standing, read_standing
from autotune.tuner._training_shape import shape_of, trial_budget
from autotune.tuner._tuners import HostRegistry, Liveness, stale_trials
from autotune.tuner._watch import run_trial
from autotune.worker._streams import same_training

if TYPE_CHECKING:
    import optuna

    from autotune.machine._launch import Launcher
    from autotune.machine._probe import Fingerprint
    from autotune.machine._slots import Slot
    from autotune.tuner._options import Reporter, StudyOptions
    from autotune.tuner._space import Space


class TrialSteps:
    """A study's steps for one claimed trial; ``StudyRunner`` sets the state they read."""

    options: StudyOptions
    fingerprint: Fingerprint
    space: Space
    study: optuna.Study
    name: str
    slots: list[Slot]
    host: HostRegistry
    reporter: Reporter
    scheduler: Scheduler
    recorder: Recorder
    ram_budget: int
    _owner: Mapping[str, object]
    _warm: dict[int, Launcher]
    _holding: threading.Lock
    _settled_by: int | None

    def _space_now(self, standing: Standing) -> Space:
        space, line = space_now(self.space, standing, self.fingerprint.cpus, self.ram_budget)
        if line is not None:
            self.scheduler.say(line)
        return space

    def _config(self, trial: optuna.Trial, kind: Kind, standing: Standing) -> tuple[Config, dict[str, str]]:
        """What a claimed trial runs, by its kind, and why knobs were held (for its tags): the
        code's own (the baseline), the config it repeats or retries, or a draw from the
        space as of now under its holds and caps (a climb's config is enqueued as the draw's
        fixed values)."""
        if kind is Kind.BASELINE:
            return Config(), {}
        if kind.repeats or kind is Kind.RETRY:
            return Config(**trial.user_attrs.get(ATTR_SAMPLED, {})), {}
        space = self._space_now(standing)
        with self._holding:
            held = holds(
                standing,
                self.space,
                self._settled_by,
                *self.options.hold_limits,
                learnt=self.study.user_attrs.get(BROKE_ATTR),
            )  # (a warm start's: autotune.tuner._broke)
            self._settled_by = held.settled_by
        for line in held.lines:
            self.scheduler.say(line)
        return space.sample(trial, held.values, draw_caps(standing, space, self.scheduler.say)), held.why

    def _one_trial(
        self, trial: optuna.Trial, slot: Slot, index: int, total: int, standing: Standing
    ) -> tuple[int, bool]:
        """Run one claimed trial to its end in both stores; return its number, and whether
        this tuner recorded it (False: another tuner closed it as stale meanwhile).

        A repeat runs unpruned and measures its own ceilings (the winner's efficiency is then
        paired in every run); the baseline measures until it learns (every trial's divergence
        is judged against its curve), and where it ran whole its ceilings run after it."""
        kind = kind_of(trial.user_attrs)
        config, holding = self._config(trial, kind, standing)
        base, judged = (
            standing.base.first if standing.base else None,
            noisy_loss(standing.rows) is None,
        )  # (else: nan/inf only)
        seed = standing.seed(self.options.seed)
        tags = {
            "autotune.fingerprint": self.fingerprint.summary(),
            **{f"autotune.held.{knob}": why for knob, why in holding.items()},
        }  # (the MLflow UI shows why)
        run_id = self.recorder.begin(trial, self._owner, config, slot, seed, tags)
        self.reporter.trial_started(
            trial.number,
            index,
            total,
            config,
            slot.share() if len(self.slots) > 1 else None,
            kind,
            trial.user_attrs.get(ATTR_OF),
        )
        budget = trial_budget(
            self.options.budget,
            kind,
            shape_of(base),
            self.options.judge.divergence_tolerance,
            batch_size=config.batch_size,
        )
        spec = TrialSpec(
            self.options.target,
            config,
            slot.device,
            budget,
            seed,
            {} if kind.repeats else standing.ceilings.known(),
            slot.cpus,
            self.options.argv,
            self.options.nproc_per_node,
            compile_cache=str(self.options.store / "inductor" / self.name),
        )
        # (its windows' samples/s against the winner's loop's: a whole run ranks with its start-up)
        prune_below = standing.decision.winner.loop_median if standing.decision.winner and kind.explores else None
        beats = itertools.count(1)
        interrupt = self.scheduler.interrupt
        try:
            with (
                Heartbeat(lambda: self.recorder.beat(trial, next(beats)), f"trial {trial.number}", self.reporter.note),
                self.host.turn(
                    slot.runs_on,
                    f"trial {trial.number} of study {self.name} (tuner pid {os.getpid()})",
                    lambda line: self.scheduler.say(Line(line, "turn")),
                    interrupt,
                ),
            ):
                result = run_trial(
                    spec,
                    self.recorder.log_path(trial.number),
                    self.ram_budget,
                    watcher(
                        trial,
                        prune_below,
                        self.options.judge.prune,
                        self.options.noise.max_load,
                        self.reporter.event,
                        self.options.budget.window_s,
                    ),
                    interrupt=interrupt,
                    against=LossReference(
                        base.losses if base and judged else (),
                        base.curve if base and judged else (),
                        self.options.judge.divergence_tolerance,
                    ),
                    warm=self._warm.get(slot.index),
                )
                result = with_ceilings(
                    spec,
                    result,
                    self.recorder.log_path(trial.number),
                    lambda again, log: run_trial(
                        again, log, self.ram_budget, interrupt=interrupt, warm=self._warm.get(slot.index)
                    ),
                )
        except BaseException as exc:  # a second Ctrl-C, or our own bug: close both records, go on raising
            self.recorder.abandon(trial, run_id, exc)
            raise
        base_rate = standing.base.loop_median if standing.base else None
        result = same_training(result, base)  # (under --horizon, Optuna learns the projection it ranks on)
        result = dataclasses.replace(
            result, metrics=with_production_rate(result.metrics, base_rate, standing.horizon_h)
        )
        return trial.number, self.recorder.end(trial, run_id, result, standing.ceilings, base_rate)


def recover(study: optuna.Study, liveness: Liveness, recorder: Recorder, note: Callable[[str], None]) -> list[int]:
    """Close the trials that gone tuners left RUNNING; return their numbers.

    On this host a trial is stale when its tuner process is gone; elsewhere,
    when its heartbeat has not moved for ``STALE_AFTER_S`` while this tuner
    watched (``Liveness``: no two hosts' clocks are compared). A stale trial's
    worker processes are killed if they still run here, and the recorder closes
    it as ``interrupted`` (``Recorder.close_stale``); the tuner whose close lands
    (one: a trial is finished once) asks again for the baseline or re-run it owed.
    """
    closed = []
    for frozen, reason in stale_trials(study, liveness):
        if not recorder.close_stale(frozen, reason):
            continue  # another tuner closed it first, and owes what it owed
        note(f"trial {frozen.number}: {reason}")
        closed.append(frozen.number)
        standing = read_standing(study)
        owed = owed_again(next(r for r in standing.rows if r.number == frozen.number), standing)
        if owed is not None:
            write(study, owed)
    return closed
