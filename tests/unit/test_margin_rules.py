"""The memory margin's rules and readers (autotune.machine._margin), in milliseconds: the step ``fit``
returns, the GPU line, a memory cgroup read from files laid out as the kernel's, the batch
order a rebuilt loader resumes, the bytes in flight."""

from __future__ import annotations

from pathlib import Path

import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

from autotune.machine._margin import MARGIN, Cgroup, Counted, EpochOrder, fit, gpu_line

GIB = 2**30


@given(
    held=st.floats(0, 64 * GIB),
    size=st.floats(0, 4 * GIB),
    budget=st.floats(GIB / 16, 64 * GIB),
    workers=st.integers(0, 96),
    prefetch=st.one_of(st.none(), st.integers(1, 32)),
)
def test_a_step_holds_fewer_batches_and_fits_when_anything_can(held, size, budget, workers, prefetch) -> None:
    step = fit(held, size, budget, workers, prefetch)
    depth = prefetch or 2
    if step is None:  # only where the bound fits, or there is nothing left to give back
        assert workers == 0 or held + workers * depth * size < MARGIN * budget
        return
    capacity = step.workers * (step.prefetch or 0)
    assert capacity < workers * depth and step.workers <= workers
    assert step.workers == 0 or 2 <= (step.prefetch or 0) <= max(2, depth)
    if step.workers:  # what it keeps fits in what the rest leaves of the margin
        assert held + capacity * size <= MARGIN * budget + 1e-6 * budget
    assert step.why.endswith(f"num_workers {workers} -> {step.workers}") or "prefetch_factor" in step.why


def test_steps_go_by_prefetch_first_then_workers() -> None:
    assert fit(GIB, 64 << 20, 4 * GIB, 8, 8).workers == 8  # room for 2 a worker or more: prefetch only
    assert (fit(GIB, 256 << 20, 4 * GIB, 8, 8).workers, fit(GIB, 256 << 20, 4 * GIB, 8, 8).prefetch) == (4, 2)
    assert fit(3.5 * GIB, GIB, 4 * GIB, 8, 2).workers == 0  # nothing fits: the loop reads its own batches
    assert fit(3.9 * GIB, GIB, 4 * GIB, 0, None) is None  # no workers: nothing a step can give back


def test_gpu_memory_is_said_past_the_margin_only() -> None:
    assert gpu_line(int(MARGIN * 80 * GIB) - 1, 80 * GIB, None) is None
    line = gpu_line(76 * GIB, 80 * GIB, 30.0)
    assert (
        line.startswith(
            "GPU memory: 76.0 GiB reserved, 95% of the device's 80.0 GiB (the study's winner peaked at 30.0 GiB)"
        )
        and "expandable_segments" in line
    )
    assert gpu_line(GIB, 0, None) is None


def _v1(tmp_path: Path, limit: str, usage: int, inactive: int) -> tuple[Path, Path]:
    folder = tmp_path / "memory" / "jobs" / "a"
    folder.mkdir(parents=True)
    (folder / "memory.stat").write_text(f"cache 1\nhierarchical_memory_limit {limit}\ntotal_inactive_file {inactive}\n")
    (folder / "memory.usage_in_bytes").write_text(f"{usage}\n")
    table = tmp_path / "cgroup"
    table.write_text("9:pids:/\n4:memory:/jobs/a\n0::/\n")
    return tmp_path, table


def test_a_v1_cgroup_with_a_limit_counts_its_usage_less_the_file_cache_it_reclaims(tmp_path) -> None:
    root, table = _v1(tmp_path, str(GIB), 700 << 20, 100 << 20)
    group = Cgroup.find(root, table)
    assert (group.limit, group.version, group.used()) == (GIB, 1, 600 << 20)
    unlimited, table = _v1(tmp_path / "u", "9223372036854771712", 1, 0)
    assert Cgroup.find(unlimited, table) is None  # v1's "no limit": the largest page-aligned int64


def test_a_v2_cgroup_takes_the_tightest_limit_on_the_way_up(tmp_path) -> None:
    leaf = tmp_path / "user.slice" / "job"
    leaf.mkdir(parents=True)
    (tmp_path / "user.slice" / "memory.max").write_text(f"{2 * GIB}\n")
    (leaf / "memory.max").write_text("max\n")
    (leaf / "memory.current").write_text(f"{GIB}\n")
    (leaf / "memory.stat").write_text(f"anon 5\ninactive_file {GIB // 4}\n")
    table = tmp_path / "cgroup"
    table.write_text("0::/user.slice/job\n")
    group = Cgroup.find(tmp_path, table)
    assert (group.limit, group.version, group.used()) == (2 * GIB, 2, 3 * GIB // 4)
    (tmp_path / "user.slice" / "memory.max").write_text("max\n")
    assert Cgroup.find(tmp_path, table) is None
    assert Cgroup.find(tmp_path, tmp_path / "missing") is None


def test_a_resumed_epoch_gives_what_was_not_trained_on_then_the_rest_and_draws_nothing_twice() -> None:
    torch.manual_seed(0)
    plain = [list(b) for _ in range(2) for b in BatchSampler(RandomSampler(range(20)), 4, False)]
    torch.manual_seed(0)
    order = EpochOrder(BatchSampler(RandomSampler(range(20)), 4, False))
    iter(order)  # (a DataLoader iterator calls iter twice as it starts, and draws from the second)
    first = iter(order)
    given = [next(first) for _ in range(3)]  # 3 handed to workers ...
    order.trained()  # ... 1 trained on
    order.resume()
    again = list(iter(order))
    assert [given[0], *again] == plain[:5]  # the epoch, each batch once, in its order
    assert again[:2] == given[1:]  # those handed out and not trained on, again first
    second = list(iter(order))  # a new epoch: the sampler's next order
    assert second == plain[5:]
    assert len(EpochOrder(BatchSampler(SequentialSampler(range(10)), 4, False))) == 3


def test_bytes_in_flight_are_those_made_less_those_taken() -> None:
    counted = Counted(lambda items: torch.stack(items), workers=1)
    made = [counted([torch.zeros(8)] * 4) for _ in range(3)]  # 3 batches of 128 bytes, in this process
    assert counted.in_flight() == (384, 128)
    counted.took(made[0])
    assert counted.in_flight() == (256, 128)
    assert counted.ready() == 2  # batches made that the loop has not taken
    counted.restart()  # a new epoch: nothing in flight, the size kept
    assert counted.in_flight() == (0, 128) and counted.ready() == 0
