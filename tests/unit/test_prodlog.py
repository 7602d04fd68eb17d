"""The production job's MLflow writer (autotune.production._prodlog): the loop never waits for the store, and
a store that fails (a server restarting) costs figures late, never the job nor a figure."""

from __future__ import annotations

import threading
import time

from autotune.production import _prodlog
from autotune.production._prodlog import ProductionLog


class Store:
    """A tracking store that fails its first ``fails`` writes, and blocks each write until
    ``opened`` is set: what the writer sent, in order."""

    def __init__(self, fails: int = 0) -> None:
        self.fails, self.metrics, self.tags = fails, [], []
        self.opened = threading.Event()

    def write(self, metrics, tags) -> None:
        self.opened.wait()
        if self.fails:
            self.fails -= 1
            raise ConnectionError("tracking server restarting")
        self.metrics += metrics
        self.tags += tags


def test_a_failing_store_costs_no_figure_and_the_loop_never_waits(monkeypatch) -> None:
    monkeypatch.setattr(_prodlog, "RETRY_S", (0.01, 0.02))
    store, said = Store(fails=3), []
    log = ProductionLog(store.write, "run-1", said.append)

    def loop() -> None:
        for step in range(1, 121):
            log(
                step,
                {"data_wait_frac": 0.5, "samples_per_s": 100.0 + step},
                {"num_workers": 2 + step // 60, "prefetch_factor": 2},
            )

    training = threading.Thread(target=loop)
    training.start()
    training.join(60)  # the store blocks every write until opened: a loop that waited for it would hang here
    assert not training.is_alive()
    assert log.pending == 120 and not log.flush(0.05)
    store.opened.set()
    assert log.flush(10.0) and log.pending == 0
    steps = [m.step for m in store.metrics if m.key == "samples_per_s"]
    assert steps == list(range(1, 121))  # every epoch, once, in order
    assert [t.value for t in store.tags] == [
        "num_workers=2 prefetch_factor=2",
        "num_workers=3 prefetch_factor=2",
        "num_workers=4 prefetch_factor=2",
    ]  # when the values change only
    assert len(said) == 2 and "logging to MLflow failed (ConnectionError: tracking server restarting)" in said[0]
    assert said[1] == "adapt: logging to MLflow works again; nothing was lost"
    log.close()


def test_what_a_dead_store_keeps_at_the_end_is_counted_not_waited_for(monkeypatch) -> None:
    monkeypatch.setattr(_prodlog, "RETRY_S", (0.01, 0.02))
    store, said = Store(fails=10**9), []
    store.opened.set()
    log = ProductionLog(store.write, "run-2", said.append)
    for step in range(3):
        log(step, {"samples_per_s": 1.0}, {"num_workers": 2})
    started = time.perf_counter()
    log.close(timeout=0.5)
    assert time.perf_counter() - started < 3.0
    assert said[-1] == (
        "adapt: 3 epoch(s) of figures were not logged to MLflow (run run-2): "
        "ConnectionError: tracking server restarting"
    )
    assert not store.metrics


def test_without_figures_no_thread_starts_and_close_says_nothing() -> None:
    said = []
    log = ProductionLog(Store().write, "run-3", said.append)
    log.close()
    assert said == [] and log.flush(0.01)


def test_figures_the_store_refuses_are_dropped_and_said_and_the_rest_go_on() -> None:
    """An error that waiting cannot mend (not ``autotune.stores._stores.transient``) drops that batch once,
    instead of retrying it for ever ahead of every later epoch."""
    refused, said, written = [True], [], []

    def write(metrics, tags) -> None:
        if refused.pop() if refused else False:
            raise ValueError("metric value must be a number")
        written.extend(metrics)

    log = ProductionLog(write, "run-4", said.append)
    log(1, {"samples_per_s": 1.0}, {"num_workers": 2})
    assert log.flush(10.0)
    log(2, {"samples_per_s": 2.0}, {"num_workers": 2})
    assert log.flush(10.0) and [m.step for m in written] == [2, 2]  # samples_per_s and num_workers
    assert said == [
        "adapt: MLflow refused 1 epoch(s) of figures (ValueError: metric value must be a number); "
        "they are dropped, training goes on"
    ]
    log.close()
