"""The sweep benchmark's load rule as data (benchmarks/_host_load.py, benchmarks/sweep.py): its
figures are provisional by the CPU time of processes outside its own process tree, not by the
1-minute load average its own DataLoader workers and trials raise."""

from __future__ import annotations

import pytest

from bench_modules import BENCH, load_module

host = load_module("_host_load_under_test", BENCH / "_host_load.py")
sweep = load_module("sweep_under_test", BENCH / "sweep.py")


def test_foreign_is_the_busy_time_less_the_trees():
    # 2 CPUs over 10 s: 20 CPU-seconds; 14 busy, 12 of them the benchmark's own: 2/20 = 10%
    start, end = host.Reading(0.0, 100.0, 50.0), host.Reading(10.0, 114.0, 62.0)
    assert host.foreign_since(start, end) == pytest.approx(2 / (10 * len(host.os.sched_getaffinity(0))))


def _raw(foreign=None, load=3.5, cpus=2, measure=0.05):
    raw = {
        "cpus": cpus,
        "load": {"sweep": [load, load], "study": [load, load], "turns": [load, load]},
        "sweep": [{"runs": [{"load_before": load, **({"foreign": measure} if foreign else {})}]}],
        "turns": {"a": [{"load_before": load, **({"foreign": measure} if foreign else {})}]},
    }
    return {**raw, "foreign": foreign} if foreign else raw


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        # the 12:05 run's kind: a load average of 3.5 on 2 CPUs, its own workers' and trials'; others 5%
        (_raw({"sweep": 0.03, "study": 0.05, "turns": 0.04}), None),
        # others took 31% of the CPUs while one turn measured (over the study's 20% for a trial)
        (
            _raw({"sweep": 0.03, "study": 0.05, "turns": 0.04}, measure=0.31),
            "other processes used up to 31% of the CPUs during the turns (over 20%)",
        ),
        # over a whole part (the study: its trials judge their own windows, the page the part)
        (
            _raw({"sweep": 0.03, "study": 0.25, "turns": 0.04}),
            "other processes used up to 25% of the CPUs during the study (over 20%)",
        ),
        # a run from before the foreign share was recorded: the load average, as then
        (_raw(), "a 1-minute load average of up to 3.5 on 2 CPUs"),
        (_raw(load=1.5), None),
    ],
)
def test_a_run_is_provisional_by_the_load_of_others(raw, why):
    assert sweep.loaded(raw) == why


def test_the_page_says_both_loads():
    raw = {
        **_raw({"sweep": 0.03, "study": 0.05, "turns": 0.12}, measure=0.09),
        "machine": "m",
        "commit": "c",
        "autotune_changed": [],
        "wall_s": 60.0,
        "args": {k: 1 for k in ("repeats", "turns", "trials", "samples", "warmup_samples")}
        | {"batches": [64], "workers": [4], "prefetch_factors": [2]},
    }
    text = " ".join(sweep.header(raw, sweep.loaded(raw)))
    assert "sweep 3.5 -> 3.5" in text and "before the sweep's runs 3.5..3.5" in text
    assert "sweep 3% (9%), study 5% (5%), turns 12% (12%)" in text and "The host was quiet." in text
