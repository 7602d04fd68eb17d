"""The scheduler (autotune.tuner._scheduler): slots, own trials, the wait before confirming, signals, lines."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from autotune.core._kinds import Line
from autotune.machine._slots import Slot
from autotune.tuner._scheduler import Scheduler


def slots(n: int) -> list[Slot]:
    return [Slot(i, (), 1, "cpu") for i in range(n)]


def test_own_trials_are_handed_out_once_each_and_given_back() -> None:
    scheduler = Scheduler(slots(1), trials=2, say=lambda line: None)
    assert [scheduler.take_own(), scheduler.take_own(), scheduler.take_own()] == [0, 1, None]
    assert not scheduler.trials_left()
    scheduler.give_back_own()  # a re-run that ask() handed out: not one of its own
    assert scheduler.trials_left() and scheduler.take_own() == 1
    scheduler.give_back_own()
    scheduler.stop()
    assert scheduler.take_own() is None and not scheduler.trials_left()


def test_slots_share_the_count_and_the_last_to_finish_sampling_plans_once() -> None:
    scheduler = Scheduler(slots(3), trials=7, say=lambda line: None)
    taken: list[int] = []
    planned: list[str] = []
    order: list[str] = []

    def work(slot: Slot) -> None:
        while (index := scheduler.take_own()) is not None:
            taken.append(index)
        scheduler.done_sampling(lambda: planned.append(threading.current_thread().name))
        order.append("confirming")  # no slot confirms before the plan is made

    scheduler.run(work)
    assert sorted(taken) == list(range(7)) and len(planned) == 1 and order == ["confirming"] * 3


def test_a_slot_that_raises_stops_the_others_and_its_error_is_raised() -> None:
    scheduler = Scheduler(slots(2), trials=100, say=lambda line: None)

    def work(slot: Slot) -> None:
        if slot.index == 0:
            raise RuntimeError("boom")
        scheduler.done_sampling(lambda: None)  # waits for slot 0, which never comes: the stop wakes it

    with pytest.raises(RuntimeError, match="boom"):
        scheduler.run(work)
    assert scheduler.interrupt.is_set()


def test_a_line_with_a_key_is_said_once_one_without_every_time() -> None:
    said: list[str] = []
    scheduler = Scheduler(slots(1), 1, said.append)
    for _ in range(2):
        scheduler.say(Line("widened to 8", "workers-8"))
        scheduler.say(Line("trial 3: noisy"))
    assert said == ["widened to 8", "trial 3: noisy", "trial 3: noisy"]


def test_the_first_signal_stops_the_study_the_second_raises() -> None:
    scheduler = Scheduler(slots(1), 1, lambda line: None)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with scheduler.signals():
        os.kill(os.getpid(), signal.SIGTERM)
        assert scheduler.interrupt.wait(2) and scheduler.signum == signal.SIGTERM
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            threading.Event().wait(1)  # the handler runs between bytecodes of this thread
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before  # restored


def test_a_wait_for_quiet_that_ran_out_makes_the_next_one_look_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import autotune.tuner._scheduler as scheduler_module

    patience: list[float] = []

    def wait_for_quiet(cpus, max_load, wait, stop):
        patience.append(wait)
        return False, 0.6, wait

    monkeypatch.setattr(scheduler_module, "wait_for_quiet", wait_for_quiet)
    scheduler = Scheduler(slots(1), 1, lambda line: None)
    assert scheduler.wait_quiet((0,), 0.2, 120.0) == (False, 0.6, 120.0)
    scheduler.wait_quiet((0,), 0.2, 120.0)
    assert patience == [120.0, scheduler_module.QUIET_LOOK_S]


def test_a_signal_wakes_a_slot_that_waits_for_the_others_to_finish_sampling() -> None:
    # slot 0 is done sampling and waits for slot 1, which a SIGTERM stops before it is done:
    # slot 0 must wake and leave, not wait for a plan that will never come
    scheduler = Scheduler(slots(2), trials=100, say=lambda line: None)
    waiting = threading.Event()
    rescued: list[bool] = []

    def work(slot: Slot) -> None:
        if slot.index == 0:
            waiting.set()
            scheduler.done_sampling(lambda: None)
        else:
            waiting.wait(5)
            os.kill(os.getpid(), signal.SIGTERM)
            scheduler.interrupt.wait(5)  # (interrupted: it leaves without being done sampling)

    def rescue() -> None:  # a hung slot fails the test, never hangs it
        rescued.append(True)
        scheduler.stop()

    timer = threading.Timer(10, rescue)
    timer.start()
    try:
        with scheduler.signals():
            scheduler.run(work)
    finally:
        timer.cancel()
    assert scheduler.signum == signal.SIGTERM and not rescued
