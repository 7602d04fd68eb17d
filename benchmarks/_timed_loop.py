"""A plain training script that times itself (the script the hooks benchmarks run): an MLP on
in-memory tensors, Adam, ``--steps`` timed steps after ``--warmup``; prints ``rate N`` (samples/s).
``loop`` is the same loop for a benchmark that runs it in its own process (hooks_in_process.py)."""

import argparse
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def loop(steps: int, warmup: int) -> float:
    """Samples/s over ``steps`` training steps after ``warmup``."""
    torch.manual_seed(0)
    x = torch.randn(8192, 64)
    y = (x.sum(1) > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, drop_last=True)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    step, began, samples = 0, time.perf_counter(), 0
    while step < warmup + steps:
        for xb, yb in loader:
            if step == warmup:
                began, samples = time.perf_counter(), 0
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
            step += 1
            samples += len(xb)
            if step >= warmup + steps:
                break
    return samples / (time.perf_counter() - began)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=100)
    args = parser.parse_args()
    print(f"rate {loop(args.steps, args.warmup):.1f}")
