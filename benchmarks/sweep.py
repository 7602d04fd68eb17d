"""Sweep: a default study of a latency-bound training function against a hand sweep of the same
training as a plain PyTorch loop. Writes the section ``Sweep (DATE HH:MM)`` of
``benchmarks/results/sweep.md`` (one per run, in the order they ran), and the raw figures to
``benchmarks/data/sweep/sweep-DATE-HHMM.json``.

The training: ``tests/fixtures/io_train.py``'s (4,096 items, each read waits 1 ms like a network
read; ``Linear(16, 2)``, SGD, batch 16 as written). Three parts:

1. **sweep**: the plain loop (``_io_loop.py``: PyTorch's DataLoader and loop, no autotune code)
   at every point of a grid, by default batch 64/128/256 x 32/64 persistent workers x
   prefetch_factor 2/4; each point ``--repeats`` times, a process each, the grid in a new random
   order each round; each measure ``--samples`` samples after a warmup of ``--warmup-samples``.
   The sweep's best: the best median.
2. **study**: ``autotune run tests/fixtures/io_train.py:train --trials 16`` (default space and
   budget) on a store of its own in a temporary folder; its winner, from its export, in the
   plain loop's terms (batch, workers, persistence, prefetch_factor, in_order, the transfer
   thread, amp, fused SGD, malloc_retain, the lr its scaling gives).
3. **turns**: the plain loop at the sweep's best point and at the study's winner, ``--turns``
   times in turns (which goes first alternates), so that the machine's drift falls on both.
   *share*: the winner's median over the sweep's best's. Goal: 95% or more.

The host's load is read two ways around every measure and part (``_host_load.py``): the 1-minute
load average (``/proc/loadavg``), which counts the benchmark's own processes (64 DataLoader
workers, the study's trials), and the share of the CPUs that processes outside the benchmark's
process tree used, which does not. That share over the study's own limit for a trial marks the
figures provisional.

    python benchmarks/sweep.py                      # 36 minutes on a loaded 2-core CPU (2026-11-29)
    python benchmarks/sweep.py --quick              # a smoke run: one point, a 2-trial study
    python benchmarks/sweep.py --batches 64 128 --workers 16 32 64 --prefetch-factors 2 4 8
    python benchmarks/sweep.py --from-json benchmarks/data/sweep/sweep-2026-11-29-1057.json   # a run's section again
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _host_load import foreign_since, load_average, provisional, reading
from _plain_sweep import CODE_BATCH, best_point, env, grid, label, measure, sweep, usable_cpus, winner_of
from _results import ROOT, data_path, spread, write_section

TOPIC = "sweep"
TARGET = f"{ROOT / 'tests' / 'fixtures' / 'io_train.py'}:train"
GOAL = 0.95
#: The two contenders of the turns.
BEST, WINNER = "sweep's best", "study winner"
#: ``--quick``: one point, one run of each, a 2-trial study, short runs (a smoke run; no page).
QUICK = {
    "batches": [64],
    "workers": [4],
    "prefetch_factors": [2],
    "repeats": 1,
    "turns": 1,
    "trials": 2,
    "samples": 2048,
    "warmup_samples": 512,
}


def study(trials: int, folder: Path) -> dict[str, Any]:
    """A default study of the fixture on a store of its own: what ``show --json`` says of it."""
    store = folder / "store"
    name = f"sweep-io-{datetime.datetime.now():%Y%m%d-%H%M}"
    began = time.monotonic()
    with open(folder / "study.log", "w") as log:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "autotune",
                "run",
                TARGET,
                "--trials",
                str(trials),
                "--study",
                name,
                "--store",
                str(store),
            ],
            check=False,
            cwd=folder,
            env=env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    wall = time.monotonic() - began
    printed = (folder / "study.log").read_text()
    if done.returncode:
        raise RuntimeError(f"the study failed ({done.returncode}):\n{printed[-3000:]}")
    shown = subprocess.run(
        [sys.executable, "-m", "autotune", "show", "--store", str(store), "--study", name, "--json"],
        cwd=folder,
        env=env(),
        capture_output=True,
        text=True,
        check=True,
    )
    from _spent import spent

    return {
        "name": name,
        "wall_s": wall,
        "printed_tail": printed.splitlines()[-40:],
        "spent": spent(store, name),
        **json.loads(shown.stdout),
    }


def in_turns(contenders: dict[str, dict[str, Any]], turns: int, samples: int, warmup: int) -> dict[str, list]:
    """Each contender once a turn, the order alternating."""
    runs: dict[str, list] = {name: [] for name in contenders}
    names = list(contenders)
    for turn in range(turns):
        for name in names if turn % 2 == 0 else names[::-1]:
            runs[name].append(measure(contenders[name], samples, warmup))
            print(
                f"turn {turn + 1}: {name}: {runs[name][-1]['samples_per_s']:,.0f} samples/s",
                file=sys.stderr,
                flush=True,
            )
    return runs


def share(runs: dict[str, list], winner: str = WINNER, best: str = BEST) -> dict[str, float]:
    """The winner's median over the best's, and the geometric mean of the turns' own ratios."""
    rate = {k: [r["samples_per_s"] for r in v] for k, v in runs.items()}
    ratios = [w / b for w, b in zip(rate[winner], rate[best])]
    return {
        "share": statistics.median(rate[winner]) / statistics.median(rate[best]),
        "per_turn_geomean": math.exp(statistics.fmean(math.log(r) for r in ratios)),
    }


def command(a: dict[str, Any]) -> str:
    """The command line that reproduces a run (indented: a code block on the page)."""
    return (
        f"    python benchmarks/sweep.py --batches {' '.join(map(str, a['batches']))} "
        f"--workers {' '.join(map(str, a['workers']))} "
        f"--prefetch-factors {' '.join(map(str, a['prefetch_factors']))} --repeats {a['repeats']} "
        f"--turns {a['turns']} --trials {a['trials']} --samples {a['samples']} "
        f"--warmup-samples {a['warmup_samples']}"
    )


def readings(raw: dict[str, Any]) -> list[float]:
    """Every 1-minute load average of a run: each part's ends, and before each measure."""
    ends = [x for part in raw["load"].values() for x in part]
    runs = [r["load_before"] for p in raw["sweep"] for r in p["runs"]]
    return ends + runs + [r["load_before"] for v in raw["turns"].values() for r in v]


def foreign_by_part(raw: dict[str, Any]) -> dict[str, list[float]]:
    """Each part's foreign shares (``_host_load``): the part's own, then each of its measures'."""
    measures = {
        "sweep": [r for p in raw["sweep"] for r in p["runs"]],
        "turns": [r for v in raw.get("turns", {}).values() for r in v],
    }
    return {
        part: [share, *(r["foreign"] for r in measures.get(part, []) if "foreign" in r)]
        for part, share in raw.get("foreign", {}).items()
    }


def loaded(raw: dict[str, Any]) -> str | None:
    """Why a run's figures are provisional (None: the host was quiet): the load other processes
    put on the CPUs during a measure (``_host_load.provisional``); for a run from before that
    was recorded, a 1-minute load average above the usable CPUs, which counts the benchmark's
    own processes too."""
    if "foreign" in raw:
        return provisional(foreign_by_part(raw))
    most = max(readings(raw))
    return f"a 1-minute load average of up to {most:.1f} on {raw['cpus']} CPUs" if most > raw["cpus"] else None


def rate(runs: list[dict[str, Any]]) -> list[float]:
    return [r["samples_per_s"] for r in runs]


def render(raw: dict[str, Any]) -> str:
    """The page's section of one run."""
    why = loaded(raw)
    return "\n".join(
        [*header(raw, why), "", *sweep_part(raw), "", *study_part(raw), "", *turns_part(raw, why is not None)]
    )


def header(raw: dict[str, Any], why: str | None) -> list[str]:
    ends = ", ".join(f"{part} {v[0]:.1f} -> {v[-1]:.1f}" for part, v in raw["load"].items())
    before = [r["load_before"] for p in raw["sweep"] for r in p["runs"]]
    changed = raw["autotune_changed"]
    others = f", with {len(changed)} files under autotune/ changed in the working tree by others" if changed else ""
    foreign = foreign_by_part(raw)
    outside = (
        " Share of the CPUs used by processes outside the benchmark's own process tree (its plain "
        "loops and their workers, the study and its trials), over each part and (highest) over any "
        "of its measures: "
        + ", ".join(f"{part} {shares[0]:.0%} ({max(shares):.0%})" for part, shares in foreign.items())
        + "."
        if foreign
        else ""
    )
    state = (
        f" **Provisional: the host was loaded**: {why} (other engineers' tests, studies and benchmarks "
        "on the same cores); every figure here was taken under that load."
        if why
        else " The host was quiet."
    )
    return [
        f"Machine: {raw['machine']}. Commit {raw['commit']}{others}. Whole run {raw['wall_s'] / 60:.1f} min.",
        "",
        f"Host load (1-minute load average, which counts the benchmark's own processes, {raw['cpus']} usable "
        f"CPUs), at each part's start and end: {ends}; before the sweep's runs {min(before):.1f}..{max(before):.1f}."
        f"{outside}{state}",
        "",
        command(raw["args"]),
    ]


def sweep_part(raw: dict[str, Any]) -> list[str]:
    a = raw["args"]
    lines = [
        f"**Sweep** of the plain loop (`benchmarks/_io_loop.py`: PyTorch's DataLoader and loop over "
        f"`io_train.py`'s `SlowReads`, `Linear(16, 2)`, SGD, lr scaled linearly from batch {CODE_BATCH}); "
        f"each point {a['repeats']} runs, a process each, {a['samples']:,} samples timed after "
        f"{a['warmup_samples']:,}; samples/s median (min..max); {raw['sweep_wall_s'] / 60:.1f} min.",
        "",
        "| batch | workers (persistent) | prefetch_factor | samples/s |",
        "|---|---|---|---|",
    ]
    best = best_point(raw["sweep"])
    for p in raw["sweep"]:
        loader, cell = p["loader"], spread(rate(p["runs"]), ",.0f")
        cell = f"**{cell}** (best)" if p is best else cell
        lines.append(f"| {loader['batch_size']} | {loader['num_workers']} | {loader['prefetch_factor']} | {cell} |")
    return lines


def study_part(raw: dict[str, Any]) -> list[str]:
    from autotune.core._knobs import KNOBS

    a, st, winner = raw["args"], raw["study"], raw["contenders"][WINNER]
    speedup = f"{st['speedup']:.2f}x the code as written" if st.get("speedup") else "no speedup figure"
    lines = [
        f"**Study** `{st['name']}`: `autotune run tests/fixtures/io_train.py:train --trials {a['trials']}` "
        f"(default space and budget, a store of its own), {st['wall_s'] / 60:.1f} min. Its winner by its own "
        f"figure: {st['samples_per_s'] or 0:,.0f} samples/s ({speedup})"
        + ("; it exported no winner, so the turns run the code as written" if winner.get("no_export") else "")
        + f"; in the plain loop's terms: {label(winner)}, lr {winner['lr']:g}"
        + (f"; not carried to the plain loop: {', '.join(winner['untranslated'])}" if winner["untranslated"] else "")
        + ". It said:",
        "",
    ]
    lines += [f"- {line}" for line in st["findings"]]
    if "spent" in st:  # (a run from before it was recorded has none)
        from _spent import said

        lines += ["", f"Trials spent on a losing value: {said(st['spent'])}."]
    shown = ("batch_size", "num_workers", "persistent_workers", "prefetch_factor")
    lines += [
        "",
        "Its runs (knobs as they ran; samples/s as the study measured them; *not believed*: the "
        "study's own doubt, which keeps a figure out of its ranking):",
        "",
        "| trial | kind | batch | workers | persistent | prefetch_factor | other knobs set | samples/s | "
        "not believed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in st["trials"]:
        c = row["config"]
        other = ", ".join(f"{k}={v}" for k, v in c.items() if k not in shown and k in KNOBS and v != KNOBS[k].default)
        cells = [
            row["number"],
            row["kind"],
            *(c.get(k, "") for k in shown),
            other or "-",
            f"{row['samples_per_s'] or 0:,.0f}",
            row.get("doubt") or "-",
        ]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return lines


def turns_part(raw: dict[str, Any], loaded: bool) -> list[str]:
    lines = [
        f"**In turns**: each {raw['args']['turns']} runs, alternating which goes first; samples/s median (min..max).",
        "",
        "| config | plain loop | samples/s | share of the sweep's best |",
        "|---|---|---|---|",
    ]
    medians = {k: statistics.median(rate(v)) for k, v in raw["turns"].items()}
    for name, runs in raw["turns"].items():
        lines.append(
            f"| {name} | {label(raw['contenders'][name])} | {spread(rate(runs), ',.0f')} | "
            f"{medians[name] / medians[BEST]:.0%} |"
        )
    verdict = ("met" if raw["share"] >= GOAL else "NOT met") + (" (provisional: loaded host)." if loaded else ".")
    return [
        *lines,
        "",
        f"**Share: {raw['share']:.0%}** of the sweep's best (the turns' own ratios: geometric mean "
        f"{raw['per_turn_geomean']:.0%}); goal {GOAL:.0%}: {verdict}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--workers", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--prefetch-factors", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each sweep point")
    parser.add_argument("--turns", type=int, default=7, help="runs of each of the two, in turns")
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--samples", type=int, default=8 * 4096, help="timed samples of a run (8 epochs)")
    parser.add_argument("--warmup-samples", type=int, default=4096, help="untimed samples first (1 epoch)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: one point (batch 64, 4 workers), 1 repeat, a 2-trial study, 1 turn, "
        "short runs; writes no page",
    )
    parser.add_argument("--from-json", type=Path, help="render the page's section again from a run's raw figures")
    parser.add_argument("--resume-from", type=Path, help="a run's raw figures: what it lacks (the turns) is run")
    args = parser.parse_args()
    if args.from_json:
        raw = json.loads(args.from_json.read_text())
        write_section(TOPIC, heading(raw), render(raw))
        return
    if args.quick:
        vars(args).update(QUICK)
    raw = run(args)
    save(raw, args)  # (first: a page that fails to render is made again with --from-json)
    body = render(raw)
    print(body)
    if not args.quick:
        write_section(TOPIC, heading(raw), body)


def heading(raw: dict[str, Any]) -> str:
    """A run's section: named by when it started (by its date, for a run that kept only that)."""
    return f"Sweep ({raw.get('started', raw['date'])})"


def save(raw: dict[str, Any], args: argparse.Namespace) -> None:
    """The raw figures so far (after each part: a run that fails later keeps what it measured)."""
    if not args.quick:
        name = "sweep-" + raw["started"].replace(" ", "-").replace(":", "")
        data_path(TOPIC, name, ".json").write_text(json.dumps(raw, indent=1, default=str) + "\n")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from _results import machine

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], check=False, cwd=ROOT, capture_output=True, text=True
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "autotune"], check=False, cwd=ROOT, capture_output=True, text=True
    )
    raw: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "started": f"{datetime.datetime.now():%Y-%m-%d %H:%M}",
        "machine": machine(),
        "commit": commit.stdout.strip(),
        "autotune_changed": dirty.stdout.split("\n")[:-1],
        "cpus": usable_cpus(),
        "args": {k: v for k, v in vars(args).items() if k not in ("from_json", "resume_from")},
        "load": {},
    }
    began = time.monotonic()
    if args.resume_from:  # (a run that died after its study: its sweep and study, its turns again)
        raw = {**json.loads(args.resume_from.read_text()), "resumed": f"{datetime.datetime.now():%Y-%m-%d %H:%M}"}
        args = argparse.Namespace(**{**raw["args"], "quick": False})
        raw["wall_s_before"] = raw.get("sweep_wall_s", 0) + raw.get("study", {}).get("wall_s", 0)
    raw.setdefault("foreign", {})
    if "sweep" not in raw:
        raw["load"]["sweep"], start = [load_average()], reading()
        raw["sweep"] = sweep(
            grid(args.batches, args.workers, args.prefetch_factors), args.repeats, args.samples, args.warmup_samples
        )
        raw["load"]["sweep"].append(load_average())
        raw["foreign"]["sweep"] = foreign_since(start)
        raw["sweep_wall_s"] = time.monotonic() - began
        save(raw, args)
    if "study" not in raw:
        raw["load"]["study"], start = [load_average()], reading()
        with tempfile.TemporaryDirectory(prefix="sweep-study-") as tmp:
            raw["study"] = study(args.trials, Path(tmp))
        raw["load"]["study"].append(load_average())
        raw["foreign"]["study"] = foreign_since(start)
        save(raw, args)
    winner = winner_of(raw["study"].get("export"))
    best = best_point(raw["sweep"])
    raw["contenders"] = {BEST: {k: best[k] for k in ("loader", "lr")}, WINNER: winner}
    raw["load"]["turns"], start = [load_average()], reading()
    raw["turns"] = in_turns(raw["contenders"], args.turns, args.samples, args.warmup_samples)
    raw["load"]["turns"].append(load_average())
    raw["foreign"]["turns"] = foreign_since(start)
    raw.update(share(raw["turns"]))
    raw["wall_s"] = raw.get("wall_s_before", 0) + time.monotonic() - began
    return raw


if __name__ == "__main__":
    main()
