"""Numbers on a busy machine: what a CPU hog on one core does to a trial's figures, and
whether a study still exports the quiet study's winner. Writes the "Noise" section of
``benchmarks/results/noise.md``.

1. One config (the MNIST runner as written, the default budget with its ceilings) run
   ``N`` times on the quiet machine and ``N`` times beside a hog
   (``taskset -c 0 python3 -c 'while True: pass'``): samples/s, the foreign load the
   monitor read, how many were flagged noisy, and whether the bottleneck verdict moved.
2. A divergence-borderline config (batch 4x without lr scaling) run ``N`` times against
   one baseline: its excess loss and verdict by the rule on the same samples (the loss
   curves over the baseline's span), and by the old rule (the later half of the points a
   trial shares with the baseline), whose window moved with the trial's speed.
3. Whole studies through the CLI: quiet twice, then once with the hog started and stopped
   mid-study. Winner, speedup and spread of each; noisy trials and re-measures; whether
   the hogged study's winner and speedup fall inside the quiet studies' spread.

    python benchmarks/noise.py                 # about 45 minutes on a 2-core CPU
    python benchmarks/noise.py --quick         # a smoke run, about 10 minutes
    python benchmarks/noise.py --studies-only  # part 3 again, parts 1-2 kept from the page's last Noise section
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _results import ROOT, machine, read_section, spread, write_section
from autotune import Config
from autotune.core._ceilings import Ceilings
from autotune.core._guard import DIVERGENCE_TOLERANCE, LossReference, compare, judged_span, mean_over
from autotune.machine._launch import Budget, TrialSpec
from autotune.machine._noise import doubt
from autotune.stores._records import bottleneck_of
from autotune.tuner._watch import run_trial

TARGET = f"{ROOT / 'runners' / 'mnist.py'}:train"
HOG = [sys.executable, "-c", "while True: pass"]


class Hog:
    """A CPU-bound process pinned to CPU 0 for the ``with`` block."""

    def __enter__(self):
        self.proc = subprocess.Popen(["taskset", "-c", "0", *HOG])
        time.sleep(0.5)
        return self

    def __exit__(self, *exc) -> None:
        self.proc.kill()
        self.proc.wait()


def one_trial(config: Config, logs: Path, name: str, budget: Budget | None = None, **kwargs):  # type: ignore[valid-type]
    return run_trial(TrialSpec(TARGET, config, "cpu", budget or Budget()), logs / f"{name}.log", **kwargs)


def repeats(n: int, logs: Path) -> tuple[str, dict]:
    """Part 1: the baseline config quiet and beside the hog."""
    rows, raw = [], {}
    for condition in ("quiet", "hog on CPU 0"):
        runs = []
        for i in range(n):
            if condition == "quiet":
                result = one_trial(Config(), logs, f"quiet-{i}")
            else:
                with Hog():
                    result = one_trial(Config(), logs, f"hog-{i}")
            m = result.metrics
            bound = bottleneck_of(m, result.resolved, Ceilings(), result.ceilings)
            runs.append(
                {
                    "sps": m.get("samples_per_s", 0.0),
                    "foreign": m.get("foreign_cpu", 0.0),
                    "spread": m.get("samples_per_s_spread", 0.0),
                    "doubt": doubt(m, result.reason),
                    "verdict": bound.verdict,
                    "efficiency": bound.efficiency,
                    "unreliable": bound.unreliable,
                    "outcome": result.outcome.value,
                }
            )
            print(condition, i, {k: v for k, v in runs[-1].items()}, flush=True)
        raw[condition] = runs
    quiet_verdict = statistics.mode(r["verdict"] for r in raw["quiet"])
    for condition, runs in raw.items():
        sps = [r["sps"] for r in runs]
        rows.append(
            f"| {condition} | {spread(sps, ',.0f')} | {(max(sps) - min(sps)) / statistics.median(sps):.0%} | "
            f"{spread([r['foreign'] for r in runs], '.0%')} | {sum(bool(r['doubt']) for r in runs)} of {len(runs)} | "
            f"{sum(r['verdict'] != quiet_verdict for r in runs)} | "
            f"{sum(bool(r['unreliable']) for r in runs)} | "
            f"{max((r['efficiency'] or 0) for r in runs):.0%} |"
        )
    table = (
        "| runs | samples/s, median (min..max) | spread | foreign load read | flagged noisy | "
        f"bottleneck verdict other than the quiet one ({quiet_verdict}) | a ceiling flagged unreliable | "
        "highest efficiency shown |\n|---|---|---|---|---|---|---|---|\n" + "\n".join(rows)
    )
    return table, raw


def borderline(n: int, logs: Path) -> str:
    """Part 2: batch 4x without lr scaling against one baseline, by the two rules."""
    budget = Budget(ceiling_windows=0)
    base = one_trial(Config(), logs, "ref", budget)
    span = judged_span(base.curve)
    rows = []
    for i in range(n):
        result = one_trial(
            Config(batch_size="4x", lr_scaling="none"),
            logs,
            f"border-{i}",
            budget,
            against=LossReference(base.losses, base.curve),
        )
        end = min(span[1], result.curve[-1][1])
        ref, loss = mean_over(base.curve, span[0], end), mean_over(result.curve, span[0], end)
        new = (loss - ref) / abs(ref)
        old = compare(base.losses, result.losses)
        rows.append(
            (
                new,
                old.excess if old else float("nan"),
                result.outcome.value,
                result.metrics.get("samples_per_s", 0.0),
                f"{old.first:,.0f}-{old.last:,.0f}" if old else "-",
            )
        )
        print("borderline", i, rows[-1], flush=True)
    new_x, old_x = [r[0] for r in rows], [r[1] for r in rows]
    return (
        f"Against one baseline run ({base.metrics['samples_per_s']:,.0f} samples/s; its span: samples "
        f"{span[0]:,.0f}-{span[1]:,.0f}), {n} runs of batch 4x with the lr as is "
        f"({spread([r[3] for r in rows], ',.0f')} samples/s):\n\n"
        "| rule | excess loss, median (min..max) | verdicts over the tolerance | samples compared |\n"
        "|---|---|---|---|\n"
        f"| on the same samples (now) | {spread(new_x, '.0%')} | {sum(x > DIVERGENCE_TOLERANCE for x in new_x)} "
        f"of {n} (the study's: {sum(r[2] == 'diverged' for r in rows)}) | the baseline's span |\n"
        f"| later half of shared points (before) | {spread(old_x, '.0%')} | "
        f"{sum(x > DIVERGENCE_TOLERANCE for x in old_x)} of {n} | "
        f"{', '.join(sorted({r[4] for r in rows}))} |"
    )


def study(folder: Path, trials: int, confirm: int, hog_at: tuple[float, float] | None) -> dict:
    """Part 3: one study through the CLI; with ``hog_at`` (start, stop seconds), the hog runs then."""
    import optuna
    from optuna.storages.journal import JournalFileBackend

    from autotune.tuner._standing import findings, read_standing

    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    args = [
        sys.executable,
        "-m",
        "autotune",
        "run",
        TARGET,
        "--trials",
        str(trials),
        "--confirm",
        str(confirm),
        "--seed",
        "0",
        "--store",
        str(folder),
    ]
    started = time.monotonic()
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True)
    reader.start()
    hog = None
    try:
        while proc.poll() is None:
            now = time.monotonic() - started
            if hog_at and hog is None and now >= hog_at[0]:
                hog = Hog().__enter__()
            if hog is not None and now >= hog_at[1]:
                hog.__exit__()
                hog, hog_at = None, None
            time.sleep(0.5)
    finally:
        if hog is not None:
            hog.__exit__()
    reader.join(5)
    wall = time.monotonic() - started
    if proc.returncode:
        print(f"the tuner exited {proc.returncode}; its output ends:\n" + "".join(out[-40:]), flush=True)
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(folder / "optuna.journal")))
    standing = read_standing(optuna.load_study(study_name="mnist", storage=storage))
    for r in standing.rows:  # the raw rows, for the log
        print(
            f"  trial {r.number} (= {r.of}) {r.outcome} {r.samples_per_s or 0:,.0f}/s "
            f"foreign {r.metrics.get('foreign_cpu', 0):.0%} {r.doubt or ''} {r.sampled}",
            flush=True,
        )
    win = standing.decision.winner
    shown_over = sum(
        1
        for r in standing.rows
        if r.bottleneck and ((r.bottleneck.efficiency or 0) > 1 or (r.bottleneck.of_roof or 0) > 1)
    )
    return {
        "wall": wall,
        "returncode": proc.returncode,
        "findings": findings(standing),
        "winner": win.first.number if win else None,
        "config": win.first.sampled if win else None,
        "speedup": standing.speedup(win) if win else None,
        "spread": win.spread if win else None,
        "base_spread": standing.base.spread if standing.base else None,
        "noisy": sum(1 for r in standing.rows if r.doubt and r.doubt.startswith("noisy")),
        "remeasured": sum(1 for r in standing.rows if r.remeasure),
        "foreign_max": max((r.metrics.get("foreign_cpu", 0) for r in standing.rows if r.measured), default=0),
        "over_100": shown_over,
        "trials": len(standing.rows),
        "sampled": [r.sampled for r in standing.rows if r.sampled and r.of is None],
        "said": [line for line in "".join(out).splitlines() if "noisy" in line or "busy" in line],
    }


def studies(trials: int, confirm: int, quiet_runs: int, hog_at: tuple[float, float]) -> str:
    results = []
    for i in range(quiet_runs):
        with tempfile.TemporaryDirectory() as tmp:
            results.append(("quiet", study(Path(tmp) / "store", trials, confirm, None)))
        print("quiet study", i, results[-1][1], flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        results.append(
            (
                f"hog on CPU 0 from {hog_at[0]:.0f} s to {hog_at[1]:.0f} s",
                study(Path(tmp) / "store", trials, confirm, hog_at),
            )
        )
    print("hog study", results[-1][1], flush=True)
    rows = []
    for label, r in results:
        knobs = _knobs(r["config"])
        rows.append(
            f"| {label} | {r['wall']:.0f} s | {r['trials']} | trial {r['winner']}: {knobs} | "
            f"{r['speedup']:.2f}x ±{r['spread'] / 2:.0%} | {r['noisy']} / {r['remeasured']} | "
            f"{r['foreign_max']:.0%} | {r['over_100']} |"
            if r["speedup"]
            else f"| {label} | {r['wall']:.0f} s | {r['trials']} | {r['findings'][0]} | - | {r['noisy']} / "
            f"{r['remeasured']} | {r['foreign_max']:.0%} | {r['over_100']} |"
        )
    quiet = [r for label, r in results if label == "quiet" and r["speedup"]]
    hog = results[-1][1]
    cross = cross_check(results, CROSS_ROUNDS)
    verdict = "no quiet study had a speedup to compare with"
    if quiet and hog["speedup"]:
        low = min(q["speedup"] * (1 - q["spread"] / 2) for q in quiet)
        high = max(q["speedup"] * (1 + q["spread"] / 2) for q in quiet)
        same = any(q["config"] == hog["config"] for q in quiet)
        verdict = (
            f"the hogged study's winner is {'the same config as' if same else 'another config than'} a "
            f"quiet study's, and its speedup {hog['speedup']:.2f}x is "
            f"{'inside' if low <= hog['speedup'] <= high else 'outside'} the quiet studies' range "
            f"({low:.2f}x..{high:.2f}x: each quiet winner's speedup ± half its spread)"
        )
    said = "\n".join(f"    {line.strip()}" for line in hog["said"][:6])
    tried = "\n".join(f"- {label}: " + "; ".join(_knobs(c) for c in r["sampled"]) for label, r in results)
    return (
        "| study | wall | trials | winner | speedup ± half its runs' spread | noisy / measured again | "
        "highest foreign load | figures over 100% of a ceiling |\n|---|---|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + f"\n\nResult: {verdict}.\n\n{cross}\n\nThe configs each study sampled, in "
        f"order:\n\n{tried}\n\nWhat the hogged study said:\n\n{said}\n"
    )


#: Rounds of the cross-check: each study's winner and the baseline once per round, in turns.
CROSS_ROUNDS = 3


def _knobs(config: dict | None) -> str:
    """The knobs that change something (off, none, false and 0 are the code's own)."""
    return (
        " ".join(f"{k}={v}" for k, v in (config or {}).items() if v not in (False, "none", "off", 0, None))
        or "your code as written"
    )


def cross_check(results: list[tuple[str, dict]], rounds: int) -> str:
    """Every study's winner measured again on the quiet machine, in turns with the baseline:
    tells a study whose search went elsewhere from one whose figures the hog bent."""
    configs: dict[str, tuple[Config, list[str]]] = {"your code as written": (Config(), [])}
    for label, r in results:
        key = _knobs(r["config"])
        configs.setdefault(key, (Config(**(r["config"] or {})), []))[1].append(label)
    rates: dict[str, list[float]] = {key: [] for key in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            for key, (config, _) in configs.items():
                result = one_trial(config, Path(tmp), f"cross-{i}-{len(rates[key])}", Budget(ceiling_windows=0))
                rates[key].append(result.metrics.get("samples_per_s", 0.0))
                print("cross-check", key, f"{rates[key][-1]:,.0f}", result.outcome.value, flush=True)
    base = statistics.median(rates["your code as written"])
    lines = [
        f"**Cross-check**: each study's winner and the baseline measured again on the quiet machine, "
        f"{rounds} rounds in turns (one trial each, default budget):",
        "",
        "| config | winner of | samples/s, median (min..max) | over the baseline's median |",
        "|---|---|---|---|",
    ]
    for key, (_, won) in configs.items():
        lines.append(
            f"| {key} | {', '.join(won) or '-'} | {spread(rates[key], ',.0f')} "
            f"| {statistics.median(rates[key]) / base:.2f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and a shorter study")
    parser.add_argument(
        "--studies-only",
        action="store_true",
        help="run part 3 only; parts 1-2 are kept from the Noise section of the results",
    )
    args = parser.parse_args()
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    n = 3 if args.quick else 10
    trials, confirm, quiet_runs = (6, 1, 1) if args.quick else (12, 2, 2)
    if args.studies_only:
        kept = read_section("noise", "Noise")
        if kept is None:
            parser.error("--studies-only: the page has no Noise section to keep parts 1-2 from; run without it")
        head = kept.split("**Whole studies**", 1)[0].rstrip()
        part3 = studies(trials, confirm, quiet_runs, (40.0, 100.0) if args.quick else (60.0, 200.0))
        write_section(
            "noise",
            "Noise",
            f"""{head}

**Whole studies** (`autotune run runners/mnist.py:train --trials {trials} --confirm {confirm} --seed 0`; run
on their own with `--studies-only`, {time.strftime("%Y-%m-%d")}):

{part3}""",
        )
        return
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        part1, _ = repeats(n, logs)
        part2 = borderline(n, logs)
    part3 = studies(trials, confirm, quiet_runs, (40.0, 100.0) if args.quick else (60.0, 200.0))
    write_section(
        "noise",
        "Noise",
        f"""Machine: {machine()}. `python benchmarks/noise.py{" --quick" if args.quick else ""}`.
The hog is `taskset -c 0 python3 -c 'while True: pass'`; foreign load is the share of the trial's
CPUs that processes outside the trial and its tuner used while it measured (`foreign_cpu`); a trial
is noisy above `--max-load` (20%) or with windows spread over 100%.

**One config, {n} runs each** (the MNIST runner as written, the default budget):

{part1}

A hog on one of 2 cores takes about half of the CPUs the trial may use: every such run is flagged
noisy, so none of these figures would rank, set the pruning bar or be exported; the study measures
them again once the machine is quiet.

**Divergence verdicts of a borderline config**:

{part2}

**Whole studies** (`autotune run runners/mnist.py:train --trials {trials} --confirm {confirm} --seed 0`):

{part3}""",
    )


if __name__ == "__main__":
    main()
