"""A plain training script that times itself (the script the hooks benchmark runs): an MLP on
in-memory tensors, Adam, ``--steps`` timed steps after ``--warmup``; prints ``rate N`` (samples/s)."""

import argparse
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3000)
parser.add_argument("--warmup", type=int, default=100)
args = parser.parse_args()
torch.manual_seed(0)
x = torch.randn(8192, 64)
y = (x.sum(1) > 0).long()
loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, drop_last=True)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
step, began, samples = 0, None, 0
while step < args.warmup + args.steps:
    for xb, yb in loader:
        if step == args.warmup:
            began, samples = time.perf_counter(), 0
        opt.zero_grad()
        F.cross_entropy(model(xb), yb).backward()
        opt.step()
        step += 1
        samples += len(xb)
        if step >= args.warmup + args.steps:
            break
print(f"rate {samples / (time.perf_counter() - began):.1f}")
