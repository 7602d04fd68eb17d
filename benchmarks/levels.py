"""Where the MNIST runner's run-to-run spread comes from: within a process or between processes.

A plain hand-written PyTorch loop over the MNIST runner's data and model (no autotune: no
trial, no monitor, no Recipe), started ``--runs`` times as fresh processes one after another;
each reports samples/s over windows of ``--window`` s after a warm-up window, and the minor
page faults a second and the share of its CPU time spent in the kernel over those windows.
With ``--bind``, every other run sets ``OMP_PROC_BIND=true`` (torch's intra-op threads pinned
to CPUs), to see whether thread placement decides a run's level; with ``--retain``, every other
run first tells glibc's malloc to keep freed memory (``autotune.machine._malloc.retain``, the
``malloc_retain`` knob), to see whether the heap's give-back-and-fault-again decides it.

It prints, and records in ``benchmarks/data/levels/levels.json`` (``levels-retained.json``
with ``--retain``): the spread of windows inside each run, the spread
of the runs' medians, and how alike two runs in a row are (per group, the correlation of
each run's median with the next one's; near 0 when each process draws its level anew, near
1 when the machine drifts slowly and neighbours share it).

    python benchmarks/levels.py                    # 16 runs of 10 s (about 4 minutes)
    python benchmarks/levels.py --runs 20 --bind
    python benchmarks/levels.py --runs 24 --retain
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from _results import ROOT, data_path, machine

#: The child: the runner's dataset and model, the loop as a user writes it, per-window rates on stdout.
LOOP = """
import json, os, sys, time
sys.path.insert(0, {runners!r})
import torch, torch.nn.functional as F
from mnist import Net, make_dataset
if {retain}:
    from autotune.machine._malloc import retain
    retain()
def usage():  # minor faults, user and system CPU seconds, from /proc/self/stat
    fields = open("/proc/self/stat").read().rpartition(")")[2].split()
    return int(fields[7]), int(fields[11]) / TICK, int(fields[12]) / TICK
TICK = os.sysconf("SC_CLK_TCK")
torch.manual_seed(0)
loader = torch.utils.data.DataLoader(make_dataset(), batch_size=64, shuffle=True, drop_last=True)
model = Net()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
seconds, window = {seconds}, {window}
start = mark = time.perf_counter()
samples, rates = 0, []
while time.perf_counter() - start < seconds:
    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        samples += len(x)
        now = time.perf_counter()
        if now - mark >= window:
            rates.append(samples / (now - mark))
            mark, samples = now, 0
            if len(rates) == 1:  # the first window warms up: count from its end
                begun, first = now, usage()
        if now - start >= seconds:
            break
faults, user, system = (b - a for a, b in zip(first, usage()))
print(json.dumps({{"rates": rates[1:], "faults_per_s": faults / (now - begun),
                  "system_share": system / max(user + system, 1e-9)}}))
"""


def run_once(seconds: float, window: float, bind: bool, retain: bool) -> dict:
    env = dict(os.environ, **({"OMP_PROC_BIND": "true"} if bind else {}))
    code = LOOP.format(runners=str(ROOT / "runners"), seconds=seconds, window=window, retain=retain)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def lag_correlation(values: list[float]) -> float | None:
    """Pearson correlation of each value with the next; None under 3 values or no variance."""
    if len(values) < 3:
        return None
    a, b = values[:-1], values[1:]
    try:
        return statistics.correlation(a, b)
    except statistics.StatisticsError:
        return None


def rel_spread(values: list[float]) -> float:
    """(max - min) / median."""
    return (max(values) - min(values)) / statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0, help="per run, the warm-up window included")
    parser.add_argument("--window", type=float, default=2.0)
    varied = parser.add_mutually_exclusive_group()
    varied.add_argument("--bind", action="store_true", help="every other run with OMP_PROC_BIND=true")
    varied.add_argument(
        "--retain", action="store_true", help="every other run with glibc's malloc keeping freed memory (malloc_retain)"
    )
    args = parser.parse_args()
    other = "bound" if args.bind else "retained" if args.retain else None
    runs = []
    for index in range(args.runs):
        changed = other is not None and index % 2 == 1
        found = run_once(args.seconds, args.window, changed and args.bind, changed and args.retain)
        rates = found["rates"]
        if not rates:
            parser.error(f"--seconds {args.seconds} leaves no window past the warm-up one ({args.window} s each)")
        runs.append(
            {
                "group": other if changed else "free",
                "windows": rates,
                "median": statistics.median(rates),
                "faults_per_s": found["faults_per_s"],
                "system_share": found["system_share"],
            }
        )
        print(
            f"run {index + 1:2d}{' ' + other if changed else ''}: {statistics.median(rates):7,.0f} samples/s, "
            f"{found['faults_per_s']:7,.0f} faults/s, {found['system_share']:4.0%} in the kernel, "
            f"windows {', '.join(f'{r:,.0f}' for r in rates)}",
            flush=True,
        )
    within = [rel_spread(r["windows"]) for r in runs]
    summary = {"within_run_spread_median": statistics.median(within)}
    for label in ("free", other):
        chosen = [r for r in runs if r["group"] == label]
        if len(chosen) > 1:
            medians = [r["median"] for r in chosen]
            summary[label] = {
                "runs": len(medians),
                "median": statistics.median(medians),
                "min": min(medians),
                "max": max(medians),
                "between_run_spread": rel_spread(medians),
                "faults_per_s_median": statistics.median(r["faults_per_s"] for r in chosen),
                "system_share_median": statistics.median(r["system_share"] for r in chosen),
            }
            if label == "free" and len(chosen) > 2:  # does a run's kernel time tell its level?
                summary[label]["rate_vs_faults_correlation"] = statistics.correlation(
                    medians, [r["faults_per_s"] for r in chosen]
                )
            # within the group: with --bind the runs alternate, and a correlation across both
            # groups would measure that alternation, not the machine's drift
            summary[label]["lag1_correlation"] = lag_correlation(medians)
    data_path("levels", "levels-retained" if args.retain else "levels", ".json").write_text(
        json.dumps({"machine": machine(), "args": vars(args), "summary": summary, "runs": runs}, indent=1) + "\n"
    )
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
