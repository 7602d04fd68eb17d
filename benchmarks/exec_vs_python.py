"""``autotune exec`` of a script's own config against ``python``, on one clock: what autotune
costs a production run that it changes nothing in.

For each case, a study of the script as it is, the baseline alone (``autotune run SCRIPT
--trials 1``: the study's whole run of the script as written, process start to exit), then its
export (every knob at the script's own value), and ``--turns`` runs each of ``python SCRIPT
ARGS`` and ``autotune exec EXPORT SCRIPT -- ARGS`` in turns (which goes first alternates), each
in a fresh folder and timed by a stopwatch around the process (``time.perf_counter`` from the
spawn to the exit, as a user waits). Each pair of runs must print the same lines (autotune's own
lines left out) and leave the same files, byte for byte.

The result per case: the medians, their ratio (``python / exec``: 1.00 is no cost) and the
geometric mean of the turns' ratios, which cancels the machine's drift between turns; and the
study's whole-run figure beside them, with the ratio ``autotune exec`` printed against it.

Writes the section ``Exec vs python (DATE)`` of ``results/exec-vs-python.md`` and the raw
figures to ``data/exec-vs-python/exec-vs-python.json``.

    python benchmarks/exec_vs_python.py                   # about 10 minutes on a 2-core CPU
    python benchmarks/exec_vs_python.py --turns 2 --cases harm-probe   # a smoke run

``--startup`` measures what exec adds to a run in milliseconds, on a 10-step script (``TRIVIAL``)
whose own start-up is python's: ``python SCRIPT`` against ``autotune exec`` of the checkout (and,
with ``--against COMMIT``, of that commit's ``autotune``), in turns; wall and CPU time from spawn to
exit (``os.wait4``), the differences to python's run of the same turn, and the minor page faults.
Every tree runs from byte-compiled modules (``PYTHONPYCACHEPREFIX``), as an installed wheel does:
with ``PYTHONDONTWRITEBYTECODE=1`` (this project's containers) an editable install compiles
autotune's modules at every start. Writes the section ``Exec's start-up (DATE TIME)``.

    python benchmarks/exec_vs_python.py --startup --turns 24 --against 074a92a
    python benchmarks/exec_vs_python.py --startup --turns 12 --against 074a92a --by-hand
    python benchmarks/exec_vs_python.py --startup --turns 16 --against HEAD --script PATH/TO/regression/main.py
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import ROOT, data_path, machine, spread, write_section

TOPIC = "exec-vs-python"
#: Each case: the script and its command line. The README's quickstart script as it is; a
#: plain script whose files only a normal exit finishes (a log never closed, a checkpoint a
#: thread saves); a loader-bound script with a test pass per epoch.
CASES = {
    "quickstart": (ROOT / "runners" / "mnist_script.py", []),
    "harm-probe": (ROOT / "tests" / "fixtures" / "scripts" / "harm_probe.py", ["--steps", "3000"]),
    "mnist-style": (
        ROOT / "tests" / "fixtures" / "scripts" / "mnist_style.py",
        ["--epochs", "4", "--train-size", "640", "--test-size", "200", "--read-ms", "3"],
    ),
}


def env() -> dict[str, str]:
    return {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "PYTHONPATH": str(ROOT)}


def timed(argv: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    """Seconds from the process's spawn to its exit, and what it printed."""
    cwd.mkdir(parents=True)
    began = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env(), capture_output=True, text=True)
    took = time.perf_counter() - began
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return took, done


def printed(done: subprocess.CompletedProcess) -> list[str]:
    """What a run printed, autotune's own lines left out."""
    return [line for line in (done.stdout + done.stderr).splitlines() if not line.startswith("autotune: ")]


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def study(case: str, script: Path, args: list[str], folder: Path) -> dict:
    """The baseline's study of the script; its whole run's figure and its export."""
    store = folder / f"store-{case}"
    command = [
        sys.executable,
        "-m",
        "autotune",
        "run",
        str(script),
        "--trials",
        "1",
        "--store",
        str(store),
        "--",
        *args,
    ]
    done = subprocess.run(command, cwd=folder, env=env(), capture_output=True, text=True)
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
    rows = json.loads(shown.stdout)["trials"]
    export = folder / f"{case}.yaml"
    exported = subprocess.run(
        [sys.executable, "-m", "autotune", "export", "--store", str(store), "-o", str(export)],
        cwd=folder,
        env=env(),
        capture_output=True,
        text=True,
    )
    if exported.returncode:  # (a baseline measured under others' load three times has no figure to export)
        raise RuntimeError(
            f"{case}: no export ({exported.returncode}): {exported.stderr.strip()}\n{done.stderr[-2000:]}"
        )
    return {"study_run_s": rows[0]["metrics"].get("run_s"), "export": str(export)}


def turns(case: str, script: Path, args: list[str], export: str, n: int, folder: Path) -> dict:
    """``n`` runs each of ``python`` and ``autotune exec``, in turns; each pair compared."""
    plain = [sys.executable, str(script), *args]
    execd = [sys.executable, "-m", "autotune", "exec", export, str(script), "--", *args]
    out: dict[str, list] = {"python": [], "exec": [], "exec_line": [], "differs": []}
    for turn in range(n):
        runs = {}
        for which in ("python", "exec") if turn % 2 == 0 else ("exec", "python"):
            where = folder / f"{case}-{turn}-{which}"
            took, done = timed(plain if which == "python" else execd, where)
            out[which].append(took)
            runs[which] = (printed(done), files(where))
            if which == "exec":
                out["exec_line"].append((done.stderr.strip().splitlines() or [""])[-1])
        if runs["python"][0] != runs["exec"][0]:
            out["differs"].append(f"turn {turn}: printed lines")
        if runs["python"][1] != runs["exec"][1]:
            out["differs"].append(f"turn {turn}: files {sorted(runs['python'][1])} vs {sorted(runs['exec'][1])}")
    ratios = [p / e for p, e in zip(out["python"], out["exec"])]
    out["ratio_median"] = statistics.median(out["python"]) / statistics.median(out["exec"])
    out["ratio_geomean"] = math.exp(statistics.fmean(math.log(r) for r in ratios))
    out["ratios"] = ratios
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=5, help="runs of each, python and exec, in turns")
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    parser.add_argument("--startup", action="store_true", help="exec's own start-up, in ms, on a 10-step script")
    parser.add_argument("--against", metavar="COMMIT", help="with --startup: also exec of this commit's autotune")
    parser.add_argument("--by-hand", action="store_true", help="with --startup: the script steps without torch.optim")
    parser.add_argument("--script", type=Path, help="with --startup: this script (run without arguments) instead")
    args = parser.parse_args()
    if args.startup:
        from _exec_startup import startup

        startup(args.turns, args.against, args.by_hand, args.script)
        return
    found = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for case in args.cases:
            script, argv = CASES[case]
            print(f"{case}: the study's baseline", flush=True)
            found[case] = study(case, script, argv, folder)
            found[case].update(turns(case, script, argv, found[case]["export"], args.turns, folder))
            f = found[case]
            print(
                f"  python {spread(f['python'], '.2f')} s, exec {spread(f['exec'], '.2f')} s: "
                f"{f['ratio_median']:.3f}x (turns' geometric mean {f['ratio_geomean']:.3f}x); "
                f"study {f['study_run_s']:.2f} s; differs: {f['differs'] or 'nothing'}",
                flush=True,
            )
    data_path(TOPIC, "exec-vs-python", ".json").write_text(json.dumps({"machine": machine(), **found}, indent=1))
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    lines = [
        f"Machine: {machine()}. Commit {commit}.",
        "",
        f"`python benchmarks/exec_vs_python.py --turns {args.turns}`: for each case the study's baseline "
        "(`autotune run SCRIPT --trials 1`) and its export, the script's own config; then "
        f"{args.turns} runs each of `python SCRIPT ARGS` and `autotune exec EXPORT SCRIPT -- ARGS`, in "
        "turns, each in a fresh folder, timed from its process's spawn to its exit. Seconds: median "
        "(min..max). *python / exec*: the medians' ratio, and the geometric mean of the turns' ratios.",
        "",
        "| case | python | `autotune exec` | python / exec | per turn | the study's whole run | "
        "same output and files |",
        "|---|---|---|---|---|---|---|",
    ]
    for case, f in found.items():
        script, argv = CASES[case]
        lines.append(
            f"| {case} (`{script.relative_to(ROOT)} {' '.join(argv)}`) | {spread(f['python'], '.2f')} | "
            f"{spread(f['exec'], '.2f')} | **{f['ratio_median']:.3f}x** | {f['ratio_geomean']:.3f}x | "
            f"{f['study_run_s']:.2f} s | {'yes' if not f['differs'] else '; '.join(f['differs'])} |"
        )
    lines.append("")
    for case, f in found.items():
        lines.append(f"{case}: `autotune exec`'s last line (its last run): `{f['exec_line'][-1]}`")
        lines.append("")
    body = "\n".join(lines)
    print(body)
    write_section(TOPIC, f"Exec vs python ({datetime.date.today().isoformat()})", body)


if __name__ == "__main__":
    main()
