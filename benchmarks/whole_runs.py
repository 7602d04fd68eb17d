"""Short plain scripts, tuned whole and run with their export: what a user waits for.

Two unmodified scripts whose whole training takes a few seconds as written
(``tests/fixtures/scripts/mnist_style.py``: argparse, a DataLoader, a log line per interval, a
test pass per epoch):

- **loader-bound**: each item read in ``--read-ms`` (3 ms: storage), so DataLoader workers can
  win several-fold even on two cores;
- **compute-bound**: the same script reading from memory (``--read-ms 0``) through a wider
  hidden layer (``--hidden 2048``) at a batch of 512, where no knob should win;
- **compute, batch 64**: the same at the script's batch of 64, where a larger batch computes
  faster and ranks on its time to the baseline's loss.

For each, a study with the default space (``autotune run SCRIPT --trials N -- ARGS``, its own
store): every trial must rank (no "short measure", no ``NotTunable``); then ``python SCRIPT
ARGS`` and ``autotune exec EXPORT SCRIPT -- ARGS`` in turns (which first alternates), each timed
by a stopwatch around the process (start to exit, as a user waits): medians and min..max.

Writes the section ``Whole runs (DATE)`` of ``results/whole-runs.md`` and the raw figures to
``data/whole-runs/whole-runs.json``.

    python benchmarks/whole_runs.py                    # about 8 minutes on a 2-core CPU
    python benchmarks/whole_runs.py --trials 4 --turns 2   # a smoke run
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import ROOT, data_path, machine, spread, write_section

TOPIC = "whole-runs"
SCRIPT = ROOT / "tests" / "fixtures" / "scripts" / "mnist_style.py"
#: Each case's command line, 4 epochs with a test pass after each: 10 batches of 64 items read in
#: 3 ms each; 12 batches of 512 from memory through a hidden layer of 2,048 (about 0.25 s a step
#: here: a larger batch computes no faster a sample); and the same at the script's batch of 64,
#: where a larger one does, and ranks on its time to the baseline's loss.
CASES = {
    "loader-bound": ["--epochs", "4", "--train-size", "640", "--test-size", "200", "--read-ms", "3"],
    "compute-bound": [
        "--epochs",
        "4",
        "--train-size",
        "6400",
        "--test-size",
        "500",
        "--read-ms",
        "0",
        "--hidden",
        "2048",
        "--batch-size",
        "512",
    ],
    "compute, batch 64": [
        "--epochs",
        "4",
        "--train-size",
        "3200",
        "--test-size",
        "500",
        "--read-ms",
        "0",
        "--hidden",
        "2048",
    ],
}


def env() -> dict[str, str]:
    return {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "PYTHONPATH": str(ROOT)}


def timed(argv: list[str], cwd: Path) -> tuple[float, str]:
    """Seconds from the process's start to its exit, and its stderr's last line."""
    began = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env(), capture_output=True, text=True)
    took = time.perf_counter() - began
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return took, (done.stderr.strip().splitlines() or [""])[-1]


def study(case: str, args: list[str], trials: int, folder: Path) -> dict:
    """The case's study; what it found, as ``show --json`` gives it, and its export."""
    store = folder / "".join(c if c.isalnum() else "-" for c in case)
    command = [
        sys.executable,
        "-m",
        "autotune",
        "run",
        str(SCRIPT),
        "--trials",
        str(trials),
        "--store",
        str(store),
        "--seed",
        "0",
        "--",
        *args,
    ]
    began = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=env(), capture_output=True, text=True)
    took = time.perf_counter() - began
    (folder / f"{store.name}.out").write_text(done.stdout + done.stderr)
    if done.returncode:
        raise RuntimeError(f"{case}: the study failed ({done.returncode})\n{done.stderr[-3000:]}")
    shown = subprocess.run(
        [sys.executable, "-m", "autotune", "show", "--store", str(store), "--json"],
        cwd=folder,
        env=env(),
        capture_output=True,
        text=True,
        check=True,
    )
    found = json.loads(shown.stdout)
    rows = found["trials"]
    return {
        "seconds": took,
        "findings": found["findings"],
        "winner": found["winner"],
        "speedup": found["speedup"],
        "config": found["config"],
        "export": str(store / "exports" / "mnist_style.yaml"),
        "unranked": [
            f"{r['number']} {r['outcome']}: {r['doubt'] or r['reason']}"
            for r in rows
            if r["outcome"] == "complete"
            and r["doubt"]
            or "short measure" in (r["reason"] or "")
            or "NotTunable" in (r["reason"] or "")
        ],
        "run_s": {r["number"]: r["metrics"].get("run_s") for r in rows},
        "cost_line": next((line for line in (done.stderr.splitlines()) if "each trial" in line), None),
    }


def turns(args: list[str], export: str, n: int, folder: Path) -> dict[str, list[float]]:
    """``n`` runs each of the script as written and under ``autotune exec``, in turns."""
    plain = [sys.executable, str(SCRIPT), *args]
    execd = [sys.executable, "-m", "autotune", "exec", export, str(SCRIPT), "--", *args]
    out: dict[str, list] = {"plain": [], "exec": [], "exec_line": []}
    for turn in range(n):
        for which in ("plain", "exec") if turn % 2 == 0 else ("exec", "plain"):
            took, last = timed(plain if which == "plain" else execd, folder)
            out[which].append(took)
            if which == "exec":
                out["exec_line"].append(last)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--turns", type=int, default=5, help="runs of each, plain and exec, in turns")
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    args = parser.parse_args()
    found = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for case in args.cases:
            print(f"{case}: study of {args.trials} trials", flush=True)
            found[case] = study(case, CASES[case], args.trials, folder)
            print(f"  {found[case]['findings'][0]}", flush=True)
            found[case].update(turns(CASES[case], found[case]["export"], args.turns, folder))
            ratio = statistics.median(found[case]["plain"]) / statistics.median(found[case]["exec"])
            print(
                f"  plain {spread(found[case]['plain'], '.2f')} s, exec {spread(found[case]['exec'], '.2f')} s: "
                f"{ratio:.2f}x",
                flush=True,
            )
    data_path(TOPIC, "whole-runs", ".json").write_text(json.dumps({"machine": machine(), **found}, indent=1))
    lines = [
        f"Machine: {machine()}.",
        "",
        f"`python benchmarks/whole_runs.py --trials {args.trials} --turns {args.turns}`: for each case a study "
        f"of `{SCRIPT.relative_to(ROOT)}` with the default space, then {args.turns} runs each of the script as "
        "written and under `autotune exec` with the study's export, in turns, each timed from its process's "
        "start to its exit. Seconds: median (min..max).",
        "",
        "| case | study | ranked | exported | as written | `autotune exec` | plain / exec |",
        "|---|---|---|---|---|---|---|",
    ]
    for case, f in found.items():
        ranked = "every trial" if not f["unranked"] else f"not: {'; '.join(f['unranked'])}"
        config = (
            " ".join(
                f"{k}={v}"
                for k, v in f["config"].items()
                if k in ("batch_size", "num_workers", "persistent_workers", "prefetch_factor", "lr_scaling")
            )
            or "-"
        )
        ratio = statistics.median(f["plain"]) / statistics.median(f["exec"])
        lines.append(
            f"| {case} ({' '.join(CASES[case])}) | {f['seconds'] / 60:.1f} min | {ranked} | "
            f"trial {f['winner']}: {config} | {spread(f['plain'], '.2f')} | {spread(f['exec'], '.2f')} | "
            f"**{ratio:.2f}x** |"
        )
    lines.append("")
    for case, f in found.items():
        lines += [
            f"**{case}**: the study's summary:",
            "",
            "```",
            *f["findings"],
            "```",
            "",
            f"its cost line: `{f['cost_line']}`; `autotune exec`'s last line (its last run): `{f['exec_line'][-1]}`",
            "",
        ]
    body = "\n".join(lines)
    print(body)
    write_section(TOPIC, f"Whole runs ({datetime.date.today().isoformat()})", body)


if __name__ == "__main__":
    main()
