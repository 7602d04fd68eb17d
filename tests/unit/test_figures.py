"""A trial's figures and the evidence in its log (autotune.machine._figures)."""

from __future__ import annotations

FAULTHANDLER_REPORT = """some output of the user's
Fatal Python error: Segmentation fault

Thread 0x00007f01 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007f00 (most recent call first):
  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at
  File "/work/train.py", line 64 in train

Extension modules: numpy.core._multiarray_umath, torch._C (total: 2)"""


def test_log_tail_keeps_the_crashing_threads_stack() -> None:
    from autotune.machine._figures import log_tail

    assert log_tail(FAULTHANDLER_REPORT) == (
        "Fatal Python error: Segmentation fault\n"
        "Current thread 0x00007f00 (most recent call first):\n"
        '  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at\n'
        '  File "/work/train.py", line 64 in train'
    )


def test_log_tail_without_a_native_crash_is_the_last_lines() -> None:
    from autotune.machine._figures import log_tail

    text = "\n".join(f"line {i}" for i in range(30))
    assert log_tail(text, lines=3) == "line 27\nline 28\nline 29"
