"""A new local tracking store starts as a copy of an empty, migrated one (autotune.stores._schema): real
MLflow, real SQLite files in a temporary folder."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from autotune.stores._schema import CACHE_ENV, seed_store, sqlite_path
from autotune.stores._tracking import Tracker


@pytest.mark.parametrize(
    ("uri", "path"),
    [
        ("sqlite:////tmp/a/mlflow.db", "/tmp/a/mlflow.db"),
        ("sqlite:///mlflow.db", "mlflow.db"),
        ("sqlite:///:memory:", None),
        ("sqlite:///x.db?timeout=5", None),  # options MLflow passes on: its own way
        ("postgresql://u@h/db", None),
        ("http://127.0.0.1:5000", None),
    ],
)
def test_only_a_file_of_sqlite_is_seeded(uri: str, path: str | None) -> None:
    assert sqlite_path(uri) == (None if path is None else Path(path))


def test_a_seeded_store_is_one_mlflow_uses_with_its_own_default_experiment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    uri = f"sqlite:///{tmp_path}/store/mlflow.db"
    (tmp_path / "store").mkdir()
    assert seed_store(uri)
    assert list((tmp_path / "cache").glob("mlflow-*-empty.db"))  # kept for the next store
    assert not seed_store(uri)  # never over a store that exists
    tracker = Tracker(uri, tmp_path / "artifacts")
    experiment = tracker.experiment("s")
    run = tracker.parent_run(experiment, None, {"autotune.study": "s"})
    assert tracker.client.get_run(run).data.tags["autotune.study"] == "s"
    rows = (
        sqlite3.connect(tmp_path / "store" / "mlflow.db")
        .execute("select name from experiments order by experiment_id")
        .fetchall()
    )
    assert rows == [("Default",), ("s",)]  # the template held no experiment of another store


def test_a_store_that_appeared_meanwhile_is_kept_and_no_staged_file_is_left(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    db = tmp_path / "mlflow.db"
    real_link = os.link

    def another_tuner_first(src, dst):  # another tuner linked its copy between the check and the link
        Path(dst).write_bytes(b"theirs")
        return real_link(src, dst)

    monkeypatch.setattr(os, "link", another_tuner_first)
    assert not seed_store(f"sqlite:///{db}")
    assert db.read_bytes() == b"theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "mlflow.db"]


def test_a_cache_that_cannot_be_written_leaves_the_store_to_mlflow(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "file" / "cache"))  # under a file: mkdir fails
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    assert not seed_store(uri)
    assert not (tmp_path / "mlflow.db").exists()
    Tracker(uri, tmp_path / "artifacts").experiment("s")  # MLflow migrates it itself
    assert (tmp_path / "mlflow.db").stat().st_size > 0
