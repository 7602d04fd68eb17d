"""classify(): every way a worker can end, as a table of cases."""

from __future__ import annotations

import math
import signal

import pytest

from autotune import Outcome
from autotune.core._guard import LossReference
from autotune.core._outcome import WorkerExit, classify, clip, headline

OK = [{"index": 0, "loss": 0.7}, {"index": 1, "loss": 0.6}]

# The texts torch really raises: torch.OutOfMemoryError from the caching allocator,
# and the driver's error surfaced by cuBLAS/cuDNN calls (Lightning's fake uses the latter).
TORCH_OOM = {
    "type": "OutOfMemoryError",
    "message": "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.19 GiB of which 1.06 GiB is free.",
    "traceback": "Traceback ...\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
}
DRIVER_OOM = {
    "type": "RuntimeError",
    "message": "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported",
    "traceback": "...",
}
USER_BUG = {
    "type": "ValueError",
    "message": "shapes do not match",
    "traceback": 'Traceback (most recent call last):\n  File "train.py", line 3\nValueError: shapes do not match',
}


RAM = (Outcome.OOM_HOST, "the trial's processes used 9.00 GiB, over the RAM budget of 8.00 GiB")
DEADLINE = (Outcome.TIMEOUT, "deadline: still running after 64 s")
STALLED = (Outcome.TIMEOUT, "stalled: no step finished for 30 s (after step 12)")


@pytest.mark.parametrize(
    ("returncode", "killed", "error", "windows", "tail", "outcome", "reason"),
    [
        # our RAM guard killed the group: SIGKILL, but the guard's verdict wins
        (-9, RAM, None, OK, "", Outcome.OOM_HOST, "over the RAM budget of 8.00 GiB"),
        # our deadline, our stall detector
        (-9, DEADLINE, None, [], "", Outcome.TIMEOUT, "deadline: still running after 64 s"),
        (-9, STALLED, None, OK, "", Outcome.TIMEOUT, "no step finished for 30 s"),
        # a verdict beats an error event the worker managed to send first
        (-9, DEADLINE, USER_BUG, [], "", Outcome.TIMEOUT, "deadline"),
        # pruned and interrupted are verdicts too
        (-9, (Outcome.PRUNED, "pruned after 2 windows"), None, OK, "", Outcome.PRUNED, "pruned after"),
        (-9, (Outcome.INTERRUPTED, "Ctrl-C"), None, OK, "", Outcome.INTERRUPTED, "Ctrl-C"),
        # GPU OOM, both texts torch produces
        (
            1,
            None,
            TORCH_OOM,
            [],
            "",
            Outcome.OOM_GPU,
            "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ),
        (1, None, DRIVER_OOM, OK, "", Outcome.OOM_GPU, "RuntimeError: CUDA error: out of memory"),
        # the type alone is enough (a message torch may word differently in future)
        (
            1,
            None,
            {"type": "OutOfMemoryError", "message": "", "traceback": ""},
            [],
            "",
            Outcome.OOM_GPU,
            "OutOfMemoryError:",
        ),
        # a generic exception: what it was, then the traceback
        (1, None, USER_BUG, [], "", Outcome.CRASHED, "ValueError: shapes do not match\n" + USER_BUG["traceback"]),
        # no traceback: type and message
        (1, None, {"type": "KeyError", "message": "'x'"}, [], "", Outcome.CRASHED, "KeyError: 'x'"),
        # a host OOM in a DataLoader worker is not a GPU OOM
        (
            1,
            None,
            {
                "type": "RuntimeError",
                "message": "DataLoader worker (pid 7) is killed by signal: Killed.",
                "traceback": "RuntimeError: DataLoader worker",
            },
            [],
            "",
            Outcome.CRASHED,
            "RuntimeError: DataLoader worker",
        ),
        # killed by a signal from outside, with plenty of memory left: not an OOM
        (-signal.SIGKILL, None, None, OK, "", Outcome.CRASHED, "killed by SIGKILL from outside autotune"),
        (
            -signal.SIGSEGV,
            None,
            None,
            OK,
            "Fatal Python error: Segmentation fault",
            Outcome.CRASHED,
            "killed by SIGSEGV\nFatal Python error: Segmentation fault",
        ),
        (-signal.SIGABRT, None, None, [], "", Outcome.CRASHED, "killed by SIGABRT"),
        # a non-zero exit without an error event (e.g. os._exit, or sys.exit in user code)
        (3, None, None, OK, "last words", Outcome.CRASHED, "exit status 3\nlast words"),
        (2, None, None, [], "", Outcome.CRASHED, "exit status 2"),
        # exit 0 but nothing measured
        (0, None, None, [], "", Outcome.CRASHED, "the training function returned before one measured window finished"),
        # no loss recorded (the function never called run.step) is not divergence
        (0, None, None, [{"index": 0, "loss": None}], "", Outcome.COMPLETE, ""),
        # complete
        (0, None, None, OK, "", Outcome.COMPLETE, ""),
    ],
)
def test_classify(returncode, killed, error, windows, tail, outcome, reason) -> None:
    got, why = classify(WorkerExit(returncode, killed, error, tail), windows)
    assert got is outcome
    if not reason:
        assert why == ""
    else:
        assert reason and reason in why


@pytest.mark.parametrize(
    ("expected", "reason"),
    [
        (0, ""),  # no budget given
        (len(OK), ""),  # every window measured
        (
            len(OK) + 2,
            f"short measure: the training function returned after {len(OK)} windows, before its measured stretch ended",
        ),
    ],
)
def test_a_complete_trial_with_fewer_windows_than_its_budget_says_so(expected: int, reason: str) -> None:
    outcome, why = classify(WorkerExit(0), OK, expected_windows=expected)
    assert outcome is Outcome.COMPLETE
    assert why.startswith(reason) and bool(why) is bool(reason)


def test_sigkill_while_the_machine_was_out_of_memory_is_oom_host() -> None:
    outcome, why = classify(WorkerExit(-signal.SIGKILL, memory_low=True), OK)
    assert outcome is Outcome.OOM_HOST
    assert "the kernel's OOM killer" in why


@pytest.mark.parametrize(
    ("history", "reference", "outcome", "reason"),
    [
        # the worker stops at a nan in its warmup: no window, still diverged (not "returned early")
        ([(50.0, math.nan)], [], Outcome.DIVERGED, "loss is nan after 50 samples"),
        ([(50.0, 2.0), (150.0, math.inf)], [], Outcome.DIVERGED, "loss is inf after 150 samples"),
        # finite but far worse than the baseline at matched samples
        ([(100.0, 2.3), (300.0, 2.3)], [(100.0, 2.0), (300.0, 0.5)], Outcome.DIVERGED, "worse"),
        # as good as the baseline
        ([(100.0, 2.0), (300.0, 0.55)], [(100.0, 2.0), (300.0, 0.5)], Outcome.COMPLETE, ""),
    ],
)
def test_classify_judges_the_loss_history(history, reference, outcome, reason) -> None:
    windows = OK if outcome is Outcome.COMPLETE else []
    got, why = classify(WorkerExit(0), windows, history=history, against=LossReference(reference))
    assert got is outcome
    assert reason in why


@pytest.mark.parametrize(
    ("returncode", "killed", "error", "tail", "first"),
    [
        (1, None, USER_BUG, "", "ValueError: shapes do not match"),
        (1, None, DRIVER_OOM, "", "RuntimeError: CUDA error: out of memory"),
        (-signal.SIGSEGV, None, None, "Fatal Python error: Segmentation fault", "killed by SIGSEGV"),
        (3, None, None, "last words", "exit status 3"),
        (-9, STALLED, None, "", STALLED[1]),
    ],
)
def test_every_reason_starts_with_its_headline(returncode, killed, error, tail, first) -> None:
    _, why = classify(WorkerExit(returncode, killed, error, tail), OK)
    assert headline(why) == first


def test_error_event_wins_over_its_exit_status() -> None:
    # The worker exits 1 after reporting the error: the error is the story, not "exit status 1".
    outcome, why = classify(WorkerExit(1, None, USER_BUG, "tail"), [])
    assert outcome is Outcome.CRASHED
    assert "exit status" not in why


def test_killed_by_a_realtime_signal_is_crashed() -> None:
    rt = signal.SIGRTMIN + 6  # 40 on Linux: valid, but no name in signal.Signals
    outcome, why = classify(WorkerExit(-rt), OK)
    assert outcome is Outcome.CRASHED
    assert str(int(rt)) in why


def test_outcome_values_are_the_documented_strings() -> None:
    assert {o.value for o in Outcome} == {
        "complete",
        "diverged",
        "oom_gpu",
        "oom_host",
        "timeout",
        "crashed",
        "pruned",
        "interrupted",
        "distorted",
    }
    assert Outcome("oom_gpu") is Outcome.OOM_GPU


def test_clip_keeps_the_headline_and_the_end() -> None:
    reason = "killed by SIGSEGV\n" + "x" * 5000 + "\nthe last line"
    clipped = clip(reason, 200)
    assert len(clipped) <= 200
    assert headline(clipped) == "killed by SIGSEGV"
    assert clipped.endswith("the last line")
    assert clip("short", 200) == "short"
