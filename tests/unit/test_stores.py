"""Stores that blip (autotune.stores._stores): which failures are waited out, for how long, and results spooled until both stores hold them. The real outages are in tests/study/test_many_tuners.py."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import pytest

from autotune.stores._stores import Patience, Spool, StoreDown, patient_storage, transient


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def chained(outer: Exception, cause: BaseException) -> Exception:
    try:
        raise outer from cause
    except Exception as exc:  # noqa: BLE001 - the chained exception itself is the value
        return exc


def mlflow_error(message: str, code: str):
    from mlflow.exceptions import MlflowException
    from mlflow.protos import databricks_pb2

    return MlflowException(message, error_code=getattr(databricks_pb2, code))


@pytest.mark.parametrize(
    "exc, waits",
    [
        (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), True),
        (OSError(errno.ENOSPC, "No space left on device"), True),
        (OSError(errno.EROFS, "Read-only file system"), True),
        (FileNotFoundError(errno.ENOENT, "no such file"), False),
        (sqlite3.OperationalError("database or disk is full"), True),
        (ValueError("bad value"), False),
        (KeyError("x"), False),
    ],
)
def test_what_waiting_can_mend(exc, waits) -> None:
    assert transient(exc) is waits


def test_mlflow_and_optuna_errors_are_judged_by_their_cause() -> None:
    import optuna
    import sqlalchemy.exc

    # the REST client's wording for a server that does not answer
    assert transient(mlflow_error("API request to http://127.0.0.1:5/api failed with exception ...", "INTERNAL_ERROR"))
    assert transient(mlflow_error("server's database is down", "TEMPORARILY_UNAVAILABLE"))
    assert not transient(mlflow_error("Experiment 'x' already exists", "RESOURCE_ALREADY_EXISTS"))
    assert not transient(mlflow_error("Changing param values is not allowed", "INVALID_PARAMETER_VALUE"))
    # Optuna's RDB wraps every SQLAlchemy error the same way ("exceeding max length"): the cause decides
    down = sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("server closed the connection"))
    assert transient(chained(optuna.exceptions.StorageInternalError("... exceeding max length ..."), down))
    wrapped = chained(optuna.exceptions.StorageInternalError("... exceeding max length ..."), down)
    clock = Clock()
    calls = iter([wrapped] * 100)

    def failing():
        raise next(calls)

    # the message names what really happened, not Optuna's guess
    with pytest.raises(StoreDown, match=r"has failed for 1 s: \(builtins.Exception\) server closed the connection$"):
        Patience("the study storage s", 1, clock=clock, sleep=clock.sleep).call(failing)
    too_long = sqlalchemy.exc.DataError("INSERT", {}, Exception("value too long"))
    assert not transient(chained(optuna.exceptions.StorageInternalError("..."), too_long))
    assert not transient(optuna.exceptions.UpdateFinishedTrialError("finished"))


def test_patience_retries_with_backoff_and_stops_after_it() -> None:
    clock, calls, said = Clock(), [], []

    def down():
        calls.append(clock.now)
        raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")

    patience = Patience("the tracking store http://x", 30, clock=clock, sleep=clock.sleep, on_wait=said.append)
    with pytest.raises(
        StoreDown,
        match=r"^the tracking store http://x has failed for 30 s: \[Errno 111\] "
        r"Connection refused$",
    ):
        patience.call(down)
    # backoff 0.5, 1, 2, 4, 8, 10, then what is left of the 30 s
    assert [round(b - a, 1) for a, b in zip(calls, calls[1:])] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 4.5]
    assert said == [
        "the tracking store http://x does not answer ([Errno 111] Connection refused); "
        "retrying for up to 30 s (--store-patience)"
    ]
    # still down on the next call: the patience is spent already, no second 30 s
    before = clock.now
    with pytest.raises(StoreDown):
        patience.call(down)
    assert clock.now == before


def test_patience_gets_through_an_outage_shorter_than_it() -> None:
    clock, said = Clock(), []
    outage_ends = 12.0

    def flaky():
        if clock.now < outage_ends:
            raise OSError(errno.ENOSPC, "No space left on device")
        return "written"

    patience = Patience("the study storage s", 300, clock=clock, sleep=clock.sleep, on_wait=said.append)
    assert patience.call(flaky) == "written"
    assert said[-1] == "the study storage s answers again after 16 s"  # 0.5+1+2+4+8 >= 12
    assert patience.call(flaky) == "written"  # a later failure gets the whole patience again


def test_a_refused_write_is_not_retried() -> None:
    calls = []

    def refused():
        calls.append(1)
        raise ValueError("bad value")

    with pytest.raises(ValueError):
        Patience("s", 300, sleep=lambda s: pytest.fail("no wait for a refusal")).call(refused)
    assert calls == [1]


def test_the_optuna_storage_is_retried_call_by_call(tmp_path: Path) -> None:
    import optuna
    from optuna.storages.journal import JournalFileBackend

    inner = optuna.storages.JournalStorage(JournalFileBackend(str(tmp_path / "j")))
    clock = Clock()
    storage = patient_storage(inner, Patience("s", 300, clock=clock, sleep=clock.sleep))
    study = optuna.create_study(study_name="s", storage=storage)
    real, failures = inner.set_trial_user_attr, [OSError(errno.ENOSPC, "full")] * 2

    def blips(*args):
        if failures:
            raise failures.pop()
        return real(*args)

    inner.set_trial_user_attr = blips
    trial = study.ask()
    trial.set_user_attr("k", 1)
    assert study.trials[0].user_attrs == {"k": 1} and clock.now == 1.5  # waited 0.5 + 1


def test_pending_results_are_written_whole_and_read_oldest_first(tmp_path: Path) -> None:
    pending = Spool(tmp_path, "s")
    assert pending.all() == []
    for number in (10, 2):
        pending.write(number, {"number": number})
    assert [r["number"] for _, r in pending.all()] == [2, 10]
    assert not list((tmp_path / "s").glob("*.tmp"))
    pending.done(pending.all()[0][0])
    assert [r["number"] for _, r in pending.all()] == [10]
