"""The scheduler: a tuner's slots and threads, signals, heartbeats and the quiet-machine wait.

It knows nothing of what a trial runs (the planner decides, the recorder writes): it runs
one piece of work per slot (``--jobs``), hands out this tuner's own trials (``take_own``),
holds the slots that finished sampling until the last one has planned the confirmation
(``done_sampling``), turns SIGINT and SIGTERM into a stop (``signals``), and waits for a
quiet machine before a noisy trial is measured again (``wait_quiet``). Its state is shared
by the slots' threads, and all of it is read and changed under one lock.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from autotune.core._kinds import Line
from autotune.machine._monitor import Background
from autotune.machine._noise import QUIET_LOOK_S, wait_for_quiet
from autotune.stores._stores import first_line
from autotune.tuner._tuners import HEARTBEAT_S, STALE_AFTER_S

if TYPE_CHECKING:
    from autotune.machine._slots import Slot


class Heartbeat(Background):
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
                    self._note(
                        f"{self._what}: a heartbeat failed ({first_line(exc)}); retrying every "
                        f"{HEARTBEAT_S:.0f} s (other tuners close it as stale after {STALE_AFTER_S:.0f} s "
                        "without one)"
                    )
                failing = True
                continue
            if failing and self._note:
                self._note(f"{self._what}: heartbeats go through again")
            failing = False


class Scheduler:
    """Runs a tuner's slots (see the module).

    Args:
        slots: This tuner's slots (one per ``--jobs``).
        trials: Trials of its own this tuner runs (``--trials``).
        say: Where its lines go.
    """

    def __init__(self, slots: list[Slot], trials: int, say: Callable[[str], None]) -> None:
        self.slots, self.trials, self._say = slots, trials, say
        self.interrupt = threading.Event()
        #: The signal that stopped the study early, if one did.
        self.signum: int | None = None
        self._lock = threading.Condition()
        self._taken, self._sampling, self._planned = 0, len(slots), False
        self._busy = False  # the last wait for a quiet machine timed out: look once, not wait
        self._said: set[str] = set()

    def say(self, line: Line) -> None:
        """Say ``line``: once per tuner per ``line.once`` key, or every time without one."""
        if line.once is not None:
            with self._lock:
                if line.once in self._said:
                    return
                self._said.add(line.once)
        self._say(line.text)

    # -- this tuner's own trials ------------------------------------------------------

    def take_own(self) -> int | None:
        """The index of this tuner's next own trial, or None once all are taken (or interrupted)."""
        with self._lock:
            if self._taken >= self.trials or self.interrupt.is_set():
                return None
            self._taken += 1
            return self._taken - 1

    def give_back_own(self) -> None:
        with self._lock:
            self._taken -= 1

    def trials_left(self) -> int:
        """How many trials of this tuner's own are still to be taken (none once it was stopped)."""
        with self._lock:
            return 0 if self.interrupt.is_set() else max(0, self.trials - self._taken)

    def done_sampling(self, last: Callable[[], None]) -> None:
        """This slot is done sampling: the last of the tuner's slots calls ``last`` (which plans
        the confirmation), the others wait for it to return (or for a stop)."""
        with self._lock:
            self._sampling -= 1
            if self._sampling > 0:
                self._lock.wait_for(lambda: self._planned or self.interrupt.is_set())
                return
        last()  # (if it raises, the slot's error stops the others: see ``run``)
        with self._lock:
            self._planned = True
            self._lock.notify_all()

    # -- running the slots ---------------------------------------------------------------

    def run(self, work: Callable[[Slot], None]) -> None:
        """``work`` for each slot: in this thread for one slot, else in a thread per slot, the
        main thread staying free for the signal handlers. A slot that raises stops the
        others (as an interrupt: their running trials are recorded), and its exception is
        raised here once they have stopped."""
        if len(self.slots) == 1:
            work(self.slots[0])
            return
        errors: list[BaseException] = []

        def run_slot(slot: Slot) -> None:
            try:
                work(slot)
            except BaseException as exc:  # handed to the main thread below
                errors.append(exc)
                self.stop()

        threads = [
            threading.Thread(target=run_slot, args=(slot,), name=f"autotune-slot-{slot.index}", daemon=True)
            for slot in self.slots
        ]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)
        except BaseException:  # a second Ctrl-C: stop every slot's worker before leaving
            self.interrupt.set()
            for thread in threads:
                thread.join(10)
            raise
        if errors:
            raise errors[0]

    def stop(self) -> None:
        """Stop: running trials end as interrupted, waiting slots wake."""
        self.interrupt.set()
        with self._lock:
            self._lock.notify_all()

    @contextlib.contextmanager
    def signals(self) -> Iterator[None]:
        """While the study runs, the first SIGINT or SIGTERM stops it (``stop``, ``signum``
        names it); a second one raises KeyboardInterrupt at once. Handlers can only be
        set from the main thread: from another, nothing changes."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum, frame):
            if self.interrupt.is_set():  # asked twice: stop now
                raise KeyboardInterrupt
            self.signum = signum
            # (and wake a slot that waits for the others to finish sampling: the lock is
            # re-entrant, and with --jobs the main thread that runs this only joins the slots)
            self.stop()

        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)

    # -- the quiet-machine wait -----------------------------------------------------------

    def wait_quiet(self, cpus: tuple[int, ...], max_load: float, patience: float) -> tuple[bool, float, float]:
        """Wait, up to ``patience`` seconds, for ``cpus`` to be quiet (``autotune.machine._noise.wait_for_quiet``);
        after a wait that ran out, the next one looks once (``QUIET_LOOK_S``) instead of waiting
        again, until the machine is found quiet. Returns (quiet, the load seen, seconds waited)."""
        with self._lock:
            busy = self._busy
        quiet, load, waited = wait_for_quiet(cpus, max_load, QUIET_LOOK_S if busy else patience, self.interrupt)
        if not self.interrupt.is_set():
            with self._lock:
                self._busy = not quiet
        return quiet, load, waited
