"""``exec_vs_python.py --startup``: what ``autotune exec`` adds to a run, in milliseconds, on a
script that trains 10 steps (``TRIVIAL``), against ``python`` on the same script, in turns.

Each turn runs ``python SCRIPT``, then ``autotune exec EXPORT SCRIPT`` of each tree (the checkout,
and ``--against``'s commit, extracted with ``git archive``), in an order that rotates, and reads
each process's wall time (spawn to exit), CPU time and minor page faults from ``os.wait4``. The
export is the script's own config as a study exports it, with a ``measured_on`` section for this
machine, so that exec's last line compares its run, as in production. Every run must print the
script's own line.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import ROOT, data_path, machine, write_section

TOPIC = "exec-vs-python"
#: torch, a DataLoader, an SGD optimizer, 10 steps: a run whose cost outside start-up is small.
TRIVIAL = """import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
loader = DataLoader(TensorDataset(torch.randn(160, 8), torch.randn(160, 1)), batch_size=16)
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final loss {loss.item():.6f}")
"""
#: The same steps taken by hand, as pytorch/examples' word_language_model does: no torch.optim
#: optimizer, so nothing of the script's imports torch._dynamo (an optimizer's first use does).
BY_HAND = TRIVIAL.replace("opt = torch.optim.SGD(model.parameters(), lr=0.05)\n", "").replace(
    "    opt.zero_grad()\n    loss.backward()\n    opt.step()\n",
    "    model.zero_grad()\n    loss.backward()\n    with torch.no_grad():\n"
    "        for p in model.parameters():\n            p.add_(p.grad, alpha=-0.05)\n",
)


def own_export(path: Path) -> None:
    """The script's own config, as a study of it exports it on this machine."""
    from autotune.core._knobs import KNOBS
    from autotune.machine._probe import probe
    from autotune.production._export import MEASURED_ON, render

    fp = dataclasses.asdict(probe("auto"))
    measured = {key: fp[key] for key in MEASURED_ON if fp.get(key) is not None}
    resolved = {**{name: knob.default for name, knob in KNOBS.items()}, "batch_size": 16}
    path.write_text(render(resolved, 16, ["the code as written"], {**measured, "run_s": 3.0, "winner_run_s": 3.0}))


def run_once(argv: list[str], env: dict[str, str], cwd: Path) -> dict:
    """One process: its wall and CPU ms, its minor page faults, what it printed on stdout."""
    with tempfile.TemporaryFile("w+") as out:
        began = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        took = time.perf_counter() - began
        out.seek(0)
        printed = out.read()
    if status:
        raise RuntimeError(f"{' '.join(argv)}: wait status {status}")
    cpu = usage.ru_utime + usage.ru_stime
    return {"wall_ms": took * 1000, "cpu_ms": cpu * 1000, "minflt": usage.ru_minflt, "stdout": printed}


def spread_ms(values: list[float]) -> str:
    return f"{statistics.median(values):.0f} ({min(values):.0f}..{max(values):.0f})"


def startup(turns: int, against: str | None, by_hand: bool = False, given: Path | None = None) -> None:
    """The turns, on ``TRIVIAL`` (``BY_HAND``), or on the ``given`` script (run without arguments,
    in a folder of its own, its output not compared: a public script may be unseeded)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        script, export = folder / (given.name if given else "trivial.py"), folder / "own.yaml"
        script.write_text(given.read_text() if given else BY_HAND if by_hand else TRIVIAL)
        own_export(export)
        trees = {"exec": ROOT}
        if against:
            tree = folder / against
            tree.mkdir()
            archive = subprocess.run(["git", "archive", against, "autotune"], cwd=ROOT, capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
            trees[f"exec@{against}"] = tree
        base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        base.update(MLFLOW_DISABLE_TELEMETRY="true", PYTHONPYCACHEPREFIX=str(folder / "pyc"))
        commands = {"python": ([sys.executable, str(script)], base)}
        for name, tree in trees.items():
            argv = [sys.executable, "-m", "autotune", "exec", str(export), str(script)]
            commands[name] = (argv, {**base, "PYTHONPATH": str(tree)})
        for argv, env in commands.values():  # (compiles each tree's modules; not timed)
            run_once(argv, env, folder)
        found: dict[str, list[dict]] = {name: [] for name in commands}
        loads = []
        names = list(commands)
        for turn in range(turns):
            for name in names[turn % len(names) :] + names[: turn % len(names)]:
                found[name].append(run_once(*commands[name], folder))
            loads.append(os.getloadavg()[0])
            print(f"turn {turn + 1}/{turns}: load {loads[-1]:.1f}", flush=True)
    report(found, loads, turns, against, by_hand, given)


def report(
    found: dict[str, list[dict]], loads: list[float], turns: int, against: str | None, by_hand: bool, given: Path | None
) -> None:
    plain = found["python"]
    differs = [n for n, runs in found.items() if any(r["stdout"] != p["stdout"] for r, p in zip(runs, plain))]
    same = "not compared (a script of its own)" if given else "no, " + ", ".join(differs) if differs else "yes"
    what = (
        f"`{given.name}` (run without arguments)"
        if given
        else f"a 10-step script{' stepping by hand, no torch.optim optimizer' if by_hand else ''}"
    )
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    lines = [
        f"Machine: {machine()}. Commit {commit.stdout.strip()}; load average (1 min) over the turns "
        f"{statistics.median(loads):.1f} ({min(loads):.1f}..{max(loads):.1f}).",
        "",
        f"`python benchmarks/exec_vs_python.py --startup --turns {turns}"
        + (f" --against {against}" if against else "")
        + (" --by-hand" if by_hand else "")
        + (f" --script {given}`" if given else "`")
        + f": {what}, {turns} turns of `python SCRIPT` and `autotune exec EXPORT SCRIPT` "
        "(the script's own config, with this machine's `measured_on`), in a rotating order, each tree "
        "byte-compiled. Milliseconds: median (min..max); *over python*: each run less python's of its "
        f"turn. Same printed line in every run: {same}.",
        "",
        "| run | wall ms | CPU ms | wall over python | CPU over python | page faults |",
        "|---|---|---|---|---|---|",
    ]
    for name, runs in found.items():
        over_wall = [r["wall_ms"] - p["wall_ms"] for r, p in zip(runs, plain)]
        over_cpu = [r["cpu_ms"] - p["cpu_ms"] for r, p in zip(runs, plain)]
        lines.append(
            f"| {name} | {spread_ms([r['wall_ms'] for r in runs])} | {spread_ms([r['cpu_ms'] for r in runs])} | "
            + ("" if name == "python" else f"**{spread_ms(over_wall)}**")
            + " | "
            + ("" if name == "python" else f"**{spread_ms(over_cpu)}**")
            + f" | {statistics.median(r['minflt'] for r in runs):.0f} |"
        )
    body = "\n".join(lines)
    print(body)
    raw = {name: [{k: v for k, v in r.items() if k != "stdout"} for r in runs] for name, runs in found.items()}
    suffix = f"-{given.stem}" if given else "-by-hand" * by_hand
    data_path(TOPIC, "exec-startup" + suffix, ".json").write_text(json.dumps({"loads": loads, **raw}, indent=1))
    of = f" of {given.name}" if given else " of a script stepping by hand" if by_hand else ""
    write_section(TOPIC, f"Exec's start-up{of} ({datetime.datetime.now().strftime('%Y-%m-%d %H:%M')})", body)
