"""Judge points of a Reach sweep by the study's loss rule (raw figures ``reach-jpeg-judged.json``).

Reach's sweep measures speed only. A study also judges each config's loss against the
baseline's over the same samples and refuses a config more than 50% worse. This runs a
baseline as a study runs it (measuring until its loss has fallen), then each point
against its curve, once per seed, and prints each verdict with its samples/s:

    python benchmarks/reach_judged.py            # the jpeg sweep's top points, seeds 0 and 1
"""

from __future__ import annotations

import json
import os
import sys

from _results import ROOT, figure_path

from autotune import Config
from autotune._pool import WarmWorker
from autotune._runner import Budget, TrialSpec, new_tag, run_trial

TARGET = f"{ROOT / 'runners' / 'jpeg.py'}:train"
FIXED = {"persistent_workers": True, "prefetch_factor": 4}
POINTS = {"2x, 16 workers, linear": Config(batch_size="2x", num_workers=16, lr_scaling="linear", **FIXED),
          "4x, 16 workers, linear": Config(batch_size="4x", num_workers=16, lr_scaling="linear", **FIXED),
          "1x, 32 workers": Config(num_workers=32, **FIXED),
          "1x, 16 workers": Config(num_workers=16, **FIXED)}
SEEDS = (0, 1)


def main() -> None:
    logs = ROOT / "mlflow" / "reach-judged-logs"
    logs.mkdir(parents=True, exist_ok=True)
    budget = Budget(ceiling_windows=0)
    learn = budget.learning()  # as a study runs its baseline
    warm = WarmWorker(os.environ, new_tag())
    verdicts: dict[str, list[list]] = {}
    try:
        base = run_trial(TrialSpec(TARGET, Config(), "cpu", learn), logs / "baseline.log", warm=warm)
        print(f"baseline {base.outcome.value} {base.metrics.get('samples_per_s', 0):,.0f}", file=sys.stderr)
        for label, config in POINTS.items():
            for seed in SEEDS:
                result = run_trial(TrialSpec(TARGET, config, "cpu", budget, seed=seed), logs / f"{label}-{seed}.log",
                                   warm=warm, reference=base.losses, reference_curve=base.curve)
                rate = result.metrics.get("samples_per_s")
                verdicts.setdefault(label, []).append(
                    [result.outcome.value, rate, result.reason.splitlines()[0] if result.reason else ""])
                print(f"{label} seed {seed}: {result.outcome.value} {rate or 0:,.0f} {result.reason[:160]}",
                      file=sys.stderr)
    finally:
        warm.close()
    figure_path("reach-jpeg-judged", ".json").write_text(
        json.dumps({"baseline": base.metrics.get("samples_per_s"), "points": verdicts}, indent=1) + "\n")


if __name__ == "__main__":
    main()
