"""MNIST as a plain training script, the way people write one: the quickstart's target.

It knows nothing of autotune: argparse, a DataLoader, AdamW, a log line every
``--log-interval`` steps (``loss.item()``), a test pass after each epoch, in the
shape of pytorch/examples' ``mnist/main.py``. The data and the model are
``runners/digits.py``'s: 4,500 of the 5,000 real digits train, 500 test.

Tune it unmodified, then run it with the export applied::

    autotune run runners/mnist_script.py --trials 8
    autotune exec mlflow/exports/mnist_script.yaml runners/mnist_script.py

or on its own: ``python runners/mnist_script.py --epochs 2``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, random_split

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the data and the model: runners/digits.py
from digits import Net, make_dataset

#: Digits held out for the test pass (drawn once, the same in every run).
TEST_SIZE = 500


def split(digits):
    """(train, test): ``TEST_SIZE`` digits drawn at random with a fixed seed (the 5,000 are
    ordered by label: the last 500 would all be nines)."""
    return random_split(digits, [len(digits) - TEST_SIZE, TEST_SIZE], generator=torch.Generator().manual_seed(0))


def train(args: argparse.Namespace, model, device, loader, optimizer, epoch: int) -> None:
    model.train()
    for i, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        if i % args.log_interval == 0:
            print(f"Train Epoch: {epoch} [{i * len(x)}/{len(loader.dataset)}]\tLoss: {loss.item():.6f}")


def test(model, device, loader) -> None:
    model.eval()
    total, correct = 0.0, 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            logits = model(x)
            total += F.cross_entropy(logits, y, reduction="sum").item()
            correct += logits.argmax(dim=1).eq(y).sum().item()
    n = len(loader.dataset)
    print(f"Test set: Average loss: {total / n:.4f}, Accuracy: {correct}/{n} ({100 * correct / n:.0f}%)")


def main() -> None:
    parser = argparse.ArgumentParser(description="MNIST (5,000 real digits) with a small CNN")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--test-batch-size", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_set, test_set = split(make_dataset())
    train_loader = DataLoader(
        train_set, batch_size=args.batch_size, shuffle=True, drop_last=True, num_workers=args.num_workers
    )
    test_loader = DataLoader(test_set, batch_size=args.test_batch_size)
    model = Net().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        test(model, device, test_loader)


if __name__ == "__main__":
    main()
