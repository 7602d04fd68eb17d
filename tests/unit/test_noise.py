"""When a figure is not believed (autotune.machine._noise): foreign load, spread, short measures, the wait for a quiet machine."""

from __future__ import annotations

import threading

import pytest

from autotune.machine._noise import (
    FOREIGN_LOAD_MAX,
    SPREAD_MAX,
    doubt,
    is_noisy,
    wait_for_quiet,
)

SHORT_REASON = (
    "short measure: the training function returned after 2 of 4 windows, so no ceiling was measured; give it more steps"
)


@pytest.mark.parametrize(
    "metrics, reason, kind",
    [
        ({"foreign_cpu": 0.01, "samples_per_s_spread": 0.2}, "", None),  # a quiet machine
        ({"foreign_cpu": FOREIGN_LOAD_MAX}, "", None),  # at the limit: believed
        ({"foreign_cpu": 0.48}, "", "noisy: other processes used 48% of its CPUs"),
        ({"foreign_cpu": 0.0, "foreign_gpu": 0.6}, "", "noisy: other processes used 60% of its GPU"),
        # window rates 545, 122, 166, 2,293 (one real trial): median 355.5, spread (2293 - 122) / 355.5 = 6.1
        ({"samples_per_s_spread": 6.1}, "", "noisy: its windows disagree, from lowest to highest 610%"),
        ({"samples_per_s_spread": SPREAD_MAX}, "", None),
        ({"foreign_cpu": 0.0}, SHORT_REASON, "short measure: the training function returned after 2 of 4 windows"),
    ],
)
def test_doubt(metrics, reason, kind) -> None:
    why = doubt(metrics, reason)
    assert (why is None) if kind is None else why.startswith(kind)
    assert is_noisy(why) is bool(kind and kind.startswith("noisy"))


def test_a_lower_max_load_doubts_more() -> None:
    assert doubt({"foreign_cpu": 0.1}, "", max_load=0.05).startswith("noisy")
    assert doubt({"foreign_cpu": 0.9}, "", max_load=1.0) is None


def test_max_spread_moves_the_spread_limit() -> None:
    assert doubt({"samples_per_s_spread": 0.5}, "", max_spread=0.4).startswith("noisy: its windows disagree")
    assert doubt({"samples_per_s_spread": 6.1}, "", max_spread=1000) is None


def test_wait_for_quiet_returns_once_the_load_drops_and_gives_up_after_its_patience() -> None:
    loads = iter([0.6, 0.5, 0.1])
    quiet, seen, _ = wait_for_quiet((0,), 0.2, 60.0, threading.Event(), load=lambda cpus: next(loads))
    assert (quiet, seen) == (True, 0.1)
    quiet, seen, waited = wait_for_quiet((0,), 0.2, 0.0, threading.Event(), load=lambda cpus: 0.5)
    assert (quiet, seen) == (False, 0.5) and waited < 1.0
