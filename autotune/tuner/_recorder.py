"""The recorder: the only writer of a study's trials, in Optuna and in MLflow.

A trial is begun here (its kind, config, slot and seed in Optuna; its MLflow child run),
and ended here. A result goes to the store folder first (``Spool``), then to Optuna,
then to MLflow, and leaves the folder once both hold it: a store that stays down, or a
kill, leaves it for the next tuner on the study to replay (``replay``), and replaying a
result already recorded changes nothing. A trial a gone tuner left RUNNING is closed here
too (``close_stale``), and one whose tuner stops on an error (``abandon``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core._ceilings import Ceilings
from autotune.core._kinds import Kind
from autotune.core._outcome import Outcome, headline
from autotune.core._prune import PRUNE_MIN_WINDOWS, prune_reason, prune_so_far
from autotune.stores._optuna_io import frozen_by_id, frozen_trial, handle, set_param, trial_id_of
from autotune.stores._records import (
    ATTR_BASE_BATCH,
    ATTR_BASELINE,
    ATTR_CONFIG,
    ATTR_DOUBT,
    ATTR_HEARTBEAT,
    ATTR_KIND,
    ATTR_METRICS,
    ATTR_OF,
    ATTR_OUTCOME,
    ATTR_OWNER,
    ATTR_REASON,
    ATTR_RUN,
    ATTR_SAMPLED,
    ATTR_SEED,
    ATTR_SLOT,
    ATTR_WORKER,
    kind_of,
    told_rate,
)
from autotune.stores._stores import Spool, first_line
from autotune.tuner._judge import TrialIds, optuna_params, optuna_state, result_record

if TYPE_CHECKING:
    import optuna

    from autotune.core._config import Config
    from autotune.machine._slots import Slot
    from autotune.stores._tracking import Tracker
    from autotune.tuner._join import Joined
    from autotune.tuner._option_groups import Noise
    from autotune.tuner._space import Space
    from autotune.tuner._watch import Stop, TrialResult


@dataclasses.dataclass(frozen=True)
class ParentRecord:
    """What the parent run is closed with.

    Attributes:
        artifacts: Text artifacts by name (``trials.json``, ``ceilings.json``, ``report.html``, ``best.yaml``).
        metrics: The study's figures (``best_speedup``, ...).
        tags: Its tags (``autotune.ended``, ``autotune.result``, its name and note).
        runs: Tags to set on each child run, by run id: whether it won, and its name.
        traces: The profile runs' trace files (``autotune.tuner._profiling``), attached under ``traces/``.
    """

    artifacts: dict[str, str]
    metrics: dict[str, float]
    tags: dict[str, str]
    runs: dict[str, dict[str, str]]
    traces: list[str] = dataclasses.field(default_factory=list)


class Recorder:
    """Writes one study's trials.

    Args:
        joined: The study: its Optuna study, MLflow experiment and parent run.
        tracker: Its MLflow store.
        spool: Where results wait for both stores (``STORE/pending/STUDY``).
        space: The study's space (the params of a trial the sampler did not draw).
        say: Told what a person should know (a result replayed, a trial closed by another tuner).
        log_dir: Where the trials' logs are (``trial-N.log``).
        noise: When a figure is not believed (``autotune.machine._noise.doubt``).
    """

    def __init__(
        self,
        joined: Joined,
        tracker: Tracker,
        spool: Spool,
        space: Space,
        say: Callable[[str], None],
        log_dir: Path,
        noise: Noise,
    ) -> None:
        self.study, self.tracker, self.spool, self.space, self.say = joined.study, tracker, spool, space, say
        self.experiment_id, self.parent_id, self.log_dir = joined.experiment_id, joined.parent_id, log_dir
        self._noise = noise

    def log_path(self, number: int) -> Path:
        return self.log_dir / f"trial-{number}.log"

    def begin(
        self,
        trial: optuna.Trial,
        owner: Mapping[str, Any],
        config: Config,
        slot: Slot,
        seed: int,
        tags: Mapping[str, str],
    ) -> str:
        """Record a claimed trial as started: who runs it, its kind, what it runs, where, from
        which seed; start its MLflow child run (its id kept with the trial); return that id.

        Every child run says its kind (``autotune.kind``), the trial it repeats or starts from
        (``autotune.of``) and whether it runs the user's code as written (``autotune.baseline``).
        """
        attrs = trial.user_attrs
        kind = kind_of(attrs)
        baseline = bool(attrs.get(ATTR_BASELINE))
        trial.set_user_attr(ATTR_OWNER, dict(owner))
        trial.set_user_attr(ATTR_KIND, kind.value)
        trial.set_user_attr(ATTR_BASELINE, baseline)
        trial.set_user_attr(ATTR_SAMPLED, config.set_values())
        trial.set_user_attr(ATTR_SLOT, slot.record())
        trial.set_user_attr(ATTR_SEED, seed)
        run_tags = {
            "autotune.kind": kind.value,
            "autotune.baseline": str(baseline).lower(),
            "autotune.slot": str(slot.index),
            "autotune.share": slot.share(),
            "autotune.seed": str(seed),
            **tags,
        }
        if attrs.get(ATTR_OF) is not None:
            run_tags["autotune.of"] = str(attrs[ATTR_OF])
        run_id = self.tracker.start_trial(
            self.experiment_id, self.parent_id, trial.number, config.set_values(), run_tags
        )
        trial.set_user_attr(ATTR_RUN, run_id)
        return run_id

    @staticmethod
    def beat(trial: optuna.Trial, count: int) -> None:
        """A running trial's heartbeat (its tuner lives: ``autotune.tuner._tuners.Liveness``)."""
        trial.set_user_attr(ATTR_HEARTBEAT, count)

    def end(
        self, trial: optuna.Trial, run_id: str, result: TrialResult, ceilings: Ceilings, base_rate: float | None
    ) -> bool:
        """Record a finished trial in both stores; False if another tuner had closed it
        meanwhile (it stalled past the staleness limit): both stores then keep what that
        tuner wrote, which is not contradicted."""
        attrs = trial.user_attrs
        kind, of = kind_of(attrs), attrs.get(ATTR_OF)
        first = (
            frozen_trial(self.study, of)
            if of is not None and (kind.repeats or kind is Kind.RETRY) and not trial.params
            else None
        )
        params = (
            {}
            if trial.params
            else optuna_params(
                first, attrs.get(ATTR_SAMPLED, {}), result.resolved, result.base_batch_size, self.space.domains
            )
        )
        record = result_record(
            TrialIds(trial.number, trial_id_of(trial), run_id), attrs, result, ceilings, base_rate, self._noise, params
        )
        try:
            path = self.spool.write(trial.number, record)
        except OSError as exc:  # the local disk is full: the stores may still take it
            self.say(
                f"trial {trial.number}: cannot keep its result in {self.spool.folder} ({first_line(exc)}); "
                "recording it straight away"
            )
            path = None
        applied = self.apply(record)
        if path is not None:
            self.spool.done(path)
        return applied

    def apply(self, record: Mapping[str, Any]) -> bool:
        """Put a spooled result in Optuna, then MLflow; False if another tuner closed the
        trial meaning something else (both stores then keep what it wrote).

        Replaying a result that was already applied changes nothing: a finished trial
        with this result is left as it is, and MLflow gets the same values again.
        """
        import optuna

        trial_id, attrs = record["trial_id"], record["attrs"]
        frozen = frozen_by_id(self.study, trial_id)
        if frozen.state.is_finished():
            if (
                frozen.user_attrs.get(ATTR_OUTCOME) != attrs[ATTR_OUTCOME]
                or frozen.user_attrs.get(ATTR_METRICS) != attrs[ATTR_METRICS]
            ):
                reason = frozen.user_attrs.get(ATTR_REASON, "")
                self.say(
                    f"trial {record['number']}: closed by another tuner while it ran "
                    f"({headline(reason)}); its measurement is not used"
                )
                return False
        else:
            trial = handle(self.study, trial_id)
            # The outcome last: another tuner that reads it (waiting on this baseline, say)
            # then reads the figures, params and doubt with it, never a half-written trial.
            for key, value in attrs.items():
                if key != ATTR_OUTCOME:
                    trial.set_user_attr(key, value)
            for name, (dist, value) in record.get("optuna_params", {}).items():
                dist = optuna.distributions.json_to_distribution(dist)
                with contextlib.suppress(ValueError):  # a distribution the study's others contradict
                    set_param(self.study, trial_id, name, dist, value)
            trial.set_user_attr(ATTR_OUTCOME, attrs[ATTR_OUTCOME])
            try:
                rate = told_rate(
                    attrs[ATTR_OUTCOME], attrs[ATTR_METRICS], attrs.get(ATTR_CONFIG) or {}, attrs.get(ATTR_BASE_BATCH)
                )
                self._tell(frozen.number, trial, Outcome(attrs[ATTR_OUTCOME]), rate, attrs.get(ATTR_DOUBT))
            except optuna.exceptions.UpdateFinishedTrialError:
                return self.apply(record)  # closed meanwhile: judged as above
        logged = record["mlflow"]
        self.tracker.end_trial(
            record["run_id"],
            Outcome(logged["outcome"]),
            logged["reason"],
            logged["metrics"],
            logged["series"],
            logged["params"],
            Path(logged["log_path"]),
            logged["tags"],
        )
        return True

    def _tell(self, number: int, trial: optuna.Trial, outcome: Outcome, sps: float | None, doubt: str | None) -> None:
        """Finish the trial in Optuna, as its sampler should learn from it (``optuna_state``)."""
        import optuna

        state, value = optuna_state(outcome, sps, doubt)
        if state == "complete":
            # Constraints, not penalties: a diverged trial keeps its real speed
            # for the sampler but is infeasible, so never the best (Optuna 5).
            trial.set_constraint("diverged", float(outcome == Outcome.DIVERGED))
            self.study.tell(number, value)
        else:
            self.study.tell(number, state=optuna.trial.TrialState[state.upper()])

    def replay(self) -> None:
        """Apply the results a stopped or killed tuner left in the store folder (oldest first)."""
        for path, record in self.spool.all():
            applied = self.apply(record)
            self.spool.done(path)
            if applied:
                self.say(
                    f"trial {record['number']}: its result, kept in {path.parent} while a store was down, "
                    "is now recorded"
                )

    def abandon(self, trial: optuna.Trial, run_id: str, error: BaseException) -> None:
        """Close a trial whose tuner stops on an error (a second Ctrl-C, a bug of ours)."""
        import optuna

        self.tracker.kill(run_id, f"the tuner stopped: {error!r}", self.log_path(trial.number))
        self.study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)

    def close_stale(self, frozen: optuna.trial.FrozenTrial, reason: str) -> bool:
        """Close a trial a gone tuner left RUNNING as ``interrupted``; False when another tuner
        closed it first (that one owes what it owed). MLflow goes first: if this is killed
        midway, the trial is still RUNNING next time."""
        import optuna

        run_id = frozen.user_attrs.get(ATTR_RUN)
        if run_id:
            self.tracker.kill(run_id, reason, self.log_path(frozen.number))
        trial = handle(self.study, trial_id_of(frozen))
        try:
            trial.set_user_attr(ATTR_OUTCOME, Outcome.INTERRUPTED.value)
            trial.set_user_attr(ATTR_REASON, reason)
            self.study.tell(frozen.number, state=optuna.trial.TrialState.FAIL)
        except optuna.exceptions.UpdateFinishedTrialError:
            return False
        return True

    def close_parent(self, record: ParentRecord, images: Mapping[str, bytes], status: str) -> None:
        """Close the study's MLflow parent run with what the study found (the last tuner does);
        ``images``: PNGs by artifact name."""
        self.tracker.tag_runs(record.runs)
        self.tracker.finish_parent(
            self.parent_id,
            record.artifacts,
            record.metrics,
            images,
            status=status,
            tags=record.tags,
            files={"traces": record.traces},
        )

    def kill_parent(self) -> None:
        """Close the parent run as KILLED: the last tuner running the study stopped on an error."""
        self.tracker.kill(self.parent_id)

    def discard(self) -> None:
        """Delete what was recorded of the study: its MLflow runs, its trial logs, its pending results."""
        import shutil

        self.tracker.delete_runs(self.experiment_id, self.parent_id)
        shutil.rmtree(self.log_dir, ignore_errors=True)
        shutil.rmtree(self.spool.folder, ignore_errors=True)


def watcher(
    trial: optuna.Trial,
    best: float | None,
    prune: float,
    max_load: float,
    relay: Callable[[Mapping[str, Any]], None],
    window_s: float = 0.0,
) -> Callable[[dict[str, Any]], Stop | None]:
    """The running trial's event handler: relays each event (the progress on the terminal),
    records its worker process (what a tuner that resumes kills if it outlived us) and
    each window's samples/s (Optuna's intermediate values), and stops it when the pruning
    rule says so (``autotune.core._prune.prune_reason``; against ``best``, the winner's loop
    median), or its measure so far, once it has lasted ``PRUNE_MIN_WINDOWS`` times
    ``window_s`` (``prune_so_far``)."""
    rates: list[float] = []

    def on_event(event: dict[str, Any]) -> Stop | None:
        relay({**event, "trial": trial.number})
        if event["event"] == "spawned":
            from autotune.machine._proctree import process_tree

            procs = process_tree(event["pid"])
            # Kept even if the worker is gone already: its tag still finds what it left.
            started = procs[0].create_time() if procs else time.time()
            trial.set_user_attr(ATTR_WORKER, {"pid": event["pid"], "started": started, "tag": event["tag"]})
        elif event["event"] == "window":
            rate = event["samples"] / event["seconds"]
            trial.report(rate, event["index"])
            # A window others slowed says nothing about the config: it never prunes.
            if max(event.get("foreign_cpu", 0.0), event.get("foreign_gpu", 0.0)) <= max_load:
                rates.append(rate)
            reason = prune_reason(rates, best, prune)
            if reason:
                return Outcome.PRUNED, reason
        elif (
            event["event"] == "progress"
            and "seconds" in event
            and max(event.get("foreign_cpu", 0.0), event.get("foreign_gpu", 0.0)) <= max_load
        ):
            reason = prune_so_far(
                event["samples"], event["seconds"], best, prune, PRUNE_MIN_WINDOWS * window_s, event.get("window_s")
            )
            if reason:
                return Outcome.PRUNED, reason
        return None

    return on_event
