"""How many DataLoader workers can help (autotune.tuner._loader_workers): the worker range from measured loaders, and the climb of a leader that waits."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import TensorDataset

from autotune import Config, Run
from autotune.core._ceilings import Ceilings, ceiling_key
from autotune.core._knobs import Part
from autotune.stores._records import TrialRow
from autotune.tuner._loader_workers import (
    Evidence,
    epoch_samples,
    evidence,
    leads,
    limits,
    useful_workers,
    widened_range,
    worker_ram,
)
from autotune.tuner._space import IntRange, load_space
from autotune.tuner._worker_climb import more_workers

NO_LIMITS: dict[str, int] = {}


def row(
    number: int,
    workers: int,
    ram: float | None = None,
    retain: bool = False,
    rate: float | None = None,
    waits: float | None = None,
    of: int = 5,
) -> TrialRow:
    """A complete trial with ``workers``; with ``rate``, its samples/s; past trial 0 (the
    baseline) drawn from a range 0-``of``."""
    config = {"num_workers": workers, "batch_size": 64, "pin_memory": False, "malloc_retain": retain}
    metrics = {k: v for k, v in (("ram_peak", ram), ("samples_per_s", rate), ("data_wait_frac", waits)) if v}
    return TrialRow(
        number,
        number == 0,
        "complete",
        "",
        metrics,
        config,
        64,
        None,
        sampled={"num_workers": workers} if number else {},
        workers_high=of if number else None,
    )


def ceilings(*measured: tuple[TrialRow, float, float, float]) -> Ceilings:
    """Per row: its loader's samples/s, the CPU seconds a sample cost it, its model's samples/s."""
    c = Ceilings()
    for r, loader, cpu, compute in measured:
        c.add(
            {
                "part": "loader",
                "key": ceiling_key(Part.LOADER, r.config),
                "samples_per_s": loader,
                "cpu_per_sample": cpu,
                "cpus": 2,
            }
        )
        c.add({"part": "compute", "key": ceiling_key(Part.COMPUTE, r.config), "samples_per_s": compute})
    return c


def test_littles_law() -> None:
    # the main process alone reads 800 samples/s, busy 8% of the time; the model takes 20,000
    seen = Evidence(0, 0, 800.0, 0.08, 20_000.0)
    assert seen.needed == 25 and seen.waiting == pytest.approx(0.92)
    # 8 workers make 7,000 together: 875 each; 20,000 needs 23 of them
    assert Evidence(3, 8, 7_000.0, 0.5, 20_000.0).needed == 23


def test_a_waiting_loader_widens_the_range_and_says_why() -> None:
    base = row(0, 0)
    wider = widened_range(2, 0, [base], ceilings((base, 800.0, 1e-4, 20_000.0)), 2, None, NO_LIMITS)
    assert wider.high == 25
    assert wider.why == (
        "workers wait 92% of their time (trial 0's loader alone: 800 samples/s from the main "
        "process (no workers), using 0.1 of 2 CPUs; its model takes 20,000): num_workers range 0-25"
    )


@pytest.mark.parametrize(
    ("loader", "cpu", "compute", "why"),
    [
        (800.0, 1.2e-3, 20_000.0, "CPU-bound: 800 x 1.2 ms keeps 0.96 CPUs busy"),
        (30_000.0, 1e-5, 20_000.0, "the loader alone is faster than the model"),
        (800.0, 1e-4, 1_500.0, "2 workers would do: the range already has them"),
    ],
)
def test_no_widening(loader: float, cpu: float, compute: float, why: str) -> None:
    base = row(0, 0)
    assert widened_range(2, 0, [base], ceilings((base, loader, cpu, compute)), 2, None, NO_LIMITS) is None, why


def test_leaders_are_the_fastest_so_far_in_trial_order() -> None:
    rows = [
        row(0, 0, rate=100.0),
        row(1, 4, rate=300.0),
        row(2, 2, rate=200.0),
        row(3, 8, rate=250.0),
        row(4, 6, rate=400.0),
        row(5, 7),
    ]  # (5: no figure)
    assert [r.number for r, _ in leads(rows)] == [0, 1, 4]
    # a trial added later does not change who led before it
    assert [r.number for r, _ in leads([*rows, row(6, 1, rate=350.0)])] == [0, 1, 4]
    doubted = dataclasses.replace(rows[4], doubt="noisy")
    assert [r.number for r, _ in leads([*rows[:4], doubted])] == [0, 1]
    # within LEAD_WITHIN (10%) of the fastest before it leads too, as far below it as it was;
    # the fastest is still trial 4's 400 after it: 7 (364 = 91%) leads, 8 (355 = 89%) does not
    close = [*rows, row(7, 9, rate=364.0), row(8, 9, rate=355.0)]
    assert [(r.number, round(behind, 2)) for r, behind in leads(close)] == [(0, 0), (1, 0), (4, 0), (7, 0.09)]


def test_a_leader_at_the_top_of_the_range_that_waits_widens_it() -> None:
    # Little's law: 4,000 / 800 = 5 workers; trial 3 drew all 5, was the fastest then, and
    # still waited on data 20% of its time: Little's count fell short, so the range doubles
    base = row(0, 0, rate=800.0)
    measured = ceilings((base, 800.0, 1e-4, 4_000.0))
    rows = [base, row(1, 2, rate=1_500.0, waits=0.5), row(3, 5, rate=2_900.0, waits=0.2)]
    wider = widened_range(2, 0, rows, measured, 2, None, NO_LIMITS)
    assert wider.high == 10
    assert wider.why.endswith(
        "its model takes 4,000); trial 3, the fastest then, drew num_workers=5 of 0-5 and "
        "waited on data 20% of its time: num_workers range 0-10"
    )
    # near the top is enough (4 of 5: three quarters or more)
    near = [base, row(1, 2, rate=1_500.0, waits=0.5), row(3, 4, rate=2_900.0, waits=0.2)]
    assert widened_range(2, 0, near, measured, 2, None, NO_LIMITS).high == 8
    # it drew 8 of 0-10 since, still the fastest and still waiting: 16
    again = widened_range(2, 0, [*rows, row(7, 8, rate=3_300.0, waits=0.15, of=10)], measured, 2, None, NO_LIMITS)
    assert again.high == 16 and "trial 7, the fastest then, drew num_workers=8 of 0-10" in again.why
    # 6 of 0-10 is not the top of the range it drew from (though 6 is past Little's 5)
    assert (
        widened_range(2, 0, [*rows, row(7, 6, rate=3_300.0, waits=0.15, of=10)], measured, 2, None, NO_LIMITS).high
        == 10
    )
    # a faster trial with fewer workers later does not narrow it (trial 7 led when it ran)
    assert (
        widened_range(
            2,
            0,
            [*rows, row(7, 8, rate=3_300.0, waits=0.15, of=10), row(8, 3, rate=3_400.0, waits=0.3, of=16)],
            measured,
            2,
            None,
            NO_LIMITS,
        ).high
        == 16
    )
    # a leader within 10% of the fastest before it widens it too, and the line says how close
    close = widened_range(2, 0, [*rows, row(7, 8, rate=2_700.0, waits=0.15, of=10)], measured, 2, None, NO_LIMITS)
    assert close.high == 16 and "trial 7, within 7% of the fastest then, drew num_workers=8 of 0-10" in close.why
    # an epoch's batches still bound it, and the line says the doubling asked for more
    bounded = widened_range(2, 0, rows, measured, 2, None, {"an epoch's 8 batches at batch size 64": 8})
    assert bounded.high == 8 and bounded.why.endswith("(10 asked; an epoch's 8 batches at batch size 64 allows 8)")


@pytest.mark.parametrize(
    ("drawn", "rate", "waits", "why"),
    [
        (5, 2_900.0, 0.05, "it hardly waits on data: its workers keep up"),
        (3, 2_900.0, 0.2, "it drew below the top quarter: the range has room it did not use"),
        (5, 1_000.0, 0.2, "it was not the fastest when it ran"),
        (5, 1_340.0, 0.2, "it ran 11% below the fastest before it: past the noise of one run"),
    ],
)
def test_the_range_stays_at_littles_law(drawn: int, rate: float, waits: float, why: str) -> None:
    base = row(0, 0, rate=800.0)
    rows = [base, row(1, 2, rate=1_500.0, waits=0.5), row(3, drawn, rate=rate, waits=waits)]
    assert widened_range(2, 0, rows, ceilings((base, 800.0, 1e-4, 4_000.0)), 2, None, NO_LIMITS).high == 5, why


def test_no_doubling_without_a_waiting_loader() -> None:
    # CPU-bound workers (800 x 1.2 ms keeps 0.96 CPUs busy): a leader at the top says nothing
    base = row(0, 0, rate=800.0)
    rows = [base, row(1, 2, rate=1_500.0, waits=0.5)]
    assert widened_range(2, 0, rows, ceilings((base, 800.0, 1.2e-3, 20_000.0)), 2, None, NO_LIMITS) is None


def test_the_limits_bound_the_range_and_the_line_says_which() -> None:
    base = row(0, 0)
    wider = widened_range(
        2,
        0,
        [base],
        ceilings((base, 800.0, 1e-4, 20_000.0)),
        2,
        None,
        {"the RAM budget": 12, "the open-file limit (ulimit -n)": 1250},
    )
    assert wider.high == 12 and wider.why.endswith("(25 would feed the model; the RAM budget allows 12)")


def test_the_ram_one_worker_adds_bounds_the_range() -> None:
    gib = 2**30
    rows = [row(0, 0, ram=1.0 * gib), row(1, 4, ram=3.0 * gib)]  # 0.5 GiB a worker
    assert worker_ram(rows) == 0.5 * gib
    caps = limits(8 * gib, worker_ram(rows), 1.0 * gib)
    assert caps["the RAM budget"] == 14  # (8 - 1) / 0.5
    assert all(isinstance(v, int) and v >= 0 for v in caps.values())
    assert widened_range(2, 0, rows, ceilings((rows[0], 800.0, 1e-4, 20_000.0)), 2, 8 * gib).high <= 14


def test_a_retaining_heap_is_not_counted_as_the_workers_ram() -> None:
    gib = 2**30
    # without workers: 1.0 GiB as glibc trims, 1.5 GiB when the heap keeps what it frees
    rows = [
        row(0, 0, ram=1.0 * gib),
        row(1, 0, ram=1.5 * gib, retain=True),
        row(2, 2, ram=1.7 * gib, retain=True),  # (1.7 - 1.5) / 2 = 0.1 GiB a worker
        row(3, 2, ram=1.2 * gib),
    ]  # (1.2 - 1.0) / 2 = 0.1 GiB a worker
    assert worker_ram(rows) == pytest.approx(0.1 * gib)  # not (1.7 - 1.0) / 2 = 0.35
    # no retaining trial without workers yet: held against the least peak, as before
    assert worker_ram([rows[0], rows[2]]) == pytest.approx(0.35 * gib)


def test_evidence_counts_each_loader_once_and_skips_unmeasured_ones() -> None:
    a, b, c = row(0, 0), row(1, 0), row(2, 4)
    assert [e.trial for e in evidence([a, b, c], ceilings((a, 800.0, 1e-4, 20_000.0)), 2)] == [0]


def test_high_auto_marks_the_range_for_widening(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("knobs: {num_workers: {low: 0, high: auto}, pin_memory: [false, true]}\n")
    space = load_space(str(path))
    assert space.domains["num_workers"].auto
    wider = space.with_high("num_workers", 40)
    assert wider.domains["num_workers"] == IntRange(0, 40, auto=True)
    assert space.domains["num_workers"].high != 40  # a new space; the loaded one is unchanged
    assert load_space("default").domains["num_workers"].auto


def test_no_more_workers_than_batches_in_an_epoch() -> None:
    data = TensorDataset(torch.randn(40, 2), torch.zeros(40))
    run = Run(Config(num_workers=8), "cpu")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        loader = run.dataloader(data, batch_size=8)  # 5 batches
    assert loader.num_workers == 5 and run.resolved()["num_workers"] == 5
    assert "num_workers=8 exceeds the 5 batches of an epoch; using 5" in [str(w.message) for w in said]
    assert Run(Config(num_workers=2), "cpu").dataloader(data, batch_size=8).num_workers == 2
    spawned = Run(Config(num_workers=8), "cpu").dataloader(data, batch_size=8, multiprocessing_context="spawn")
    assert spawned.num_workers == 5  # the user's worker kwargs kept


def test_an_epochs_batches_bound_the_range_and_the_line_says_so() -> None:
    base = row(0, 0)
    wider = widened_range(
        2,
        0,
        [base],
        ceilings((base, 800.0, 1e-4, 20_000.0)),
        2,
        None,
        NO_LIMITS,
        also={"an epoch's 10 batches at batch size 64": 10},
    )
    assert wider.high == 10
    assert wider.why.endswith("(25 would feed the model; an epoch's 10 batches at batch size 64 allows 10)")


def test_epoch_samples_from_the_trials_loaders() -> None:
    def seen(batches: int | None, size: int | str) -> SimpleNamespace:
        return SimpleNamespace(
            dataset={"epoch_batches": batches}, config={"batch_size": size}, metrics={}, outcome="complete"
        )

    # 1,000 samples: 16 batches of 64 (the last one partial), 4 of 256; the most seen is kept
    assert epoch_samples([seen(16, 64), seen(4, 256), seen(None, 64)]) == 1_024
    assert epoch_samples([seen(None, 64)]) is None
    assert useful_workers("4x", 64, 1_024) == 4 and useful_workers(None, 64, 1_024) == 16
    assert useful_workers("4x", None, 1_024) is None and useful_workers(64, None, None) is None


def test_the_search_draws_no_more_workers_than_an_epoch_has_batches(tmp_path: Path) -> None:
    import optuna

    path = tmp_path / "s.yaml"
    path.write_text("knobs: {batch_size: [1x, 8x], num_workers: {low: 0, high: 1000}}\n")
    space = load_space(str(path))
    asked = []

    def cap(name: str, values: dict) -> int | None:
        asked.append((name, dict(values)))
        return useful_workers(values.get("batch_size"), 16, 4_096) if name == "num_workers" else None

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    drawn = [space.sample(study.ask(), cap=cap) for _ in range(40)]
    sizes = {c.batch_size for c in drawn}
    assert sizes == {"1x", "8x"}
    for trial, config in zip(study.get_trials(), drawn):
        most = 256 if config.batch_size == "1x" else 32  # 4,096 samples in batches of 16 or 128
        assert trial.distributions["num_workers"].high == most and 0 <= config.num_workers <= most
    assert ("num_workers", {"batch_size": "8x"}) in asked  # the batch size is drawn first
    # a step is kept: the bound rounds up to the next step
    stepped = tmp_path / "t.yaml"
    stepped.write_text("knobs: {num_workers: {low: 2, high: 64, step: 4}}\n")
    trial = optuna.create_study().ask()
    load_space(str(stepped)).sample(trial, cap=lambda name, values: 7)
    assert trial.distributions["num_workers"].high == 10


class Batched(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> int:
        return i

    def __getitems__(self, indices: list[int]) -> list[int]:
        return list(indices)


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(10))


def test_a_run_says_what_its_loader_reads() -> None:
    from torch.utils.data import Subset

    def facts(dataset, **kwargs) -> dict:
        run = Run(Config(), "cpu")
        run.dataloader(dataset, **kwargs)
        return run._dataset

    plain = TensorDataset(torch.zeros(10, 2))
    assert facts(plain, batch_size=4) == {
        "name": "TensorDataset",
        "epoch_batches": 3,
        "batched_fetch": False,
        "shuffles": False,
    }
    assert facts(plain, batch_size=4, shuffle=True)["shuffles"] is True
    assert facts(plain, batch_size=4, drop_last=True)["epoch_batches"] == 2
    # a Subset fetches in batches only when what it wraps does
    assert facts(Subset(Batched(), [1, 2, 3]), batch_size=2) == {
        "name": "Batched",
        "epoch_batches": 2,
        "batched_fetch": True,
        "shuffles": False,
    }
    assert facts(Subset(plain, [1, 2]))["batched_fetch"] is False
    assert facts(Stream(), batch_size=4) == {"name": "Stream", "epoch_batches": None, "shuffles": False}


def test_a_leader_that_waits_runs_again_with_twice_its_workers_up_to_an_epochs_batches() -> None:
    # the loader waits (800 samples/s from the main process, 0.1 of 2 CPUs); trial 3 leads,
    # drew 9 workers and waited on data 40% of its time
    base = row(0, 0, rate=200.0)
    measured = ceilings((base, 800.0, 1e-4, 4_000.0))
    rows = [base, row(1, 4, rate=900.0, waits=0.5, of=34), row(3, 9, rate=1_600.0, waits=0.4, of=34)]
    more = more_workers(rows[2], rows, measured, 2, high=34, useful=None)
    assert more.workers == 18
    assert more.why == (
        "trial 3, the fastest then, drew num_workers=9 and waited on data 40% of its time: "
        "its config runs again with num_workers=18"
    )
    # an epoch of 24 batches at its batch size, or the range, bounds it, and the line says which
    rows[2] = row(3, 18, rate=1_600.0, waits=0.4, of=34)
    assert more_workers(rows[2], rows, measured, 2, high=34, useful=24).why.endswith(
        "num_workers=24 (an epoch's batches at its batch size, 24)"
    )
    assert more_workers(rows[2], rows, measured, 2, high=20, useful=24).workers == 20
    # a leader whose workers started anew each epoch keeps them too: twice the workers would
    # otherwise restart twice the work each epoch
    anew = row(3, 9, rate=1_600.0, waits=0.4, of=34)
    anew.sampled["persistent_workers"] = False
    more = more_workers(anew, [*rows[:2], anew], measured, 2, high=34, useful=None)
    assert more.persistent and more.workers == 18
    assert more.why.endswith(
        "num_workers=18 and persistent_workers=true (started anew each epoch, twice the workers restart twice the work)"
    )
    kept = row(3, 9, rate=1_600.0, waits=0.4, of=34)
    kept.sampled["persistent_workers"] = True
    assert not more_workers(kept, [*rows[:2], kept], measured, 2, high=34, useful=None).persistent
    # within 10% of the fastest before it counts as leading
    close = [*rows, row(5, 6, rate=1_500.0, waits=0.3, of=34)]
    assert more_workers(close[3], close, measured, 2, high=34, useful=None).why.startswith(
        "trial 5, within 6% of the fastest then, drew num_workers=6"
    )


def test_a_leader_with_a_worker_per_batch_runs_again_at_a_smaller_batch_with_twice_its_workers() -> None:
    # trial 3 leads and waits with 12 workers, as many as its epoch has batches (12 at 4x):
    # at 2x an epoch has 24
    base = row(0, 0, rate=200.0)
    measured = ceilings((base, 800.0, 1e-4, 4_000.0))
    leader = row(3, 12, rate=1_600.0, waits=0.4, of=48)
    leader.sampled["batch_size"] = "4x"
    rows = [base, row(1, 4, rate=900.0, waits=0.5, of=48), leader]
    more = more_workers(leader, rows, measured, 2, high=48, useful=12, smaller=("2x", 24))
    assert (more.workers, more.batch_size) == (24, "2x")
    assert more.why == (
        "trial 3, the fastest then, drew num_workers=12 and waited on data 40% of its time, "
        "one per batch of its epoch at batch_size=4x: its config runs again at batch_size=2x "
        "with num_workers=24"
    )
    # bounded by the range and by an epoch at the smaller size, and the line says which
    assert more_workers(leader, rows, measured, 2, high=48, useful=12, smaller=("2x", 20)).why.endswith(
        "at batch_size=2x with num_workers=20 (an epoch's batches at that batch size, 20)"
    )
    # while its own epoch has batches for more workers, it climbs at its own batch size first
    assert more_workers(leader, rows, measured, 2, high=48, useful=16, smaller=("2x", 32)).batch_size is None
    # none smaller in the space, the range's top reached, or no more batches there: nothing
    assert more_workers(leader, rows, measured, 2, high=48, useful=12) is None
    assert more_workers(leader, rows, measured, 2, high=12, useful=12, smaller=("2x", 24)) is None
    assert more_workers(leader, rows, measured, 2, high=48, useful=12, smaller=("2x", 12)) is None


def test_a_climbed_config_drops_what_no_longer_applies() -> None:
    from autotune.tuner._planner import smaller_batch
    from autotune.tuner._space import Choice
    from autotune.tuner._worker_climb import MoreWorkers, climbed

    drawn = {
        "batch_size": "2x",
        "num_workers": 12,
        "lr_scaling": "linear",
        "prefetch_factor": 4,
        "persistent_workers": False,
        "amp": "bf16",
    }
    # at the code's own batch size no lr scaling applies; 24 workers ask at most 2 batches
    # each of an epoch of 48
    assert climbed(drawn, MoreWorkers(24, "", True, "1x"), 48) == {
        "batch_size": "1x",
        "num_workers": 24,
        "prefetch_factor": 2,
        "persistent_workers": True,
        "amp": "bf16",
    }
    assert climbed(drawn, MoreWorkers(24, ""), None) == {**drawn, "num_workers": 24}
    # the next smaller batch size in the space, in samples (the code's own is 32)
    sizes = Choice(("1x", 48, "4x", "2x"))
    assert smaller_batch("4x", 32, sizes) == "2x"
    assert smaller_batch("2x", 32, sizes) == 48
    assert smaller_batch(48, 32, sizes) == "1x"
    assert smaller_batch("1x", 32, sizes) is None
    assert smaller_batch("4x", None, sizes) is None
    assert smaller_batch(None, 32, sizes) is None


@pytest.mark.parametrize(
    ("drawn", "rate", "waits", "cpu", "useful", "why"),
    [
        (9, 1_000.0, 0.4, 1e-4, None, "it did not lead: 1,000 against 1,600 before it"),
        (9, 1_700.0, 0.05, 1e-4, None, "it hardly waits on data"),
        (9, 1_700.0, 0.4, 1.2e-3, None, "the loaders are CPU-bound: more than the cores cannot help"),
        (24, 1_700.0, 0.4, 1e-4, 24, "it drew as many as an epoch has batches"),
        (0, 1_700.0, 0.4, 1e-4, None, "it drew no workers: the range's rule covers it"),
    ],
)
def test_no_more_workers(drawn: int, rate: float, waits: float, cpu: float, useful: int | None, why: str) -> None:
    base = row(0, 0, rate=200.0)
    rows = [base, row(1, 4, rate=1_600.0, waits=0.5, of=34), row(2, drawn, rate=rate, waits=waits, of=34)]
    assert more_workers(rows[2], rows, ceilings((base, 800.0, cpu, 4_000.0)), 2, high=34, useful=useful) is None, why


def test_in_order_false_applies_only_to_a_loader_that_shuffles_with_workers() -> None:
    data = TensorDataset(torch.arange(64.0))

    def built(config: Config, **kwargs):
        run = Run(config, "cpu")
        return run.dataloader(data, batch_size=8, **kwargs), run.resolved()

    loader, resolved = built(Config(num_workers=2, in_order=False), shuffle=True)
    assert loader.in_order is False and resolved["in_order"] is False
    # a loader that keeps its order (a curriculum, a sequence): the order stays, whatever the config
    loader, resolved = built(Config(num_workers=2, in_order=False))
    assert loader.in_order is True and resolved["in_order"] is True
    # without workers there is nothing to reorder; the user's own in_order=False stays theirs
    assert built(Config(in_order=False), shuffle=True)[0].in_order is True
    assert built(Config(num_workers=2), in_order=False)[0].in_order is False
    # every row once an epoch, in any order
    loader, _ = built(Config(num_workers=2, in_order=False), shuffle=True)
    assert sorted(torch.cat([x for (x,) in loader]).tolist()) == list(range(64))


def test_a_loader_on_several_ranks_says_whether_its_sampler_splits_the_dataset_by_rank() -> None:
    from torch.utils.data import BatchSampler, DistributedSampler, RandomSampler

    from autotune.core._loaders import dataset_facts

    data = TensorDataset(torch.zeros(64, 2))
    split = DistributedSampler(data, num_replicas=2, rank=0)
    assert dataset_facts(data, 4, {"sampler": split}, ranks=2)["splits_ranks"] is True
    batched = BatchSampler(DistributedSampler(data, num_replicas=2, rank=1), 8, False)
    assert dataset_facts(data, 4, {"batch_sampler": batched}, ranks=2)["splits_ranks"] is True
    for whole in ({"shuffle": True}, {"sampler": RandomSampler(data)}):  # every rank reads every row
        facts = dataset_facts(data, 4, whole, ranks=2)
        assert (facts["ranks"], facts["splits_ranks"]) == (2, False)
    assert "splits_ranks" not in dataset_facts(data, 4, {"shuffle": True})  # one process: nothing to split
