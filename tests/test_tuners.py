"""Many tuners on one study: liveness without clocks, and the one-time claims, on real
Optuna storages (a journal file here; PostgreSQL in test_many_tuners.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import optuna
import pytest
from optuna.storages.journal import JournalFileBackend

from autotune._queue import claim, claim_waiting, is_marker
from autotune._tuners import STALE_AFTER_S, HostRegistry, Liveness, Registry, TunerPhase, found_or_join

HERE = "here"


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_owner_on_this_host_is_judged_by_its_process_at_once() -> None:
    owner = {"host": HERE, "pid": 5, "started": 1.0}
    assert Liveness(HERE, alive=lambda pid, started: True).stale("t", owner, 1) is None
    assert Liveness(HERE, alive=lambda pid, started: False).stale("t", owner, 1) == \
        "its tuner (pid 5 on here) is gone"


def test_another_host_is_stale_once_its_beat_stops_moving_for_the_watchers_own_time() -> None:
    clock = Clock()
    watch = Liveness(HERE, alive=lambda pid, started: pytest.fail("no pid check for another host"), clock=clock)
    owner = {"host": "there", "pid": 5, "started": 1.0}
    assert watch.stale("t", owner, 7) is None  # first sight: no verdict yet
    clock.now += STALE_AFTER_S - 1
    assert watch.stale("t", owner, 7) is None
    clock.now += 2  # unchanged for STALE_AFTER_S + 1 of our own time
    assert watch.stale("t", owner, 7) == "no heartbeat from there for 121 s (watched by here)"
    assert watch.stale("t", owner, 8) is None  # it moved: alive, and the watch starts again
    clock.now += STALE_AFTER_S + 1
    assert watch.stale("t", owner, 8) is not None
    assert watch.stale("other", None, None) is None  # each key is watched on its own


def test_a_beat_written_with_a_clock_hours_off_is_alive_while_it_moves() -> None:
    # The writer's wall clock is 3 hours behind: its values mean nothing here, only that they change.
    clock, skewed = Clock(), 1_700_000_000.0 - 3 * 3600
    watch = Liveness(HERE, clock=clock)
    owner = {"host": "there", "pid": 5, "started": 1.0}
    for beat in range(10):
        assert watch.stale("t", owner, skewed + 30 * beat) is None
        clock.now += 30


def journal(tmp_path: Path):
    return optuna.storages.JournalStorage(JournalFileBackend(str(tmp_path / "optuna.journal")))


def test_one_founder_however_many_race(tmp_path: Path) -> None:
    founders, errors = [], []

    def join() -> None:
        try:
            _, founded = found_or_join(journal(tmp_path), "s", None)
            founders.append(founded)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=join) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert sorted(founders) == [False] * 5 + [True]


def test_a_job_is_claimed_once_and_its_marker_is_no_users_study(tmp_path: Path) -> None:
    study, _ = found_or_join(journal(tmp_path), "s", None)
    assert claim(study, "confirm-after-4")
    assert not claim(study, "confirm-after-4")
    assert claim(study, "confirm-after-5")  # the next round is another job
    names = [s.study_name for s in optuna.get_all_study_summaries(journal(tmp_path))]
    assert [n for n in names if not is_marker(n)] == ["s"]


def test_an_enqueued_trial_is_claimed_by_one_and_only_if_wanted(tmp_path: Path) -> None:
    study, _ = found_or_join(journal(tmp_path), "s", None)
    study.enqueue_trial({}, user_attrs={"kind": "a"})
    study.enqueue_trial({}, user_attrs={"kind": "b"})
    assert claim_waiting(study, lambda t: t.user_attrs["kind"] == "c") is None
    other = optuna.load_study(study_name="s", storage=journal(tmp_path))
    got = claim_waiting(study, lambda t: t.user_attrs["kind"] == "b")
    assert got is not None and got.number == 1
    assert claim_waiting(other, lambda t: t.user_attrs["kind"] == "b") is None  # taken
    assert claim_waiting(other, lambda t: True).number == 0


def test_the_registry_holds_each_tuner_once_with_its_phase(tmp_path: Path) -> None:
    study, _ = found_or_join(journal(tmp_path), "s", None)
    me = Registry(study, {"host": HERE, "pid": 1, "started": 1.0})
    you = Registry(study, {"host": "there", "pid": 2, "started": 2.0})
    me.enter(TunerPhase.SAMPLING)
    you.enter(TunerPhase.CONFIRMING)
    me.beat()
    alive = Liveness(HERE, alive=lambda pid, started: True)
    assert [t["pid"] for t in me.live_others(alive, (TunerPhase.CONFIRMING,))] == [2]
    assert me.live_others(alive, (TunerPhase.SAMPLING,)) == []
    you.enter(TunerPhase.DONE, "finished")
    assert me.live_others(alive, (TunerPhase.SAMPLING, TunerPhase.CONFIRMING)) == []
    assert [(t["pid"], t["beat"]) for t in you.others()] == [(1, 1)]


def test_tuners_on_one_host_see_each_other_and_tidy_up_after_the_dead(tmp_path: Path) -> None:
    import os
    import subprocess

    import psutil

    from autotune._tuners import HostRegistry, this_process

    registry = HostRegistry(tmp_path)
    gone = subprocess.Popen(["true"])
    gone.wait()
    (tmp_path / f"{gone.pid}.json").write_text(
        '{"pid": %d, "started": 1.0, "host": "here", "study": "old", "cpus": "all 2 CPUs"}' % gone.pid)
    parent = psutil.Process(os.getppid())  # a live process playing another tuner
    (tmp_path / f"{parent.pid}.json").write_text(
        '{"pid": %d, "started": %r, "host": "here", "study": "mnist", "cpus": "all 2 CPUs"}'
        % (parent.pid, parent.create_time()))
    others = registry.join(this_process(), "jpeg", "all 2 CPUs")
    assert [(o["pid"], o["study"]) for o in others] == [(parent.pid, "mnist")]
    assert not (tmp_path / f"{gone.pid}.json").exists()  # the dead one's file is tidied away
    assert (tmp_path / f"{os.getpid()}.json").exists()
    registry.leave()
    assert not (tmp_path / f"{os.getpid()}.json").exists()


def test_trials_on_one_host_take_turns_per_cpu_and_a_dead_holder_frees_its_cpus(tmp_path) -> None:
    import subprocess
    import sys
    import time

    registry = HostRegistry(tmp_path)
    # another tuner's trial on CPUs 0 and 1, in a process of its own that is then killed
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, %r)\n"
        "from pathlib import Path\nfrom autotune._tuners import HostRegistry\n"
        "with HostRegistry(Path(%r)).turn((0, 1), 'trial 3 of study other (tuner pid 1)'):\n"
        "    print('held', flush=True); time.sleep(60)\n") % (str(Path(__file__).resolve().parent.parent), str(tmp_path))],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        said: list[str] = []
        entered = threading.Event()

        def mine() -> None:
            with registry.turn((1,), "trial 0 of study mine", on_wait=said.append):
                entered.set()

        waiter = threading.Thread(target=mine)
        waiter.start()
        time.sleep(0.5)
        assert not entered.is_set()  # CPU 1 is the other trial's
        assert said == ["waiting for CPU 1: trial 3 of study other (tuner pid 1) runs on it (trials on this "
                        "host take turns on a CPU, so none measures another)"]
        # a --jobs slot on another CPU does not wait
        with registry.turn((2,), "slot 1"):
            pass
        holder.kill()  # a tuner killed mid-trial: the kernel drops its locks
        waiter.join(10)
        assert entered.is_set()
    finally:
        holder.kill()
        holder.wait()


def test_a_turn_waited_for_is_given_up_when_the_tuner_is_interrupted(tmp_path) -> None:
    registry = HostRegistry(tmp_path)
    stop = threading.Event()
    with registry.turn((0,), "first"):
        stop.set()
        with registry.turn((0,), "second", stop=stop):  # runs at once, without the turn
            pass
