"""Measure how much worse than the baseline's loss healthy and broken configs run, to
justify the divergence tolerance (``autotune.core._guard.DIVERGENCE_TOLERANCE``).

For each runner: the baseline once as the reference, then more baselines with other
seeds (seed noise alone), configs that train the same model differently (bigger
batches with each lr scaling, bf16, loader workers) and configs expected to break
it (very large batches with linear lr scaling). Each is one real trial with the
default budget, compared with the reference by ``autotune.core._guard.compare``. Writes
the "Divergence tolerance" section of ``benchmarks/results/divergence.md``.

    python benchmarks/divergence.py
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from _results import ROOT, machine, write_section
from autotune import Config
from autotune.core._guard import DIVERGENCE_TOLERANCE, compare, first_nonfinite
from autotune.machine._launch import Budget, TrialSpec
from autotune.tuner._watch import run_trial

RUNNERS = ["mnist", "charlm", "jpeg"]
#: name -> (config, what it is meant to show)
CONFIGS = {
    "baseline, seed 1": (Config(), "seed noise"),
    "baseline, seed 2": (Config(), "seed noise"),
    "batch 4x, lr linear": (Config(batch_size="4x", lr_scaling="linear"), "same training"),
    "batch 4x, lr sqrt": (Config(batch_size="4x", lr_scaling="sqrt"), "fewer updates per sample"),
    "batch 4x, lr as is": (Config(batch_size="4x", lr_scaling="none"), "fewer updates per sample"),
    "bf16 autocast": (Config(amp="bf16"), "same training"),
    "2 workers, thread prefetch": (Config(num_workers=2, prefetch="thread"), "same training"),
    "batch 16x, lr linear": (Config(batch_size="16x", lr_scaling="linear"), "lr x16: risky"),
    "batch 32x, lr linear": (Config(batch_size="32x", lr_scaling="linear"), "lr x32: risky"),
}
READING = (
    "Seed noise and configs that train the same model the same way should stay well "
    "inside the tolerance. Configs flagged here lose more per sample than they can gain "
    "per second (a 4x batch without lr scaling makes 4x fewer updates per sample): the "
    "study calls them diverged, keeps their speed for the sampler, and never exports them. "
    "A trial that saw more samples than the baseline ever did meets the baseline's last "
    "loss, which favours the trial (the loader-bound jpeg's '2 workers' row)."
)
#: 1,024 JPEG decodes with 4 ms of storage latency each is a 6 s step: past the deadline.
SKIP = {("jpeg", "batch 32x, lr linear")}


def trial(runner: str, config: Config, seed: int, logs: Path):  # type: ignore[valid-type]
    spec = TrialSpec(f"{ROOT / 'runners' / runner}.py:train", config, "cpu", Budget(ceiling_windows=0), seed=seed)
    return run_trial(spec, logs / f"{runner}-{seed}-{abs(hash(config))}.log")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runners", nargs="*", default=RUNNERS)
    args = parser.parse_args()
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for runner in args.runners:
            reference = trial(runner, Config(), 0, Path(tmp))
            print(f"{runner}: reference {reference.outcome.value} {reference.losses}", file=sys.stderr)
            for seed, (name, (config, meant)) in enumerate(CONFIGS.items(), start=1):
                if (runner, name) in SKIP:
                    continue
                result = trial(runner, config, seed, Path(tmp))
                bad = first_nonfinite(result.losses)
                found = None if bad else compare(reference.losses, result.losses)
                if bad:
                    excess, verdict = "nan/inf", "diverged"
                elif found is None:
                    excess, verdict = "-", result.outcome.value
                else:
                    excess = f"{found.excess:+.0%}"
                    verdict = "diverged" if found.excess > DIVERGENCE_TOLERANCE else "ok"
                loss = f"{found.loss:.3g} vs {found.reference:.3g}" if found else "-"
                rows.append(f"| {runner} | {name} | {meant} | {loss} | {excess} | {verdict} |")
                print(rows[-1], file=sys.stderr)
    body = "\n".join(
        [
            f"Machine: {machine()}. One trial per row, default budget (1 s warmup, 4 windows of "
            "1.5 s); each compared with one baseline trial of the same runner (seed 0) by "
            "`autotune.core._guard.compare`: the mean loss over the later half of the points both "
            "share, relative to the baseline's (floored at 10% of its first loss). A positive "
            "excess is worse. The tolerance is "
            f"{DIVERGENCE_TOLERANCE:.0%}.",
            "",
            "Regenerate with `python benchmarks/divergence.py`.",
            "",
            "| runner | config | meant as | loss vs baseline's | excess | verdict |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            READING,
        ]
    )
    write_section("divergence", "Divergence tolerance", body)
    print(body)


if __name__ == "__main__":
    main()
