"""Character-level language model: a small causal transformer on Python source.

Workload: next-byte prediction over windows of 64 bytes with a 2-layer,
4-head, 128-wide decoder-only transformer (about 0.47 M parameters), batch 32,
AdamW at lr 3e-4.

Data: about 1.4 MB of Python source every machine has: twenty modules of the
running interpreter's own standard library (``STDLIB_FILES`` under
``sysconfig.get_paths()["stdlib"]``), concatenated in a fixed order and modelled
as raw bytes (vocabulary 256). The text is fixed for a given Python version.

Bottleneck: compute. An item is a slice of one in-memory tensor, so the loader
costs next to nothing and the time goes to the model's matrix multiplies and
attention; a tuner wins here through batch size, mixed precision and a fused
optimizer, not through workers.

Production: ``python runners/charlm.py best.yaml`` (or no argument for PyTorch's
defaults).
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

import autotune

# Large, long-lived stdlib modules present as single files from Python 3.10 on;
# the order is fixed so every process builds the same bytes.
STDLIB_FILES = (
    "argparse.py",
    "ast.py",
    "calendar.py",
    "configparser.py",
    "dataclasses.py",
    "difflib.py",
    "doctest.py",
    "enum.py",
    "fractions.py",
    "functools.py",
    "inspect.py",
    "pickle.py",
    "pydoc.py",
    "shutil.py",
    "statistics.py",
    "subprocess.py",
    "tarfile.py",
    "textwrap.py",
    "threading.py",
    "typing.py",
)
BLOCK_SIZE = 64  # context length, bytes
VOCAB = 256  # one token per byte value


class ByteWindows(Dataset):
    """Map-style dataset of (input, target) byte windows over one text.

    Item ``i`` starts at byte ``i * block_size``: the input is ``block_size``
    bytes and the target the same span shifted by one byte.

    Args:
        data: uint8 tensor holding the whole text.
        block_size: Context length in bytes.
    """

    def __init__(self, data: torch.Tensor, block_size: int = BLOCK_SIZE) -> None:
        if data.numel() < block_size + 1:
            raise ValueError(
                f"the text must hold at least block_size + 1 bytes, but got "
                f"(bytes={data.numel()}, block_size={block_size})"
            )
        self.data = data
        self.block_size = block_size

    def __len__(self) -> int:
        return (self.data.numel() - 1) // self.block_size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = i * self.block_size
        chunk = self.data[start : start + self.block_size + 1].long()
        return chunk[:-1], chunk[1:]


def make_dataset(files: tuple[str, ...] = STDLIB_FILES, block_size: int = BLOCK_SIZE) -> ByteWindows:
    """Read the stdlib files (a few ms) and cut them into windows.

    Args:
        files: File names under the stdlib directory, read in this order.
        block_size: Context length in bytes.
    """
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    text = b"".join((stdlib / name).read_bytes() for name in files)
    return ByteWindows(torch.frombuffer(bytearray(text), dtype=torch.uint8), block_size)


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then a 4x MLP."""

    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map (B, T, C) to (B, T, C)."""
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class CharTransformer(nn.Module):
    """Decoder-only byte-level transformer with learned positions.

    Args:
        n_layer: Transformer blocks.
        d_model: Embedding width.
        n_head: Attention heads; must divide ``d_model``.
        block_size: Longest context, bytes.
    """

    def __init__(self, n_layer: int = 2, d_model: int = 128, n_head: int = 4, block_size: int = BLOCK_SIZE) -> None:
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"n_head must divide d_model, but got (d_model={d_model}, n_head={n_head})")
        self.tok = nn.Embedding(VOCAB, d_model)
        self.pos = nn.Embedding(block_size, d_model)
        self.blocks = nn.Sequential(*(Block(d_model, n_head) for _ in range(n_layer)))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, VOCAB)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, 256) for byte ids (B, T)."""
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))


def train(run: autotune.Run, *, epochs: int = 10) -> None:
    """Train the language model; under tuning the step budget ends the run.

    Args:
        run: A tuning trial or a production recipe.
        epochs: Passes over the text (about 700 steps each at batch 32).
    """
    model = CharTransformer().to(run.device)
    loader = run.dataloader(make_dataset(), batch_size=32, shuffle=True, drop_last=True)
    opt = run.optimizer(torch.optim.AdamW, model.parameters(), lr=3e-4)
    for _ in range(epochs):
        for x, y in run.batches(loader):
            with run.autocast():
                loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            run.step(loss, opt)


if __name__ == "__main__":
    train(autotune.load(sys.argv[1] if len(sys.argv) > 1 else None))
