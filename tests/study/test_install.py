"""A normal, non-editable install: the wheel carries the shipped spaces and runs a study.

The wheel is built from this checkout and installed into a fresh virtual environment that
sees this environment's dependencies (torch, optuna, mlflow) but not its autotune: a
``.pth`` line adds this site-packages as a plain path, so its editable-install hooks do not
run and ``import autotune`` can only find the installed wheel.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from helpers import FIXTURES, ROOT, cli_env, load_study

FIXTURE = FIXTURES / "cli_train.py"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out, source = tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("source")
    # Built from a copy: setuptools writes build/ and *.egg-info beside the sources.
    for name in ("pyproject.toml", "README.md", "LICENSE", "autotune", "search_spaces"):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif (ROOT / name).exists():
            shutil.copy(ROOT / name, source / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    return next(out.glob("autotune-*.whl"))


def test_the_wheel_carries_the_shipped_spaces(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {p.stem for p in (ROOT / "search_spaces").glob("*.yaml")}
    assert shipped and {f"autotune/spaces/{name}.yaml" for name in shipped} <= set(names)


def test_an_installed_wheel_runs_a_study_with_a_shipped_space(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(env_dir), "platbase": str(env_dir)}))
    (site / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    python = env_dir / "bin" / "python"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr
    work = tmp_path / "work"
    work.mkdir()
    where = subprocess.run(
        [str(python), "-c", "import autotune; print(autotune.__file__)"],
        cwd=work,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.stdout.startswith(str(site)), where.stdout + where.stderr
    study = subprocess.run(
        [
            str(env_dir / "bin" / "autotune"),
            "run",
            f"{FIXTURE}:train",
            "--space",
            "loader",
            "--trials",
            "2",
            "--study",
            "installed",
            "--warmup",
            "0.2",
            "--window",
            "0.3",
            "--windows",
            "2",
            "--prune",
            "0",
            "--confirm",
            "0",
            "--max-load",
            "1",
            "--max-spread",
            "1000",
            "--whole-run",
            "0",
        ],
        cwd=work,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert study.returncode == 0, study.stdout + study.stderr
    trials = load_study(work / "mlflow", "installed").get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    assert trials[1].params  # drawn from the loader space
