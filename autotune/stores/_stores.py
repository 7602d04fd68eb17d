"""Stores that blip: the study database and the tracking server restart, disks fill up.

A store that stops answering costs time, never a finished measurement:

- every call to either store is retried with backoff while the store has been
  failing for less than ``--store-patience`` (``Patience``; the Optuna storage is
  wrapped whole by ``patient_storage``, the MLflow client call by call);
- a trial's result is written to the store folder before either store is
  updated (``Spool``), and removed once both hold it: a tuner that stops on a
  dead store, or is killed midway, leaves it there, and the next tuner on the
  study replays it before anything else;
- a store still failing after the patience stops the tuner with one line naming
  the store and the command that resumes (``StoreDown``, exit status 3);
- a store folder that is read-only or full is found before the first trial
  (``check_folder``).

Only failures that waiting can mend are retried (connections, timeouts, a 5xx, a
locked or full disk); a refused write (a bad value, a finished trial) is raised
at once.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from autotune.core._config import ConfigError

#: Default seconds a store may keep failing before the tuner stops (exit 3).
STORE_PATIENCE_S = 300.0
#: Free bytes the store folder needs before a study starts: logs, artifacts, SQLite.
MIN_FREE_BYTES = 64 * 2**20
#: MLflow error codes a server answers with when it, or its database, is down for now.
TRANSIENT_CODES = frozenset(
    {"INTERNAL_ERROR", "TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED", "DEADLINE_EXCEEDED", "ENDPOINT_NOT_FOUND"}
)
#: OS errors that an operator can mend while the tuner waits.
TRANSIENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EIO, errno.EAGAIN})

T = TypeVar("T")


class StoreDown(RuntimeError):
    """A store kept failing past the patience: the tuner stops; nothing measured is lost.

    Attributes:
        store: What failed, as the user named it (``--storage URL``, ``tracking store URI``).
        why: The last error's first line.
    """

    def __init__(self, store: str, why: str, waited: float) -> None:
        self.store, self.why, self.waited = store, why, waited
        super().__init__(f"{store} has failed for {waited:.0f} s: {why}" if waited else f"{store} is unusable: {why}")


#: Characters of an error kept in a line: urllib3 nests the URL three times in one.
LINE_LIMIT = 200


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line if len(line) <= LINE_LIMIT else line[: LINE_LIMIT - 3] + "..."


def root_cause(exc: BaseException) -> BaseException:
    """The innermost cause: Optuna's RDB wraps a lost connection in "... exceeding max
    length", which would send a user the wrong way."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def transient(exc: BaseException) -> bool:
    """Whether waiting may mend ``exc`` (anywhere in its chain of causes)."""
    seen: BaseException | None = exc
    while seen is not None:
        kind = type(seen)
        names = {c.__name__ for c in kind.__mro__}
        if isinstance(seen, OSError) and (
            seen.errno in TRANSIENT_ERRNOS or isinstance(seen, (ConnectionError, TimeoutError))
        ):
            return True
        if names & {"OperationalError", "InterfaceError", "ConnectionError", "Timeout", "DisconnectionError"}:
            return True
        code = getattr(seen, "error_code", None)
        if "MlflowException" in names and (code in TRANSIENT_CODES or str(seen).startswith("API request to")):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class Patience:
    """Calls a store, retrying transient failures with backoff while the store has been
    failing for less than ``patience`` seconds (counted from its first failure, across
    calls: a store down for good costs the patience once, not once per call).

    Args:
        store: The store's name for messages.
        patience: Seconds of failing allowed.
        clock, sleep: Injected in tests.
    """

    def __init__(
        self,
        store: str,
        patience: float = STORE_PATIENCE_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        on_wait: Callable[[str], None] | None = None,
    ) -> None:
        self.store, self.patience = store, patience
        self._clock, self._sleep, self._on_wait = clock, sleep, on_wait
        self._failing_since: float | None = None

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        delay = 0.5
        while True:
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                if not transient(exc):
                    raise
                now = self._clock()
                if self._failing_since is None:
                    self._failing_since = now
                    if self._on_wait:
                        self._on_wait(
                            f"{self.store} does not answer ({first_line(root_cause(exc))}); "
                            f"retrying for up to {self.patience:.0f} s (--store-patience)"
                        )
                waited = now - self._failing_since
                if waited >= self.patience:
                    raise StoreDown(self.store, first_line(root_cause(exc)), waited) from exc
                self._sleep(min(delay, self.patience - waited))
                delay = min(delay * 2, 10.0)
                continue
            if self._failing_since is not None and self._on_wait:
                self._on_wait(f"{self.store} answers again after {self._clock() - self._failing_since:.0f} s")
            self._failing_since = None
            return result


#: The storage methods Optuna's ``BaseStorage`` declares (Optuna 5): all of them retried.
_STORAGE_METHODS = (
    "create_new_study",
    "delete_study",
    "set_study_user_attr",
    "set_study_system_attr",
    "get_study_id_from_name",
    "get_study_name_from_id",
    "get_study_directions",
    "get_study_user_attrs",
    "get_study_system_attrs",
    "get_all_studies",
    "create_new_trial",
    "set_trial_param",
    "get_trial_id_from_study_id_trial_number",
    "get_trial_number_from_id",
    "get_trial_param",
    "set_trial_state_values",
    "set_trial_intermediate_value",
    "set_trial_user_attr",
    "set_trial_system_attr",
    "get_trial",
    "get_all_trials",
    "get_n_trials",
    "get_best_trial",
    "get_trial_params",
    "get_trial_user_attrs",
    "get_trial_system_attrs",
    "check_trial_is_updatable",
)


def patient_storage(inner, patience: Patience):
    """``inner`` (an Optuna storage) with every call run through ``patience``."""
    from optuna.storages import BaseStorage

    def forward(name: str):
        def method(self, *args, **kwargs):
            return patience.call(getattr(inner, name), *args, **kwargs)

        method.__name__ = name
        return method

    namespace = {name: forward(name) for name in _STORAGE_METHODS}
    namespace["remove_session"] = lambda self: inner.remove_session()
    namespace["inner"] = inner
    return type("PatientStorage", (BaseStorage,), namespace)()


def check_folder(folder: Path, store: str) -> None:
    """Fail before the first trial if ``folder`` cannot take a study's files.

    Raises:
        StoreDown: it is read-only, not a folder, or has under ``MIN_FREE_BYTES`` free.
    """
    existing = folder.absolute()
    while not existing.exists():  # checked where it would be made: nothing is created here
        existing = existing.parent
    try:
        probe = existing / f".autotune-write-check-{os.getpid()}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        raise StoreDown(store, f"cannot write in {existing}: {first_line(exc)}", 0.0) from None
    free = shutil.disk_usage(existing).free
    if free < MIN_FREE_BYTES:
        raise StoreDown(
            store,
            f"{existing} has {free / 2**20:.0f} MiB free; a study needs {MIN_FREE_BYTES / 2**20:.0f} MiB or more",
            0.0,
        )


class Spool:
    """Trial results written to the store folder (``STORE/pending``) before the stores get them.

    One JSON file per trial (``<folder>/<study>/trial-<n>.json``), written whole
    (a temporary file renamed) so a kill never leaves half of one.
    """

    def __init__(self, folder: Path, study: str) -> None:
        self.folder = folder / study

    def write(self, number: int, record: dict[str, Any]) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"trial-{number}.json"
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(record))
        with open(temporary, "rb") as f:
            os.fsync(f.fileno())
        temporary.replace(path)
        return path

    def all(self) -> list[tuple[Path, dict[str, Any]]]:
        """Every pending result, oldest trial first."""
        if not self.folder.is_dir():
            return []
        paths = sorted(self.folder.glob("trial-*.json"), key=lambda p: int(p.stem.split("-")[1]))
        return [(p, json.loads(p.read_text())) for p in paths]

    @staticmethod
    def done(path: Path) -> None:
        path.unlink(missing_ok=True)


def _rdb_storage(url: str, engine_kwargs: dict[str, Any] | None, attempts: int = 5):
    """Optuna's RDB storage; tuners starting together on a new database race through its
    schema creation (a duplicate key in ``alembic_version``): the losers retry once the
    winner's tables are there."""
    import optuna
    import sqlalchemy.exc

    for attempt in range(attempts - 1):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError):
            time.sleep(0.5 + attempt)
    return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)


#: How to get the driver SQLAlchemy picks for a plain URL of each backend.
DRIVER_HINTS = {"postgresql": "pip install 'autotune[postgres]'"}


def open_storage(
    store: Path, url: str | None, patience: float | None = None, on_wait: Callable[[str], None] | None = None
):
    """An Optuna storage: ``url`` (an RDB URL, or a journal file), else a journal in ``store``.

    Nothing is created when the URL is bad or its driver is missing. With
    ``patience``, every call that fails for want of the database (a restart, a
    full disk) is retried for up to that many seconds (``autotune.stores._stores``).

    Raises:
        ConfigError: naming the storage (password hidden) when it cannot be opened or reached.
    """
    import optuna
    from optuna.storages.journal import JournalFileBackend

    shown = url
    try:
        if url and "://" in url:
            from sqlalchemy.engine import make_url

            parsed = make_url(url)
            shown = parsed.render_as_string(hide_password=True)
            try:
                parsed.get_dialect().import_dbapi()
            except ImportError as exc:
                hint = DRIVER_HINTS.get(parsed.get_backend_name(), f"install a driver for {parsed.drivername}")
                raise ConfigError(
                    f"--storage {shown!r}: the database driver is not installed ({exc}); {hint}"
                ) from None
            # A server that does not answer should fail in seconds, not hang the tuner; a
            # pooled connection that a server restart broke is replaced, not used.
            kwargs = (
                {"connect_args": {"connect_timeout": 10}, "pool_pre_ping": True}
                if parsed.get_backend_name() in ("postgresql", "mysql")
                else None
            )
            storage = _rdb_storage(url, kwargs)
        else:
            path = Path(url) if url else store / "optuna.journal"
            shown = str(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            storage = optuna.storages.JournalStorage(JournalFileBackend(str(path)))
        if patience is None:
            return storage
        return patient_storage(storage, Patience(f"the study storage {shown}", patience, on_wait=on_wait))
    except ConfigError:
        raise
    except Exception as exc:  # every failure here means: no study can start
        raise ConfigError(f"--storage {shown!r}: cannot be opened: {first_line(exc)}") from None
