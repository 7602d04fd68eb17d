"""Trial = production: a config's samples/s measured by a trial against the same training
function run in production with that config's YAML. Writes the "Trial vs production" section
of ``benchmarks/results/trial-vs-production.md``, and each case's turns to
``benchmarks/data/trial-vs-production/production-<cases>.json``.

For each case, one unmeasured trial (the warm-up; production runs its YAML), then turns, each
in an order shuffled per turn (so that a drift of the machine, and a place in the turn, fall on
all alike):

- **trial**: ``run_trial`` as the study runs it (a warm worker, the tuner's monitor
  watching RAM and foreign load): the median of its windows;
- **production**: ``train(autotune.load(yaml, report_every=S))`` in a process of its
  own, as a user runs it: the median of its ``samples/s over the last S s`` lines,
  the first one (its warm-up) left out;
- with ``--variants``, trials measured other ways beside them, to find where a gap comes
  from: the tuner's monitor slowed to 0.2 Hz (``monitor-slowed``), and the worker spawned
  as a new interpreter instead of forked from the warm one (``cold``). These go to a
  section of their own.

    python benchmarks/production.py              # about 15 minutes on a 2-core CPU
    python benchmarks/production.py --pairs 2    # a smoke run
    python benchmarks/production.py --cases 2 --pairs 10 --variants monitor-slowed cold
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _results import ROOT, data_path, machine, one_trial, spread, write_section
from autotune import Config, _monitor
from autotune.machine._launch import Budget, new_tag
from autotune.production._export import render
from autotune.worker._warm import WarmWorker

#: The page and raw-figures folder (benchmarks/results/, benchmarks/data/) this and interleaved.py write.
TOPIC = "trial-vs-production"
IO = ROOT / "tests" / "fixtures" / "io_train.py"
#: (name, target, config): the runners as written and with a tuned-like config, and a
#: loader whose items wait like network reads, fed by many more workers than cores.
CASES = [
    ("mnist, as written", f"{ROOT / 'runners' / 'mnist.py'}:train", Config()),
    (
        "mnist, batch 4x, 2 workers",
        f"{ROOT / 'runners' / 'mnist.py'}:train",
        Config(batch_size="4x", lr_scaling="linear", num_workers=2, persistent_workers=True, prefetch_factor=4),
    ),
    ("charlm, as written", f"{ROOT / 'runners' / 'charlm.py'}:train", Config()),
    ("I/O-bound loader, 32 workers", f"{IO}:train", Config(num_workers=32, persistent_workers=True, prefetch_factor=4)),
    # as written, but glibc's malloc keeping freed memory: the level each process draws at its
    # start (benchmarks/results/levels.md) is then no longer mostly page faults
    ("mnist, malloc_retain", f"{ROOT / 'runners' / 'mnist.py'}:train", Config(malloc_retain=True)),
    # the jpeg runner at the best point of its sweep on a 2-core host (benchmarks/results/reach.md): its items
    # wait on storage and decode in 24 workers, so interleaved.py cannot take it
    (
        "jpeg, batch 2x, 24 workers",
        f"{ROOT / 'runners' / 'jpeg.py'}:train",
        Config(batch_size="2x", lr_scaling="linear", num_workers=24, persistent_workers=True, prefetch_factor=4),
    ),
    # the ResNet runner (its CPU size) with the model-side knob its studies pick here, and workers
    # that decode and augment (no storage latency: interleaved.py can take it)
    (
        "resnet, channels_last, 2 workers",
        f"{ROOT / 'runners' / 'resnet.py'}:train",
        Config(channels_last=True, num_workers=2, persistent_workers=True, prefetch_factor=4),
    ),
]
SAMPLES_LINE = re.compile(r"autotune: ([\d,]+) samples/s over the last")


def trial(target: str, config: Config, warm: WarmWorker, logs: Path, windows: int, window_s: float):
    budget = Budget(windows=windows, window_s=window_s, ceiling_windows=0, learn_windows=0)
    return one_trial(target, config, budget, logs, device="cpu", warm=warm)


def production_rate(target: str, result, folder: Path, reports: int, every: float) -> float:
    """The training function under the recipe the study would export for the trial's config
    (``result``), in a process of its own; killed after ``reports + 1`` samples/s lines (the
    first is its warm-up)."""
    path = folder / "best.yaml"
    path.write_text(render(result.resolved, result.base_batch_size, ["benchmark"]))
    module, _, func = target.rpartition(":")
    code = (
        "import sys, autotune, importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('target', {module!r})\n"
        f"sys.path.insert(0, {str(Path(module).parent)!r})\n"
        "m = importlib.util.module_from_spec(spec); sys.modules['target'] = m; spec.loader.exec_module(m)\n"
        f"m.{func}(autotune.load({str(path)!r}, device='cpu', report_every={every}, check=False))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    rates: list[float] = []
    try:
        for line in proc.stderr:
            found = SAMPLES_LINE.search(line)
            if found:
                rates.append(float(found.group(1).replace(",", "")))
                if len(rates) > reports:
                    break
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
    if len(rates) <= reports:
        raise RuntimeError(f"production run of {target} ended after {len(rates)} reports")
    return statistics.median(rates[1:])


@contextlib.contextmanager
def monitor_slowed(every: float = 5.0):
    """The tuner's monitor reading once every ``every`` s instead of 10 times a second: what a
    trial costs without it (a benchmark's patch; the product never turns it down)."""
    saved = _monitor.INTERVAL, _monitor.PSS_EVERY
    _monitor.INTERVAL = _monitor.PSS_EVERY = every
    try:
        yield
    finally:
        _monitor.INTERVAL, _monitor.PSS_EVERY = saved


#: ``--variants``: trials measured another way, each beside the two above, to find a gap's cause.
VARIANTS = {"monitor-slowed": "trial, the monitor at 0.2 Hz", "cold": "trial, spawned cold"}
HOW = {
    "monitor-slowed": "with the tuner's monitor reading once every 5 s instead of 10 times a second (`monitor-slowed`)",
    "cold": "spawned as a new interpreter instead of forked from the warm worker (`cold`)",
}


def measure_turn(
    target: str, config: Config, first, warm: WarmWorker, folder: Path, args: argparse.Namespace, turn: int
) -> dict[str, float]:
    """One turn of a case: the trial, production (under the YAML of ``first``, a trial of the
    same config) and each variant asked for, in an order shuffled per turn, so that what a
    place in the turn does (the first after the last turn's process, the one after production)
    falls on each alike."""
    kinds = ["trial", "production", *args.variants]
    random.Random(turn).shuffle(kinds)
    found = {}
    for kind in kinds:
        if kind == "production":
            found[kind] = production_rate(target, first, folder, args.windows, args.window)
            continue
        with monitor_slowed() if kind == "monitor-slowed" else contextlib.nullcontext():
            result = trial(target, config, None if kind == "cold" else warm, folder, args.windows, args.window)
        found[VARIANTS.get(kind, kind)] = result.metrics["samples_per_s"]
    return dict(sorted(found.items(), key=lambda kv: ["trial", "production", *VARIANTS.values()].index(kv[0])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5, help="trial/production pairs per case")
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--window", type=float, default=2.0, help="seconds per window and per production report")
    parser.add_argument("--cases", nargs="*", type=int, help="indices into CASES (default: all)")
    parser.add_argument(
        "--variants",
        nargs="*",
        default=[],
        choices=list(VARIANTS),
        help="also measure trials these ways, in the same turns (a section of their own)",
    )
    args = parser.parse_args()
    rows, variant_rows = [], []
    raw: dict[str, list[dict[str, float]]] = {}  # each case's turns, for the JSON
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        warm = WarmWorker(os.environ, new_tag())
        try:
            for index, (name, target, config) in enumerate(CASES):
                if args.cases and index not in args.cases:
                    continue
                # a trial first, unmeasured: the warm-up of the case, and the YAML production runs
                first = trial(target, config, warm, folder, args.windows, args.window)
                turns = []
                for turn in range(args.pairs):
                    turns.append(measure_turn(target, config, first, warm, folder, args, turn))
                    print(f"{name}: " + ", ".join(f"{k} {v:,.0f}" for k, v in turns[-1].items()), flush=True)
                raw[name] = turns
                trials, production = [t["trial"] for t in turns], [t["production"] for t in turns]
                rows.append(
                    f"| {name} | {spread(trials, ',.0f')} | {spread(production, ',.0f')} "
                    f"| {ratio_cells(trials, production)} |"
                )
                for kind in turns[0]:
                    if kind != "production":
                        values = [t[kind] for t in turns]
                        variant_rows.append(
                            f"| {name} | {kind} | {spread(values, ',.0f')} | {ratio_cells(values, production)} |"
                        )
        finally:
            warm.close()
    data_path(TOPIC, "production-" + ("-".join(map(str, args.cases)) if args.cases else "all"), ".json").write_text(
        json.dumps({"machine": machine(), "args": vars(args), "turns": raw}, indent=1) + "\n"
    )
    command = f"`python benchmarks/production.py --pairs {args.pairs}"
    if args.variants:
        body = "\n".join(
            [
                f"Machine: {machine()}. {command} --variants {' '.join(args.variants)}`.",
                "",
                f"As above, {args.pairs} turns per case after one unmeasured trial (whose YAML production runs), "
                "in an order shuffled per turn; in each turn, beside the trial and production, a trial "
                f"measured each other way: {'; '.join(HOW[v] for v in args.variants)}. Each against the same "
                "turns' production.",
                "",
                "| case | measured as | samples/s | over production (medians) | per turn |",
                "|---|---|---|---|---|",
                *variant_rows,
            ]
        )
        write_section(TOPIC, "Trial vs production: where the gap is", body)
        print(body)
        return
    body = "\n".join(
        [
            f"Machine: {machine()}. {command}`.",
            "",
            f"Each case {args.pairs} times in turns (after one unmeasured trial, in an order shuffled per turn): "
            "a trial as the study runs it (forked from a warm worker, "
            f"the tuner's monitor watching; {args.windows} windows of {args.window:.0f} s, median) and the same "
            "function in production (`train(autotune.load(yaml, report_every="
            f"{args.window:.0f}))` in its own process; the median of {args.windows} reports after the first). "
            "Goal: within 3%.",
            "",
            "| case | trial samples/s | production samples/s | trial / production (medians) | per pair |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )
    write_section(TOPIC, "Trial vs production", body)
    print(body)


#: Turns from which the per-turn cell also gives a confidence interval (fewer say little).
CI_TURNS = 10


def ratio_cells(values: list[float], production: list[float]) -> str:
    """Two table cells: the ratio of the medians, and the per-turn ratios' median (min..max);
    from ``CI_TURNS`` turns on, also their geometric mean with a 95% bootstrap interval."""
    ratios = [v / p * 100 for v, p in zip(values, production)]
    cells = f"{statistics.median(values) / statistics.median(production) * 100:.1f}% | {spread(ratios, '.1f')}%"
    if len(ratios) < CI_TURNS:
        return cells
    mean, low, high = geometric_mean_ci(ratios)
    return cells + f"; mean {mean:.1f}% (95% CI {low:.1f}..{high:.1f}%)"


def geometric_mean_ci(values: list[float], draws: int = 4000, seed: int = 0) -> tuple[float, float, float]:
    """The geometric mean of positive ``values`` and a 95% percentile-bootstrap interval for it
    (turns resampled with replacement): ratios are compared on a log scale, where 50% and 200%
    sit at the same distance from 100%."""
    logs = [math.log(v) for v in values]
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(logs, k=len(logs))) for _ in range(draws))
    return (
        math.exp(statistics.fmean(logs)),
        math.exp(means[int(0.025 * draws)]),
        math.exp(means[int(0.975 * draws) - 1]),
    )


if __name__ == "__main__":
    main()
