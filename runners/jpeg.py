"""JPEG tiles: a loader-bound image classifier.

Workload: which of three photographs does a 96x96 tile come from? Every item
waits out a storage latency, decodes a real JPEG with Pillow and gets a random
80x80 crop and horizontal flip; a tiny CNN (batch 32, AdamW at lr 1e-3) then
costs little per batch next to all that loading.

Data: three photographs shipped inside installed packages, read as files without
importing the packages: scikit-learn's ``sklearn/datasets/images/china.jpg`` and
``flower.jpg`` and matplotlib's ``mpl-data/sample_data/grace_hopper.jpg``. At
construction each is cut into random tiles that are re-encoded as JPEG bytes in
memory (quality 90); the label is the source photograph's index.

Bottleneck: the DataLoader. Each item sleeps ``latency_ms`` (default 4 ms) to
emulate a read from a network filesystem or object store, where every file costs
a round trip (0 means local disk with the page cache warm). Sleeping processes
need no CPU, so DataLoader workers well beyond the core count overlap those
waits: with ``num_workers=0`` the loop waits on storage most of the time.

Production: ``python runners/jpeg.py best.yaml`` (or no argument for PyTorch's
defaults).
"""

from __future__ import annotations

import importlib.util
import io
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn
from torch.utils.data import Dataset

import autotune

# (package, path inside it) of each source photograph; the index is the label.
SOURCES = (
    ("sklearn", "datasets/images/china.jpg"),
    ("sklearn", "datasets/images/flower.jpg"),
    ("matplotlib", "mpl-data/sample_data/grace_hopper.jpg"),
)
N_TILES = 1536  # 48 steps per epoch at batch 32
TILE = 96  # side of a stored tile, pixels
CROP = 80  # side of the random crop an item returns
QUALITY = 90  # JPEG quality of the stored tiles
LATENCY_MS = 4.0  # per-item storage latency, milliseconds

# ImageNet channel statistics: the usual choice for natural photographs.
_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
_STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


def source_path(package: str, relative: str) -> Path:
    """Path of a data file inside an installed package, without importing it.

    scikit-learn and matplotlib each take about a second to import; only their
    files are needed here.

    Args:
        package: Top-level package name, e.g. ``"sklearn"``.
        relative: Path inside the package, e.g. ``"datasets/images/china.jpg"``.

    Raises:
        ModuleNotFoundError: the package is not installed.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"runners/jpeg.py reads {relative} from the {package} package; install it "
            f"(`pip install scikit-learn matplotlib`)"
        )
    return Path(spec.submodule_search_locations[0], relative)


class JpegTiles(Dataset):
    """Map-style dataset of JPEG-encoded tiles; each item waits, decodes, augments.

    Args:
        n_tiles: How many tiles to cut, spread evenly over the photographs.
        latency_ms: Emulated storage latency per item, milliseconds; 0 for none.
        seed: Seeds the tile positions, so every process builds the same data.
        tile: Side of a stored tile, pixels.
        crop: Side of the random crop an item returns, pixels (at most ``tile``).

    Example:
        >>> x, y = JpegTiles(30, latency_ms=0)[0]
        >>> tuple(x.shape), y
        ((3, 80, 80), 0)
    """

    def __init__(
        self,
        n_tiles: int = N_TILES,
        *,
        latency_ms: float = LATENCY_MS,
        seed: int = 0,
        tile: int = TILE,
        crop: int = CROP,
    ) -> None:
        if n_tiles < 1:
            raise ValueError(f"n_tiles must be >= 1, but got n_tiles={n_tiles}")
        if latency_ms < 0:
            raise ValueError(f"latency_ms must be >= 0, but got latency_ms={latency_ms}")
        if not 1 <= crop <= tile:
            raise ValueError(f"1 <= crop <= tile must hold, but got crop={crop}, tile={tile}")
        self.latency_s = latency_ms / 1000
        self.tile, self.crop = tile, crop
        photos = [Image.open(source_path(*source)).convert("RGB") for source in SOURCES]
        rng = np.random.default_rng(seed)
        self.blobs: list[bytes] = []
        self.labels: list[int] = []
        for i in range(n_tiles):
            label = i % len(photos)
            photo = photos[label]
            left = int(rng.integers(0, photo.width - tile + 1))
            top = int(rng.integers(0, photo.height - tile + 1))
            buf = io.BytesIO()
            photo.crop((left, top, left + tile, top + tile)).save(buf, "JPEG", quality=QUALITY)
            self.blobs.append(buf.getvalue())
            self.labels.append(label)

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if self.latency_s:
            time.sleep(self.latency_s)
        img = Image.open(io.BytesIO(self.blobs[i])).convert("RGB")
        # torch's RNG, not numpy's: DataLoader reseeds torch in every worker, while
        # forked workers would all share one numpy stream and draw the same crops.
        left, top = torch.randint(0, self.tile - self.crop + 1, (2,)).tolist()
        img = img.crop((left, top, left + self.crop, top + self.crop))
        if torch.rand(()) < 0.5:
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        x = torch.from_numpy(np.array(img)).permute(2, 0, 1).float().div_(255)
        return (x - _MEAN) / _STD, self.labels[i]


def make_dataset(n_tiles: int = N_TILES, *, latency_ms: float = LATENCY_MS) -> JpegTiles:
    """Build the tiles (about 0.2 s for the default 1,536).

    Args:
        n_tiles: How many tiles to cut.
        latency_ms: Emulated storage latency per item, milliseconds; 0 for none.
    """
    return JpegTiles(n_tiles, latency_ms=latency_ms)


class Net(nn.Module):
    """Three strided convolutions and a linear head: about 25 k parameters."""

    def __init__(self, classes: int = len(SOURCES)) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1),
            nn.ReLU(),
        )
        self.head = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (B, classes) for images (B, 3, H, W)."""
        return self.head(self.features(x).mean((2, 3)))


def train(run: autotune.Run, *, epochs: int = 100) -> None:
    """Train the tile classifier; under tuning the step budget ends the run.

    Args:
        run: A tuning trial or a production recipe.
        epochs: Passes over the tiles (48 steps each at batch 32): 150,000 samples, so
            a trial at the 3,600 samples/s tuned on an H100 still measures all its windows.
    """
    model = Net().to(run.device)
    loader = run.dataloader(make_dataset(), batch_size=32, shuffle=True, drop_last=True)
    opt = run.optimizer(torch.optim.AdamW, model.parameters(), lr=1e-3)
    for _ in range(epochs):
        for x, y in run.batches(loader):
            with run.autocast():
                loss = F.cross_entropy(model(x), y)
            run.step(loss, opt)


if __name__ == "__main__":
    train(autotune.load(sys.argv[1] if len(sys.argv) > 1 else None))
