"""A plain PyTorch training loop over the latency-bound dataset of ``tests/fixtures/io_train.py``
(``SlowReads``: 4,096 items, each read waits 1 ms like a network read), the same training as
that file's ``train``: ``Linear(16, 2)``, SGD, cross-entropy, a shuffled loader that drops the
last partial batch. No autotune code runs here: the DataLoader and the loop are PyTorch's own.
``benchmarks/sweep.py`` runs it in a process of its own per measurement.

It times ``--samples`` samples (whole batches) after a warmup of ``--warmup-samples`` (the
workers' start-up and the first epoch), and prints one JSON line: samples/s and what it timed.

    python benchmarks/_io_loop.py --loader '{"batch_size": 128, "num_workers": 32,
        "persistent_workers": true, "prefetch_factor": 2}' --lr 0.8
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import queue
import threading
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "io_train.py"
#: What the fixture's ``train`` builds (tests/process/test_sweep_bench.py holds the two together):
#: its batch size and lr as written, its loader's other kwargs, its model's shape, its optimizer.
CODE_BATCH, CODE_LR = 16, 0.1
LOADER_FIXED = {"shuffle": True, "drop_last": True}
MODEL_SHAPE = (16, 2)
OPTIMIZER = torch.optim.SGD


def slow_reads():
    """The fixture's dataset class, loaded from its file (which also sets one intra-op thread, as
    under a study)."""
    spec = importlib.util.spec_from_file_location("io_train", FIXTURE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SlowReads


def in_thread(loader, depth: int = 2):
    """The loader's batches through a background thread and a bounded queue (``prefetch:
    thread`` in plain code): the next batches are fetched while this one trains. Closing the
    generator stops and joins the thread (one left blocked on a full queue aborted the process
    at its exit: "terminate called without an active exception", 2026-11-29)."""
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop, done = threading.Event(), object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def fetch() -> None:
        for batch in loader:
            if not put(batch):
                return
        put(done)

    thread = threading.Thread(target=fetch, daemon=True)
    thread.start()
    try:
        while (batch := ready.get()) is not done:
            yield batch
    finally:
        stop.set()
        thread.join()


def retain_freed_memory() -> None:
    """glibc's malloc keeps what it frees (``malloc_retain``): the same mallopt calls, in plain
    ctypes (thresholds from ``mallopt(3)``; values as ``autotune.machine._malloc``)."""
    import ctypes

    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    for param, value in ((-3, 32 << 20), (-1, 1 << 30), (-2, 64 << 20)):  # MMAP, TRIM, TOP_PAD
        if mallopt(param, value) != 1:
            raise OSError(f"mallopt({param}, {value}) failed")


def loop(
    loader_kwargs: dict,
    lr: float,
    samples: int,
    warmup_samples: int,
    *,
    amp: str = "off",
    fused: bool = False,
    prefetch: str = "none",
    malloc_retain: bool = False,
) -> dict:
    """Samples/s of the training over ``samples`` samples after ``warmup_samples``."""
    torch.manual_seed(0)
    reads = slow_reads()()
    # (more workers than cores is the point here: torch's warning says otherwise)
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    loader = DataLoader(reads, **LOADER_FIXED, **loader_kwargs)
    model = torch.nn.Linear(*MODEL_SHAPE)
    opt = OPTIMIZER(model.parameters(), lr=lr, **({"fused": True} if fused else {}))
    batch = loader_kwargs.get("batch_size", 1)
    warmup, measured = -(-warmup_samples // batch), -(-samples // batch)  # whole batches
    if malloc_retain:
        retain_freed_memory()
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if amp == "bf16" else contextlib.nullcontext
    step, began = 0, time.perf_counter()
    epochs = 0
    while step < warmup + measured:
        epochs += 1
        batches = in_thread(loader) if prefetch == "thread" else iter(loader)
        for xb, yb in batches:
            with autocast():
                loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            if step == warmup:
                began = time.perf_counter()
            if step == warmup + measured:
                break
        if prefetch == "thread":
            batches.close()
    seconds = time.perf_counter() - began
    return {
        "samples_per_s": measured * batch / seconds,
        "samples": measured * batch,
        "batches": measured,
        "seconds": seconds,
        "epochs_started": epochs,
        "loss": float(loss.detach()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loader", type=json.loads, required=True, help="DataLoader kwargs, as JSON")
    parser.add_argument("--lr", type=float, default=CODE_LR)
    parser.add_argument("--samples", type=int, default=8 * 4096, help="timed samples (whole batches)")
    parser.add_argument("--warmup-samples", type=int, default=4096)
    parser.add_argument("--amp", choices=("off", "bf16"), default="off")
    parser.add_argument("--fused", action="store_true", help="SGD(fused=True)")
    parser.add_argument("--prefetch", choices=("none", "thread"), default="none")
    parser.add_argument("--malloc-retain", action="store_true")
    args = parser.parse_args()
    print(
        json.dumps(
            loop(
                args.loader,
                args.lr,
                args.samples,
                args.warmup_samples,
                amp=args.amp,
                fused=args.fused,
                prefetch=args.prefetch,
                malloc_retain=args.malloc_retain,
            )
        )
    )


if __name__ == "__main__":
    main()
