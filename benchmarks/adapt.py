"""The adaptive loader in production (``autotune.load(path, adapt=True)``), two measures:

1. **Storage slows 4x mid-run**: a recipe of ``num_workers: 2`` trains for ``--seconds`` on a
   loader of 1,024 reads an epoch that wait 2 ms, then 8 ms from 3 s on; samples/s over the epochs that began
   4 s after the change, without and with ``adapt`` (goal: with at least 1.5x without), and
   the moves it made.
2. **A steady loader**: 1,024 reads of 0.2 ms that never slow on 4 persistent workers, feeding a
   ``--steady-step-ms`` step (20: the export right for its loader, which keeps ahead of the loop,
   so there is nothing to move and what ``adapt`` costs shows), interleaved turns without and
   with ``adapt`` (goal: ``adapt`` costs under 2%); the share of its time the loop waited
   without ``adapt`` is recorded, to show that it was steady on the host.

Writes the section ``Adaptive loader (DATE)`` of ``results/production.md`` and
``data/production/adapt.json`` (``adapt-steady[-Nms].json`` for ``--cases steady``).

    python benchmarks/adapt.py --turns 5
    python benchmarks/adapt.py --turns 5 --cases steady
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _results import ROOT, data_path, machine, spread, write_section

sys.path.insert(0, str(ROOT / "tests" / "process"))
sys.path.insert(0, str(ROOT / "tests" / "lib"))
TOPIC = "production"


def run(adapt: bool, seconds: float, slows: bool, persistent: bool = False, step_s: float = 0.02) -> dict:
    from test_adapt import SLOW_AFTER_S, rate_after, train, waited_after

    import autotune

    with tempfile.TemporaryDirectory() as tmp:
        export = Path(tmp) / "best.yaml"
        # Slowing: reads of 2 ms (8 ms later) on 2 workers. Steady: reads of 0.2 ms on 4 workers
        # feeding a ``step_s`` step, the export right for its loader: nothing to move, the cost shows.
        # (1,024 reads an epoch: at 256, an epoch at 8 fresh workers lasted about as long as starting
        # them, and on a 2-CPU host whose forks are slow a move up gained nothing, and was undone.
        # A 5 ms step was not steady on a sandboxed host: taking a batch from a worker's pipe cost
        # the loop about 30% of its time there, and adapt tried more workers in every run.)
        workers, reads = (2, {"n": 1024}) if slows else (4, {"read_s": 0.0002, "slower": 1.0, "n": 1024})
        step_s = 0.0 if slows else step_s
        export.write_text(
            f"dataloader:\n  num_workers: {workers}\n  prefetch_factor: 2\n"
            f"  persistent_workers: {str(persistent or not slows).lower()}\n"
        )
        recipe = autotune.load(export, "cpu", adapt=adapt, quiet=True)
        epochs = train(recipe, seconds, step_s, **reads)
    moves = [m.why for m in recipe.adaptive.moves] if recipe.adaptive else []
    settle = SLOW_AFTER_S + 1.0 if slows else 1.0
    return {
        "adapt": adapt,
        "rate": rate_after(epochs, settle - SLOW_AFTER_S),
        "moves": moves,
        "epochs": len(epochs),
        "waited": waited_after(epochs, settle - SLOW_AFTER_S),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--persistent", action="store_true", help="the slowed loader's workers persistent too")
    parser.add_argument("--steady-step-ms", type=float, default=20.0, help="the steady loader's step, slept")
    parser.add_argument("--cases", default="slowed,steady", help="slowed, steady or both (comma-separated)")
    args = parser.parse_args()
    cases = {c.strip() for c in args.cases.split(",")}
    if not cases or cases - {"slowed", "steady"}:
        parser.error(f"--cases {args.cases}: allowed are slowed, steady, or both")
    slowed: list[dict] = []
    steady: list[dict] = []
    for i in range(args.turns):
        order = (False, True) if i % 2 == 0 else (True, False)
        if "slowed" in cases:
            slowed.append({a: run(a, args.seconds, True, args.persistent) for a in order})
        if "steady" in cases:
            steady.append({a: run(a, args.seconds, False, step_s=args.steady_step_ms / 1000) for a in order})
        print(
            json.dumps(
                {
                    "slowed": {str(k): v for k, v in (slowed or [{}])[-1].items()},
                    "steady": {str(k): v for k, v in (steady or [{}])[-1].items()},
                }
            ),
            flush=True,
        )
    name = "adapt-persistent" if args.persistent else "adapt"
    steady_name = "adapt-steady" + (f"-{args.steady_step_ms:g}ms" if args.steady_step_ms != 20 else "")
    raw = data_path(TOPIC, name if "slowed" in cases else steady_name, ".json")
    raw.write_text(
        json.dumps(
            {
                "machine": machine(),
                "seconds": args.seconds,
                "steady_step_ms": args.steady_step_ms,
                "slowed": [{str(k): v for k, v in t.items()} for t in slowed],
                "steady": [{str(k): v for k, v in t.items()} for t in steady],
            },
            indent=1,
        )
    )
    command = (
        f"python benchmarks/adapt.py --turns {args.turns} --seconds {args.seconds:g}"
        f"{' --persistent' * args.persistent}"
        + (f" --cases {args.cases}" if cases != {"slowed", "steady"} else "")
        + (f" --steady-step-ms {args.steady_step_ms:g}" if "steady" in cases and args.steady_step_ms != 20 else "")
    )
    body = f"Machine: {machine()}.\n\nCommand: `{command}`; raw figures `{raw.relative_to(ROOT / 'benchmarks')}`. "
    if slowed:
        gain = [t[True]["rate"] / t[False]["rate"] for t in slowed]
        body += (
            f"The recipe: `num_workers: 2`, `persistent_workers: {str(args.persistent).lower()}`, "
            "`prefetch_factor: 2`, batch 16 over 1,024 reads (tests/process/test_adapt.py's loader). "
        )
    if steady:
        body += (
            f"The steady one: `num_workers: 4` persistent, 1,024 reads of 0.2 ms, a {args.steady_step_ms:g} ms step. "
        )
    body += "Turns interleaved, the order alternating.\n\n"
    if slowed:
        body += (
            f"- **Storage 4x slower from 3 s on**: samples/s over the epochs from 4 s after the change, without "
            f"`adapt` {spread([t[False]['rate'] for t in slowed], ',.0f')}, with it "
            f"{spread([t[True]['rate'] for t in slowed], ',.0f')}: **{spread(gain, '.2f')}x** (goal: at least "
            f"1.5x). The moves of the last turn: {'; '.join(slowed[-1][True]['moves']) or 'none'}.\n"
        )
    if steady:
        cost = [100 * t[True]["rate"] / t[False]["rate"] for t in steady]
        body += (
            f"- **A steady loader**: with `adapt` **{spread(cost, '.1f')}%** of the rate without it "
            f"(goal: over 98%; medians {statistics.median(t[True]['rate'] for t in steady):,.0f} and "
            f"{statistics.median(t[False]['rate'] for t in steady):,.0f} samples/s); without `adapt` the loop "
            f"waited {spread([100 * t[False]['waited'] for t in steady], '.1f')}% of its time for batches; "
            f"moves made: {sum(len(t[True]['moves']) for t in steady)} in {args.turns} turns.\n"
        )
    title = (
        "Adaptive loader"
        + (", persistent workers" if args.persistent else "")
        + (", steady loader" if not slowed else "")
    )
    write_section(TOPIC, f"{title} ({time.strftime('%Y-%m-%d')})", body)
    print(body)


if __name__ == "__main__":
    main()
