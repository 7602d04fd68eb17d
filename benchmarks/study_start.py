"""What a study costs around its trials: a 2-trial study of ``tests/fixtures/tiny_train.py``
(each trial about a second of measuring), run in turns from each checkout given, on a store
seeded with an empty MLflow database (as the tests do).

Wall seconds of the whole ``autotune run``, and the CPU seconds of it and everything it waited
for (its warm workers and their trials), median (min..max) over the runs. Writes the section
``Study start-up`` of ``results/overhead.md`` and ``data/overhead/study-start.json``; with
``--new-store`` the tuner makes its store itself, as a user's first study does (section
``Study start-up on a new store``, ``data/overhead/study-start-new-store.json``).

    python benchmarks/study_start.py --runs 5 --repo /path/to/old/checkout --repo .
    python benchmarks/study_start.py --runs 5 --new-store --repo /path/to/old/checkout --repo .
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import ROOT, data_path, machine, spread, write_section

TOPIC = "overhead"
TARGET = ROOT / "tests" / "fixtures" / "tiny_train.py"
ARGS = [
    "--trials",
    "2",
    "--warmup",
    "0.2",
    "--window",
    "0.3",
    "--windows",
    "2",
    "--seed",
    "0",
    "--prune",
    "0",
    "--confirm",
    "0",
    "--max-load",
    "1",
    "--max-spread",
    "1000",
    "--space",
    "loader",
    "-q",
]


def empty_mlflow_db(folder: Path) -> Path:
    from mlflow import MlflowClient

    MlflowClient(tracking_uri=f"sqlite:///{folder}/mlflow.db").search_experiments()
    return folder / "mlflow.db"


def one_study(repo: Path, template: Path | None) -> tuple[float, float]:
    """Wall and CPU seconds of one study run from ``repo``'s package (its store seeded from
    ``template``, or made by the tuner)."""
    with tempfile.TemporaryDirectory() as work:
        if template is not None:
            (Path(work) / "mlflow").mkdir()
            shutil.copyfile(template, Path(work) / "mlflow" / "mlflow.db")
        env = {**os.environ, "PYTHONPATH": str(repo), "MLFLOW_DISABLE_TELEMETRY": "true"}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "autotune", "run", f"{TARGET}:train", *ARGS],
            cwd=work,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wall = time.perf_counter() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="studies per checkout, in turns")
    parser.add_argument("--repo", type=Path, action="append", help="a checkout to run (default: this one)")
    parser.add_argument("--new-store", action="store_true", help="each study makes its store (no seeded copy)")
    args = parser.parse_args()
    repos = [r.resolve() for r in args.repo or [ROOT]]
    with tempfile.TemporaryDirectory() as folder:
        template = None if args.new_store else empty_mlflow_db(Path(folder))
        seen: dict[str, list[tuple[float, float]]] = {str(r): [] for r in repos}
        for _ in range(args.runs):
            for repo in repos:
                seen[str(repo)].append(one_study(repo, template))
    commits = {
        str(r): subprocess.run(
            ["git", "-C", str(r), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        or "?"
        for r in repos
    }
    rows = [
        f"| {commits[r]} | {spread([w for w, _ in runs], '.1f')} | {spread([c for _, c in runs], '.1f')} |"
        for r, runs in seen.items()
    ]
    name, heading = (
        ("study-start-new-store", "Study start-up on a new store")
        if args.new_store
        else ("study-start", "Study start-up")
    )
    data_path(TOPIC, name, ".json").write_text(
        json.dumps(
            {"machine": machine(), "args": ARGS, "runs": {commits[r]: runs for r, runs in seen.items()}}, indent=1
        )
    )
    body = "\n".join(
        [
            f"Machine: {machine()}.",
            "",
            f"A 2-trial study of `tests/fixtures/tiny_train.py` (`autotune run ... {' '.join(ARGS)}`), "
            f"{args.runs} runs per checkout in turns, "
            + ("each making its MLflow store" if args.new_store else "a seeded MLflow store")
            + "; median (min..max).",
            "",
            "| commit | wall s | CPU s (with its workers) |",
            "|---|---|---|",
            *rows,
        ]
    )
    print(body)
    write_section(TOPIC, heading, body)


if __name__ == "__main__":
    main()
