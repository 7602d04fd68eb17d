"""Repeat a whole tuning study and record what it buys: baseline vs best samples/s.

Each repeat is a fresh ``autotune run`` (new store, new study) through the real
CLI, so the figures include everything a user gets. Results are medians over the
repeats with their spread (min..max), with the machine named, written as a
Markdown section into ``benchmarks/RESULTS.md``.

    python benchmarks/study_speedup.py runners/jpeg.py:train --trials 12 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import ROOT, machine, spread, write_section


def one_study(target: str, trials: int, extra: list[str]) -> dict:
    """Run one fresh study; return its baseline, best and wall time."""
    from autotune._cli import _open_study
    from autotune._study import rows_of

    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "autotune", "run", str(ROOT / target.split(":")[0]) + ":"
                        + target.split(":")[1], "--trials", str(trials), "--store", str(store), *extra],
                       check=True, cwd=tmp, stdout=subprocess.DEVNULL,
                       env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
        wall = time.monotonic() - started
        rows, best = rows_of(_open_study(store, None, None))
    base = next(r for r in rows if r.baseline)
    changed = {k: v for k, v in best.config.items() if base.config.get(k) != v}
    return {"base": base.samples_per_s, "best": best.samples_per_s, "speedup": best.speedup,
            "wait_base": base.metrics["data_wait_frac"], "wait_best": best.metrics["data_wait_frac"],
            "trial": best.number, "config": changed, "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("extra", nargs="*", help="more `autotune run` arguments (after --)")
    args = parser.parse_args()
    results = []
    for i in range(args.repeats):
        results.append(one_study(args.target, args.trials, args.extra))
        print(f"repeat {i + 1}: {results[-1]}", file=sys.stderr)
    heading = f"`autotune run {args.target} --trials {args.trials}` {' '.join(args.extra)}".rstrip()
    lines = [
        f"Machine: {machine()}. {args.repeats} fresh studies; median (min..max).",
        "",
        "| baseline samples/s | best samples/s | speedup | data wait: baseline -> best | study wall time |",
        "|---|---|---|---|---|",
        f"| {spread([r['base'] for r in results], ',.1f')} | {spread([r['best'] for r in results], ',.1f')} "
        f"| {spread([r['speedup'] for r in results], '.2f')}x "
        f"| {statistics.median(r['wait_base'] for r in results):.0%} -> "
        f"{statistics.median(r['wait_best'] for r in results):.0%} "
        f"| {spread([r['wall'] for r in results], '.0f')} s |",
        "",
        "Best config of each study (knobs that differ from the baseline):",
        "",
        *[f"- study {i + 1}: trial {r['trial']}, {r['speedup']:.2f}x: "
          + ", ".join(f"{k}={v}" for k, v in r["config"].items()) for i, r in enumerate(results)],
        "",
    ]
    section = "\n".join(lines)
    write_section(heading, section)
    print(section)


if __name__ == "__main__":
    main()
