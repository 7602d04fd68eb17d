"""The benchmark harness: what autotune buys, how close it gets to the machine's limits,
how fast its search gets there, and what the tuner itself costs.

One command regenerates five pages of ``benchmarks/results/`` on this machine, one per part
(``runners.md``, ``search.md``, ``overhead.md``, ``divergence.md``, ``watchdogs.md``: each part's
section is replaced, or appended at the page's end), with the raw figures and plots in
``benchmarks/data/<part>/``:

    python benchmarks/harness.py                  # every part (about 45 min on a 2-core CPU)
    python benchmarks/harness.py --only runners   # parts: runners search overhead divergence watchdogs
    python benchmarks/harness.py --only runners --runners mnist jpeg --results benchmarks/results/gpu.md

- **runners**: for each runner, a real study (``autotune run``, default budget and
  confirmation), then PyTorch's defaults, "all tricks on" and the study's winner,
  each run ``--repeats`` times in turns, with both ceilings measured in every run.
- **search**: on one small space, the exhaustive grid once and the tuner with
  several seeds: trials needed to come within 5% of the grid's best.
- **overhead**: the instrumentation's cost against the same loop uninstrumented,
  each trial's fixed cost (spawn, imports, set-up, teardown), and the run-to-run
  spread of one config.
- **divergence**, **watchdogs**: ``divergence.py`` and ``watchdogs.py``.

Figures are medians with (min..max) over repeats; the machine is named in each
section. Everything is also logged to MLflow in ``--store`` (experiment
``autotune-benchmarks``; the studies under their own names): ``autotune ui --store STORE``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _results import (
    DATA,
    HERE,
    RESULTS_ENV,
    ROOT,
    data_path,
    link,
    machine,
    one_trial,
    results_path,
    spread,
    write_section,
)
from autotune import Config
from autotune.core._ceilings import bottleneck, cpu_roof
from autotune.machine._launch import Budget

RUNNERS = ["mnist", "jpeg", "charlm"]
PARTS = ["runners", "search", "overhead", "divergence", "watchdogs"]  # each part's topic (page) too
#: The small space of the search-efficiency part (on the MNIST runner).
SEARCH_SPACE = HERE / "data" / "search" / "search_space.yaml"
SEARCH_RUNNER = "mnist"
#: A trial within this share of the grid's best counts as having found it.
NEAR_BEST = 0.95


def target(runner: str) -> str:
    return f"{ROOT / 'runners' / runner}.py:train"


def cli(*args: str, cwd: Path) -> None:
    """Run ``autotune`` as a user would (output to a log beside the store)."""
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    with open(cwd / "harness-cli.log", "a") as log:
        subprocess.run(
            [sys.executable, "-m", "autotune", *args],
            cwd=cwd,
            env=env,
            check=True,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def load(store: Path, name: str):
    import optuna

    from autotune.tuner._study import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=name, storage=open_storage(store, None))


def all_tricks() -> Config:  # type: ignore[valid-type]
    """Every trick on, where this machine has what it needs (doctor's capabilities)."""
    from autotune.machine._probe import probe, usable_cpus

    caps = probe("auto").capabilities
    return Config(
        num_workers=usable_cpus(),
        persistent_workers=True,
        prefetch_factor=4,
        pin_memory=True if caps["cuda"] else None,
        prefetch="cuda_stream" if caps["cuda"] else None,
        amp="bf16" if caps["bf16"] else None,
        fused_optimizer=True if caps["fused_optimizer"] else None,
        cudnn_benchmark=True if caps["cudnn"] else None,
        malloc_retain=True if caps["glibc_malloc"] else None,
    )


def measure(
    runner: str,
    config: Config,
    logs: Path,
    budget: Budget = Budget(),
    seed: int = 0,  # noqa: B008
    warm=None,
) -> dict[str, Any]:
    """One real trial (both ceilings measured, none known); its figures. ``warm``: the
    ``autotune.worker._warm.WarmWorker`` to fork it from, as a study does; None spawns it cold."""
    result = one_trial(target(runner), config, budget, logs, seed=seed, warm=warm)
    figures = dict(result.metrics)
    for entry in result.ceilings:
        figures[f"{entry['part']}_ceiling"] = entry["samples_per_s"]
        if "cpu_per_sample" in entry:
            figures[f"{entry['part']}_cpu_per_sample"] = entry["cpu_per_sample"]
            figures["cpus"] = entry["cpus"]
    roof = cpu_roof(figures.get("compute_cpu_per_sample"), figures.get("loader_cpu_per_sample"), figures.get("cpus"))
    if roof:
        figures["cpu_roof"] = roof
    return figures


def med(runs: list[dict[str, Any]], key: str) -> float | None:
    """The median of a figure over runs; None where a run lacks it (a ceiling not measured)."""
    values = [r.get(key) for r in runs]
    return statistics.median(values) if values and None not in values else None


def cell(runs: list[dict[str, Any]], key: str) -> str:
    """A table cell: median (min..max) of a figure, or why it is missing."""
    return spread([r[key] for r in runs], ",.0f") if med(runs, key) is not None else "not measured"


def changed(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items()) or "(none: the code as written)"


# -- runners ------------------------------------------------------------------------------


def runners_part(args: argparse.Namespace) -> list[dict[str, Any]]:
    from autotune.tuner._standing import findings, read_standing

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M")
    logs = args.store / "harness-logs"
    logs.mkdir(parents=True, exist_ok=True)
    results = []
    for runner in args.runners:
        name = f"bench-{runner}-{stamp}"
        started = time.monotonic()
        cli(
            "run",
            target(runner),
            "--trials",
            str(args.trials),
            "--study",
            name,
            "--store",
            str(args.store.resolve()),
            cwd=args.store,
        )
        wall = time.monotonic() - started
        standing = read_standing(load(args.store, name))
        rows = [r for r in standing.rows if r.samples_per_s]
        configs = {
            "PyTorch defaults": Config(),
            "all tricks on": all_tricks(),
            f"tuned ({args.trials} trials)": Config(**standing.best.sampled),
        }
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label in configs}
        for turn in range(args.repeats):  # in turns: a slow drift of the machine hits all alike
            for label, config in configs.items():
                runs[label].append(measure(runner, config, logs, seed=turn))
                print(
                    f"{runner} {label} run {turn + 1}: {runs[label][-1]['samples_per_s']:,.0f} samples/s",
                    file=sys.stderr,
                )
        results.append(
            {
                "runner": runner,
                "study": name,
                "wall": wall,
                "trials": len(standing.rows),
                "findings": findings(standing),
                "configs": {k: v.set_values() for k, v in configs.items()},
                "runs": runs,
                "overhead": [r.metrics.get("overhead_s") for r in rows if r.metrics.get("overhead_s")],
            }
        )
    # Every run's figures, so the table can be rendered again (--from-json) without re-measuring.
    raw = {"machine": machine(), "trials": args.trials, "repeats": args.repeats, "results": results}
    data_path("runners", f"runners-{'-'.join(args.runners)}", ".json").write_text(
        json.dumps(raw, indent=1, default=str) + "\n"
    )
    write_runners(results, args)
    return results


def write_runners(results: list[dict[str, Any]], args: argparse.Namespace, where: str | None = None) -> None:
    lines = [
        f"Machine: {where or machine()}. Each config run {args.repeats} times in turns, default budget "
        "(1 s warmup, 4 windows of 1.5 s), both ceilings measured in every run (2 windows each); "
        "median (min..max). *compute*: the same loop fed its last 4 batches again from the device; "
        "*loader*: the same DataLoader and transfer alone; *of min*: samples/s over the lower of the "
        "two medians, the most any loading can allow at this config's compute, were loading and compute "
        "perfectly overlapped; *CPU roof*: the usable CPUs over the CPU seconds a sample costs the two "
        "parts together (each measured in its ceiling, DataLoader workers included), the most they allow "
        "where they share the CPUs; *of roof*: samples/s over the lowest of the three.",
        "",
        "| runner | config | samples/s | vs defaults | compute ceiling | loader ceiling | of min | "
        "CPU roof | of roof | data wait | bottleneck |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for res in results:
        base = med(res["runs"]["PyTorch defaults"], "samples_per_s")
        for label, runs in res["runs"].items():
            sps = [r["samples_per_s"] for r in runs]
            compute, loader = med(runs, "compute_ceiling"), med(runs, "loader_ceiling")
            wait = med(runs, "data_wait_frac")
            bound = bottleneck(statistics.median(sps), wait, compute, loader, med(runs, "cpu_roof"))
            of_min = f"{statistics.median(sps) / min(compute, loader):.0%}" if compute and loader else "-"
            lines.append(
                f"| {res['runner']} | {label} | {spread(sps, ',.0f')} | {statistics.median(sps) / base:.2f}x "
                f"| {cell(runs, 'compute_ceiling')} | {cell(runs, 'loader_ceiling')} | {of_min} "
                f"| {cell(runs, 'cpu_roof')} | {f'{bound.of_roof:.0%}' if bound.of_roof else '-'} "
                f"| {wait:.0%} | {bound.verdict} |"
            )
        overhead = res["overhead"]
        notes += [
            f"- **{res['runner']}**: study `{res['study']}`, {res['trials']} trials ({args.trials} "
            f"sampled, the rest confirmation re-runs) in {res['wall'] / 60:.1f} min "
            f"({res['wall'] / res['trials']:.1f} s a trial; fixed overhead "
            f"{statistics.median(overhead) if overhead else float('nan'):.1f} s of it). All tricks: "
            f"{changed(res['configs']['all tricks on'])}. Tuned: "
            f"{changed(res['configs'][f'tuned ({args.trials} trials)'])}.",
            *[f"  - the study said: {line}" for line in res["findings"]],
        ]
        if not res["configs"][f"tuned ({args.trials} trials)"]:
            notes.append(
                "  - no config beat the code as written beyond the noise, so the tuned row runs "
                "the defaults again: its distance from the first row is this machine's "
                "run-to-run noise"
            )
    plot = data_path("runners", "runners")
    lines += ["", *notes, "", f"![samples/s per config, with the ceilings]({link('runners', plot)})"]
    write_section("runners", "Runners: defaults, all tricks on, tuned, and the ceilings", "\n".join(lines))
    plot_runners(results, plot, where or machine())


def plot_runners(results: list[dict[str, Any]], path: Path, where: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4 * len(results), 3.6), dpi=110)
    for ax, res in zip(fig.subplots(1, len(results), squeeze=False)[0], results):
        labels = list(res["runs"])
        for i, label in enumerate(labels):
            sps = [r["samples_per_s"] for r in res["runs"][label]]
            mid = statistics.median(sps)
            ax.bar(
                i,
                mid,
                color=["tab:gray", "tab:orange", "tab:blue"][i % 3],
                yerr=[[mid - min(sps)], [max(sps) - mid]],
                capsize=4,
            )
            runs = res["runs"][label]
            ceilings = [v for v in (med(runs, "compute_ceiling"), med(runs, "loader_ceiling")) if v]
            if ceilings:
                ax.hlines(min(ceilings), i - 0.4, i + 0.4, colors="black", linestyles="dashed")
            if med(runs, "cpu_roof"):
                ax.hlines(med(runs, "cpu_roof"), i - 0.4, i + 0.4, colors="tab:red", linestyles="dotted")
        ax.set_xticks(range(len(labels)), [lab.split(" (")[0] for lab in labels], fontsize=8)
        ax.set_title(res["runner"])
        ax.set_ylabel("samples/s (dashed: min of the ceilings;\ndotted: CPU roof)", fontsize=8)
    fig.suptitle(where, fontsize=8)
    fig.tight_layout()
    fig.savefig(path)


# -- search efficiency --------------------------------------------------------------------


def search_part(args: argparse.Namespace) -> None:
    import itertools

    import yaml

    from autotune.tuner._standing import read_standing

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M")
    short = [
        "--space",
        str(SEARCH_SPACE),
        "--confirm",
        "0",
        "--ceiling-windows",
        "0",
        "--prune",
        "0",
        "--store",
        str(args.store.resolve()),
    ]
    knobs = yaml.safe_load(SEARCH_SPACE.read_text())["knobs"]
    varied = {k: v for k, v in knobs.items() if isinstance(v, list)}
    points = [dict(zip(varied, values)) for values in itertools.product(*varied.values())]
    # The grid: the baseline, then every point enqueued (Optuna hands them out in order).
    grid = f"bench-grid-{stamp}"
    cli("run", target(SEARCH_RUNNER), "--trials", "1", "--study", grid, *short, cwd=args.store)
    study = load(args.store, grid)
    for point in points:
        study.enqueue_trial(point)
    started = time.monotonic()
    cli("run", target(SEARCH_RUNNER), "--trials", str(len(points)), "--study", grid, *short, cwd=args.store)
    grid_wall = time.monotonic() - started
    table = [r.samples_per_s if r.outcome == "complete" else 0.0 for r in read_standing(load(args.store, grid)).rows]
    best = max(table)
    curves = {}
    for seed in range(args.seeds):
        name = f"bench-search-{stamp}-seed{seed}"
        cli(
            "run",
            target(SEARCH_RUNNER),
            "--trials",
            str(len(points) + 1),
            "--study",
            name,
            "--seed",
            str(seed),
            *short,
            cwd=args.store,
        )
        curves[seed] = best_so_far(
            [r.samples_per_s if r.outcome == "complete" else 0.0 for r in read_standing(load(args.store, name)).rows]
        )
    random = expected_random_curve(table[1:], table[0])
    reach = {seed: next((i + 1 for i, v in enumerate(c) if v >= NEAR_BEST * best), None) for seed, c in curves.items()}
    reach_random = next((i + 1 for i, v in enumerate(random) if v >= NEAR_BEST * best), None)
    lines = [
        f"Machine: {machine()}. Space `{SEARCH_SPACE.relative_to(ROOT)}` on the {SEARCH_RUNNER} runner: "
        f"{len(points)} points ({' x '.join(f'{k} {v}' for k, v in varied.items())}), each trial "
        "with the default budget, no ceilings, no confirmation, no pruning. The grid ran every point "
        f"once ({grid_wall / 60:.1f} min); its best: {best:,.0f} samples/s. The tuner (TPE) ran "
        f"{len(points) + 1} trials (the baseline first) with {args.seeds} seeds.",
        "",
        f"| search | trials to reach {NEAR_BEST:.0%} of the grid's best | best after {len(points) + 1} trials |",
        "|---|---|---|",
        *[
            f"| tuner, seed {seed} | {reach[seed] or 'not reached'} | {c[-1]:,.0f} ({c[-1] / best:.0%}) |"
            for seed, c in curves.items()
        ],
        f"| random order of the grid (expected) | {reach_random or 'not reached'} | "
        f"{random[-1]:,.0f} ({random[-1] / best:.0%}) |",
        "",
        "Trials count the baseline. Each grid point was measured once, so the grid's best carries "
        "the run-to-run noise too (see [Overhead](overhead.md)); a tuner run can land above it.",
        "",
        f"![best so far per trial]({link('search', data_path('search', 'search'))})",
    ]
    write_section("search", "Search efficiency", "\n".join(lines))
    plot_search(curves, random, best, data_path("search", "search"))


def best_so_far(values: list[float]) -> list[float]:
    out, top = [], 0.0
    for v in values:
        top = max(top, v)
        out.append(top)
    return out


def expected_random_curve(points: list[float], baseline: float) -> list[float]:
    """E[best so far] when the grid's points are tried in a random order after the baseline.

    The k-th smallest of n values is the best of k draws (without replacement) with
    probability C(i-1, k-1)/C(n, k) for its rank i; exact, no simulation.
    """
    from math import comb

    ordered = sorted(points)
    n = len(ordered)
    curve = [baseline]
    for k in range(1, n + 1):
        expected = sum(ordered[i - 1] * comb(i - 1, k - 1) / comb(n, k) for i in range(k, n + 1))
        curve.append(max(baseline, expected))
    return curve


def plot_search(curves: dict[int, list[float]], random: list[float], best: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 3.6), dpi=110)
    ax = fig.subplots()
    for seed, curve in curves.items():
        ax.step(range(1, len(curve) + 1), curve, where="post", label=f"tuner, seed {seed}")
    ax.plot(range(1, len(random) + 1), random, "k:", label="random order (expected)")
    ax.axhline(best, color="black", label="grid's best")
    ax.axhline(NEAR_BEST * best, color="black", linestyle="--", label=f"{NEAR_BEST:.0%} of it")
    ax.set_xlabel("trials (the baseline is 1)")
    ax.set_ylabel("best samples/s so far")
    ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(machine(), fontsize=8)
    fig.tight_layout()
    fig.savefig(path)


# -- overhead -----------------------------------------------------------------------------


def overhead_part(args: argparse.Namespace) -> None:
    from autotune.machine._launch import new_tag
    from autotune.worker._warm import WarmWorker

    logs = args.store / "harness-logs"
    logs.mkdir(parents=True, exist_ok=True)
    spans = ["spawn_s", "import_s", "setup_s", "teardown_s", "overhead_s"]
    lines = [
        f"Machine: {machine()}.",
        "",
        f"**Per-trial fixed overhead and run-to-run spread**: PyTorch's defaults, {args.overhead_runs} "
        "trials per runner and start, cold and warm in turns, default budget, no ceilings; median "
        "(min..max). *cold*: a new interpreter per trial (`python -m autotune.worker._trial_main`); *warm*: forked "
        "from the slot's warm worker, which imported torch once (`autotune.worker._warm`), as a study does. "
        "*spawn*: to the worker's first event (interpreter, autotune); *import*: torch and the runner's "
        "module; *set-up*: the runner's own code up to its first batch (dataset, model, loader); "
        "*teardown*: last event to exit. Goals: spawn + import < 0.5 s, spread < 5%.",
        "",
        "| runner | start | spawn s | import s | set-up s | teardown s | fixed overhead s | trial wall s "
        "| samples/s | spread (max-min)/median |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    warm = WarmWorker(os.environ, new_tag())
    try:
        for runner in args.runners:
            runs: dict[str, list[dict[str, Any]]] = {"cold": [], "warm": []}
            for i in range(args.overhead_runs):
                for start, worker in (("cold", None), ("warm", warm)):
                    runs[start].append(measure(runner, Config(), logs, Budget(ceiling_windows=0), seed=i, warm=worker))
            for start, done in runs.items():
                sps = [r["samples_per_s"] for r in done]
                lines.append(
                    f"| {runner} | {start} | "
                    + " | ".join(spread([r[s] for r in done], ".2f") for s in spans)
                    + f" | {spread([r['duration_s'] for r in done], '.1f')} | {spread(sps, ',.0f')} "
                    f"| {(max(sps) - min(sps)) / statistics.median(sps):.1%} |"
                )
    finally:
        warm.close()
    ratios, per_step = instrumentation(args.instrument_repeats)
    lines += [
        "",
        f"**Instrumentation**: the MNIST model's training loop over its real loader, {INSTRUMENT_STEPS} "
        f"steps, timed plain and through a `Trial` (windows, loss accumulation, events), alternating, "
        f"{args.instrument_repeats} pairs. Instrumented over plain throughput: "
        f"{spread([r * 100 for r in ratios], '.1f')}% (goal: > 99%). The same bookkeeping on an empty "
        f"step costs {spread([t * 1e6 for t in per_step], '.1f')} µs per step.",
    ]
    write_section("overhead", "Overhead", "\n".join(lines))


INSTRUMENT_STEPS = 300


def instrumentation(repeats: int) -> tuple[list[float], list[float]]:
    """Throughput of the same loop through a Trial over plain, and the bookkeeping per empty step."""
    import importlib.util

    import torch
    import torch.nn.functional as F

    from autotune.worker._trial import Trial

    spec = importlib.util.spec_from_file_location("mnist_runner", ROOT / "runners" / "mnist.py")
    mnist = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mnist)
    dataset = mnist.make_dataset()

    def loop(instrumented: bool) -> float:
        torch.manual_seed(0)
        model = mnist.Net()
        run = Trial(
            Config(),
            "cpu",
            lambda kind, **_: None,
            Budget(warmup_steps=0, warmup_s=0.0, window_s=1e9, windows=1, ceiling_windows=0),
        )
        loader = run.dataloader(dataset, batch_size=64, shuffle=True, drop_last=True)
        opt = run.optimizer(torch.optim.AdamW, model.parameters(), lr=1e-3)
        batches = run.batches(loader) if instrumented else iter(loader)
        started, steps = time.perf_counter(), 0
        while steps < INSTRUMENT_STEPS:
            for x, y in batches:
                loss = F.cross_entropy(model(x), y)
                if instrumented:
                    run.step(loss, opt)
                else:
                    loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                steps += 1
                if steps == INSTRUMENT_STEPS:
                    break
            batches = run.batches(loader) if instrumented else iter(loader)
        return INSTRUMENT_STEPS * 64 / (time.perf_counter() - started)

    loop(True), loop(False)  # warm both paths
    ratios = []
    for _ in range(repeats):
        plain = loop(False)
        ratios.append(loop(True) / plain)

    def empty(n: int = 20000) -> float:
        run = Trial(
            Config(),
            "cpu",
            lambda kind, **_: None,
            Budget(warmup_steps=0, warmup_s=0.0, window_s=0.05, windows=10**9, ceiling_windows=0),
        )
        batch, loss = (torch.zeros(64, 1),), torch.zeros(())
        started = time.perf_counter()
        for _ in run.batches([batch] * n):
            run._after_step(loss)  # what run.step adds to the user's backward and step
        return (time.perf_counter() - started) / n

    plain_iter = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _b in [None] * 20000:
            pass
        plain_iter.append((time.perf_counter() - started) / 20000)
    return ratios, [empty() - p for p in plain_iter]


# -- the older scripts, and main ------------------------------------------------------------


def script(name: str) -> None:
    subprocess.run([sys.executable, str(HERE / name)], check=True)


def log_to_mlflow(args: argparse.Namespace, results: list[dict[str, Any]] | None) -> None:
    """The harness run in MLflow: the pages it wrote and their plots, and one child run per runner config."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from mlflow.entities import Metric, Param

    from autotune.stores._tracking import Tracker, tracking_uri

    tracker = Tracker(tracking_uri(args.store.resolve()), artifact_root=args.store.resolve() / "artifacts")
    client = tracker.client
    experiment = tracker.experiment("autotune-benchmarks")
    parent = client.create_run(
        experiment, run_name=f"harness {' '.join(args.only)}", tags={"autotune.machine": machine()}
    ).info.run_id
    for res in results or []:
        for label, runs in res["runs"].items():
            child = client.create_run(
                experiment,
                run_name=f"{res['runner']}: {label}",
                tags={"mlflow.parentRunId": parent, "runner": res["runner"]},
            ).info.run_id
            metrics = {
                f"{k}_median": med(runs, k)
                for k in (
                    "samples_per_s",
                    "compute_ceiling",
                    "loader_ceiling",
                    "cpu_roof",
                    "data_wait_frac",
                    "overhead_s",
                )
                if med(runs, k) is not None
            }
            metrics.update(
                samples_per_s_min=min(r["samples_per_s"] for r in runs),
                samples_per_s_max=max(r["samples_per_s"] for r in runs),
                runs=len(runs),
            )
            now = int(time.time() * 1000)
            client.log_batch(
                child,
                metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()],
                params=[Param(k, str(v)) for k, v in res["configs"][label].items()],
            )
            client.set_terminated(child)
    for page in dict.fromkeys(results_path(part) for part in args.only):
        if page.exists():
            client.log_artifact(parent, str(page))
    named = os.environ.get(RESULTS_ENV)
    for folder in [DATA / Path(named).stem] if named else [DATA / part for part in args.only]:
        for png in sorted(folder.glob("*.png")):
            client.log_artifact(parent, str(png))
    client.set_terminated(parent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=PARTS, default=PARTS)
    parser.add_argument("--runners", nargs="*", default=RUNNERS, choices=RUNNERS)
    parser.add_argument("--trials", type=int, default=12, help="sampled trials per study (runners part)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per config (runners part)")
    parser.add_argument("--seeds", type=int, default=3, help="tuner runs (search part)")
    parser.add_argument("--overhead-runs", type=int, default=5, help="trials per runner (overhead part)")
    parser.add_argument("--instrument-repeats", type=int, default=7)
    parser.add_argument(
        "--store", type=Path, default=ROOT / "mlflow", help="autotune store for the studies and the MLflow runs"
    )
    parser.add_argument(
        "--results",
        type=Path,
        help="one Markdown page for every part instead of each part's own in benchmarks/results/ "
        "(raw figures and plots then go to benchmarks/data/ under the page's name, "
        "suffixed with it: results/gpu.md -> data/gpu/runners-gpu.png)",
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        nargs="+",
        metavar="RAW",
        help="render the runners table again from runners-*.json files written earlier "
        "(one machine; e.g. benchmarks/data/runners/), measuring nothing",
    )
    args = parser.parse_args()
    if args.results:
        os.environ[RESULTS_ENV] = str(args.results.resolve())  # for divergence.py and watchdogs.py too
    if args.from_json:
        raws = [json.loads(path.read_text()) for path in args.from_json]
        args.trials, args.repeats = raws[0]["trials"], raws[0]["repeats"]
        write_runners([res for raw in raws for res in raw["results"]], args, where=raws[0]["machine"])
        return
    args.store.mkdir(parents=True, exist_ok=True)
    results = None
    for part in args.only:
        started = time.monotonic()
        if part == "runners":
            results = runners_part(args)
        elif part == "search":
            search_part(args)
        elif part == "overhead":
            overhead_part(args)
        else:
            script(f"{part}.py")
        print(f"harness: {part} done in {(time.monotonic() - started) / 60:.1f} min", file=sys.stderr)
    log_to_mlflow(args, results)


if __name__ == "__main__":
    main()
