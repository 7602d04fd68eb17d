"""The worker rule on several ranks (autotune.core._rank_loaders, and its use by
autotune.tuner._loader_workers and the planner's climb): each rank's loader read from the trial's
own figures, on the rank's share of the CPUs and the RAM."""

from __future__ import annotations

import pytest

from autotune.core._ceilings import Ceilings
from autotune.core._kinds import Kind, Request
from autotune.core._rank_loaders import RankLoader, rank_loader, read_cpu
from autotune.tuner._loader_workers import evidence, limits, widened_range, worker_ram
from autotune.tuner._planner import climb
from autotune.tuner._space import Choice, IntRange, Space
from autotune.tuner._worker_climb import more_workers
from standings import standing_from, trial

TWO = {"ranks": 2, "splits_ranks": True}
NONE: dict[str, int] = {}
WORKERS = Space("w", {"num_workers": IntRange(0, 16), "persistent_workers": Choice((False, True))})


def base(busy: float = 0.0875, ranks: dict = TWO, **metrics: float):
    """The script as written on 2 ranks, no workers: 875 samples/s a rank, waiting on data 7/8 of
    its time; its main thread busy ``busy`` of it (reading and stepping)."""
    return trial(
        0,
        1750.0,
        waits=0.875,
        config={"num_workers": 0, "batch_size": 32},
        dataset=ranks,
        main_thread_busy=busy,
        **metrics,
    )


def drew(number: int, workers: int, rate: float, waits: float, high: int = 2, **metrics: float):
    """A draw of ``workers`` a rank from 0-``high``, at ``rate`` samples/s over both ranks."""
    return trial(number, rate, waits=waits, sampled={"num_workers": workers}, dataset=TWO, workers_high=high, **metrics)


@pytest.mark.parametrize(
    ("args", "found", "why"),
    [
        # 875/s a rank reads 7/8 of its time: 1,000/s while it reads, 7,000/s while it steps; its
        # main thread busy 8.75% over 875 samples a second: 0.1 ms a sample at most
        ((1750.0, 0.875, 0.0875, 0, 2), RankLoader(0, 1000.0, 7000.0, 1e-4), "no workers: its main process reads"),
        ((4000.0, 0.75, 0.5, 4, 2), RankLoader(4, 2000.0, 8000.0), "workers: the rank gets what they make"),
        ((1750.0, 0.875, None, 0, 2), RankLoader(0, 1000.0, 7000.0), "no main thread figure: no bound"),
        ((1750.0, 0.0, 0.5, 0, 2), None, "it never waited: nothing says the loader is slower"),
        ((1750.0, 1.0, 0.5, 0, 2), None, "it never stepped"),
        ((None, 0.5, 0.5, 0, 2), None, "no figure"),
    ],
)
def test_a_ranks_loader_from_the_trials_figures(args: tuple, found: RankLoader | None, why: str) -> None:
    assert rank_loader(*args) == found, why


def test_the_least_bound_on_a_samples_read_is_kept() -> None:
    assert (
        read_cpu([RankLoader(0, 1.0, 2.0, 3e-4), None, RankLoader(2, 1.0, 2.0), RankLoader(0, 1.0, 2.0, 1e-4)]) == 1e-4
    )
    assert read_cpu([RankLoader(2, 1.0, 2.0), None]) is None


def test_a_waiting_loader_on_two_ranks_widens_each_ranks_range_and_says_why() -> None:
    # Little's law a rank: 7,000 / 1,000 = 7 workers (the baseline's 0.1 CPUs of the rank's 1)
    wider = widened_range(2, 0, [base()], Ceilings(), 2, None, NONE)
    assert wider.high == 7
    assert wider.why == (
        "workers wait 90% of their time (trial 0's loader on each of 2 ranks: 1,000 samples/s from "
        "the main process (no workers), using 0.1 of the rank's 1 CPUs; its model takes 7,000): "
        "num_workers range 0-7"
    )
    # 2 workers a rank still wait 7/8 of the time: 1,600/s a rank, 800 each, for 12,800: 16 of them
    wider = widened_range(2, 0, [base(), drew(1, 2, 3200.0, 0.875)], Ceilings(), 2, None, NONE)
    assert wider.high == 16
    assert (
        "trial 1's loader on each of 2 ranks: 1,600 samples/s from 2 workers, using 0.2 of the rank's 1 CPUs"
        in wider.why
    )


@pytest.mark.parametrize(
    ("rows", "counted", "why"),
    [
        ([drew(1, 2, 3200.0, 0.875)], [], "no trial without workers bounded what a sample costs to read"),
        ([base(busy=0.8)], [], "its main thread was busy 80% of the time: reading may be CPU work"),
        ([base(ranks={})], [], "one process (or a stream that cannot say): its ceilings decide, and there are none"),
        ([base(), drew(1, 2, 3200.0, 0.0)], [0], "the baseline asks for 7, the range's top; 2 workers never waited"),
    ],
)
def test_no_wider_range(rows: list, counted: list, why: str) -> None:
    assert [e.trial for e in evidence(rows, Ceilings(), 2)] == counted, why
    assert widened_range(7, 0, rows, Ceilings(), 2, None, NONE) is None, why


@pytest.mark.parametrize(("cpus", "counted"), [(2, False), (8, True)])
def test_each_rank_has_its_share_of_the_cpus(cpus: int, counted: bool) -> None:
    # 2 workers a rank make 6,000/s at 0.1 ms a sample: 0.6 CPUs. On 2 CPUs (1 a rank) they keep
    # it busy; on 8 (4 a rank) they use 0.6 of the 2 they could
    rows = [base(), drew(1, 2, 12_000.0, 0.5)]
    assert (1 in [e.trial for e in evidence(rows, Ceilings(), cpus)]) is counted


def test_the_ram_one_more_worker_a_rank_adds_bounds_each_ranks_range() -> None:
    gib = 2**30
    # the job's tree: 2 GiB without workers, 3 GiB with 2 a rank (4 in all): 0.5 GiB for each
    # worker every rank adds; a budget of 8 GiB allows (8 - 2) / 0.5 = 12 a rank
    rows = [base(ram_peak=2.0 * gib), drew(1, 2, 3200.0, 0.875, ram_peak=3.0 * gib)]
    assert worker_ram(rows) == 0.5 * gib
    caps = limits(8 * gib, worker_ram(rows), 2.0 * gib)
    assert caps["the RAM budget"] == 12
    assert widened_range(2, 0, rows, Ceilings(), 2, None, {"the RAM budget": 12}).why.endswith(
        "(16 would feed the model; the RAM budget allows 12)"
    )


def test_a_ranked_leader_that_waits_climbs() -> None:
    # trial 1 leads (3,200 over the baseline's 1,750) with 2 workers a rank, waiting 7/8 of its time
    leader = drew(1, 2, 3200.0, 0.875)
    rows = [base(), leader]
    more = more_workers(leader, rows, Ceilings(), 2, high=16, useful=None)
    assert more.workers == 4 and more.why == (
        "trial 1, the fastest then, drew num_workers=2 and waited on data 88% "
        "of its time: its config runs again with num_workers=4"
    )
    # the planner asks for it, as for one process
    standing = standing_from(*rows)
    assert climb(leader, standing, WORKERS, cpus=2) == Request(
        Kind.MORE_WORKERS, {"num_workers": 4}, 1, more.why, once="more-workers-1", enqueue_params=True
    )
    # the range the space has now bounds it: 2 is its top, so nothing
    assert more_workers(leader, rows, Ceilings(), 2, high=2, useful=None) is None
    # without a baseline that bounded the read, nothing says more than the cores help
    assert climb(leader, standing_from(base(busy=0.8), leader), WORKERS, cpus=2) is None
