"""A trial's warmup and windows end at the baseline's marks, in samples (autotune.worker._marks): a
faster config is measured on the same stretch of the same training, never on fewer windows;
a whole run goes on to the code's end; the baseline measures on past its windows."""

from __future__ import annotations

import time

import pytest
import torch
from torch.utils.data import TensorDataset

from autotune.core._config import Config
from autotune.worker._marks import MIN_WINDOW_S

#: 256 rows: an epoch of 32 batches at the code's batch size, 8.
ROWS, BATCH = 256, 8


def measured(
    config: Config = Config(),  # noqa: B008
    epochs: int = 100,
    step_s: float | tuple[float, ...] = 0.0,
    **budget,
) -> tuple[list[dict], bool]:
    """The events of a Trial over a loop of ``epochs`` epochs (each step ``step_s`` long, or
    ``step_s[epoch]``), and whether the loop ended by itself (else the trial stopped it)."""
    from autotune.machine._launch import Budget
    from autotune.worker._trial import BudgetSpent, Trial

    events: list[dict] = []
    trial = Trial(
        config,
        torch.device("cpu"),
        lambda kind, **e: events.append({"event": kind, **e}),
        Budget(**{"warmup_steps": 2, "warmup_s": 0.0, "window_s": 0.0, "windows": 3, "ceiling_windows": 0, **budget}),
    )
    weight = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([weight], lr=0.0)
    loader = trial.dataloader(TensorDataset(torch.zeros(ROWS, 1)), batch_size=BATCH)
    try:
        for epoch in range(epochs):
            pause = step_s[epoch] if isinstance(step_s, tuple) else step_s
            for _ in trial.batches(loader):
                if pause:
                    time.sleep(pause)
                trial.step(weight.sum(), opt)
    except BudgetSpent:
        trial.finish()
        return events, False
    trial.finish(ended=True)
    return events, True


def stretches(events: list[dict]) -> list[int]:
    return [e["samples_seen"] for e in events if e["event"] in ("warmup", "window")]


@pytest.fixture
def no_floor(monkeypatch):
    """Windows a few microseconds long may close: the rule under test is the marks'."""
    monkeypatch.setattr("autotune.worker._marks.MIN_WINDOW_S", 0.0)


@pytest.mark.usefixtures("no_floor")
def test_every_config_ends_its_warmup_and_windows_at_the_marks() -> None:
    marks = (64, 128, 192, 320)
    events, ended = measured(marks=marks)
    assert not ended and stretches(events) == list(marks)
    # 4x the batch: the same samples, in a quarter of the steps
    events, _ = measured(Config(batch_size="4x"), marks=marks)
    assert stretches(events) == list(marks)
    assert [e["steps"] for e in events if e["event"] == "window"] == [2, 2, 4]
    # 8x: a mark inside a window's two steps is merged into the next window (192 in 128-256)
    events, _ = measured(Config(batch_size="8x"), marks=marks)
    assert stretches(events) == [64, 192, 320] and events[-1]["short"] is False


@pytest.mark.usefixtures("no_floor")
def test_a_larger_batch_is_measured_over_the_same_steps() -> None:
    """Batches 4x the baseline's (its samples per step, ``step_samples``): the marks times 4, the
    same steps, whether the knob or the code made them larger; the same batch: the same samples."""
    marks = (64, 128, 192, 320)
    events, _ = measured(Config(batch_size="4x"), marks=marks, step_samples=BATCH)
    assert stretches(events) == [4 * m for m in marks]
    events, _ = measured(marks=marks, step_samples=BATCH)
    assert stretches(events) == list(marks)


def test_a_window_of_a_far_slower_config_closes_at_its_ceiling() -> None:
    """Steps of 5 ms against marks 100 steps apart, windows of 10 ms: each window closes after
    SLOW_WINDOWS of them (40 ms), short of its mark, and counts as the mark's; three windows, as asked."""
    events, ended = measured(step_s=0.005, marks=(8, 808, 1608, 2408), window_s=0.01)
    windows = [e for e in events if e["event"] == "window"]
    assert not ended and len(windows) == 3, windows
    assert all(w["samples_seen"] < 800 and 0.04 <= w["seconds"] < 0.2 for w in windows), windows


def test_a_window_shorter_than_the_floor_is_merged() -> None:
    # steps of a few microseconds: the window at 128 lasts less than MIN_WINDOW_S and runs on to
    # the next mark, where it ends (the same samples as the baseline's two windows)
    events, _ = measured(marks=(64, 128, 20_000))
    windows = [e for e in events if e["event"] == "window"]
    assert windows[0]["samples_seen"] == 20_000 and windows[0]["seconds"] >= MIN_WINDOW_S, windows
    # past the last mark it closes as soon as it is long enough
    events, _ = measured(marks=(64, 128))
    windows = [e for e in events if e["event"] == "window"]
    assert len(windows) == 1 and windows[0]["samples_seen"] > 128 and windows[0]["seconds"] >= MIN_WINDOW_S, windows


@pytest.mark.usefixtures("no_floor")
def test_a_whole_run_measures_to_the_codes_end() -> None:
    events, ended = measured(epochs=3, marks=(64, 128, 192), whole=True)
    assert ended
    end = events[-1]
    assert end["event"] == "end" and end["ended"] and not end["short"]
    assert end["samples"] == 3 * ROWS and end["epochs"] == 3 and end["steps"] == 3 * ROWS // BATCH
    # the marks, then a last window to the code's end
    assert stretches(events) == [64, 128, 192, 3 * ROWS]
    assert end["loop_s"] > 0 and end["outside_s"] >= 0


def test_the_baseline_measures_on_until_its_code_ends_or_whole_s_has_passed() -> None:
    # ends by itself within whole_s: its windows past the asked-for 3 are marked extra (epochs of
    # 32 steps of over 1 ms, windows of 10 ms: cut by time)
    events, ended = measured(epochs=4, step_s=0.001, window_s=0.01, whole_s=60.0)
    windows = [e for e in events if e["event"] == "window"]
    assert ended and events[-1]["ended"] and len(windows) > 3
    assert [bool(w.get("extra")) for w in windows] == [False] * 3 + [True] * (len(windows) - 3)
    # its last window closed where the code returned (or a step before, with a window's steps past it)
    assert 4 * ROWS - windows[-1]["samples_seen"] < 2 * BATCH and events[-1]["samples"] == 4 * ROWS
    # runs past whole_s: its ceilings would come next (none asked here), then the trial stops it
    events, ended = measured(step_s=0.001, window_s=0.01, whole_s=0.3)
    assert not ended and "ended" not in events[-1]
    assert stretches(events)[-1] < 100 * ROWS


def test_code_that_returns_before_its_windows_says_short() -> None:
    events, ended = measured(epochs=1, marks=(64, 128, 4096))
    assert ended and events[-1]["short"] and events[-1]["ended"]


def test_code_that_returns_inside_its_warmup_is_split_into_a_warmup_and_a_window() -> None:
    """A whole run shorter than the warmup's seconds (or whose aligned warmup ended on its last
    epoch): its first warmup_steps steps are the warmup, the rest one window, not "no measure"."""
    # the warmup asks for 60 s: the code returns long before
    events, ended = measured(epochs=2, warmup_s=60.0, window_s=0.0)
    assert ended and stretches(events) == [2 * BATCH, 2 * ROWS]
    window = next(e for e in events if e["event"] == "window")
    assert window["steps"] == 2 * ROWS // BATCH - 2 and window["samples"] == 2 * ROWS - 2 * BATCH
    # epochs of 32 steps, shorter than two windows of 10 s, end the warmup (1 s) on an epoch's end:
    # here the last one, which leaves no window; the warmup is said again, split so. (The first
    # epoch's steps are instant, the second's 40 ms: the warmup's seconds pass inside the second
    # however loaded the host; with 10 ms steps in both they once passed inside the first.)
    events, ended = measured(epochs=2, step_s=(0.0, 0.04), warmup_s=1.0, window_s=10.0)
    warmups = [e for e in events if e["event"] == "warmup"]
    assert ended and len(warmups) == 2 and warmups[0]["samples_seen"] == 2 * ROWS
    assert stretches(events)[-2:] == [2 * BATCH, 2 * ROWS] and warmups[-1]["steps"] == 2
