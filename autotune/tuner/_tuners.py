"""Many tuners on one study: who runs (a registry with heartbeats), what is stale, and who
does each one-time job (founding the study, the baseline, a confirmation round).

Everything rests on the Optuna storage's own atomicity, never on locks of ours:

- a study name is created once (a unique key in an RDB; the journal's own file
  lock), so exactly one tuner founds a study, and one claims each one-time job,
  which is a marker study named after the job and its round (``claim``);
- an enqueued (WAITING) trial becomes RUNNING for exactly one claimer
  (``set_trial_state_values`` under a row lock; Optuna's ``ask()`` relies on the
  same), so the baseline and each confirmation re-run are run once;
- a trial is finished once (``UpdateFinishedTrialError`` for the second), so one
  tuner closes a stale trial and re-enqueues the work it owed.

Liveness never compares two hosts' clocks (they drift by minutes): on this host a
tuner's pid is checked; elsewhere a heartbeat *counter* that has not moved for
``STALE_AFTER_S`` of this tuner's own monotonic time marks its writer stale.
"""

from __future__ import annotations

import contextlib
import enum
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.stores._optuna_io import set_system_attr, system_attrs
from autotune.stores._records import ATTR_HEARTBEAT, ATTR_OWNER, ATTR_WORKER

if TYPE_CHECKING:
    import optuna


#: Seconds between heartbeats (a tuner's, and its running trial's).
HEARTBEAT_S = 30.0
#: A tuner or trial on another host is stale once its heartbeat has not moved for
#: this long, as timed by the tuner looking (on this host its pid is checked).
STALE_AFTER_S = 4 * HEARTBEAT_S
#: Study system attr key prefix of the tuner registry (one entry per tuner process).
TUNER_KEY = "autotune:tuner:"
#: Names the folder where this host's tuners register and take turns on CPUs (``HostRegistry``).
HOST_DIR_ENV = "AUTOTUNE_HOST_DIR"


class TunerPhase(str, enum.Enum):
    """Where a tuner is: its own trials, the confirmation re-runs, the profile runs, or gone."""

    SAMPLING = "sampling"
    CONFIRMING = "confirming"
    PROFILING = "profiling"
    DONE = "done"


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


class Liveness:
    """Judges whether the tuner behind a heartbeat is gone, without reading its clock.

    Args:
        host: This host's name: owners here are checked by pid.
        alive: Checks a (pid, start time) on this host.
        clock: This tuner's monotonic clock (injected in tests).
        after: Seconds a heartbeat may stay unchanged before its writer is stale.
    """

    def __init__(
        self,
        host: str,
        alive: Callable[[int, float], bool] = process_alive,
        clock: Callable[[], float] = time.monotonic,
        after: float = STALE_AFTER_S,
    ) -> None:
        self.host, self._alive, self._clock, self._after = host, alive, clock, after
        self._seen: dict[str, tuple[Any, float]] = {}

    def stale(self, key: str, owner: Mapping[str, Any] | None, beat: Any) -> str | None:
        """Why the writer of ``beat`` is gone, or None while it may live.

        Args:
            key: What is watched (a trial, a tuner): observations are kept per key.
            owner: Its tuner (host, pid, started), if recorded.
            beat: Its heartbeat's current value (any value; only a change counts).
        """
        if owner and owner.get("host") == self.host:
            if self._alive(owner["pid"], owner["started"]):
                return None
            return f"its tuner (pid {owner['pid']} on {self.host}) is gone"
        now = self._clock()
        seen = self._seen.get(key)
        if seen is None or seen[0] != beat:
            self._seen[key] = (beat, now)
            return None
        if now - seen[1] < self._after:
            return None
        where = f"from {owner['host']} " if owner else ""
        return f"no heartbeat {where}for {now - seen[1]:.0f} s (watched by {self.host})"


class Registry:
    """The tuners of a study, in its system attrs: each writes only its own entry.

    An entry holds the tuner's identity, its ``Phase`` and a heartbeat counter
    (``beat``), so others can tell it is alive without reading its clock.
    """

    def __init__(self, study: optuna.Study, me: Mapping[str, Any]) -> None:
        self._study, self.me = study, dict(me)
        self.key = f"{TUNER_KEY}{me['host']}:{me['pid']}:{me['started']}"
        self._phase, self._beat, self._ended = TunerPhase.SAMPLING, 0, ""

    def _write(self) -> None:
        entry = {**self.me, "phase": self._phase.value, "beat": self._beat, "ended": self._ended}
        set_system_attr(self._study, self.key, entry)

    def enter(self, phase: TunerPhase, ended: str = "") -> None:
        """Record this tuner's phase (and, when done, how it ended)."""
        self._phase, self._ended = phase, ended
        self._write()

    def beat(self) -> None:
        self._beat += 1
        self._write()

    def others(self) -> list[dict[str, Any]]:
        """Every other tuner's entry (live or not)."""
        attrs = system_attrs(self._study)
        return [v for k, v in attrs.items() if k.startswith(TUNER_KEY) and k != self.key]

    def live_others(self, liveness: Liveness, phases: tuple[TunerPhase, ...]) -> list[dict[str, Any]]:
        """Other tuners in one of ``phases`` that are not known to be gone."""
        return [
            t
            for t in self.others()
            if t.get("phase") in {p.value for p in phases}
            and liveness.stale(f"tuner {t['host']}:{t['pid']}:{t['started']}", t, t.get("beat")) is None
        ]


def stale_trials(study: optuna.Study, liveness: Liveness) -> list[tuple[optuna.trial.FrozenTrial, str]]:
    """The trials gone tuners left RUNNING, each with the reason to close it as ``interrupted``.

    A stale trial's worker processes are killed first where they run on this host (found by
    process group and by the trial's tag), and the reason says how many.
    """
    import optuna

    from autotune.machine._reap import kill_orphans

    found = []
    for frozen in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        attrs = frozen.user_attrs
        why = liveness.stale(f"trial {frozen.number}", attrs.get(ATTR_OWNER), attrs.get(ATTR_HEARTBEAT))
        if why is None:
            continue
        worker = attrs.get(ATTR_WORKER)
        killed = 0
        if worker and attrs.get(ATTR_OWNER, {}).get("host") == liveness.host:
            killed = kill_orphans(worker["pid"], worker["started"], worker.get("tag"))
        found.append(
            (
                frozen,
                f"left RUNNING: {why}; closed by pid {os.getpid()} on {liveness.host}"
                + (f", which killed {killed} orphaned worker process(es)" if killed else ""),
            )
        )
    return found


def neighbours_line(neighbours: Sequence[Mapping[str, Any]]) -> str:
    """What a tuner says when other tuners run on its host (``HostRegistry.join``)."""
    return (
        f"{len(neighbours)} other tuner(s) run on this host ("
        + "; ".join(f"pid {n['pid']}: study {n['study']} on {n['cpus']}" for n in neighbours)
        + "): their trials and these take turns on each CPU (beside another, a trial read 9% of alone on "
        f"2 cores), and the RAM budget is split {1 + len(neighbours)} ways. One tuner with --jobs N runs "
        "trials at once, each on CPUs of its own"
    )


def describe(tuners: Sequence[Mapping[str, Any]]) -> str:
    """``pid 12 on a, pid 40 on b``."""
    return ", ".join(f"pid {t['pid']} on {t['host']}" for t in tuners)


class HostRegistry:
    """The tuners running on this host, whatever their study: one small file each in
    ``/dev/shm`` (memory: gone with the host, no disk of the user's).

    Two tuners on one host measure each other: each trial gets about half the CPUs
    and both read as slower, and each would take most of the RAM as its budget.
    ``join`` lists the live others so that the tuner can say so and share the RAM.

    Args:
        folder: Where the files go (default: ``$AUTOTUNE_HOST_DIR``, else
            ``/dev/shm/autotune-tuners``, else the temporary folder's). Tuners that use
            one folder take turns on its CPUs; tuners whose folders differ never wait on
            each other (containers that share CPUs should share the folder).
    """

    def __init__(self, folder: Path | None = None) -> None:
        import tempfile

        shm = Path("/dev/shm")
        default = (shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())) / "autotune-tuners"
        self.folder = folder or Path(os.environ.get(HOST_DIR_ENV) or default)
        self._path: Path | None = None

    def join(self, me: Mapping[str, Any], study: str, cpus: str) -> list[dict[str, Any]]:
        """Register this tuner; return the other live tuners on this host."""
        import json

        self.folder.mkdir(parents=True, exist_ok=True)
        others = []
        for path in self.folder.glob("*.json"):
            try:
                entry = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if entry.get("pid") == me["pid"]:
                continue
            if process_alive(entry["pid"], entry["started"]):
                others.append(entry)
            else:  # its tuner died without leaving: tidy up
                path.unlink(missing_ok=True)
        self._path = self.folder / f"{me['pid']}.json"
        self._path.write_text(json.dumps({**me, "study": study, "cpus": cpus}))
        return others

    def leave(self) -> None:
        if self._path is not None:
            self._path.unlink(missing_ok=True)
            self._path = None

    @contextlib.contextmanager
    def turn(
        self,
        cpus: Sequence[int],
        who: str,
        on_wait: Callable[[str], None] | None = None,
        stop: threading.Event | None = None,
    ):
        """Hold the measuring turn of ``cpus`` on this host for the ``with`` block: one trial at a
        time runs on a CPU, whatever tuner it belongs to, so that no tuner's trial measures
        another's (a trial beside another read 9% of alone on 2 cores; ``--jobs`` slots have
        disjoint CPUs and never wait on each other).

        One lock file per CPU, taken in order (no two waiters can hold each other up); the
        kernel drops a lock whose holder dies. ``who`` is written in the files for waiters to
        name; ``on_wait`` hears once whom this one waits for. When ``stop`` is set while
        waiting, the block runs without the turn (the trial then stops at once).
        """
        import fcntl

        self.folder.mkdir(parents=True, exist_ok=True)
        held = []
        try:
            for cpu in sorted(set(cpus)):
                lock = open(self.folder / f"cpu-{cpu}.lock", "a+")  # noqa: SIM115 - held past this loop
                told = stopped = False
                while True:
                    try:
                        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if stop is not None and stop.is_set():
                            lock.close()
                            stopped = True
                            break
                        if not told and on_wait:
                            told = True
                            lock.seek(0)
                            on_wait(
                                f"waiting for CPU {cpu}: {lock.read().strip() or 'another trial'} runs on it "
                                "(trials on this host take turns on a CPU, so none measures another)"
                            )
                        time.sleep(0.2)
                if stopped:
                    break
                lock.seek(0)
                lock.truncate()
                lock.write(who)
                lock.flush()
                held.append(lock)
            yield
        finally:
            for lock in held:
                fcntl.flock(lock, fcntl.LOCK_UN)
                lock.close()
