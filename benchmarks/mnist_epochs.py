"""Whole-run time of the MNIST runner: N epochs with PyTorch's defaults and with a tuned recipe.

A published article reports MNIST training for 5 epochs at about 43 s with default
loading and under 10 s with pinned memory and workers. This measures the same
kind of figure on the shipped runner: the runner's CNN and training loop, its 5,000
real digits repeated to the size of MNIST's 60,000-image training set (the same
per-item work, 937 steps per epoch at batch 64), each run in a fresh process and
timed from just before ``train()`` (CUDA already initialised) to the last step
done on the device. Runs alternate between the configs.

    python benchmarks/mnist_epochs.py --recipe mlflow/exports/STUDY.yaml      # 5 epochs, 3 runs each

Writes the "MNIST, whole runs" section of ``benchmarks/results/mnist-epochs.md``, or of the page
named by ``--results`` (``benchmarks/gpu.sh``: ``benchmarks/results/gpu.md``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _results import RESULTS_ENV, ROOT, machine, spread, write_section

#: MNIST's training set: the 5,000 shipped digits are repeated to this many items per epoch.
MNIST_TRAIN = 60_000


def one_run(recipe: str | None, epochs: int, size: int) -> float:
    """Seconds for ``epochs`` epochs of the runner under ``recipe`` (None: PyTorch's defaults)."""
    import torch
    from torch.utils.data import ConcatDataset, Subset

    import autotune
    from autotune.worker._trial_main import load_target

    # Imported as a trial's worker does, registered by name for the DataLoader workers.
    mnist = sys.modules[load_target(f"{ROOT / 'runners' / 'mnist.py'}:train").__module__]
    digits = mnist.make_dataset()
    # Whole copies, cut to exactly ``size`` items (60,000 is 12 copies; 2,000 is part of one).
    repeated = Subset(ConcatDataset([digits] * -(-size // len(digits))), range(size))
    mnist.make_dataset = lambda: repeated
    run = autotune.load(recipe)
    if run.device.type == "cuda":
        torch.zeros(1, device=run.device)  # the CUDA context is not the loop's cost
    torch.manual_seed(0)
    started = time.perf_counter()
    mnist.train(run, epochs=epochs)
    if run.device.type == "cuda":
        torch.cuda.synchronize(run.device)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", type=Path, help="the tuned YAML (autotune export)")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--size", type=int, default=MNIST_TRAIN, help="items per epoch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--results", type=Path, help="the page to write (default: benchmarks/results/mnist-epochs.md)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: one timed run in this process
    args = parser.parse_args()
    if args.one is not None:
        print(one_run(args.one or None, args.epochs, args.size))
        return
    if args.recipe is None or not args.recipe.is_file():
        parser.error(f"--recipe: no such file {args.recipe}; export one with `autotune export -o FILE`")
    if args.results:
        os.environ[RESULTS_ENV] = str(args.results.resolve())
    configs = {"PyTorch defaults": "", "tuned": str(args.recipe.resolve())}
    seconds: dict[str, list[float]] = {label: [] for label in configs}
    for turn in range(args.repeats):
        for label, recipe in configs.items():
            out = subprocess.run(
                [sys.executable, __file__, "--one", recipe, "--epochs", str(args.epochs), "--size", str(args.size)],
                check=True,
                capture_output=True,
                text=True,
            )
            seconds[label].append(float(out.stdout.strip().splitlines()[-1]))
            print(f"{label} run {turn + 1}: {seconds[label][-1]:.1f} s", file=sys.stderr)
    recipe_lines = args.recipe.read_text().splitlines()
    header = next((line for line in recipe_lines if line.startswith("#")), "")
    knobs = [line for line in recipe_lines if line and not line.startswith("#")]
    base, tuned = (statistics.median(seconds[k]) for k in configs)
    lines = [
        f"Machine: {machine()}. The MNIST runner for {args.epochs} epochs of {args.size:,} items (its "
        f"5,000 digits repeated), each run in a fresh process, timed from just before `train()` "
        f"(CUDA initialised) to the last step finished on the device; {args.repeats} runs each, in "
        "turns; median (min..max).",
        "",
        "| config | seconds | vs defaults |",
        "|---|---|---|",
        *[
            f"| {label} | {spread(values, '.1f')} | {base / statistics.median(values):.2f}x |"
            for label, values in seconds.items()
        ],
        "",
        f"Tuned recipe (`{args.recipe.name}`): {header.lstrip('# ')}",
        "",
        "```yaml",
        *knobs,
        "```",
        "",
        f"The published claim: about 43 s with default loading, under 10 s with pinned memory and "
        f"workers (4.3x or more). Here: {base:.1f} s and {tuned:.1f} s, {base / tuned:.2f}x.",
    ]
    write_section("mnist-epochs", "MNIST, whole runs: defaults vs tuned", "\n".join(lines))


if __name__ == "__main__":
    main()
