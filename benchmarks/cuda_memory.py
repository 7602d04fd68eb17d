"""The measured effect of ``expandable_segments:True`` where reserved CUDA memory swings: the
profile run of ``tests/fixtures/shapes_train.py`` (its sequence length changes every step) with
the caching allocator's default and with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``,
interleaved, ``--repeats`` times each: the step time over the timed window, the reserved and
allocated peaks and the cudaMalloc calls after the warmup (``autotune.core._memline``), median
(min..max). Writes the section ``CUDA memory: expandable_segments (DATE)`` of the results page
(``results/gpu.md`` on a GPU host, as ``benchmarks/gpu.sh`` names it) and
``data/gpu/cuda-memory.json``. Needs a CUDA device.

    python benchmarks/cuda_memory.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from _results import ROOT, data_path, machine, spread, write_section

TOPIC = "gpu"
SETTINGS = ("default", "expandable_segments:True")


def profile_run(alloc: str, tmp: Path, window_s: float) -> dict:
    from autotune import Config
    from autotune.core._memline import MemoryFinding, swing_reason
    from autotune.machine._launch import Budget, TrialSpec
    from autotune.tuner._watch import run_trial

    trace = tmp / f"{alloc.split(':')[0]}-{time.time_ns()}.pt.trace.json.gz"
    spec = TrialSpec(
        f"{ROOT / 'tests/fixtures/shapes_train.py'}:train",
        Config(cuda_alloc_conf=alloc),
        "cuda",
        Budget(warmup_s=1.0, window_s=window_s, windows=1, ceiling_windows=0),
        trace=str(trace),
    )
    result = run_trial(spec, tmp / f"{trace.name}.log")
    if result.profile is None or not result.profile.get("memory"):
        raise RuntimeError(f"{alloc}: {result.outcome.value}: {result.reason}")
    memory = {k: v for k, v in result.profile["memory"].items() if k != "timeline"}
    return {
        "alloc": alloc,
        "step_ms": result.profile["parts"]["step"] * 1e3,
        **memory,
        "swings": swing_reason(MemoryFinding.from_dict(memory)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--window", type=float, default=3.0, help="the timed window's seconds")
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for alloc in SETTINGS if i % 2 == 0 else SETTINGS[::-1]:
                runs.append(profile_run(alloc, Path(tmp), args.window))
                print(json.dumps(runs[-1]), flush=True)
    raw = data_path(TOPIC, "cuda-memory", ".json")
    raw.write_text(json.dumps({"machine": machine(), "window_s": args.window, "runs": runs}, indent=1))
    rows = []
    for alloc in SETTINGS:
        mine = [r for r in runs if r["alloc"] == alloc]
        reserved, allocated = ([r[key] / 2**20 for r in mine] for key in ("reserved_peak", "allocated_peak"))
        rows.append(
            f"| `{alloc}` | {spread([r['step_ms'] for r in mine], '.2f')} | {spread(reserved, '.0f')} "
            f"| {spread(allocated, '.0f')} | {spread([r['mallocs'] for r in mine], '.0f')} "
            f"| {sum(bool(r['swings']) for r in mine)}/{len(mine)} |"
        )
    base = statistics.median(r["step_ms"] for r in runs if r["alloc"] == SETTINGS[0])
    new = statistics.median(r["step_ms"] for r in runs if r["alloc"] == SETTINGS[1])
    body = (
        f"Machine: {machine()}.\n\nCommand: `python benchmarks/cuda_memory.py --repeats {args.repeats} "
        f"--window {args.window}`; raw figures `{raw.relative_to(ROOT / 'benchmarks')}`. The profile run of "
        "`tests/fixtures/shapes_train.py` (a 3-layer MLP, width 1024, batch 32, sequence length drawn from "
        "1..512 each step) with each allocator setting, interleaved; per setting the median (min..max) of "
        "the runs over one timed window after a 1 s warmup.\n\n"
        "| PYTORCH_CUDA_ALLOC_CONF | step ms | reserved peak MiB | allocated peak MiB | cudaMalloc after warmup "
        "| runs that swing |\n|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + f"\n\nStep time with expandable segments: {new / base:.2f}x the default's.\n"
    )
    write_section(TOPIC, f"CUDA memory: expandable_segments ({time.strftime('%Y-%m-%d')})", body)
    print(body)


if __name__ == "__main__":
    main()
