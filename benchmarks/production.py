"""Trial = production: a config's samples/s measured by a trial against the same training
function run in production with that config's YAML (issue 14, item 3). Writes the
"Trial vs production" section of ``benchmarks/RESULTS.md``.

For each case, in turns (so that a drift of the machine falls on both alike):

- **trial**: ``run_trial`` as the study runs it (a warm worker, the tuner's monitor
  watching RAM and foreign load): the median of its windows;
- **production**: ``train(autotune.load(yaml, report_every=S))`` in a process of its
  own, as a user runs it: the median of its ``samples/s over the last S s`` lines,
  the first one (its warm-up) left out.

    python benchmarks/production.py              # about 15 minutes on a 2-core CPU
    python benchmarks/production.py --pairs 2    # a smoke run
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import ROOT, machine, spread, write_section

from autotune import Config
from autotune._export import render
from autotune._pool import WarmWorker
from autotune._runner import Budget, TrialSpec, new_tag, run_trial

IO = ROOT / "tests" / "fixtures" / "io_train.py"
#: (name, target, config): the runners as written and with a tuned-like config, and a
#: loader whose items wait like network reads, fed by many more workers than cores.
CASES = [
    ("mnist, as written", f"{ROOT / 'runners' / 'mnist.py'}:train", Config()),
    ("mnist, batch 4x, 2 workers", f"{ROOT / 'runners' / 'mnist.py'}:train",
     Config(batch_size="4x", lr_scaling="linear", num_workers=2, persistent_workers=True, prefetch_factor=4)),
    ("charlm, as written", f"{ROOT / 'runners' / 'charlm.py'}:train", Config()),
    ("I/O-bound loader, 32 workers", f"{IO}:train",
     Config(num_workers=32, persistent_workers=True, prefetch_factor=4)),
]
SAMPLES_LINE = re.compile(r"autotune: ([\d,]+) samples/s over the last")


def trial(target: str, config: Config, warm: WarmWorker, logs: Path, windows: int, window_s: float):
    budget = Budget(windows=windows, window_s=window_s, ceiling_windows=0, learn_windows=0)
    result = run_trial(TrialSpec(target, config, "cpu", budget), logs / f"trial-{time.time_ns()}.log", warm=warm)
    if result.outcome.value != "complete":
        raise RuntimeError(f"{target} {config.set_values()}: {result.outcome.value}: {result.reason}")
    return result


def production_rate(target: str, result, folder: Path, reports: int, every: float) -> float:
    """The training function under the recipe the study would export for the trial's config
    (``result``), in a process of its own; killed after ``reports + 1`` samples/s lines (the
    first is its warm-up)."""
    path = folder / "best.yaml"
    path.write_text(render(result.resolved, result.base_batch_size, ["benchmark"]))
    module, _, func = target.rpartition(":")
    code = ("import sys, autotune, importlib.util\n"
            f"spec = importlib.util.spec_from_file_location('target', {module!r})\n"
            f"sys.path.insert(0, {str(Path(module).parent)!r})\n"
            "m = importlib.util.module_from_spec(spec); sys.modules['target'] = m; spec.loader.exec_module(m)\n"
            f"m.{func}(autotune.load({str(path)!r}, device='cpu', report_every={every}, check=False))\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True, start_new_session=True)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5, help="trial/production pairs per case")
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--window", type=float, default=2.0, help="seconds per window and per production report")
    parser.add_argument("--cases", nargs="*", type=int, help="indices into CASES (default: all)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        warm = WarmWorker(os.environ, new_tag())
        try:
            for index, (name, target, config) in enumerate(CASES):
                if args.cases and index not in args.cases:
                    continue
                trials, production = [], []
                for _ in range(args.pairs):
                    result = trial(target, config, warm, folder, args.windows, args.window)
                    trials.append(result.metrics["samples_per_s"])
                    production.append(production_rate(target, result, folder, args.windows, args.window))
                    print(f"{name}: trial {trials[-1]:,.0f}, production {production[-1]:,.0f}", flush=True)
                ratios = [t / p * 100 for t, p in zip(trials, production)]
                rows.append(f"| {name} | {spread(trials, ',.0f')} | {spread(production, ',.0f')} "
                            f"| {statistics.median(trials) / statistics.median(production) * 100:.1f}% "
                            f"| {spread(ratios, '.1f')}% |")
        finally:
            warm.close()
    body = "\n".join([
        f"Machine: {machine()}. `python benchmarks/production.py --pairs {args.pairs}`.",
        "",
        f"Each case {args.pairs} times in turns: a trial as the study runs it (forked from a warm worker, "
        f"the tuner's monitor watching; {args.windows} windows of {args.window:.0f} s, median) and the same "
        "function in production (`train(autotune.load(yaml, report_every="
        f"{args.window:.0f}))` in its own process; the median of {args.windows} reports after the first). "
        "Goal (issue 14): within 3%.",
        "",
        "| case | trial samples/s | production samples/s | trial / production (medians) | per pair |",
        "|---|---|---|---|---|",
        *rows,
    ])
    write_section("Trial vs production", body)
    print(body)


if __name__ == "__main__":
    main()
