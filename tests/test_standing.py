"""The study's pure parts: which loader knobs to hold, and what a study found (its summary
and export header). The study itself runs in test_e2e.py and test_safety.py."""

from __future__ import annotations

import pytest

from autotune import KNOBS
from autotune._ceilings import Ceilings, bottleneck
from autotune._confirm import decide, group_runs
from autotune._records import TrialRow
from autotune._standing import Standing, findings, held_loader_knobs


def row(number: int, sps: float, *, baseline: bool = False, confirms: int | None = None,
        efficiency: float = 0.5, wait: float = 0.0, sampled: dict | None = None,
        window_spread: float = 0.1) -> TrialRow:
    bound = bottleneck(sps, wait, sps / efficiency, None)
    return TrialRow(number, baseline, "complete", "", {"samples_per_s": sps, "samples_per_s_spread": window_spread},
                    {}, None, None, sampled=sampled or {}, confirms=confirms, bottleneck=bound)


def standing_of(*rows: TrialRow) -> Standing:
    groups = group_runs(rows)
    return Standing(list(rows), groups, decide(groups), Ceilings())


@pytest.mark.parametrize("efficiency, wait, held", [
    # compute-bound at 95%: the loader knobs are held at the trial's (None: the user's own)
    (0.95, 0.01, {"num_workers": 2, "pin_memory": None, "persistent_workers": True,
                  "prefetch_factor": None, "prefetch": "thread"}),
    (0.85, 0.01, {}),  # compute-bound but loading still costs 15%
    (0.95, 0.30, {}),  # waits on data: data-bound
])
def test_held_loader_knobs(efficiency: float, wait: float, held: dict) -> None:
    best = row(3, 100.0, efficiency=efficiency, wait=wait,
               sampled={"num_workers": 2, "persistent_workers": True, "prefetch": "thread",
                        "batch_size": "2x", "amp": "bf16"})
    assert held_loader_knobs(best, KNOBS) == held  # batch size and amp act on compute: never held
    assert held_loader_knobs(None, KNOBS) == {}


def test_findings_of_a_confirmed_win() -> None:
    found = standing_of(row(0, 100, baseline=True), row(1, 150, efficiency=0.94),
                        row(2, 98, confirms=0), row(3, 102, confirms=0),
                        row(4, 160, confirms=1), row(5, 140, confirms=1))
    lines = findings(found)
    # medians: 150 vs 100; ± is half the spread of the winner's runs: (160 - 140) / 150 / 2 = 7%
    assert lines[0] == "trial 1, 1.50x the baseline (150 vs 100 samples/s, ±7%)"
    assert lines[1] == ("runs: median of 3 runs (1, 4, 5), ±7%; the baseline's: "
                        "median of 3 runs (0, 2, 3), ±2%")
    assert lines[2].startswith("bottleneck: 94% of the data-on-device ceiling")


def test_findings_when_nothing_beats_the_baseline_beyond_the_noise() -> None:
    found = standing_of(row(0, 100, baseline=True), row(1, 104), row(2, 99, confirms=0),
                        row(3, 103, confirms=0), row(4, 102, confirms=1), row(5, 106, confirms=1))
    lines = findings(found)
    assert found.best.number == 0
    assert lines[0].startswith("trial 0 (the baseline: your code as written), 100 samples/s")
    assert lines[1].startswith("no config beat the baseline beyond the run-to-run noise: "
                               "the fastest, trial 1 (1.04x, median of 3 runs (1, 4, 5)")


def test_findings_unconfirmed_say_so_and_use_the_window_spread() -> None:
    found = standing_of(row(0, 100, baseline=True), row(1, 130, window_spread=0.08))
    lines = findings(found)
    assert lines[0] == "trial 1, 1.30x the baseline (130 vs 100 samples/s, ±4%)"
    assert lines[1].startswith("runs: one each, not confirmed by re-runs")


def test_a_trials_own_ceilings_come_before_the_studys() -> None:
    from autotune._ceilings import ceiling_key
    from autotune._knobs import Part
    from autotune._records import bottleneck_of

    config = {"batch_size": 64, "num_workers": 0, "amp": "off"}
    table = Ceilings([{"part": "compute", "key": ceiling_key(Part.COMPUTE, config), "samples_per_s": 1000.0},
                      {"part": "loader", "key": ceiling_key(Part.LOADER, config), "samples_per_s": 9000.0}])
    metrics = {"samples_per_s": 900.0, "data_wait_frac": 0.01}
    # measured seconds after its windows: its own compute ceiling (1200), the study's loader one
    bound = bottleneck_of(metrics, config, table, [{"part": "compute", "samples_per_s": 1200.0}])
    assert (bound.compute, bound.loader, bound.efficiency) == (1200.0, 9000.0, 0.75)
    assert bottleneck_of(metrics, config, table, []).efficiency == 0.9
