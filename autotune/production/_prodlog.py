"""The production job's MLflow run (``autotune.load(path, adapt=True, tracking_uri=...)``,
``autotune exec --adapt --tracking-uri``): each epoch's figures and the loader values in force.

One background thread is the only writer of the run, so the training loop never waits for the
tracking store: an HTTP client's retries against a server that restarts last minutes, and an
exception out of them would end the job. Figures wait in memory and go in order, in batches,
once the store answers again; the first failure is said once on stderr. At the interpreter's
exit what is left gets ``FLUSH_S`` to go, and what cannot is counted on stderr.
"""

from __future__ import annotations

import atexit
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from autotune.stores._stores import first_line, root_cause, transient

#: Seconds the interpreter's exit waits for figures still queued (a store that is down).
FLUSH_S = 10.0
#: Seconds between tries while the store fails: doubling from the first, up to the last.
RETRY_S = (1.0, 30.0)
#: Epochs per request: MLflow takes at most 1,000 metrics in one ``log_batch``.
EPOCHS_PER_CALL = 50


class ProductionLog:
    """``log(step, metrics, values)``: the epoch's figures (metrics) and the loader's values in
    force (as metrics, and as the tag ``autotune.adapt`` when they change), queued for the
    writer thread. ``write(metrics, tags)`` is the store's ``log_batch`` for the run."""

    def __init__(
        self, write: Callable[[list, list], object], run_id: str, say: Callable[[str], None] | None = None
    ) -> None:
        self.run_id = run_id
        self._write = write
        self._say = say or (lambda line: print(f"autotune: {line}", file=sys.stderr, flush=True))
        self._queue: list[tuple[list, list]] = []  # epochs not written yet, in order
        self._cond = threading.Condition()
        self._closing = False
        self._failed: str | None = None  # the last failure, while the store fails
        self._in_force: str | None = None
        self._thread: threading.Thread | None = None  # started with the first epoch's figures

    def __call__(self, step: int, metrics: Mapping[str, float], values: Mapping[str, Any]) -> None:
        from mlflow.entities import Metric, RunTag

        figures = {**metrics, **{k: float(v) for k, v in values.items() if v is not None}}
        stamp = int(time.time() * 1000)
        now = " ".join(f"{k}={v}" for k, v in values.items())
        tags = [] if now == self._in_force else [RunTag("autotune.adapt", now)]
        self._in_force = now
        with self._cond:
            self._queue.append(([Metric(k, v, stamp, step) for k, v in figures.items()], tags))
            self._cond.notify()
            if self._thread is None and not self._closing:
                self._thread = threading.Thread(target=self._drain, name="autotune-production-log", daemon=True)
                self._thread.start()
                atexit.register(self.close)

    def flush(self, timeout: float = FLUSH_S) -> bool:
        """Wait (``timeout`` seconds at most) until every epoch logged so far is in the store;
        whether it is."""
        end = time.monotonic() + timeout
        with self._cond:
            while self._queue and self._thread is not None and self._thread.is_alive():
                if not self._cond.wait(min(0.05, max(0.0, end - time.monotonic()))) and time.monotonic() >= end:
                    break
            return not self._queue

    @property
    def pending(self) -> int:
        """Epochs queued and not written yet."""
        with self._cond:
            return len(self._queue)

    def _drain(self) -> None:
        wait = RETRY_S[0]
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                batch = self._queue[:EPOCHS_PER_CALL]
            try:
                self._write([m for metrics, _ in batch for m in metrics], [t for _, tags in batch for t in tags])
            except Exception as exc:
                cause = root_cause(exc)
                error = f"{type(cause).__name__}: {first_line(cause)}"
                if not transient(exc):  # the store refused these figures: waiting would not mend it
                    self._say(
                        f"adapt: MLflow refused {len(batch)} epoch(s) of figures ({error}); "
                        "they are dropped, training goes on"
                    )
                else:  # the store is down or restarting: keep them, try again later
                    if self._failed is None:
                        self._say(
                            f"adapt: logging to MLflow failed ({error}); "
                            "the figures wait in memory and go once it answers, training goes on"
                        )
                    self._failed = error
                    with self._cond:
                        if self._closing:
                            return
                        self._cond.wait(wait)
                    wait = min(RETRY_S[1], 2 * wait)
                    continue
            else:
                if self._failed is not None:  # what waited is written now
                    self._say("adapt: logging to MLflow works again; nothing was lost")
                    self._failed, wait = None, RETRY_S[0]
            with self._cond:
                del self._queue[: len(batch)]
                self._cond.notify_all()  # flush() waits on it

    def close(self, timeout: float = FLUSH_S) -> None:
        """Let the queued figures go (``timeout`` seconds at most), then stop the writer; what is
        left is counted on stderr."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        left = self.pending
        if left:
            self._say(
                f"adapt: {left} epoch(s) of figures were not logged to MLflow (run {self.run_id}): "
                f"{self._failed or 'the store did not answer in time'}"
            )


def production_log(tracking_uri: str | None, origin: str | None) -> ProductionLog | None:
    """With a tracking URI, an MLflow run for the production job (experiment
    ``autotune-production``, named after the recipe's origin) and its writer; None without one."""
    if not tracking_uri:
        return None
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name("autotune-production")
    experiment_id = experiment.experiment_id if experiment else client.create_experiment("autotune-production")
    run = client.create_run(
        experiment_id,
        run_name=f"production: {origin or 'the defaults'}",
        tags={"autotune.origin": origin or "the defaults"},
    )
    run_id = run.info.run_id
    return ProductionLog(lambda metrics, tags: client.log_batch(run_id, metrics=metrics, tags=tags), run_id)
