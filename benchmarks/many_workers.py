"""Trial vs a plain loop at many DataLoader workers, on an I/O-bound loader: what a trial
costs where it is most at risk (the monitor walks the worker tree and reads each worker's
RSS/PSS, the worker sends its events), at 2, 8, 32 and 64 workers. Writes the "Trial vs
plain loop, many workers" section of ``benchmarks/results/trial-vs-production.md`` and the
raw figures to ``benchmarks/data/trial-vs-production/many-workers.json``.

The workload: 8,192 items that each wait ``--wait-ms`` (a read from storage) and a linear
model, batch 64, shuffled, workers kept across epochs (``persistent_workers``), so the
loader's workers are the bottleneck and their number sets the rate (500 items/s per worker
at 2 ms). Per worker count, in turns (which one first drawn per turn):

- **trial**: a real trial of ``train`` (this file) under ``Config(num_workers=N,
  persistent_workers=True)``, as a study runs it (its own process, spawned cold, the
  tuner's monitor watching, the Trial's windows): its samples/s, the median of its windows;
- **plain**: the same loop written by hand (``plain``: a DataLoader with the same kwargs, no
  autotune), in its own process, timed over the same warmup and windows: the median window.

A turn's figure is trial / plain; the result per count is the median of the turns and their
range. The two run one after the other, a few seconds apart, not in the same seconds: the
machine's drift between them lands in the spread (a loader that waits on a timer cannot be
stopped and resumed as ``interleaved.py`` does without its waits elapsing meanwhile).

    python benchmarks/many_workers.py                      # about 10 minutes on a 2-core CPU
    python benchmarks/many_workers.py --workers 2 --turns 1 --window 0.5  # a smoke run
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

TOPIC = "trial-vs-production"
ITEMS, BATCH, FEATURES = 8192, 64, 32


class Reads(Dataset):
    """``ITEMS`` rows that each wait ``wait_s`` (the read), like a loader on remote storage."""

    def __init__(self, wait_s: float) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(ITEMS, FEATURES, generator=g)
        self.y = (self.x.sum(1) > 0).long()
        self.wait_s = wait_s

    def __len__(self) -> int:
        return ITEMS

    def __getitem__(self, i: int):
        time.sleep(self.wait_s)
        return self.x[i], self.y[i]


def _wait_s() -> float:
    import os

    return float(os.environ.get("MANY_WORKERS_WAIT_MS", "2")) / 1000


def train(run) -> None:
    """The trial's side: the loop through autotune's ``Run`` handle."""
    torch.set_num_threads(1)
    model = torch.nn.Linear(FEATURES, 2).to(run.device)
    loader = run.dataloader(Reads(_wait_s()), batch_size=BATCH, shuffle=True, drop_last=True)
    opt = run.optimizer(torch.optim.SGD, model.parameters(), lr=0.1)
    while True:
        for x, y in run.batches(loader):
            run.step(F.cross_entropy(model(x), y), opt)


def plain(workers: int, warmup_s: float, window_s: float, windows: int) -> list[float]:
    """The same loop by hand: samples/s of each window after the warmup."""
    torch.set_num_threads(1)
    model = torch.nn.Linear(FEATURES, 2)
    loader = DataLoader(
        Reads(_wait_s()),
        batch_size=BATCH,
        shuffle=True,
        drop_last=True,
        num_workers=workers,
        persistent_workers=workers > 0,
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rates: list[float] = []
    began, samples, warm = None, 0, False
    while len(rates) < windows:
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            now = time.perf_counter()
            if began is None:
                began = now  # the first batch: the warmup starts, as a trial's does
            elif not warm and now - began >= warmup_s:
                warm, began, samples = True, now, 0
            elif warm:
                samples += len(x)
                if now - began >= window_s:
                    rates.append(samples / (now - began))
                    began, samples = now, 0
                    if len(rates) == windows:
                        break
    return rates


def turn(workers: int, args: argparse.Namespace, logs: Path) -> dict[str, float]:
    from _results import one_trial
    from autotune import Config
    from autotune.machine._launch import Budget

    budget = Budget(warmup_s=args.warmup, window_s=args.window, windows=args.windows, ceiling_windows=0)
    figures: dict[str, float] = {}
    for arm in random.sample(["trial", "plain"], 2):
        if arm == "trial":
            result = one_trial(
                f"{Path(__file__).resolve()}:train", Config(num_workers=workers, persistent_workers=True), budget, logs
            )
            figures["trial"] = result.metrics["samples_per_s"]
        else:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--plain",
                    str(workers),
                    "--warmup",
                    str(args.warmup),
                    "--window",
                    str(args.window),
                    "--windows",
                    str(args.windows),
                ],
                capture_output=True,
                text=True,
                check=True,
                timeout=300,
            )
            figures["plain"] = statistics.median(json.loads(out.stdout.splitlines()[-1]))
    figures["ratio"] = figures["trial"] / figures["plain"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 8, 32, 64])
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--window", type=float, default=2.0)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--wait-ms", type=float, default=2.0, help="each item's read (default 2)")
    parser.add_argument("--plain", type=int, help=argparse.SUPPRESS)  # the plain arm's own process
    args = parser.parse_args()
    import os

    os.environ.setdefault("MANY_WORKERS_WAIT_MS", str(args.wait_ms))  # (the trial's and the plain loop's processes)
    if args.plain is not None:
        print(json.dumps(plain(args.plain, args.warmup, args.window, args.windows)))
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _results import data_path, machine, spread, write_section

    runs: dict[int, list[dict[str, float]]] = {}
    began = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for t in range(args.turns):
            for workers in random.sample(args.workers, len(args.workers)):
                figures = turn(workers, args, Path(tmp))
                runs.setdefault(workers, []).append(figures)
                print(
                    f"turn {t + 1}, {workers} workers: trial {figures['trial']:,.0f}, plain {figures['plain']:,.0f} "
                    f"samples/s: {figures['ratio']:.1%}",
                    flush=True,
                )
    minutes = (time.time() - began) / 60
    data = data_path(TOPIC, "many-workers", ".json")
    data.write_text(json.dumps({"machine": machine(), "args": vars(args), "runs": runs}, indent=1))
    rows = ["| workers | trial samples/s | plain loop samples/s | trial / plain, per turn |", "|---|---|---|---|"]
    for workers in sorted(runs):
        rows.append(
            f"| {workers} | {spread([r['trial'] for r in runs[workers]], ',.0f')} | "
            f"{spread([r['plain'] for r in runs[workers]], ',.0f')} | "
            f"{spread([100 * r['ratio'] for r in runs[workers]], '.1f')}% |"
        )
    body = "\n".join(
        [
            (
                f"Command: `python benchmarks/many_workers.py --turns {args.turns} --wait-ms {_wait_s() * 1000:g}` "
                f"(warmup {args.warmup:g} s, {args.windows} windows of {args.window:g} s; {minutes:.0f} min)."
            ),
            "",
            f"Machine: {machine()}.",
            "",
            "Medians over the turns, with their range. Goal: a trial within 3% of the plain loop at every count.",
            "",
            *rows,
        ]
    )
    write_section(TOPIC, "Trial vs plain loop, many workers (I/O-bound loader)", body)


if __name__ == "__main__":
    main()
