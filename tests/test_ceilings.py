"""Ceilings: their keys, the study's table of them, and the bottleneck verdict (pure)."""

from __future__ import annotations

import pytest

from autotune import KNOBS
from autotune._ceilings import DATA_WAIT_HIGH, HIGH_EFFICIENCY, Ceilings, bottleneck, ceiling_key, loader_only
from autotune._knobs import Part

RESOLVED = {"batch_size": 64, "num_workers": 2, "pin_memory": False, "persistent_workers": True,
            "prefetch_factor": 2, "prefetch": "thread", "lr_scaling": "linear", "fused_optimizer": True,
            "amp": "bf16", "cudnn_benchmark": False, "tf32": False, "cuda_alloc_conf": "default"}


def test_each_ceiling_keys_on_the_knobs_that_act_on_its_part() -> None:
    compute = ceiling_key(Part.COMPUTE, RESOLVED)
    loader = ceiling_key(Part.LOADER, RESOLVED)
    assert compute == ('{"amp": "bf16", "batch_size": 64, "cuda_alloc_conf": "default", '
                       '"cudnn_benchmark": false, "fused_optimizer": true, "tf32": false}')
    assert loader == ('{"batch_size": 64, "num_workers": 2, "persistent_workers": true, '
                      '"pin_memory": false, "prefetch": "thread", "prefetch_factor": 2}')
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
        "num_workers", "pin_memory", "persistent_workers", "prefetch_factor", "prefetch"]


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
        ("compute", 100.0, 3), ("loader", 5.0, 1)]


@pytest.mark.parametrize("sps, wait, compute, loader, verdict, efficiency, settled, words", [
    # at 94% of the ceiling, no waiting: compute-bound, loader knobs settled
    (940.0, 0.01, 1000.0, 5000.0, "compute-bound", 0.94, True, "compute-bound, waits on data 1%"),
    # no waiting but 70% of the ceiling (loading shares the CPU): compute-bound, not settled
    (700.0, 0.02, 1000.0, 5000.0, "compute-bound", 0.70, False, "70% of the data-on-device"),
    # waits 60%, the loader alone makes 420/s < the model's 1000/s
    (400.0, 0.60, 1000.0, 420.0, "data-bound", 0.40, False, "the loader alone makes 420 samples/s"),
    # waits 30% although the loader alone is faster than the model: no overlap
    (600.0, 0.30, 1000.0, 3000.0, "data-bound", 0.60, False, "loading and compute do not overlap"),
    # a ceiling slower than the trial (noise): efficiency over 100% is reported as measured
    (1050.0, 0.0, 1000.0, None, "compute-bound", 1.05, True, "105% of the data-on-device"),
    # no ceilings: the data wait decides alone
    (500.0, DATA_WAIT_HIGH, None, None, "data-bound", None, False, "no compute ceiling measured"),
    (500.0, DATA_WAIT_HIGH - 0.01, None, None, "compute-bound", None, False, "no compute ceiling"),
])
def test_bottleneck_verdicts(sps, wait, compute, loader, verdict, efficiency, settled, words) -> None:
    bound = bottleneck(sps, wait, compute, loader)
    assert bound.verdict == verdict
    assert bound.efficiency == (pytest.approx(efficiency) if efficiency is not None else None)
    assert bound.settled is settled
    assert words in bound.why
    assert (bound.compute, bound.loader) == (compute, loader)


def test_settled_needs_high_efficiency_exactly() -> None:
    assert bottleneck(HIGH_EFFICIENCY * 1000, 0.0, 1000.0, None).settled
    assert not bottleneck(HIGH_EFFICIENCY * 1000 - 1, 0.0, 1000.0, None).settled
