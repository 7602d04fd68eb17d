"""ResNet on photo crops: a runner that loads a GPU.

Workload: which of three photographs does a crop come from? Every item decodes a
real JPEG tile with Pillow, takes a random crop and a horizontal flip (the jpeg
runner's data, ``jpeg.JpegTiles``, with bigger tiles and no storage latency); a
ResNet with batch norm (BasicBlocks, two per stage, four stages) trains on them with
SGD and Nesterov momentum, the model handed to ``run.model``.

Sized so that every kind of knob matters on a GPU: at the CUDA size (width 64,
128-pixel crops, batch 128) the network costs about 2 GFLOPs per image forward,
enough to keep an H100 busy, so AMP (tensor cores), ``channels_last`` (convolutions
and batch norm in NHWC), ``cudnn_benchmark`` and ``compile`` change the step time,
while decoding and augmenting 128-pixel crops costs the loader about a millisecond of
CPU per image, so the DataLoader workers decide whether the GPU is fed. On the CPU
the same code trains a narrow network on 64-pixel crops (batch 32), so a study
finishes on a laptop; ``width``, ``crop`` and ``batch_size`` override either size.

Data: scikit-learn's and matplotlib's sample photographs (see ``runners/jpeg.py``).

Production: ``python runners/resnet.py best.yaml`` (or no argument for PyTorch's
defaults).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import autotune

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the data: runners/jpeg.py
from jpeg import SOURCES, JpegTiles  # noqa: E402

#: (width, tile, crop, batch size) by device type: what fills an H100, and a study-sized CPU run.
SIZES = {"cuda": (64, 144, 128, 128), "cpu": (16, 80, 64, 32)}
N_TILES = 4096


def make_dataset(n_tiles: int = N_TILES, *, tile: int = 144, crop: int = 128) -> JpegTiles:
    """Decoded, augmented photo crops: ``n_tiles`` JPEG tiles of ``tile`` pixels, each item a
    random ``crop`` with a random horizontal flip (about 0.7 s to build 4,096 tiles)."""
    return JpegTiles(n_tiles, latency_ms=0, tile=tile, crop=crop)


class Block(nn.Module):
    """A residual BasicBlock: two 3x3 convolutions with batch norm, a projected shortcut
    where the shape changes."""

    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut = (
            nn.Identity()
            if stride == 1 and inputs == outputs
            else nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride=stride, bias=False), nn.BatchNorm2d(outputs))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet(nn.Module):
    """A ResNet-18-shaped network: a strided 3x3 stem, four stages of two blocks
    (``width``, 2x, 4x, 8x channels; stages 2-4 halve the resolution), a linear head.

    Example:
        >>> ResNet(width=8)(torch.zeros(2, 3, 32, 32)).shape
        torch.Size([2, 3])
    """

    def __init__(self, width: int = 64, classes: int = len(SOURCES)) -> None:
        super().__init__()
        if width < 1:
            raise ValueError(f"width must be >= 1, but got width={width}")
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()
        )
        stages, channels = [], width
        for i, outputs in enumerate((width, 2 * width, 4 * width, 8 * width)):
            stride = 1 if i == 0 else 2
            stages += [Block(channels, outputs, stride), Block(outputs, outputs, 1)]
            channels = outputs
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (B, classes) for images (B, 3, H, W)."""
        return self.head(self.stages(self.stem(x)).mean((2, 3)))


def train(
    run: autotune.Run,
    *,
    epochs: int = 100,
    width: int | None = None,
    crop: int | None = None,
    batch_size: int | None = None,
) -> None:
    """Train the ResNet; under tuning the step budget ends the run.

    Args:
        run: A tuning trial or a production recipe.
        epochs: Passes over the tiles (32 steps each at the CUDA size).
        width, crop, batch_size: Override the size for ``run.device`` (``SIZES``).
    """
    default_width, tile, default_crop, default_batch = SIZES["cuda" if run.device.type == "cuda" else "cpu"]
    crop = crop or default_crop
    model = run.model(ResNet(width or default_width))
    loader = run.dataloader(
        make_dataset(tile=max(tile, crop), crop=crop),
        batch_size=batch_size or default_batch,
        shuffle=True,
        drop_last=True,
    )
    # lr 0.1 for batch 128 (Goyal et al.'s 0.1 per 256, doubled for this small, easy task)
    opt = run.optimizer(
        torch.optim.SGD,
        model.parameters(),
        lr=0.1 * (batch_size or default_batch) / 128,
        momentum=0.9,
        nesterov=True,
        weight_decay=5e-4,
    )
    model.train()
    for _ in range(epochs):
        for x, y in run.batches(loader):
            with run.autocast():
                loss = F.cross_entropy(model(x), y)
            run.step(loss, opt)


if __name__ == "__main__":
    train(autotune.load(sys.argv[1] if len(sys.argv) > 1 else None))
