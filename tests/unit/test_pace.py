"""The cost a study says once its baseline has run, and the one line it says as soon as it is on
pace for over 1.5x that (autotune.tuner._pace), on hand-built rows and a stepped clock."""

from __future__ import annotations

import dataclasses

from autotune.core._kinds import Kind
from autotune.tuner import _pace
from autotune.tuner._option_groups import Options
from autotune.tuner._options import StudyOptions
from autotune.tuner._pace import CostWatch, pace_line
from standings import trial


def whole(number: int, duration_s: float, kind: Kind = Kind.SAMPLED, outcome: str = "complete") -> object:
    shape = {"ended": True, "epochs": 2, "samples": 480, "steps": 15, "marks": [64, 128], "at": [1.0, 2.0]}
    row = trial(
        number,
        100.0,
        outcome,
        kind=kind,
        shape=shape,
        run_s=10.0,
        startup_s=2.0,
        loop_s=7.0,
        outside_s=0.5,
        after_s=0.5,
        duration_s=duration_s,
    )
    return row


def test_a_study_says_its_cost_then_once_its_pace_when_runs_take_far_longer(monkeypatch) -> None:
    now = [100.0]
    monkeypatch.setattr(_pace.time, "monotonic", lambda: now[0])
    said: list[str] = []
    watch = CostWatch(StudyOptions("t.py", options=Options()), said.append)
    watch.after(whole(0, 10.0, Kind.BASELINE), recorded=True)
    assert said[0].startswith("each trial runs your script whole: about 10 s as written;")
    assert watch.said_s == watch.runs * 10.0
    runs = watch.runs
    # runs at the baseline's pace: nothing more said
    for number in (1, 2):
        now[0] += 10.0
        watch.after(whole(number, 10.0), recorded=True)
    assert len([line for line in said if line.startswith("this study")]) == 0
    # then a run of 6x the baseline's time (a slow config measures the same samples for longer): 3 runs
    # in 80 s put the study on pace for 8.4 min of the 3.2 it said: said at once
    now[0] += 60.0
    watch.after(whole(3, 60.0), recorded=True)
    paced = [line for line in said if line.startswith("this study")]
    assert paced == [
        f"this study is on pace for about {_pace.duration(80.0 / 3 * runs)}, not the "
        f"{_pace.duration(10.0 * runs)} it said (3 of {runs} runs took 80 s): trial 3 ran 6.0x the "
        "baseline's time"
    ]
    now[0] += 600.0
    watch.after(whole(5, 600.0), recorded=True)
    assert len([line for line in said if line.startswith("this study")]) == 1  # said once


def test_one_slow_run_alone_is_not_a_pace_unless_it_passes_the_whole_estimate() -> None:
    row = dataclasses.replace(whole(1, 30.0))
    assert pace_line(100.0, 10, 30.0, [row], 10.0) is None  # 1 run: 300 s on pace, but one run says little
    assert pace_line(100.0, 10, 160.0, [row], 10.0).startswith("this study is on pace for about 26.7 min")
