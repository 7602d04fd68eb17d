"""The winner without its riders (autotune.tuner._trim, and the choice in autotune.tuner._confirm.decide):
what is trimmed, when the trim runs, when it is confirmed, and when it is the answer (pure)."""

from __future__ import annotations

import dataclasses

from autotune.core._kinds import Kind, Line, Request
from autotune.tuner._confirm import TRIM_WITHIN
from autotune.tuner._planner import Settings, after_trial
from autotune.tuner._space import Choice, Fixed, IntRange, Space
from autotune.tuner._standing import findings
from autotune.tuner._trim import confirm_trim, riders, trim
from standings import standing_from, trial

SPACE = Space(
    "s",
    {
        "num_workers": IntRange(0, 64),
        "persistent_workers": Choice((False, True)),
        "in_order": Choice((True, False)),
        "prefetch": Choice(("none", "thread")),
        "amp": Choice(("off", "bf16")),
        "malloc_retain": Choice((False, True)),
    },
)
CODE = {"batch_size": 16, "num_workers": 0, "prefetch": "none", "amp": "off", "malloc_retain": False}
WINNER = {
    "num_workers": 64,
    "persistent_workers": True,
    "in_order": False,
    "prefetch": "thread",
    "amp": "bf16",
    "malloc_retain": False,
}
TRIMMED = {**WINNER, "in_order": True, "prefetch": "none", "amp": "off"}


def test_the_riders_are_the_knobs_beside_the_shape_set_otherwise_than_the_code_sets_them() -> None:
    # in_order: the code ran with no workers, so PyTorch's default (true) is its own
    assert riders(WINNER, CODE, SPACE) == {"in_order": True, "prefetch": "none", "amp": "off"}
    # the shape (workers, persistence) stays; a knob the space fixes or leaves out stays
    fixed = Space("f", {**SPACE.domains, "amp": Fixed("bf16"), "prefetch": Choice(("thread",))})
    assert riders(WINNER, CODE, fixed) == {"in_order": True}
    assert riders({"num_workers": 8, "batch_size": "4x"}, CODE, SPACE) == {}


def study(*extra, winner_runs=(2000.0, 2100.0, 2050.0)):
    """A baseline at 1,000 confirmed twice, the winner (trial 1) confirmed at ``winner_runs``, then ``extra``."""
    rows = [
        trial(0, 1000.0, config=CODE),
        trial(1, winner_runs[0], sampled=WINNER),
        trial(2, 1500.0, sampled={**WINNER, "num_workers": 8}),
    ]
    number = 3
    for rate in winner_runs[1:]:
        rows += [
            trial(number, rate, kind=Kind.CONFIRM, of=1, sampled=WINNER),
            trial(number + 1, 1010.0, kind=Kind.CONFIRM, of=0, baseline=True, config=CODE),
        ]
        number += 2
    return rows + [dataclasses.replace(r, number=number + i) for i, r in enumerate(extra)]


def settings(confirm: int = 2) -> Settings:
    return Settings(SPACE, cpus=2, tolerance=0.5, windows=4, remeasure=2, trials_left=False, confirm=confirm)


def test_once_the_confirmation_ends_the_winner_runs_without_its_riders_once() -> None:
    rows = study()
    standing = standing_from(*rows)
    request = trim(rows[-1], standing.rows, standing.decision, SPACE, 2)
    assert request == Request(
        Kind.TRIM,
        TRIMMED,
        1,
        "the winner, trial 1, runs again without in_order=false, prefetch=thread, amp=bf16 (as your code has "
        "them): none of them was measured alone; where it runs as fast, the export leaves them out",
        once="trim-1",
        enqueue_params=True,
    )
    assert request in after_trial(rows[-1], standing, settings())
    # not while a re-run is owed, not twice, not with --confirm 0, not after a draw
    owed = standing_from(*rows, trial(7, None, "waiting", kind=Kind.CONFIRM, of=1))
    assert trim(rows[-1], owed.rows, owed.decision, SPACE, 2) is None
    running = standing_from(*rows, trial(7, None, "running", sampled={"num_workers": 3}))
    assert trim(rows[-1], running.rows, running.decision, SPACE, 2) is None
    # a retry the sampling left enqueued never runs now: it holds nothing up (the 21:07 sweep's study)
    left = standing_from(*rows, trial(7, None, "waiting", kind=Kind.RETRY, of=2))
    assert trim(rows[-1], left.rows, left.decision, SPACE, 2) == request
    done = standing_from(*rows, trial(7, 2000.0, kind=Kind.TRIM, of=1, sampled=TRIMMED))
    assert trim(done.rows[-1], done.rows, done.decision, SPACE, 2) is None
    assert trim(rows[-1], standing.rows, standing.decision, SPACE, 0) is None
    assert trim(rows[2], standing.rows, standing.decision, SPACE, 2) is None


def test_no_trim_of_the_code_as_written_or_of_a_winner_without_riders() -> None:
    plain = {"num_workers": 64, "persistent_workers": True, "in_order": True, "prefetch": "none", "amp": "off"}
    rows = [
        trial(0, 1000.0, config=CODE),
        trial(1, 2000.0, sampled=plain),
        trial(2, 2100.0, kind=Kind.CONFIRM, of=1, sampled=plain),
        trial(3, 1010.0, kind=Kind.CONFIRM, of=0, baseline=True, config=CODE),
    ]
    standing = standing_from(*rows)
    assert standing.decision.winner.first.number == 1
    assert trim(rows[-1], standing.rows, standing.decision, SPACE, 2) is None
    slow = standing_from(*study(winner_runs=(900.0, 950.0, 920.0)))  # no config beats the baseline
    assert slow.decision.winner is slow.decision.baseline
    assert trim(slow.rows[-1], slow.rows, slow.decision, SPACE, 2) is None


def test_a_trim_inside_the_noise_is_confirmed_one_slower_is_said_and_dropped() -> None:
    near = study(trial(0, 2050.0 * (1 - TRIM_WITHIN) + 1, kind=Kind.TRIM, of=1, sampled=TRIMMED))
    standing = standing_from(*near)
    made = confirm_trim(near[-1], standing.groups, 2)
    assert [(r.kind, r.of, dict(r.config)) for r in made] == [(Kind.CONFIRM, 7, TRIMMED)] * 2
    assert made[0].why.startswith("trial 7 (trial 1 without in_order=false, prefetch=thread, amp=bf16) ran at 1,990")
    assert made[0].why.endswith("confirming it with 2 re-runs")
    # its own re-runs ask for none again
    again = standing_from(*near, trial(8, 1990.0, kind=Kind.CONFIRM, of=7, sampled=TRIMMED))
    assert confirm_trim(again.rows[-1], again.groups, 2) == []
    slow = study(trial(0, 1800.0, kind=Kind.TRIM, of=1, sampled=TRIMMED))
    assert confirm_trim(slow[-1], standing_from(*slow).groups, 2) == [
        Line(
            "trial 7 (trial 1 without in_order=false, prefetch=thread, amp=bf16) ran at 1,800 against its median "
            "of 2,050: they pay, and the winner keeps them"
        )
    ]
    noisy = study(trial(0, 2040.0, kind=Kind.TRIM, of=1, sampled=TRIMMED, doubt="noisy: others (over 20%)"))
    assert confirm_trim(noisy[-1], standing_from(*noisy).groups, 2) == []  # (measured again first)


def confirmed_trim(*rates: float):
    return study(
        trial(0, rates[0], kind=Kind.TRIM, of=1, sampled=TRIMMED),
        *(trial(0, rate, kind=Kind.CONFIRM, of=7, sampled=TRIMMED) for rate in rates[1:]),
    )


def test_the_trimmed_config_is_the_answer_when_the_winner_does_not_beat_it() -> None:
    decision = standing_from(*confirmed_trim(2040.0, 2010.0, 2110.0)).decision
    assert (decision.winner.first.number, decision.untrimmed.first.number) == (7, 1)
    assert [g.first.number for g in decision.ties] == [1]
    lines = findings(standing_from(*confirmed_trim(2040.0, 2010.0, 2110.0)))
    assert (
        "trial 7 is trial 1's config without in_order=false, prefetch=thread, amp=bf16 (as your code has them): "
        "they paid nothing beyond the noise (runs without: 2,040, 2,010, 2,110; with: 2,000, 2,100, 2,050 "
        "samples/s), so the export leaves them out"
    ) in lines


def test_the_winner_keeps_its_riders_where_it_beats_the_trim_or_runs_past_it_by_more_than_the_margin() -> None:
    beaten = standing_from(*confirmed_trim(1900.0, 1950.0, 1980.0)).decision
    assert beaten.winner.first.number == 1 and beaten.untrimmed is None
    # not beaten (runs overlap), but its median 2,010 is more than 3% under the winner's 2,090
    behind = study(
        trial(0, 2010.0, kind=Kind.TRIM, of=1, sampled=TRIMMED),
        trial(0, 1900.0, kind=Kind.CONFIRM, of=7, sampled=TRIMMED),
        trial(0, 2150.0, kind=Kind.CONFIRM, of=7, sampled=TRIMMED),
        winner_runs=(2090.0, 2100.0, 2000.0),
    )
    assert standing_from(*behind).decision.winner.first.number == 1
    # unconfirmed (one run): the winner stays
    assert standing_from(*confirmed_trim(2200.0)).decision.winner.first.number == 1
