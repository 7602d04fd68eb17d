"""What the hooks of an unmodified script cost, in one process: the same training loop plain,
under the production hooks (``autotune exec``: the loader and optimizer built with the export's
values, nothing per step) and under a trial's hooks (every batch of the training loader through
the trial's windows, the loss kept at each backward), in turns. One process, so the speed level
each process draws (results/levels.md) is the same for the three. The goal: within 2%.

Writes the section ``Hooks in one process`` of ``results/scripts.md`` and
``data/scripts/hooks-in-process.json``.

    python benchmarks/hooks_in_process.py --turns 12
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from _results import data_path, machine, spread, write_section
from _timed_loop import loop
from autotune.core._config import Config
from autotune.machine._launch import Budget
from autotune.training._handles import Run
from autotune.training._hooks import Hooks
from autotune.worker._script_trial import ScriptTrial

TOPIC = "scripts"


def hooked(run: Run, steps: int, warmup: int) -> float:
    """The loop under the production hooks of ``run`` (what ``autotune exec`` installs)."""
    hooks = Hooks(run).install()
    try:
        return loop(steps, warmup)
    finally:
        hooks.remove()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=12, help="runs of each, in turns")
    parser.add_argument("--steps", type=int, default=1500)
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = Config(batch_size="1x", num_workers=0, lr_scaling="none", fused_optimizer=False)
    arms: dict[str, list[float]] = {"plain": [], "production hooks": [], "trial hooks": []}
    for _ in range(args.turns):
        arms["plain"].append(loop(args.steps, 100))
        arms["production hooks"].append(hooked(Run(config, "cpu"), args.steps, 100))
        # A trial whose one window outlasts the loop: every batch counted, timed and waited for.
        trial = ScriptTrial(
            config,
            "cpu",
            lambda *a, **k: None,
            Budget(warmup_steps=0, warmup_s=0.0, window_s=1e9, windows=1, ceiling_windows=0),
        )
        trial.hooks.install()
        try:
            arms["trial hooks"].append(loop(args.steps, 100))
        finally:
            trial.hooks.remove()
    ratios = {
        name: [100 * r / p for r, p in zip(rates, arms["plain"])] for name, rates in arms.items() if name != "plain"
    }
    data_path(TOPIC, "hooks-in-process", ".json").write_text(json.dumps({"machine": machine(), **arms}, indent=1))
    rows = [
        f"| {name} | {spread(rates, ',.0f')} | " + (f"{spread(ratios[name], '.1f')}% |" if name in ratios else "100% |")
        for name, rates in arms.items()
    ]
    body = "\n".join(
        [
            f"Machine: {machine()}.",
            "",
            f"The loop of `benchmarks/_timed_loop.py` (an MLP on in-memory tensors, batch 64, Adam, one thread), "
            f"{args.steps:,} timed steps, {args.turns} turns of the three in one process; samples/s, median "
            "(min..max), and each against the plain run of its turn.",
            "",
            "| run | samples/s | against plain, turn by turn |",
            "|---|---|---|",
            *rows,
            "",
            "Medians against plain: "
            + ", ".join(
                f"{name} {100 * statistics.median(arms[name]) / statistics.median(arms['plain']):.1f}%"
                for name in ratios
            )
            + ". Command: `python benchmarks/hooks_in_process.py --turns "
            f"{args.turns}`.",
        ]
    )
    print(body)
    write_section(TOPIC, "Hooks in one process", body)


if __name__ == "__main__":
    main()
