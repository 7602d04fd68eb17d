"""A precision this machine runs far slower than another is held off (autotune.tuner._precision)."""

from __future__ import annotations

import dataclasses

from autotune.stores._records import TrialRow
from autotune.tuner._precision import DOMINATED_AFTER, precision_hold

CPU_CHOICES = ("off", "bf16")


def row(number: int, amp: str, rate: float, outcome: str = "complete", doubt: str | None = None) -> TrialRow:
    """A trial that drew ``amp`` (trial 0, the baseline, ran the code's own: off) at ``rate``."""
    return TrialRow(
        number,
        number == 0,
        outcome,
        "",
        {"samples_per_s": rate},
        {"amp": amp},
        32,
        None,
        sampled={"amp": amp} if number else {},
        doubt=doubt,
    )


def believe_all(_row: TrialRow) -> bool:
    return True


def slow_bf16(n: int = DOMINATED_AFTER) -> list[TrialRow]:
    """The baseline at 1,000 samples/s, then ``n`` bf16 trials at 250-400 (pruned, diverged, complete)."""
    outcomes = ["pruned", "diverged", "complete", "pruned"]
    return [row(0, "off", 1_000.0), *(row(i + 1, "bf16", 250.0 + 50 * i, outcomes[i % 4]) for i in range(n))]


def test_a_precision_far_slower_in_every_trial_is_held_off_and_the_line_says_why() -> None:
    hold = precision_hold(slow_bf16(), CPU_CHOICES, believe_all)
    assert hold.value == "off"
    assert hold.why == (
        "amp held at off: its 3 bf16 trials ran at most 350 samples/s, 35% of trial 0's 1,000 (amp=off)"
    )


def test_no_hold() -> None:
    assert precision_hold(slow_bf16(DOMINATED_AFTER - 1), CPU_CHOICES, believe_all) is None  # too few
    fast = [*slow_bf16(), row(4, "bf16", 600.0, "pruned")]  # one at 60% of the fastest fp32: not done
    assert precision_hold(fast, CPU_CHOICES, believe_all) is None
    # the only faster fp32 figures could not win (judged diverged): no rival to be done by
    rows = [dataclasses.replace(r, outcome="diverged") if r.number == 0 else r for r in slow_bf16()]
    assert precision_hold([*rows, row(9, "off", 200.0)], CPU_CHOICES, believe_all) is None
    # a figure not believed (others loaded the machine) does not count toward the three
    noisy = [*slow_bf16(DOMINATED_AFTER - 1), row(7, "bf16", 300.0, "pruned")]
    assert precision_hold(noisy, CPU_CHOICES, lambda r: r.number != 7) is None
    # the baseline's own figure, doubted, is no rival either
    assert (
        precision_hold(
            [dataclasses.replace(r, doubt="noisy") if r.number == 0 else r for r in slow_bf16()],
            CPU_CHOICES,
            believe_all,
        )
        is None
    )


def test_with_three_precisions_the_last_one_left_is_held() -> None:
    # on a GPU: bf16 fastest, fp32 (off) at a fifth of it three times; fp16 still close
    rows = [
        row(0, "off", 200.0),
        row(1, "bf16", 1_000.0),
        row(2, "off", 150.0),
        row(3, "off", 180.0),
        row(4, "fp16", 900.0),
    ]
    assert precision_hold(rows, ("off", "bf16", "fp16"), believe_all) is None  # bf16 and fp16 both left
    # fp16 three times at under half of bf16 (its GradScaler skipping steps, say): bf16 is left
    slow16 = [*rows[:4], *(row(n, "fp16", 400.0, "pruned") for n in (4, 5, 6))]
    hold = precision_hold(slow16, ("off", "bf16", "fp16"), believe_all)
    assert hold.value == "bf16"
    assert hold.why.startswith("amp held at bf16: its 3 off trials ran at most 200 samples/s, 20% of trial 1's")
    assert "; its 3 fp16 trials ran at most 400 samples/s, 40% of trial 1's 1,000 (amp=bf16)" in hold.why
