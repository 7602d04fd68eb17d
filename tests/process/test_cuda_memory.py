"""A profile run's CUDA memory (autotune.core._memline) in a real worker: the allocator's timeline over
the timed window, its peaks, and the trace's CUDA activity; on the CPU, no memory figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune import Config, Outcome
from autotune.core._memline import EXPANDABLE, memory_path
from autotune.machine._launch import Budget, TrialSpec
from autotune.tuner._watch import run_trial
from autotune.worker._profile import PARTS, trace_events
from helpers import FIXTURES

SHAPES = FIXTURES / "shapes_train.py"
BUDGET = Budget(warmup_s=0.5, window_s=1.0, windows=1, ceiling_windows=0)


def profiled(tmp_path: Path, device: str, config: Config = Config()):  # noqa: B008
    trace = tmp_path / "baseline.pt.trace.json.gz"
    spec = TrialSpec(target=f"{SHAPES}:train", config=config, device=device, budget=BUDGET, trace=str(trace))
    result = run_trial(spec, tmp_path / "profile.log")
    assert result.outcome is Outcome.COMPLETE, result.reason
    return result, trace


def test_a_cpu_profile_run_has_no_memory_figures(tmp_path: Path) -> None:
    result, trace = profiled(tmp_path, "cpu")
    assert result.profile["memory"] is None and not memory_path(trace).exists()


@pytest.mark.gpu
@pytest.mark.parametrize("alloc", ["default", EXPANDABLE])
def test_a_cuda_profile_run_records_the_allocator_over_its_window(tmp_path: Path, alloc: str) -> None:
    result, trace = profiled(tmp_path, "cuda", Config(cuda_alloc_conf=alloc))
    memory = result.profile["memory"]
    timeline = json.loads(Path(memory["timeline"]).read_text())
    samples = timeline["samples"]
    assert timeline["finding"]["steps"] == memory["steps"] >= 1
    assert {s[1] for s in samples} >= {"start", "end", *PARTS}  # every edge of a step (run.batches copies)
    assert all(0 < allocated <= reserved for _, _, allocated, reserved in samples)
    assert max(s[3] for s in samples) <= memory["reserved_peak"]
    assert max(s[2] for s in samples) <= memory["allocated_peak"] <= memory["reserved_peak"]
    assert [s[0] for s in samples] == sorted(s[0] for s in samples)
    kinds = {e.get("cat") for e in trace_events(trace)}
    assert "kernel" in kinds  # the profiler recorded the device's work, not only the host's
