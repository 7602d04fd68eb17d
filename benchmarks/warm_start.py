"""Warm start: what a second study of the same target in the same store reaches with 3 trials,
starting from the first study's top configs, against what the first reached with 12 (goal: at
least 95%), and against a third study of 3 trials that starts cold (``--warm-start off``).

Each study runs with the defaults (confirmation included) in one store folder, on
``--target`` (default: the I/O-bound loader of tests/fixtures/io_train.py, where the worker
count decides). Per study: the winner's speedup over its own baseline, as the summary says it
(medians of the confirmation runs), and the wall time. Writes the section ``Warm start (DATE)``
of ``results/warm-start.md`` and ``data/warm-start/warm-start.json``.

    python benchmarks/warm_start.py --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import ROOT, data_path, machine, spread, write_section

TOPIC = "warm-start"
DEFAULT_TARGET = f"{ROOT / 'tests' / 'fixtures' / 'io_train.py'}:train"


def study(store: Path, target: str, name: str, trials: int, warm: bool) -> dict:
    import optuna
    from optuna.storages.journal import JournalFileBackend

    from autotune.tuner._standing import read_standing

    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    began = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "autotune",
            "run",
            target,
            "--study",
            name,
            "--trials",
            str(trials),
            "--warm-start",
            "on" if warm else "off",
            "--profile",
            "off",
        ],
        cwd=store,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    wall = time.monotonic() - began
    if done.returncode != 0:
        raise SystemExit(f"study {name} failed:\n{done.stderr[-3000:]}")
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(store / "mlflow" / "optuna.journal")))
    standing = read_standing(optuna.load_study(study_name=name, storage=storage))
    win = standing.decision.winner
    said = [" ".join(line.split()) for line in done.stderr.splitlines() if line.startswith("warm start:")]
    return {
        "name": name,
        "trials": trials,
        "warm": warm,
        "wall_s": wall,
        "speedup": standing.speedup(win) if win is not None else 1.0,
        "winner": dict(standing.best.sampled) if standing.best is not None else {},
        "warm_line": said[0] if said else None,
        "kinds": [r.kind.value for r in standing.rows],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default=DEFAULT_TARGET)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--first-trials", type=int, default=12)
    parser.add_argument("--second-trials", type=int, default=3)
    args = parser.parse_args()
    runs = []
    for _i in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            store = Path(tmp)
            first = study(store, args.target, "first", args.first_trials, warm=False)
            warm = study(store, args.target, "warm", args.second_trials, warm=True)
            cold = study(store, args.target, "cold", args.second_trials, warm=False)
        runs.append({"first": first, "warm": warm, "cold": cold})
        print(json.dumps(runs[-1]), flush=True)
    raw = data_path(TOPIC, "warm-start", ".json")
    raw.write_text(json.dumps({"machine": machine(), "target": args.target, "runs": runs}, indent=1))
    reach = [100 * r["warm"]["speedup"] / r["first"]["speedup"] for r in runs]
    cold = [100 * r["cold"]["speedup"] / r["first"]["speedup"] for r in runs]
    rows = "\n".join(
        f"| {k} | {r[k]['trials']} | {r[k]['speedup']:.2f}x | {r[k]['wall_s']:.0f} s | "
        f"{' '.join(f'{a}={b}' for a, b in r[k]['winner'].items()) or 'the baseline'} |"
        for r in runs
        for k in ("first", "warm", "cold")
    )
    body = (
        f"Machine: {machine()}.\n\nCommand: `python benchmarks/warm_start.py --repeats {args.repeats}` "
        f"(target `{Path(args.target.split(':')[0]).relative_to(ROOT)}`); raw figures "
        f"`{raw.relative_to(ROOT / 'benchmarks')}`.\n\n"
        "| study | trials | winner's speedup | wall | winner |\n|---|---|---|---|---|\n"
        + rows
        + f"\n\nThe warm study reached **{spread(reach, '.0f')}%** of the first study's speedup with "
        f"{args.second_trials} trials against its {args.first_trials} (goal: at least 95%); the cold study "
        f"of {args.second_trials} trials {spread(cold, '.0f')}%."
        + (f" Its line: `{runs[-1]['warm']['warm_line']}`." if runs[-1]["warm"]["warm_line"] else "")
        + "\n"
    )
    write_section(TOPIC, f"Warm start ({time.strftime('%Y-%m-%d')})", body)
    print(body)


if __name__ == "__main__":
    main()
