"""How far the study's loss verdict moves with the seed, on jpeg (raw figures
``benchmarks/data/reach/reach-jpeg-seeds.json``; the reading is on ``benchmarks/results/reach.md``).

A study judges each config's loss against the baseline's over the same samples and
refuses one more than 50% worse. Early in training the seed alone moves the loss a lot,
so a verdict can be seed luck. This runs a baseline as a study runs it (measuring until
its loss has fallen) at each of ``--seeds``, then each config twice against it: at the
baseline's seed (as a study runs its trials) and at another seed (as studies did before
they shared the baseline's); it prints and records each one's excess (``TrialResult.judged``)
and the 50% verdict it got:

    python benchmarks/reach_judged.py                  # seeds 0, 1, 2 (about 10 minutes)
    python benchmarks/reach_judged.py --seeds 0,1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

from _results import ROOT, data_path, machine
from autotune import Config
from autotune.core._guard import DIVERGENCE_TOLERANCE, LossReference
from autotune.machine._launch import Budget, TrialSpec, new_tag
from autotune.tuner._watch import run_trial
from autotune.worker._warm import WarmWorker

TARGET = f"{ROOT / 'runners' / 'jpeg.py'}:train"
LOADER = {"num_workers": 16, "persistent_workers": True, "prefetch_factor": 4}
CONFIGS = {
    "1x, 8 workers": Config(**{**LOADER, "num_workers": 8}),
    "2x, linear lr": Config(batch_size="2x", lr_scaling="linear", **LOADER),
    "4x, linear lr": Config(batch_size="4x", lr_scaling="linear", **LOADER),
    "2x, sqrt lr": Config(batch_size="2x", lr_scaling="sqrt", **LOADER),
    "4x, sqrt lr": Config(batch_size="4x", lr_scaling="sqrt", **LOADER),
    "2x, lr as is": Config(batch_size="2x", **LOADER),
}
#: The other seed a config runs at: the baseline's plus this (a trial number, as it was).
OTHER = 7


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2", help="baseline seeds, comma-separated")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    logs = ROOT / "mlflow" / "reach-judged-logs"
    logs.mkdir(parents=True, exist_ok=True)
    budget = Budget(ceiling_windows=0)
    warm = WarmWorker(os.environ, new_tag())
    runs: list[dict] = []
    try:
        for seed in seeds:
            base = run_trial(
                TrialSpec(TARGET, Config(), "cpu", budget.learning(), seed=seed),
                logs / f"baseline-{seed}.log",
                warm=warm,
            )
            reached = base.curve[-1][1] if base.curve else 0
            print(
                f"seed {seed}: baseline {base.outcome.value}, {base.metrics.get('samples_per_s', 0):,.0f} "
                f"samples/s, reached {reached:,.0f} samples",
                file=sys.stderr,
            )
            for label, config in CONFIGS.items():
                for trial_seed in (seed, seed + OTHER):
                    result = run_trial(
                        TrialSpec(TARGET, config, "cpu", budget, seed=trial_seed),
                        logs / f"{label}-{seed}-{trial_seed}.log",
                        warm=warm,
                        against=LossReference(base.losses, base.curve),
                    )
                    worse = result.judged.excess if result.judged else None
                    worse = worse if worse is not None and math.isfinite(worse) else None  # (JSON has no nan)
                    runs.append(
                        {
                            "config": label,
                            "baseline_seed": seed,
                            "seed": trial_seed,
                            "excess": worse,
                            "outcome": result.outcome.value,
                            "samples_per_s": result.metrics.get("samples_per_s"),
                            "reason": result.reason.splitlines()[0] if result.reason else "",
                        }
                    )
                    print(
                        f"  {label:14s} seed {trial_seed:2d}: {'?' if worse is None else f'{worse:+.0%}':>6s} "
                        f"{result.outcome.value}",
                        file=sys.stderr,
                    )
    finally:
        warm.close()
    data_path("reach", "reach-jpeg-seeds", ".json").write_text(
        json.dumps(
            {
                "machine": machine(),
                "tolerance": DIVERGENCE_TOLERANCE,
                "other_seed": f"baseline's + {OTHER}",
                "runs": runs,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
