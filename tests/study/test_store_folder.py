"""A store folder that cannot take a study (full, read-only) is found before any trial, by the real CLI."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from autotune.stores._stores import MIN_FREE_BYTES, StoreDown, check_folder
from helpers import FIXTURES, autotune


@pytest.fixture
def tmpfs(tmp_path: Path):
    """Mounts a tmpfs (a real full or read-only disk) under tmp_path; needs root, else skips."""
    mounted = []

    def mount(name: str, options: str) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True, text=True
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(folder)
        return folder

    yield mount
    for folder in mounted:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_full_store_folder_is_found_before_any_trial(tmpfs, tmp_path: Path) -> None:
    tiny_tmpfs = tmpfs("small", "size=2m")
    assert MIN_FREE_BYTES > 2 * 2**20
    with pytest.raises(StoreDown, match=r"has 2 MiB free; a study needs 64 MiB or more"):
        check_folder(tiny_tmpfs / "mlflow", "the store folder x")
    assert not (tiny_tmpfs / "mlflow").exists()  # checked where it would be made, not made
    target = f"{FIXTURES / 'tiny_train.py'}:train"
    out = autotune("run", target, "--store", str(tiny_tmpfs / "mlflow"), "--trials", "1", cwd=tmp_path)
    assert out.returncode == 3, out.stderr
    assert "Traceback" not in out.stderr
    assert (
        out.stderr.strip()
        .splitlines()[-1]
        .startswith(f"autotune: stopped: the store folder {tiny_tmpfs / 'mlflow'} is unusable: ")
    )
    assert not (tiny_tmpfs / "mlflow" / "mlflow.db").exists()  # nothing half-made


def test_a_read_only_store_folder_is_found_before_any_trial(tmpfs, tmp_path: Path) -> None:
    if os.geteuid() == 0:  # root writes through permissions: a read-only mount is the real thing
        ro = tmpfs("ro", "ro,size=1m")
    else:
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
    with pytest.raises(StoreDown, match=r"cannot write in .*: \[Errno (30|13)\]"):
        check_folder(ro, "the store folder ro")
    target = f"{FIXTURES / 'tiny_train.py'}:train"
    out = autotune("run", target, "--store", str(ro), "--trials", "1", cwd=tmp_path, timeout=120)
    assert out.returncode == 3 and "Traceback" not in out.stderr, out.stderr
    assert "cannot write in" in out.stderr
