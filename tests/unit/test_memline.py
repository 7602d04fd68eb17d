"""CUDA memory in profile runs (autotune.core._memline): the swing rule, which config runs again with
expandable_segments, the lines the terminal and the report show, and the parent run's metrics."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from autotune.core._memline import (
    EXPANDABLE,
    MemoryFinding,
    effect_line,
    memory_lines,
    memory_path,
    swing_reason,
)
from autotune.tuner._profiling import expandable_plan, parent_figures
from autotune.tuner._report import step_parts_html

MIB, GIB = 1 << 20, 1 << 30
STEADY = MemoryFinding(
    steps=80,
    allocated_peak=2 * GIB,
    reserved_peak=2 * GIB + 100 * MIB,
    reserved_start=2 * GIB + 100 * MIB,
    reserved_end=2 * GIB + 100 * MIB,
    reserved_low=2 * GIB + 100 * MIB,
)


def finding(**changed) -> dict:
    return {**STEADY.as_dict(), **changed}


def test_a_steady_allocator_does_not_swing() -> None:
    assert swing_reason(STEADY) is None
    # a little growth, or a few segments too small to matter, is not a swing either
    assert swing_reason(MemoryFinding.from_dict(finding(mallocs=2, reserved_end=2 * GIB + 120 * MIB))) is None


def test_growth_after_the_warmup_retries_and_idle_reserve_each_swing() -> None:
    grew = swing_reason(
        MemoryFinding.from_dict(finding(mallocs=9, reserved_end=2 * GIB + 500 * MIB, reserved_peak=2 * GIB + 500 * MIB))
    )
    assert grew.startswith("reserved memory grew 400 MiB over 80 steps after the warmup (9 cudaMalloc calls)")
    retried = swing_reason(MemoryFinding.from_dict(finding(retries=3, frees=40)))
    assert retried.startswith("the allocator failed 3 cudaMalloc calls") and "cudaFree" not in retried
    freed = swing_reason(MemoryFinding.from_dict(finding(frees=5, reserved_low=GIB)))
    assert freed.startswith("reserved memory fell and rose again (5 cudaFree calls, low 1024 MiB")
    idle = swing_reason(MemoryFinding.from_dict(finding(allocated_peak=GIB)))
    assert idle == "reserved 2148 MiB against 1024 MiB at most allocated: 52% of it cached and idle (fragmentation)"


@given(st.lists(st.integers(min_value=0, max_value=1 << 40), min_size=9, max_size=9))
def test_the_rule_never_raises_and_says_why_when_it_swings(values) -> None:
    found = MemoryFinding(*values)
    why = swing_reason(found)
    assert why is None or why.strip()
    if not (found.retries or found.frees or found.mallocs):
        assert why is None or "fragmentation" in why  # without allocator calls, only idle reserve can swing


def test_the_winner_runs_again_with_expandable_segments_where_it_swings() -> None:
    swings, steady = {"memory": finding(allocated_peak=GIB)}, {"memory": finding()}
    plan = [("baseline", 0, {}), ("winner", 7, {"batch_size": 2.0})]
    assert expandable_plan({"baseline": swings, "winner": swings}, plan) == [("winner", "winner_expandable")]
    assert expandable_plan({"baseline": swings, "winner": steady}, plan) == [("baseline", "baseline_expandable")]
    assert expandable_plan({"baseline": steady, "winner": steady}, plan) == []
    assert expandable_plan({"baseline": {"memory": None}}, plan[:1]) == []  # a CPU run: no memory figures
    already = [("baseline", 0, {}), ("winner", 7, {"cuda_alloc_conf": EXPANDABLE})]
    assert expandable_plan({"baseline": steady, "winner": swings}, already) == []


def test_the_memory_lines_name_the_swing_and_the_measured_effect() -> None:
    base = {"parts": {"step": 0.010}, "memory": finding(allocated_peak=GIB)}
    again = {"parts": {"step": 0.0095}, "memory": finding(allocated_peak=GIB, reserved_peak=GIB + 200 * MIB)}
    (line,) = memory_lines({"baseline": base, "baseline_expandable": again})
    assert line.startswith("memory: the baseline's reserved 2148 MiB against 1024 MiB")
    assert line.endswith(effect_line(base, again))
    assert "step 10.0 -> 9.5 ms (0.95x), reserved peak 2148 -> 1224 MiB" in line
    (unmeasured,) = memory_lines({"baseline": base})
    assert unmeasured.endswith(f"{EXPANDABLE} (PYTORCH_CUDA_ALLOC_CONF) addresses it, not measured here")
    assert memory_lines({"baseline": {"parts": {"step": 0.01}, "memory": finding()}}) == []


def test_the_parent_run_gets_the_memory_figures_and_the_timeline(tmp_path) -> None:
    trace = tmp_path / "winner.pt.trace.json.gz"
    trace.write_bytes(b"x")
    timeline = memory_path(trace)
    timeline.write_text("{}")
    metrics, files = parent_figures(
        {
            "winner": {
                "parts": {"step": 0.01, "forward": 0.01},
                "trace": str(trace),
                "memory": {**finding(mallocs=4), "timeline": str(timeline)},
            }
        }
    )
    assert metrics["profile_winner_reserved_peak_mib"] == (2 * GIB + 100 * MIB) / MIB
    assert metrics["profile_winner_allocated_peak_mib"] == 2048
    assert metrics["profile_winner_cuda_mallocs"] == 4
    assert files == [str(trace), str(timeline)] and timeline.name == "winner.memory.json"


def test_the_report_shows_the_expandable_run_and_the_memory_line() -> None:
    base = {"trial": 0, "parts": {"step": 0.010, "forward": 0.010}, "memory": finding(allocated_peak=GIB)}
    again = {"trial": 0, "parts": {"step": 0.009, "forward": 0.009}, "memory": finding()}
    page = step_parts_html({"baseline": base, "baseline_expandable": again})
    assert "id='step-baseline_expandable'" in page
    assert "<p id='memory'>memory: the baseline&#x27;s reserved 2148 MiB" in page
