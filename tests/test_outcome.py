"""classify(): every way a worker can end, as a table of cases."""

from __future__ import annotations

import math
import signal

import pytest

from autotune import Outcome
from autotune._outcome import classify

OK = [{"index": 0, "loss": 0.7}, {"index": 1, "loss": 0.6}]

# The texts torch really raises: torch.OutOfMemoryError from the caching allocator,
# and the driver's error surfaced by cuBLAS/cuDNN calls (Lightning's fake uses the latter).
TORCH_OOM = {"type": "OutOfMemoryError",
             "message": "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                        "capacity of 79.19 GiB of which 1.06 GiB is free.",
             "traceback": "Traceback ...\ntorch.OutOfMemoryError: CUDA out of memory. Tried to "
                          "allocate 2.00 GiB"}
DRIVER_OOM = {"type": "RuntimeError", "message": "CUDA error: out of memory\nCUDA kernel errors "
              "might be asynchronously reported", "traceback": "..."}
USER_BUG = {"type": "ValueError", "message": "shapes do not match",
            "traceback": "Traceback (most recent call last):\n  File \"train.py\", line 3\n"
                         "ValueError: shapes do not match"}


@pytest.mark.parametrize(
    ("returncode", "killed_for", "error", "windows", "tail", "outcome", "reason"),
    [
        # our RAM guard killed the group: SIGKILL, but the guard's reason wins
        (-9, "ram: the trial's processes used 9.00 GiB, over the RAM budget of 8.00 GiB", None, OK,
         "", Outcome.OOM_HOST, "ram: the trial's processes used 9.00 GiB"),
        # our deadline
        (-9, "deadline: still running after 64 s", None, [], "", Outcome.TIMEOUT,
         "deadline: still running after 64 s"),
        # a kill reason beats an error event the worker managed to send first
        (-9, "deadline: still running after 5 s", USER_BUG, [], "", Outcome.TIMEOUT, "deadline"),
        # GPU OOM, both texts torch produces
        (1, None, TORCH_OOM, [], "", Outcome.OOM_GPU,
         "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
        (1, None, DRIVER_OOM, OK, "", Outcome.OOM_GPU, "RuntimeError: CUDA error: out of memory"),
        # the type alone is enough (a message torch may word differently in future)
        (1, None, {"type": "OutOfMemoryError", "message": "", "traceback": ""}, [], "",
         Outcome.OOM_GPU, "OutOfMemoryError:"),
        # a generic exception: the traceback is the reason
        (1, None, USER_BUG, [], "", Outcome.CRASHED, USER_BUG["traceback"]),
        # no traceback: type and message
        (1, None, {"type": "KeyError", "message": "'x'"}, [], "", Outcome.CRASHED, "KeyError: 'x'"),
        # a host OOM in a DataLoader worker is not a GPU OOM
        (1, None, {"type": "RuntimeError", "message": "DataLoader worker (pid 7) is killed by "
                   "signal: Killed.", "traceback": "RuntimeError: DataLoader worker"}, [], "",
         Outcome.CRASHED, "RuntimeError: DataLoader worker"),
        # killed by a signal from outside: SIGKILL is most likely the kernel's OOM killer
        (-signal.SIGKILL, None, None, OK, "", Outcome.OOM_HOST, "killed by SIGKILL from outside"),
        (-signal.SIGSEGV, None, None, OK, "Fatal Python error: Segmentation fault",
         Outcome.CRASHED, "killed by SIGSEGV\nFatal Python error: Segmentation fault"),
        (-signal.SIGABRT, None, None, [], "", Outcome.CRASHED, "killed by SIGABRT"),
        # a non-zero exit without an error event (e.g. os._exit, or sys.exit in user code)
        (3, None, None, OK, "last words", Outcome.CRASHED, "exit status 3\nlast words"),
        (2, None, None, [], "", Outcome.CRASHED, "exit status 2"),
        # exit 0 but nothing measured
        (0, None, None, [], "", Outcome.CRASHED,
         "the training function returned before one measured window finished"),
        # the loss went non-finite
        (0, None, None, [{"index": 0, "loss": 0.7}, {"index": 1, "loss": math.nan}], "",
         Outcome.DIVERGED, "loss is nan in window 1"),
        (0, None, None, [{"index": 0, "loss": math.inf}], "", Outcome.DIVERGED,
         "loss is inf in window 0"),
        (0, None, None, [{"index": 0, "loss": 1.0}, {"index": 1, "loss": -math.inf}], "",
         Outcome.DIVERGED, "loss is -inf in window 1"),
        # no loss recorded (the function never called run.step) is not divergence
        (0, None, None, [{"index": 0, "loss": None}], "", Outcome.COMPLETE, ""),
        # complete
        (0, None, None, OK, "", Outcome.COMPLETE, ""),
    ],
)
def test_classify(returncode, killed_for, error, windows, tail, outcome, reason) -> None:
    got, why = classify(returncode, killed_for, error, windows, tail)
    assert got is outcome
    if outcome is Outcome.COMPLETE:
        assert why == ""
    else:
        assert reason and reason in why


def test_error_event_wins_over_its_exit_status() -> None:
    # The worker exits 1 after reporting the error: the error is the story, not "exit status 1".
    outcome, why = classify(1, None, USER_BUG, [], "tail")
    assert outcome is Outcome.CRASHED
    assert "exit status" not in why


def test_killed_by_a_realtime_signal_is_crashed() -> None:
    rt = signal.SIGRTMIN + 6  # 40 on Linux: valid, but no name in signal.Signals
    outcome, why = classify(-rt, None, None, OK)
    assert outcome is Outcome.CRASHED
    assert str(int(rt)) in why


def test_outcome_values_are_the_documented_strings() -> None:
    assert {o.value for o in Outcome} == {"complete", "diverged", "oom_gpu", "oom_host", "timeout",
                                          "crashed", "pruned"}
    assert Outcome("oom_gpu") is Outcome.OOM_GPU
