"""A study: the baseline, then sampled trials, each run in a worker and recorded in Optuna and MLflow."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune._ceilings import Ceilings
from autotune._config import Config, ConfigError
from autotune._confirm import plan
from autotune._guard import DIVERGENCE_TOLERANCE, PRUNE_FRACTION, prune_reason
from autotune._knobs import show_value
from autotune._monitor import Background
from autotune._outcome import Outcome, clip
from autotune._records import (ATTR_BASE_BATCH, ATTR_BASELINE, ATTR_CEILINGS, ATTR_CONFIG, ATTR_CONFIRMS,
                               ATTR_HEARTBEAT, ATTR_LOSSES, ATTR_LR, ATTR_METRICS, ATTR_OUTCOME, ATTR_OWNER,
                               ATTR_REASON, ATTR_RUN, ATTR_SAMPLED, ATTR_WORKER, REASON_LIMIT, TrialRow,
                               bottleneck_of)
from autotune._runner import Budget, TrialResult, TrialSpec, Verdict, kill_orphans, run_trial
from autotune._standing import Standing, export_text, held_loader_knobs, standing, throughput_figure

if TYPE_CHECKING:
    import optuna

    from autotune._probe import Fingerprint
    from autotune._space import Space
    from autotune._tracking import Tracker

#: Default store folder (relative to where autotune runs): the Optuna journal,
#: the MLflow database and artifacts, and the trials' logs.
DEFAULT_STORE = Path("mlflow")
#: Share of the RAM available at the start that one trial's processes may use.
RAM_BUDGET_FRACTION = 0.75

#: Seconds between a running trial's heartbeats in the study storage.
HEARTBEAT_S = 30.0
#: A RUNNING trial of a tuner on another host is stale after this long without a
#: heartbeat (on this host, the tuner's process is checked directly).
STALE_AFTER_S = 4 * HEARTBEAT_S


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


class Reporter:
    """Receives a study's progress (the CLI draws it; the default ignores it)."""

    def note(self, line: str) -> None:
        """A line worth showing once (capability drops, paths)."""

    def trial_started(self, number: int, index: int, total: int, config: Config,  # type: ignore[valid-type]
                      rerun: int | None = None) -> None:
        """Trial ``index`` of ``total`` of this invocation is starting (a re-run of trial
        ``rerun``, when confirming)."""

    def event(self, event: Mapping[str, Any]) -> None:
        """An event from the running worker."""

    def trial_done(self, row: TrialRow, best: TrialRow | None, seconds_left: float) -> None:
        """A trial ended; ``best`` is the study's best so far."""


class BaselineFailed(RuntimeError):
    """The user's code as written does not run, so no trial can: stop the study."""


def default_study_name(target: str) -> str:
    """``runners/mnist.py:train`` -> ``mnist``; another function name is appended."""
    module, _, func = target.rpartition(":")
    stem = Path(module).stem if module.endswith(".py") else module.rsplit(".", 1)[-1]
    return stem if func == "train" else f"{stem}.{func}"


def open_storage(store: Path, url: str | None):
    """An Optuna storage: ``url`` (an RDB URL, or a journal file), else a journal in ``store``.

    Raises:
        ConfigError: naming the storage when it cannot be opened or reached.
    """
    import optuna
    from optuna.storages.journal import JournalFileBackend

    try:
        if url and "://" in url:
            # A server that does not answer should fail in seconds, not hang the tuner.
            kwargs = ({"connect_args": {"connect_timeout": 10}}
                      if url.startswith(("postgresql", "mysql")) else None)
            return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
        path = Path(url) if url else store / "optuna.journal"
        path.parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
    except Exception as exc:  # every failure here means: no study can start
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"--storage {url or path!r}: cannot be opened: {first}") from None


def this_process() -> dict[str, Any]:
    """This tuner's identity as stored with its trials: host, pid, start time."""
    import psutil

    return {"host": socket.gethostname(), "pid": os.getpid(), "started": psutil.Process().create_time()}


def process_alive(pid: int, started: float) -> bool:
    """Whether ``pid`` is still the process that started at ``started`` (pids are reused)."""
    import psutil

    try:
        return abs(psutil.Process(pid).create_time() - started) < 1.0
    except psutil.NoSuchProcess:
        return False


def stale_reason(owner: Mapping[str, Any] | None, heartbeat: float | None, started: float, now: float,
                 host: str, alive: Callable[[int, float], bool] = process_alive) -> str | None:
    """Why a RUNNING trial belongs to no live tuner, or None while its tuner may still run it.

    Args:
        owner: The trial's owner attr (host, pid, started), if it was written.
        heartbeat: Its last heartbeat (epoch seconds), if any.
        started: When the trial started (epoch seconds).
        now: The time now.
        host: This host's name.
        alive: Checks a (pid, start time) on this host.
    """
    if owner and owner.get("host") == host:
        if alive(owner["pid"], owner["started"]):
            return None
        return f"its tuner (pid {owner['pid']} on {host}) is gone"
    last = heartbeat or started
    if now - last <= STALE_AFTER_S:
        return None
    where = f"from {owner['host']} " if owner else ""
    return f"no heartbeat {where}for {now - last:.0f} s"


class _Heartbeat(Background):
    """Writes a running trial's heartbeat every ``HEARTBEAT_S`` on a thread."""

    def __init__(self, trial) -> None:
        self._trial = trial
        super().__init__("autotune-heartbeat")

    def _loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._trial.set_user_attr(ATTR_HEARTBEAT, time.time())
            except Exception:  # a storage hiccup must not kill the trial; the next beat retries
                continue


class StudyRunner:
    """Runs ``options.trials`` trials of one study (see DESIGN 4)."""

    def __init__(self, options: StudyOptions, fingerprint: Fingerprint, space: Space,
                 tracker: Tracker, reporter: Reporter | None = None) -> None:
        import optuna

        self.options, self.fingerprint, self.space, self.tracker = options, fingerprint, space, tracker
        self.reporter = reporter or Reporter()
        self.name = options.study or default_study_name(options.target)
        storage = open_storage(options.store, options.storage)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.study = optuna.create_study(
            study_name=self.name, storage=storage, direction="maximize", load_if_exists=True,
            sampler=optuna.samplers.TPESampler(seed=options.seed))
        self._check_same_target()
        self.experiment_id = tracker.experiment(self.name)
        attrs = self.study.user_attrs
        self.parent_id = tracker.parent_run(self.experiment_id, attrs.get("mlflow_parent_run_id"), {
            "autotune.study": self.name, "autotune.target": options.target,
            "autotune.fingerprint": fingerprint.summary()})
        if "mlflow_parent_run_id" not in attrs:
            self.study.set_user_attr("mlflow_parent_run_id", self.parent_id)
            self.study.set_user_attr("target", options.target)
            self.study.set_user_attr("space", space.name)
            self.study.set_user_attr("fingerprint", {**dataclasses.asdict(fingerprint),
                                                     "summary": fingerprint.summary()})
        self.ram_budget = options.ram_budget or int(
            fingerprint.ram_available_gib * 2**30 * RAM_BUDGET_FRACTION)
        self.log_dir = options.store / "trials" / self.name
        self._owner = this_process()
        self._interrupt = threading.Event()
        self._signum: int | None = None
        self._settled_by: int | None = None  # the trial whose loader knobs are held, once noted

    def _check_same_target(self) -> None:
        known = self.study.user_attrs.get("target")
        if known and known != self.options.target:
            raise ConfigError(f"--study {self.name!r} tunes {known}, not {self.options.target}; "
                              "give another --study name")

    def run(self) -> Standing:
        """Close stale trials, run the trials, confirm the top configs; return the standing.

        After ``options.trials`` trials, the top ``CONFIRM_TOP`` feasible configs and
        the baseline are re-run until each has ``1 + options.confirm`` runs; the
        winner is chosen on the medians (``autotune._confirm``).

        The first SIGINT or SIGTERM stops the running trial, which is recorded as
        ``interrupted``; the study then finishes as usual (export, parent run
        closed as KILLED) and ``interrupted_by`` names the signal. A second one
        raises KeyboardInterrupt at once.
        """
        started = time.monotonic()
        total = self.options.trials
        self.recover()
        found = standing(self.study)
        try:
            with self._signals():
                for index in range(total):
                    if self._interrupt.is_set():
                        break
                    found = self._trial_and_report(found, index, total, started)
                reruns = [] if self._interrupt.is_set() else plan(found.groups, self.options.confirm)
                if reruns:
                    self.reporter.note(f"confirming: {len(reruns)} re-runs of trials "
                                       f"{', '.join(str(n) for n in dict.fromkeys(reruns))} "
                                       "(the winner is chosen on the median of its runs)")
                started = time.monotonic()
                for index, number in enumerate(reruns):
                    if self._interrupt.is_set():
                        break
                    first = next(g for g in found.groups if g.first.number == number).first
                    found = self._trial_and_report(found, index, len(reruns), started, rerun=first)
        except BaseException:  # the parent run must not stay RUNNING
            self.tracker.kill(self.parent_id)
            raise
        return self._finish()

    def _trial_and_report(self, found: Standing, index: int, total: int, started: float,
                          rerun: TrialRow | None = None) -> Standing:
        """Run one trial (or a re-run of ``rerun``), report it; return the new standing.

        Raises:
            BaselineFailed: this was the baseline and it did not complete.
        """
        baseline = found.base is None and rerun is None
        number = self._one_trial(index, total, found, rerun)
        found = standing(self.study)
        row = next(r for r in found.rows if r.number == number)
        left = (time.monotonic() - started) / (index + 1) * (total - index - 1)
        self.reporter.trial_done(row, found.best, left)
        if baseline and row.outcome not in (Outcome.COMPLETE.value, Outcome.INTERRUPTED.value):
            raise BaselineFailed(f"the baseline (trial {row.number}: your code as written) "
                                 f"ended as {row.outcome}; every trial would fail the same "
                                 f"way:\n{row.reason}")
        return found

    @property
    def interrupted_by(self) -> int | None:
        """The signal that stopped the study early, if one did."""
        return self._signum

    def recover(self) -> list[int]:
        """Close the trials that killed tuners left RUNNING; return their numbers.

        On this host a trial is stale when its tuner process is gone; elsewhere,
        when its heartbeat is older than ``STALE_AFTER_S``. A stale trial's worker
        group is killed if it still runs here, its MLflow run is closed as KILLED
        (with its log) and it is failed in Optuna as ``interrupted``. MLflow goes
        first: if this is killed midway, the trial is still RUNNING next time.
        """
        import optuna

        host, now, closed = socket.gethostname(), time.time(), []
        for frozen in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            attrs = frozen.user_attrs
            begun = frozen.datetime_start.timestamp() if frozen.datetime_start else now
            why = stale_reason(attrs.get(ATTR_OWNER), attrs.get(ATTR_HEARTBEAT), begun, now, host)
            if why is None:
                continue
            worker = attrs.get(ATTR_WORKER)
            killed = 0
            if worker and attrs.get(ATTR_OWNER, {}).get("host") == host:
                killed = kill_orphans(worker["pid"], worker["started"])
            reason = (f"left RUNNING: {why}; closed by pid {os.getpid()} on resume"
                      + (f", which killed {killed} orphaned worker process(es)" if killed else ""))
            run_id = attrs.get(ATTR_RUN)
            if run_id:
                self.tracker.kill(run_id, reason, self.log_dir / f"trial-{frozen.number}.log")
            trial = optuna.trial.Trial(self.study, frozen._trial_id)  # no public handle by number
            trial.set_user_attr(ATTR_OUTCOME, Outcome.INTERRUPTED.value)
            trial.set_user_attr(ATTR_REASON, reason)
            self.study.tell(frozen.number, state=optuna.trial.TrialState.FAIL)
            self.reporter.note(f"trial {frozen.number}: {reason}")
            closed.append(frozen.number)
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

    def _one_trial(self, index: int, total: int, found: Standing, rerun: TrialRow | None) -> int:
        """Run one trial to its end in both stores; return its number.

        With no complete baseline yet, this trial is the baseline. A ``rerun``
        runs that trial's config again, unpruned (a confirmation). Otherwise the
        space is sampled, with the loader knobs held at the best trial's once that
        trial is compute-bound at high efficiency.
        """
        import optuna

        baseline = found.base is None and rerun is None
        trial = self.study.ask()
        trial.set_user_attr(ATTR_OWNER, self._owner)
        if rerun is not None:
            config = Config(**rerun.sampled)
            trial.set_user_attr(ATTR_CONFIRMS, rerun.number)
        else:
            config = Config() if baseline else self.space.sample(trial, self._settled(found))
        trial.set_user_attr(ATTR_BASELINE, baseline)
        trial.set_user_attr(ATTR_SAMPLED, config.set_values())
        tags = {"autotune.baseline": str(baseline).lower(), "autotune.fingerprint": self.fingerprint.summary()}
        if rerun is not None:
            tags["autotune.confirms"] = str(rerun.number)
        run_id = self.tracker.start_trial(self.experiment_id, self.parent_id, trial.number,
                                          config.set_values(), tags)
        trial.set_user_attr(ATTR_RUN, run_id)
        self.reporter.trial_started(trial.number, index, total, config, rerun.number if rerun else None)
        spec = TrialSpec(self.options.target, config, self.fingerprint.device, self.options.budget,
                         seed=(self.options.seed or 0) + trial.number,
                         # a re-run measures its own: the winner's efficiency is then paired in every run
                         known_ceilings={} if rerun is not None else found.ceilings.known())
        log_path = self.log_dir / f"trial-{trial.number}.log"
        prune_below = found.decision.winner.median if found.decision.winner and not baseline \
            and rerun is None else None
        base = found.base.first if found.base else None
        try:
            with _Heartbeat(trial):
                result = run_trial(spec, log_path, self.ram_budget, self._watch(trial, prune_below),
                                   interrupt=self._interrupt, reference=base.losses if base else (),
                                   tolerance=self.options.tolerance)
        except BaseException as exc:  # a second Ctrl-C, or our own bug: close both records, go on raising
            self.tracker.kill(run_id, f"the tuner stopped: {exc!r}", log_path)
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            raise
        self._record(trial, run_id, result, found.ceilings)
        return trial.number

    def _settled(self, found: Standing) -> dict[str, Any]:
        """``held_loader_knobs`` for the best trial, with one line the first time it holds."""
        held = held_loader_knobs(found.best, self.space.domains)
        best = found.best
        if held and best.number != self._settled_by:
            self._settled_by = best.number
            knobs = ", ".join(f"{k}={'as in your code' if v is None else show_value(v)}" for k, v in held.items())
            self.reporter.note(f"loader knobs held at trial {best.number}'s ({knobs}): it is compute-bound "
                               f"at {best.bottleneck.efficiency:.0%} of its data-on-device ceiling")
        return held

    def _watch(self, trial, best: float | None) -> Callable[[dict[str, Any]], Verdict | None]:
        """The running trial's event handler: progress, its worker's identity, throughput
        reports to Optuna (its intermediate values) and the pruning rule."""
        rates: list[float] = []

        def on_event(event: dict[str, Any]) -> Verdict | None:
            self.reporter.event(event)
            if event["event"] == "spawned":
                from autotune._monitor import process_tree

                procs = process_tree(event["pid"])
                if procs:
                    trial.set_user_attr(ATTR_WORKER, {"pid": event["pid"], "started": procs[0].create_time()})
            elif event["event"] == "window":
                rates.append(event["samples"] / event["seconds"])
                trial.report(rates[-1], event["index"])
                reason = prune_reason(rates, best, self.options.prune)
                if reason:
                    return Outcome.PRUNED, reason
            return None

        return on_event

    def _record(self, trial: optuna.Trial, run_id: str, result: TrialResult, ceilings: Ceilings) -> None:
        import optuna

        derived = {f"resolved.{k}": v for k, v in result.resolved.items()}
        derived.update(base_batch_size=result.base_batch_size, effective_lr=result.lr)
        for key, value in ((ATTR_OUTCOME, result.outcome.value), (ATTR_REASON, clip(result.reason, REASON_LIMIT)),
                           (ATTR_METRICS, result.metrics), (ATTR_CONFIG, result.resolved),
                           (ATTR_BASE_BATCH, result.base_batch_size), (ATTR_LR, result.lr),
                           (ATTR_LOSSES, result.losses), (ATTR_CEILINGS, result.ceilings)):
            trial.set_user_attr(key, value)
        metrics, tags = dict(result.metrics), {}
        if "samples_per_s" in metrics:
            bound = bottleneck_of(metrics, result.resolved, ceilings, result.ceilings)
            tags = {"autotune.bottleneck": bound.verdict, "autotune.bottleneck_why": bound.why}
            metrics.update({name: value for name, value in (
                ("efficiency", bound.efficiency), ("compute_ceiling", bound.compute),
                ("loader_ceiling", bound.loader), ("cpu_roof", bound.cpu), ("of_roof", bound.of_roof))
                if value is not None})
        self.tracker.end_trial(run_id, result.outcome, result.reason, metrics, result.series,
                               {k: v for k, v in derived.items() if v is not None}, result.log_path, tags)
        sps = result.metrics.get("samples_per_s")
        if result.outcome in (Outcome.COMPLETE, Outcome.DIVERGED) and sps:
            # Constraints, not penalties: a diverged trial keeps its real speed
            # for the sampler but is infeasible, so never the best (Optuna 5).
            trial.set_constraint("diverged", float(result.outcome == Outcome.DIVERGED))
            self.study.tell(trial, sps)
        elif result.outcome == Outcome.PRUNED:
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)

    def _finish(self) -> Standing:
        found = standing(self.study)
        rows, best = found.rows, found.best
        artifacts = {"trials.json": json.dumps([dataclasses.asdict(r) for r in rows], indent=1),
                     "ceilings.json": json.dumps(found.ceilings.table(), indent=1)}
        metrics: dict[str, float] = {"trials": float(len(rows))}
        if best is not None:
            win = found.decision.winner
            text = export_text(self.study, found)
            artifacts["best.yaml"] = text
            path = self.options.store / "exports" / f"{self.name}.yaml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            metrics.update(best_samples_per_s=win.median, best_trial=float(best.number),
                           best_runs=float(len(win.rates)), best_spread=win.spread)
            if found.base is not None:
                metrics.update(best_speedup=found.speedup(win), baseline_samples_per_s=found.base.median,
                               baseline_spread=found.base.spread)
            if best.bottleneck is not None and best.bottleneck.efficiency is not None:
                metrics["best_efficiency"] = best.bottleneck.efficiency
        self.tracker.finish_parent(self.parent_id, artifacts, metrics,
                                   {"throughput.png": throughput_figure(self.name, rows)},
                                   status="KILLED" if self._signum else "FINISHED")
        return found
