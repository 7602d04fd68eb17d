"""Prefetch strategies: exactly the loader's batches, errors re-raised, clean shutdown."""

from __future__ import annotations

import collections
import itertools
import threading

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from autotune.training._prefetch import THREAD_DEPTH, iter_batches, map_tensors

CPU = torch.device("cpu")
Pair = collections.namedtuple("Pair", ["x", "y"])


def random_batches(n: int, seed: int) -> list:
    """Fresh random batches of every structure a loader may yield."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        x = torch.randn(8, 3, generator=g)
        y = torch.randint(0, 10, (8,), generator=g)
        out.append(
            [
                x,  # a tensor
                (x, y),  # a tuple
                [x, y, "label", 3],  # a list, non-tensor leaves
                {"x": x, "y": y, "meta": {"ids": y + i, "name": f"b{i}"}},  # nested dicts
                Pair(x, (y, [x * 2])),  # a namedtuple, nested
            ][i % 5]
        )
    return out


def assert_same(got, want) -> None:
    """Same structure (types included), every tensor element equal."""
    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):
        assert got.device == CPU
        assert got.dtype == want.dtype
        assert torch.equal(got, want)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            assert_same(got[key], want[key])
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert_same(a, b)
    else:
        assert got == want


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "autotune-prefetch"]


@pytest.mark.parametrize("strategy", ["none", "thread"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_yields_exactly_the_loaders_batches(strategy: str, seed: int) -> None:
    batches = random_batches(200, seed)
    got = list(iter_batches(batches, CPU, strategy, non_blocking=False))
    assert len(got) == len(batches)
    for a, b in zip(got, batches):
        assert_same(a, b)
    assert not prefetch_threads()


@pytest.mark.parametrize("strategy", ["none", "thread"])
def test_a_real_dataloader(strategy: str) -> None:
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(1000, 5, generator=g), torch.randint(0, 3, (1000,), generator=g))
    loader = DataLoader(data, batch_size=32, shuffle=False)
    got = list(iter_batches(loader, CPU, strategy, non_blocking=False))
    assert len(got) == 32  # ceil(1000 / 32)
    assert torch.equal(torch.cat([x for x, _ in got]), data.tensors[0])
    assert torch.equal(torch.cat([y for _, y in got]), data.tensors[1])
    assert all(isinstance(b, list) for b in got)  # default_collate's list kept as a list


@pytest.mark.parametrize("strategy", ["none", "thread"])
def test_an_empty_loader(strategy: str) -> None:
    assert list(iter_batches([], CPU, strategy, non_blocking=False)) == []


def test_unknown_strategy() -> None:
    with pytest.raises(ValueError, match=r"prefetch='stream'; allowed: none, thread, cuda_stream"):
        iter_batches([], CPU, "stream", non_blocking=False)


def failing_loader(good: int):
    for i in range(good):
        yield torch.full((2,), float(i))
    raise OSError("disk went away while reading shard 7")


def test_thread_reraises_the_loaders_exception_in_the_caller() -> None:
    got = []
    with pytest.raises(OSError, match=r"disk went away while reading shard 7"):
        for batch in iter_batches(failing_loader(3), CPU, "thread", non_blocking=False):
            got.append(batch)
    # the batches before the failure all arrived, in order
    assert [b[0].item() for b in got] == [0.0, 1.0, 2.0]
    assert not prefetch_threads()


def test_thread_reraises_a_transfer_failure() -> None:
    # The copy runs in the producer too: a batch whose .to() fails must surface here.
    class Bad(torch.Tensor):
        def to(self, *args, **kwargs):
            raise RuntimeError("copy failed")

    loader = [torch.zeros(2), torch.zeros(2).as_subclass(Bad)]
    with pytest.raises(RuntimeError, match="copy failed"):
        list(iter_batches(loader, CPU, "thread", non_blocking=False))
    assert not prefetch_threads()


class Counting:
    """An endless loader that counts what was taken from it."""

    def __init__(self) -> None:
        self.taken = 0

    def __iter__(self):
        for i in itertools.count():
            self.taken += 1
            yield torch.tensor([i])


def test_break_stops_and_joins_the_producer() -> None:
    loader = Counting()
    for i, batch in enumerate(iter_batches(loader, CPU, "thread", non_blocking=False)):
        assert batch.item() == i
        if i == 4:
            break
    # The generator was released at the break and closed: its finally joined the thread,
    # although the loader is endless and the producer was blocked on a full queue.
    assert not prefetch_threads()
    # The queue is bounded: 5 consumed, THREAD_DEPTH queued, one held by a blocked put(),
    # plus at most two more taken while the consumer drained on shutdown.
    assert loader.taken <= 5 + THREAD_DEPTH + 3


def test_close_stops_and_joins_the_producer() -> None:
    loader = Counting()
    batches = iter_batches(loader, CPU, "thread", non_blocking=False)
    assert next(batches).item() == 0
    assert len(prefetch_threads()) == 1
    batches.close()
    assert not prefetch_threads()


def test_an_exception_in_the_loop_body_stops_the_producer() -> None:
    with pytest.raises(KeyError):
        for _ in iter_batches(Counting(), CPU, "thread", non_blocking=False):
            raise KeyError("user code failed")
    assert not prefetch_threads()


def test_map_tensors_preserves_structure() -> None:
    batch = {"a": (torch.ones(1), [torch.zeros(1), "s"]), "b": Pair(torch.ones(2), 7)}
    out = map_tensors(batch, lambda t: t + 1)
    assert_same(out, {"a": (torch.full((1,), 2.0), [torch.ones(1), "s"]), "b": Pair(torch.full((2,), 2.0), 7)})


@pytest.mark.gpu
@pytest.mark.parametrize("strategy", ["none", "thread", "cuda_stream"])
def test_cuda_strategies_deliver_equal_batches(strategy: str) -> None:
    device = torch.device("cuda", 0)
    batches = random_batches(100, seed=3)
    got = list(iter_batches(batches, device, strategy, non_blocking=strategy != "none"))
    torch.cuda.synchronize(device)
    assert len(got) == len(batches)

    def back(t: torch.Tensor) -> torch.Tensor:
        assert t.device == device
        return t.cpu()

    for a, b in zip(got, batches):
        assert_same(map_tensors(a, back), b)


@pytest.mark.gpu
def test_cuda_stream_from_a_pinned_dataloader() -> None:
    device = torch.device("cuda", 0)
    data = TensorDataset(torch.randn(512, 64), torch.arange(512))
    loader = DataLoader(data, batch_size=64, pin_memory=True)
    got = []
    for x, y in iter_batches(loader, device, "cuda_stream", non_blocking=True):
        assert x.device == device
        got.append((x * 1.0, y))  # compute on the default stream, as a training step would
    torch.cuda.synchronize(device)
    assert torch.equal(torch.cat([x for x, _ in got]).cpu(), data.tensors[0])
    assert torch.equal(torch.cat([y for _, y in got]).cpu(), data.tensors[1])


@pytest.mark.gpu
@pytest.mark.parametrize("strategy", ["thread", "cuda_stream"])
def test_prefetched_batches_survive_slow_compute_without_a_race(strategy: str) -> None:
    """Many steps of fresh random data from a pinned, worker-fed loader, each batch
    read by a kernel queued behind a long one on the compute stream: if a copy
    landed in memory that compute still had to read (no ``wait_stream`` or no
    ``record_stream``), the sums would differ from the host's."""
    device = torch.device("cuda", 0)
    data = torch.randn(300 * 64, 512)
    loader = DataLoader(TensorDataset(data, torch.arange(len(data))), batch_size=64, pin_memory=True, num_workers=2)
    sums, ids = [], []
    for x, i in iter_batches(loader, device, strategy, non_blocking=True):
        torch.cuda._sleep(200_000)  # about 0.1 ms on the compute stream before it reads x
        sums.append(x.double().sum(dim=1))
        ids.append(i)
    torch.cuda.synchronize(device)
    order = torch.cat(ids).cpu()
    assert torch.equal(order, torch.arange(len(data)))
    assert torch.equal(torch.cat(sums).cpu(), data.double().sum(dim=1))
