"""A new local SQLite tracking store starts as a copy of an empty one, already migrated.

MLflow makes a new SQLite store by running every one of its schema migrations (alembic):
about 2.2 s of CPU and of wall time on the 2-core CI machine, a 2-trial study's tuner 7.7
CPU-seconds against 5.5 with the copy (benchmarks/results/overhead.md). The empty, migrated database is the same for every
store of one MLflow version, so it is made once, kept in the user's cache folder, and
copied: MLflow then finds its tables at the current revision and only adds its default
experiment, with this store's own artifact root.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

#: Overrides the cache folder (default ``$XDG_CACHE_HOME/autotune``, else ``~/.cache/autotune``).
CACHE_ENV = "AUTOTUNE_CACHE_DIR"


def cache_dir() -> Path:
    """Where autotune keeps what it can make again (the empty tracking store)."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "autotune"


def sqlite_path(uri: str) -> Path | None:
    """The file of a ``sqlite:///`` URI (``sqlite:////abs/x.db`` or ``sqlite:///rel.db``), or None
    for any other URI, an in-memory database or one with query options."""
    prefix = "sqlite:///"
    if not uri.startswith(prefix) or "?" in uri:
        return None
    path = uri[len(prefix) :]
    return None if not path or path == ":memory:" else Path(path)


def seed_store(uri: str) -> bool:
    """Put an empty, migrated MLflow database at ``uri``'s file if it has none yet; whether it did.

    Tuners starting together on one new store race to create it: the first link wins
    and the others find its file (``os.link`` never replaces one). Anything that fails
    here leaves the file absent, and MLflow makes it the slow way.
    """
    path = sqlite_path(uri)
    if path is None or path.exists() or not path.parent.is_dir():
        return False
    try:
        template = _template()
        staged = path.with_name(f".{path.name}.{os.getpid()}.staged")
        shutil.copyfile(template, staged)
        try:
            os.link(staged, path)
        finally:
            staged.unlink()
    except (OSError, ImportError, AttributeError):  # a read-only cache, a changed MLflow: its own way
        return False
    return True


def _template() -> Path:
    """The cached empty database of the installed MLflow, made on first use."""
    import mlflow

    folder = cache_dir()
    template = folder / f"mlflow-{mlflow.__version__}-empty.db"
    if template.is_file():
        return template
    folder.mkdir(parents=True, exist_ok=True)
    staged = folder / f".{template.name}.{os.getpid()}.staged"
    with contextlib.suppress(FileNotFoundError):
        staged.unlink()
    import sqlalchemy
    from mlflow.store.db.utils import _initialize_tables  # what SqlAlchemyStore runs on an empty database

    engine = sqlalchemy.create_engine(f"sqlite:///{staged}")
    try:
        _initialize_tables(engine)
    finally:
        engine.dispose()
    os.replace(staged, template)  # whole or not at all, whoever else makes it at the same time
    return template
