"""Reach: how close the default study's winner comes to the best this machine allows, not only
to its own ceilings. Writes the "Reach" section of ``benchmarks/results/reach.md``, and the raw
figures to ``benchmarks/data/reach/reach-<targets>.json``.

For each target (the shipped runners, and a loader whose items wait like network reads):

1. **study**: ``autotune run TARGET --trials 16`` on the default space, as a user runs it;
2. **sweep**: every point of a wide grid (batch size x DataLoader workers, and bf16 where
   the target computes enough for it to matter) measured once by a trial with a short
   budget, its loss judged against a baseline as a study judges its trials (a point the
   study would refuse never ranks); the grid reaches well past the default space's worker range;
3. **in turns**: the code as written, "all tricks on", the study's winner and the sweep's
   two best points, each measured ``--repeats`` times in turns (a slow drift of the
   machine falls on all alike), with the default budget. Each one's share is its median
   over the best median of the sweep's points.

    python benchmarks/reach.py                       # about 45 minutes on a 2-core CPU
    python benchmarks/reach.py --targets io --trials 6 --repeats 1   # a smoke run
    python benchmarks/reach.py --targets jpeg --studies 3   # three studies' winners, side by side
    python benchmarks/reach.py --targets jpeg --studies 3 --sweep-from benchmarks/data/reach/reach-jpeg.json
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _results import ROOT, data_path, machine, one_trial, spread, write_section
from autotune import Config
from autotune.machine._launch import Budget, new_tag
from autotune.worker._warm import WarmWorker
from harness import all_tricks, changed, cli, load

#: name -> (target, the grid's axes). Workers reach 32x the cores on the waiting loader, 16x on jpeg
#: (whose items wait on storage too).
TARGETS: dict[str, tuple[str, dict[str, list[Any]]]] = {
    "io": (
        f"{ROOT / 'tests' / 'fixtures' / 'io_train.py'}:train",
        {"batch_size": ["1x", "2x", "4x", "8x"], "num_workers": [0, 4, 8, 16, 32, 48, 64]},
    ),
    # every runner's grid crosses malloc_retain: it is in the default space, and it moved
    # mnist by a median 1.18x (benchmarks/results/reach.md)
    "mnist": (
        f"{ROOT / 'runners' / 'mnist.py'}:train",
        {
            "batch_size": ["1x", "2x", "4x", "8x"],
            "num_workers": [0, 1, 2, 4],
            "amp": ["off", "bf16"],
            "malloc_retain": [False, True],
        },
    ),
    "jpeg": (
        f"{ROOT / 'runners' / 'jpeg.py'}:train",
        {
            "batch_size": ["1x", "2x", "4x"],
            "num_workers": [0, 2, 4, 8, 16, 24, 32],
            "amp": ["off", "bf16"],
            "malloc_retain": [False, True],
        },
    ),
    "charlm": (
        f"{ROOT / 'runners' / 'charlm.py'}:train",
        {
            "batch_size": ["1x", "2x", "4x", "8x"],
            "num_workers": [0, 1, 2],
            "amp": ["off", "bf16"],
            "malloc_retain": [False, True],
        },
    ),
    # the model-side knobs instead of bf16, which this runner's CPU size does not use well
    "resnet": (
        f"{ROOT / 'runners' / 'resnet.py'}:train",
        {
            "batch_size": ["1x", "2x", "4x"],
            "num_workers": [0, 2, 4],
            "channels_last": [False, True],
            "compile": ["off", "default"],
        },
    ),
}
#: "All tricks on" adds these where the target hands its model to run.model.
MODEL_TRICKS = {"resnet": {"channels_last": True, "compile": "default"}}
#: Every grid point keeps its workers alive between epochs and lets each hold 4 batches.
SWEEP_FIXED = {"persistent_workers": True, "prefetch_factor": 4}
#: Windows as long as a study's (1.5 s): the jpeg runner's 2.2 s epochs are then two windows or
#: less, so its windows hold whole epochs (``autotune.worker._trial.EPOCH_WINDOWS``); in 1 s windows
#: they were cut across epochs and read 400 or 1,000 samples/s by their phase. Runs before
#: 2026-11-25 used 1 s windows (their JSON has no ``sweep_window_s``).
SWEEP_BUDGET = Budget(warmup_s=1.0, window_s=1.5, windows=3, ceiling_windows=0)
TURN_BUDGET = Budget(ceiling_windows=0)
#: The goal: the study's winner at this share of the sweep's best or more.
GOALS = {"io": 0.80}
GOAL = 0.95


def grid(axes: dict[str, list[Any]]) -> list[Config]:  # type: ignore[valid-type]
    configs = []
    for values in itertools.product(*axes.values()):
        knobs = dict(zip(axes, values))
        if knobs["num_workers"]:  # (the loader's other knobs mean nothing without workers)
            knobs.update(SWEEP_FIXED)
        if knobs["batch_size"] != "1x":
            knobs["lr_scaling"] = "linear"
        configs.append(Config(**knobs))
    return configs


def rate(
    target: str, config: Config, budget: Budget, warm: WarmWorker, logs: Path, seed: int = 0, reference: Any = None
) -> tuple[float | None, str]:
    """samples/s of one trial (None, with a line saying why, if it did not complete) and its
    outcome; its loss judged against ``reference`` (a baseline's result) if given."""
    result = one_trial(target, config, budget, logs, seed=seed, warm=warm, strict=False, reference=reference)
    return (result.metrics["samples_per_s"] if result.outcome.value == "complete" else None), result.outcome.value


def one_study(name: str, target: str, args: argparse.Namespace, index: int) -> tuple[dict[str, Any], Config]:  # type: ignore[valid-type]
    """A default study of ``args.trials`` trials: what it said, and its winner's config."""
    from autotune.tuner._standing import findings, read_standing

    study = f"reach-{name}-{datetime.datetime.now():%Y%m%d-%H%M}" + (f"-{index + 1}" if args.studies > 1 else "")
    started = time.monotonic()
    cli(
        "run",
        target,
        "--trials",
        str(args.trials),
        "--study",
        study,
        "--store",
        str(args.store.resolve()),
        cwd=args.store,
    )
    wall = time.monotonic() - started
    standing = read_standing(load(args.store, study))
    winner = Config(**standing.best.sampled) if standing.best is not None else Config()
    from _spent import spent

    return {"study": study, "wall": wall, "findings": findings(standing), "spent": spent(args.store, study)}, winner


def winner_label(args: argparse.Namespace, index: int) -> str:
    return (
        f"study {index + 1} winner ({args.trials} trials)"
        if args.studies > 1
        else f"study winner ({args.trials} trials)"
    )


def one_target(name: str, args: argparse.Namespace, warm: WarmWorker, logs: Path) -> dict[str, Any]:
    target, axes = TARGETS[name]
    studies, winners = [], {}
    for index in range(args.studies):
        said, winners[winner_label(args, index)] = one_study(name, target, args, index)
        studies.append(said)

    started = time.monotonic()
    earlier = swept(args.sweep_from, name) if args.sweep_from else None
    if earlier:  # (its points are ranked as they were; the turns below measure its best two again)
        sweep = [(Config(**c), r, o) for c, r, o in earlier["sweep"]]
        sweep_wall = earlier["sweep_wall"]
    else:
        # every point's loss judged as a study judges its trials: against a baseline measured as a
        # study measures its own (until its loss has fallen), at the same seed; a point the study
        # would refuse (a 4x batch that learns too little per sample) is never the sweep's best
        base = one_trial(target, Config(), TURN_BUDGET.learning(), logs, warm=warm)
        sweep = []
        for config in grid(axes):
            measured, outcome = rate(target, config, SWEEP_BUDGET, warm, logs, reference=base)
            sweep.append((config, measured, outcome))
            print(f"{name} sweep {changed(config.set_values())}: {measured or 0:,.0f} {outcome}", file=sys.stderr)
        sweep_wall = time.monotonic() - started
    ranked = sorted((s for s in sweep if s[1]), key=lambda s: s[1], reverse=True)
    tricks = Config(**{**all_tricks().set_values(), **MODEL_TRICKS.get(name, {})})
    contenders = {"code as written": Config(), "all tricks on": tricks, **winners}
    for i, (config, *_) in enumerate(ranked[:2]):
        contenders[f"sweep #{i + 1}"] = config
    runs: dict[str, list[float]] = {label: [] for label in contenders}
    for turn in range(args.repeats):
        for label, config in contenders.items():
            measured, _ = rate(target, config, TURN_BUDGET, warm, logs, seed=turn)
            if measured is not None:
                runs[label].append(measured)
            print(f"{name} {label} run {turn + 1}: {measured or 0:,.0f}", file=sys.stderr)
    return {
        "target": name,
        "studies": studies,
        "sweep_wall": sweep_wall,
        "sweep_window_s": SWEEP_BUDGET.window_s,
        "sweep_from": earlier["file"] if earlier else None,
        "sweep_points": len(sweep),
        "sweep_failed": sum(1 for s in sweep if not s[1]),
        "sweep_diverged": sum(1 for s in sweep if s[2] == "diverged"),
        "sweep_judged": True,
        "configs": {k: v.set_values() for k, v in contenders.items()},
        "runs": runs,
        "sweep": [(c.set_values(), r, o) for c, r, o in sweep],
    }


def swept(paths: list[Path], name: str) -> dict[str, Any]:
    """The sweep of ``name`` in earlier runs' raw figures (``--sweep-from``): the first file
    that holds one. Asked for every target before the first study (a file without a judged
    sweep stopped the script after a study of 8 minutes)."""
    for path in paths:
        for res in json.loads(path.read_text())["results"]:
            if res["target"] == name:
                if not res.get("sweep_judged"):
                    sys.exit(f"{path}: its {name} sweep judged no loss; sweep again")
                return {**res, "file": str(path)}
    sys.exit(f"--sweep-from: no sweep of {name} in {', '.join(map(str, paths))}")


def render(results: list[dict[str, Any]], args: argparse.Namespace, where: str) -> str:
    # (from the results, not this invocation's args: --from-json renders runs made with others)
    studies = max(len(res.get("studies") or [res]) for res in results)
    lines = [
        f"Machine: {where}. `python benchmarks/reach.py --trials {args.trials} --repeats {args.repeats}"
        + (f" --studies {studies}" if studies > 1 else "")
        + "`.",
        "",
        "For each target: a default study of "
        f"{args.trials} trials (`autotune run`, default space and budget); a sweep of a wide grid "
        f"(each point one trial of {SWEEP_BUDGET.windows} windows of {sweep_windows(results)}"
        + (
            ", at the seed of a baseline it is judged against as a study judges its trials"
            if all(res.get("sweep_judged") for res in results)
            else ""
        )
        + "; "
        "workers with `persistent_workers` and `prefetch_factor: 4`, batches above 1x with linear lr "
        f"scaling); then the code as written, all tricks on, the study's winner and the sweep's two "
        f"best points, {args.repeats} times in turns with the default budget. *share*: the median over "
        "the best median of the sweep's points. Goal: the study's winner at 80% or more of "
        "the sweep's best on the waiting loader (`io`), 95% or more on the shipped runners.",
        "",
        "| target | config | knobs | samples/s | share of sweep's best |",
        "|---|---|---|---|---|",
    ]
    notes = []
    for res in results:
        medians = {k: statistics.median(v) for k, v in res["runs"].items() if v}
        best = max((m for k, m in medians.items() if k.startswith("sweep")), default=None)
        for label, values in res["runs"].items():
            share = f"{medians[label] / best:.0%}" if values and best else "n/a"
            figures = spread(values, ",.0f") if values else "did not complete"
            lines.append(f"| {res['target']} | {label} | {changed(res['configs'][label])} | {figures} | {share} |")
        # (runs before --studies: one study, its name, wall and findings at the top)
        studies = res.get("studies") or [
            {"study": res["study"], "wall": res["study_wall"], "findings": res["findings"]}
        ]
        winners = [k for k in res["runs"] if k.startswith("study")]
        goal = GOALS.get(res["target"], GOAL)
        met = sum(1 for w in winners if w in medians and best and medians[w] / best >= goal)
        verdict = ("met" if met else "NOT met") if len(winners) == 1 else f"met by {met} of {len(winners)} studies"
        notes.append(
            f"- **{res['target']}**: "
            + ", ".join(f"study `{s['study']}` in {s['wall'] / 60:.1f} min" for s in studies)
            + f"; sweep of {res['sweep_points']} points in {res['sweep_wall'] / 60:.1f} min "
            + (f"(taken from `{Path(res['sweep_from']).name}`) " if res.get("sweep_from") else "")
            + f"({sweep_outcomes(res)}); goal {goal:.0%}: {verdict}."
        )
        for s in studies:
            who = f"study `{s['study']}`" if len(studies) > 1 else "the study"
            notes += [f"  - {who} said: {line}" for line in s["findings"]]
            if "spent" in s:  # (a run from before it was recorded has none)
                from _spent import said

                notes.append(f"  - trials spent on a losing value: {said(s['spent'])}")
    return "\n".join(lines + [""] + notes)


def sweep_outcomes(res: dict[str, Any]) -> str:
    """How many sweep points did not count, and why (runs before 2026-11-25 judged no loss)."""
    if not res.get("sweep_judged"):
        return f"{res['sweep_failed']} did not complete; no loss judged"
    diverged = res["sweep_diverged"]
    return (
        f"{diverged} judged diverged against a baseline, as a study judges, "
        f"{res['sweep_failed'] - diverged} did not complete otherwise"
    )


def sweep_windows(results: list[dict[str, Any]]) -> str:
    """The sweep's window length, per target where the runs rendered together differ."""
    lengths = {res["target"]: res.get("sweep_window_s", 1.0) for res in results}
    if len(set(lengths.values())) == 1:
        return f"{next(iter(lengths.values())):g} s"
    return ", ".join(f"{seconds:g} s ({name})" for name, seconds in lengths.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", nargs="*", default=list(TARGETS), choices=list(TARGETS))
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--studies",
        type=int,
        default=1,
        help="default studies per target, each its own winner in the turns: one study's luck is not the search's",
    )
    parser.add_argument("--store", type=Path, default=ROOT / "mlflow")
    parser.add_argument(
        "--sweep-from",
        type=Path,
        nargs="+",
        help="earlier runs' raw figures (same machine): take each target's sweep from them instead "
        "of sweeping again; the turns still measure its best two beside the studies' winners",
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        nargs="+",
        help="render the table again from runs' raw figures (one file per run, in order)",
    )
    args = parser.parse_args()
    if args.from_json:
        raws = [json.loads(path.read_text()) for path in args.from_json]
        machines = dict.fromkeys(raw["machine"] for raw in raws)  # the same machine, on the days it ran
        write_section(
            "reach", "Reach", render([res for raw in raws for res in raw["results"]], args, " / ".join(machines))
        )
        return
    for name in args.targets if args.sweep_from else ():
        swept(args.sweep_from, name)  # (exits now, not after a study, when one is missing)
    args.store.mkdir(parents=True, exist_ok=True)
    logs = args.store / "reach-logs"
    logs.mkdir(exist_ok=True)
    results = []
    warm = WarmWorker(os.environ, new_tag())
    try:
        for name in args.targets:
            results.append(one_target(name, args, warm, logs))
            raw = {"machine": machine(), "args": vars(args) | {"store": str(args.store)}, "results": results}
            data_path("reach", f"reach-{'-'.join(args.targets)}", ".json").write_text(
                json.dumps(raw, indent=1, default=str) + "\n"
            )
    finally:
        warm.close()
    body = render(results, args, machine())
    write_section("reach", "Reach", body)
    print(body)


if __name__ == "__main__":
    main()
