"""Ceilings: their keys, the study's table of them, and the bottleneck verdict (pure)."""

from __future__ import annotations

import pytest

from autotune import KNOBS
from autotune.core._ceilings import (
    DATA_WAIT_HIGH,
    HIGH_EFFICIENCY,
    Ceilings,
    bottleneck,
    ceiling_key,
    cpu_roof,
    loader_only,
)
from autotune.core._knobs import Part

RESOLVED = {
    "batch_size": 64,
    "num_workers": 2,
    "pin_memory": False,
    "persistent_workers": True,
    "prefetch_factor": 2,
    "prefetch": "thread",
    "lr_scaling": "linear",
    "fused_optimizer": True,
    "amp": "bf16",
    "cudnn_benchmark": False,
    "tf32": False,
    "cuda_alloc_conf": "default",
}


def test_each_ceiling_keys_on_the_knobs_that_act_on_its_part() -> None:
    compute = ceiling_key(Part.COMPUTE, RESOLVED)
    loader = ceiling_key(Part.LOADER, RESOLVED)
    assert compute == (
        '{"amp": "bf16", "batch_size": 64, "cuda_alloc_conf": "default", '
        '"cudnn_benchmark": false, "fused_optimizer": true, "tf32": false}'
    )
    assert loader == (
        '{"batch_size": 64, "num_workers": 2, "persistent_workers": true, '
        '"pin_memory": false, "prefetch": "thread", "prefetch_factor": 2}'
    )
    # lr scaling changes the numbers, not the speed: in neither key
    assert ceiling_key(Part.COMPUTE, {**RESOLVED, "lr_scaling": "sqrt"}) == compute
    # a loader knob does not change the compute ceiling, nor a compute knob the loader's
    assert ceiling_key(Part.COMPUTE, {**RESOLVED, "num_workers": 7}) == compute
    assert ceiling_key(Part.LOADER, {**RESOLVED, "amp": "off"}) == loader
    # the batch size changes both
    assert ceiling_key(Part.COMPUTE, {**RESOLVED, "batch_size": 128}) != compute
    assert ceiling_key(Part.LOADER, {**RESOLVED, "batch_size": 128}) != loader


def test_every_knob_but_lr_scaling_acts_on_some_part() -> None:
    assert [k.name for k in KNOBS.values() if not k.acts_on] == ["lr_scaling"]
    assert [name for name in KNOBS if loader_only(name)] == [
        "num_workers",
        "pin_memory",
        "persistent_workers",
        "prefetch_factor",
        "in_order",
        "prefetch",
    ]


def test_ceilings_table_takes_the_median_of_repeats() -> None:
    key = ceiling_key(Part.COMPUTE, RESOLVED)
    table = Ceilings([{"part": "compute", "key": key, "samples_per_s": v} for v in (90.0, 100.0, 400.0)])
    assert table.get(Part.COMPUTE, RESOLVED) == 100.0
    assert table.get(Part.COMPUTE, {**RESOLVED, "batch_size": 128}) is None
    assert table.get(Part.LOADER, RESOLVED) is None
    table.add({"part": "loader", "key": ceiling_key(Part.LOADER, RESOLVED), "samples_per_s": 5.0})
    assert table.get(Part.LOADER, RESOLVED) == 5.0
    assert table.known() == {"compute": [key], "loader": [ceiling_key(Part.LOADER, RESOLVED)]}
    assert [(r["part"], r["samples_per_s"], r["measurements"]) for r in table.table()] == [
        ("compute", 100.0, 3),
        ("loader", 5.0, 1),
    ]


@pytest.mark.parametrize(
    "sps, wait, compute, loader, verdict, efficiency, settled, words",
    [
        # at 94% of the ceiling, no waiting: compute-bound, loader knobs settled
        (940.0, 0.01, 1000.0, 5000.0, "compute-bound", 0.94, True, "compute-bound, waits on data 1%"),
        # no waiting but 70% of the ceiling (loading shares the CPU): compute-bound, not settled
        (700.0, 0.02, 1000.0, 5000.0, "compute-bound", 0.70, False, "70% of the data-on-device"),
        # waits 60%, the loader alone makes 420/s < the model's 1000/s
        (400.0, 0.60, 1000.0, 420.0, "data-bound", 0.40, False, "the loader alone makes 420 samples/s"),
        # waits 30% although the loader alone is faster than the model: no overlap
        (600.0, 0.30, 1000.0, 3000.0, "data-bound", 0.60, False, "loading and compute do not overlap"),
        # a ceiling slower than the trial within the noise (10%): the trial is at it, 100%
        (1050.0, 0.0, 1000.0, None, "compute-bound", 1.0, True, "100% of the data-on-device"),
        # past it beyond the noise: that ceiling was measured wrong, and nothing rests on it
        (
            1200.0,
            0.0,
            1000.0,
            None,
            "compute-bound",
            None,
            False,
            "unreliable, not used: the data-on-device ceiling (1,000 samples/s, the trial ran at 120% of it)",
        ),
        # no ceilings: the data wait decides alone
        (500.0, DATA_WAIT_HIGH, None, None, "data-bound", None, False, "no compute ceiling measured"),
        (500.0, DATA_WAIT_HIGH - 0.01, None, None, "compute-bound", None, False, "no compute ceiling"),
    ],
)
def test_bottleneck_verdicts(sps, wait, compute, loader, verdict, efficiency, settled, words) -> None:
    bound = bottleneck(sps, wait, compute, loader)
    assert bound.verdict == verdict
    assert bound.efficiency == (pytest.approx(efficiency) if efficiency is not None else None)
    assert bound.settled is settled
    assert words in bound.why
    kept = compute if efficiency is not None or compute is None else None
    assert (bound.compute, bound.loader) == (kept, loader)
    assert bound.unreliable == (() if kept == compute else ("compute",))


def test_settled_needs_high_efficiency_exactly() -> None:
    assert bottleneck(HIGH_EFFICIENCY * 1000, 0.0, 1000.0, None).settled
    assert not bottleneck(HIGH_EFFICIENCY * 1000 - 1, 0.0, 1000.0, None).settled


@pytest.mark.parametrize(
    "compute_cpu, loader_cpu, cpus, roof",
    [
        (0.001, 0.001, 2, 1000.0),  # 2 ms of CPU a sample, 2 CPUs: 1,000 samples/s
        (0.0012, 0.0012, 2, 833.33),  # the jpeg runner on 2 cores, roughly: decode and model alike
        (0.0001, 0.0002, 16, 53333.3),  # 0.3 ms a sample on 16 CPUs
        (None, 0.001, 2, None),  # a part unmeasured: no roof
        (0.001, None, 2, None),
        (0.001, 0.001, None, None),  # the CPU count unknown
        (0.0, 0.0, 2, None),  # no CPU time at all (a clock too coarse): no roof, not infinity
    ],
)
def test_cpu_roof(compute_cpu, loader_cpu, cpus, roof) -> None:
    got = cpu_roof(compute_cpu, loader_cpu, cpus)
    assert got == (pytest.approx(roof, rel=1e-4) if roof is not None else None)


def test_the_cpu_roof_under_both_ceilings_is_named_and_bounds_the_trial() -> None:
    # the jpeg runner's shape on 2 cores: each part alone runs at 1,400-1,700/s, together
    # they need all the CPU both take: 850/s at most, and the trial makes 800
    bound = bottleneck(800.0, 0.3, 1700.0, 1400.0, cpu=850.0)
    assert bound.verdict == "data-bound"
    assert bound.efficiency == pytest.approx(800 / 1700)
    assert (bound.cpu, bound.limit) == (850.0, "cpu")
    assert bound.of_roof == pytest.approx(800 / 850)
    assert bound.why.endswith("loading and compute share the CPUs, which allow 850 samples/s for both: 94% of that")


@pytest.mark.parametrize(
    "compute, loader, cpu, limit, of_roof, named",
    [
        (1000.0, 5000.0, 20000.0, "compute", 0.5, False),  # a roof above the ceilings: not mentioned
        (1000.0, 480.0, None, "loader", 1.0, False),  # no roof measured: the lower ceiling; 104%, within noise
        (1000.0, 400.0, None, "compute", 0.5, False),  # 125% of the loader's: that one is wrong, not the limit
        (1000.0, None, 800.0, "cpu", 0.625, True),  # 500 / 800
        (None, None, 800.0, "cpu", None, False),  # nothing shares a roof without a ceiling
    ],
)
def test_the_lowest_bound_is_the_roof(compute, loader, cpu, limit, of_roof, named) -> None:
    bound = bottleneck(500.0, 0.0, compute, loader, cpu=cpu)
    assert bound.limit == limit
    assert bound.of_roof == (pytest.approx(of_roof) if of_roof is not None else None)
    assert ("share the CPUs" in bound.why) is named


def test_ceilings_keep_the_median_cpu_cost_and_the_cpu_count() -> None:
    key = ceiling_key(Part.LOADER, RESOLVED)
    table = Ceilings(
        [
            {"part": "loader", "key": key, "samples_per_s": 100.0, "cpu_per_sample": v, "cpus": 2}
            for v in (0.001, 0.002, 0.009)
        ]
    )
    assert table.cpu(Part.LOADER, RESOLVED) == 0.002
    assert table.cpu(Part.COMPUTE, RESOLVED) is None
    assert table.cpus == 2
    # entries from before CPU costs were recorded still give their ceiling
    old = Ceilings([{"part": "loader", "key": key, "samples_per_s": 100.0}])
    assert (old.get(Part.LOADER, RESOLVED), old.cpu(Part.LOADER, RESOLVED), old.cpus) == (100.0, None, None)


def test_ceilings_leave_out_doubted_measurements_and_drop_distrusted_keys() -> None:
    key = ceiling_key(Part.COMPUTE, RESOLVED)
    table = Ceilings(
        [
            {"part": "compute", "key": key, "samples_per_s": 255.0},
            {"part": "compute", "key": key, "samples_per_s": 200.0, "doubt": "others used 48%"},
        ]
    )
    assert table.get(Part.COMPUTE, RESOLVED) == 255.0  # the doubted 200 is not in the median
    # a later trial ran at 615/s, past it: the key is measured again by the next trial
    table.add({"part": "compute", "key": key, "distrust": "trial 4 ran at 241% of it"})
    assert table.get(Part.COMPUTE, RESOLVED) is None and table.known() == {}
    table.add({"part": "compute", "key": key, "samples_per_s": 640.0})
    assert table.get(Part.COMPUTE, RESOLVED) == 640.0
