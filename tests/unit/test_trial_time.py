"""When a running trial is past its time (autotune.tuner._watch._late): startup, stall, deadline."""

from __future__ import annotations

from autotune.machine._launch import Budget
from autotune.tuner._watch import _late

BUDGET = Budget(startup_s=30, stall_s=3, timeout_s=100)


def test_no_batch_by_the_startup_limit_is_a_startup_timeout() -> None:
    assert _late(29, None, 3, None, 0, BUDGET, 0) is None
    assert _late(31, None, 3, None, 0, BUDGET, 0).startswith("startup: no batch after 30 s")


def test_the_stall_clock_runs_once_the_config_is_resolved_and_names_the_last_step() -> None:
    assert _late(50, 2.9, 3, None, 0, BUDGET, 0) is None
    assert _late(50, 3.1, 3, None, 0, BUDGET, 0) == "stalled: no step finished for 3 s"
    assert _late(50, 3.1, 3, None, 7, BUDGET, 0).endswith("(the last report was at step 7)")
    assert "while torch.compile compiled" in _late(50, 61, 60, 61, 0, BUDGET, 0)


def test_the_deadline_moves_by_what_compiling_took() -> None:
    deadline = BUDGET.deadline()
    assert _late(deadline + 1, 0.1, 3, None, 5, BUDGET, 0) == f"deadline: still running after {deadline:.0f} s"
    assert _late(deadline + 1, 0.1, 3, None, 5, BUDGET, 20) is None
    assert _late(deadline + 21, 0.1, 3, None, 5, BUDGET, 20).endswith("(20 s of it compiling)")


def test_a_compile_still_running_moves_the_deadline_too() -> None:
    # beside the suite's load, a first compile ran past the 64 s deadline of short trials: the
    # compile is bounded by --compile-timeout (the stall limit while it runs), not the deadline
    deadline = BUDGET.deadline()
    assert _late(deadline + 10, 30, 600, 30, 0, BUDGET, 0) is None
    assert (
        _late(deadline + 10, 30, 600, 5, 0, BUDGET, 0)
        == f"deadline: still running after {deadline + 5:.0f} s (5 s of it compiling)"
    )
    assert _late(deadline + 10, 30, 600, 4, 0, BUDGET, 8) is None  # an earlier compile's 8 s, and this one's 4
