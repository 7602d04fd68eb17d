"""Many tuners on one study (autotune.tuner._tuners, autotune.tuner._queue): liveness without comparing clocks, one founder, one claim per job, the registry; on a real journal storage."""

from __future__ import annotations

import threading
from pathlib import Path

import optuna
import pytest
from optuna.storages.journal import JournalFileBackend

from autotune.tuner._join import found_or_join
from autotune.tuner._queue import claim, claim_waiting, is_marker
from autotune.tuner._tuners import (
    STALE_AFTER_S,
    HostRegistry,
    Liveness,
    Registry,
    TunerPhase,
)

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
    assert Liveness(HERE, alive=lambda pid, started: False).stale("t", owner, 1) == "its tuner (pid 5 on here) is gone"


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


def test_a_turn_waited_for_is_given_up_when_the_tuner_is_interrupted(tmp_path) -> None:
    registry = HostRegistry(tmp_path)
    stop = threading.Event()
    with registry.turn((0,), "first"):
        stop.set()
        with registry.turn((0,), "second", stop=stop):  # runs at once, without the turn
            pass
