"""The live view's rules (autotune.tuner._live): a row per config, each kind of note once, rows cut
to the width, a summary of at most a dozen lines."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from autotune.core._kinds import Kind
from autotune.tuner._live import (
    SUMMARY_LINES,
    Board,
    Notes,
    fit,
    note_kind,
    short_summary,
)
from standings import standing_from, trial

BASE = {"batch_size": "1x", "num_workers": 0, "pin_memory": False, "prefetch": "none"}
FAST = {**BASE, "num_workers": 4, "prefetch": "thread"}


def test_notes_of_one_kind_print_once_and_drops_print_as_one_line() -> None:
    notes = Notes()
    assert notes.admit("pin_memory: dropped true (needs CUDA; torch.cuda.is_available() is False)") == []
    assert notes.admit("prefetch: dropped 'cuda_stream' (needs CUDA)") == []
    shown = notes.admit("trial 2: noisy: other processes used 30% of its CPUs while it measured (over 20%)")
    assert shown == [
        "not on this machine (autotune doctor says why): pin_memory=true, prefetch=cuda_stream",
        "trial 2: noisy: other processes used 30% of its CPUs while it measured (over 20%)",
    ]
    assert notes.admit("trial 13: noisy: other processes used 88% of its CPUs while it measured (over 20%)") == []
    assert notes.admit("confirming: 4 re-runs of trials 1, 3") == ["confirming: 4 re-runs of trials 1, 3"]
    assert notes.held == 1 and notes.flush() == []


def test_a_note_kind_leaves_out_figures_and_trial_numbers() -> None:
    assert note_kind("trial 1 took 2.1x the baseline's samples") == note_kind(
        "trial 12 took 1.5x the baseline's samples"
    )
    assert note_kind("trial 1: noisy: others") != note_kind("trial 1: short: its windows")


def test_a_rerun_updates_its_trials_row_and_rows_show_only_changed_knobs() -> None:
    board = Board()
    board.started(0, Kind.BASELINE, None, {}, 0, 2)
    base = trial(0, 1000.0, config=BASE)
    board.done(base, standing_from(base), 60.0)
    board.started(1, Kind.SAMPLED, None, FAST, 1, 2)
    assert board.lines[1].knobs == "num_workers=4 prefetch=thread"  # against the baseline's config
    board.window(1, None)
    assert board.lines[1].outcome == "warmup"
    board.window(1, 0)
    assert board.lines[1].outcome == "window 1"
    fast = trial(1, 2000.0, config=FAST)
    board.done(fast, standing_from(base, fast), 30.0)
    board.started(2, Kind.CONFIRM, 1, FAST, 0, 2)
    assert list(board.lines) == [0, 1] and board.lines[1].outcome == "confirm 1/2"
    again = trial(2, 2200.0, kind=Kind.CONFIRM, of=1, config=FAST)
    board.done(again, standing_from(base, fast, again), 0.0)
    rows = [line.cells() for line in board.lines.values()]
    # median of 2,000 and 2,200 over the baseline's 1,000
    assert rows == [
        ("0", "complete", "1.00x", "compute-bound", "(baseline)"),  # (no ceiling measured)
        ("1 x2", "complete", "2.10x", "compute-bound", "num_workers=4 prefetch=thread"),
    ]
    assert board.lines[1].best and board.status(80) == "best 2.10x (trial 1)"


def test_a_noisy_run_shows_its_own_figure_marked_and_a_failure_its_reason() -> None:
    board = Board()
    base = trial(0, 1000.0, config=BASE)
    noisy = trial(1, 1500.0, config=FAST, doubt="noisy: other processes used 57% of its CPUs")
    board.done(base, standing_from(base))
    board.done(noisy, standing_from(base, noisy))
    assert board.lines[1].outcome == "noisy" and board.lines[1].speedup == "(1.50x)"
    crashed = dataclasses.replace(trial(2, None, "crashed", config=FAST), reason="oom_host: killed at 7.1 GiB\n...")
    board.done(crashed, standing_from(base, noisy, crashed))
    assert board.lines[2].cells()[1:4] == ("crashed", "", "oom_host")


def test_the_table_fits_the_width_and_the_height() -> None:
    board = Board()
    base = trial(0, 1000.0, config=BASE)
    board.done(base, standing_from(base))
    rows = [base]
    for n in range(1, 30):
        row = trial(n, 1000.0 + n, config={**FAST, "num_workers": n, "prefetch_factor": 2, "persistent_workers": True})
        rows.append(row)
        board.done(row, standing_from(*rows))
    table = board.table(60)
    assert len(table) == 31 and max(len(line) for line, _ in table) == 60
    assert table[1][0].endswith("(baseline)") and table[2][0].endswith("…")
    cut = board.table(80, last=10)
    assert len(cut) == 11 and cut[1][0].startswith("... 21 more above") and cut[-1][0].startswith("29 ")
    tiny = board.table(80, last=-3)  # a terminal a few lines high: the header, the cut, the last row
    assert len(tiny) == 3 and tiny[-1][0].startswith("29 ")
    assert fit("abc", 3) == "abc" and fit("abcd", 3) == "ab…"


def test_the_summary_says_the_winner_its_time_and_what_next_in_a_dozen_lines() -> None:
    base, base2 = trial(0, 1000.0, config=BASE), trial(2, 1010.0, kind=Kind.CONFIRM, of=0, config=BASE)
    fast, fast2 = trial(1, 2000.0, config=FAST), trial(3, 2040.0, kind=Kind.CONFIRM, of=1, config=FAST)
    lines = short_summary("io", standing_from(base, fast, base2, fast2), Path("mlflow"))
    assert len(lines) <= SUMMARY_LINES
    # 2,020 / 1,005: the same samples in half the time
    assert lines[0].startswith("best: trial 1, 2.01x the baseline, ±") and "in 50% of the time" in lines[0], lines
    assert "config: num_workers=4 prefetch=thread" in lines
    assert f"exported: {Path('mlflow') / 'exports' / 'io.yaml'}" in lines
    assert lines[-2].startswith("next: autotune export -o best.yaml")
    assert short_summary("io", standing_from(trial(0, None, "crashed")), Path("m"))[0].startswith("study io: ")


def test_only_a_real_terminal_gets_the_live_view(monkeypatch) -> None:
    import io
    import os
    import pty

    from rich.console import Console

    from autotune._terminal import interactive

    monkeypatch.setenv("TERM", "xterm")
    for name in ("TTY_INTERACTIVE", "TTY_COMPATIBLE", "FORCE_COLOR", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    # FORCE_COLOR in CI makes rich call a log a terminal: colours, but no live table in it
    assert not interactive(Console(file=io.StringIO(), force_terminal=True))
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as tty:
        assert interactive(Console(file=tty))
        monkeypatch.setenv("TTY_INTERACTIVE", "0")  # (rich's own switch, honoured)
        assert not interactive(Console(file=tty))
    os.close(master)


def test_a_resumed_studys_rerun_shows_its_earlier_trials_config_and_every_run() -> None:
    board = Board()  # this invocation saw neither trial 0 nor trial 1 run
    base, fast = trial(0, 1000.0, config=BASE), trial(1, 2000.0, config=FAST)
    board.started(2, Kind.CONFIRM, 1, FAST, 0, 1)
    again = trial(2, 2000.0, kind=Kind.CONFIRM, of=1, config=FAST)
    board.done(again, standing_from(base, fast, again))
    assert board.lines[1].cells()[0] == "1 x2" and board.lines[1].knobs == "num_workers=4 prefetch=thread"
    same = trial(3, 1000.0, config=BASE)  # a draw that landed on the baseline's values
    board.done(same, standing_from(base, fast, again, same))
    assert board.lines[3].cells()[-1] == "(the baseline's values)"


def test_a_whole_run_studys_summary_says_the_gain_in_seconds() -> None:
    shape = {"ended": True, "epochs": 4, "samples": 992, "steps": 31, "marks": [64, 512], "at": [1.0, 2.0]}

    def whole(number: int, run_s: float, **config) -> object:
        return trial(
            number,
            400.0,
            config={**BASE, **config},
            sampled=config,
            shape=shape,
            run_s=run_s,
            run_samples_per_s=992 / run_s,
            startup_s=2.0,
            loop_s=run_s - 3.0,
            outside_s=0.5,
            after_s=0.5,
        )

    lines = short_summary("s", standing_from(whole(0, 10.0), whole(1, 8.0, num_workers=4)), Path("m"))
    # 10 s / 8 s: the script's whole run, start-up included, as the user waits for it
    assert lines[0].startswith("best: trial 1, 1.25x the baseline, ±") and lines[0].endswith(
        "its whole run in 8.0 s against 10.0 s as written"
    ), lines
    assert len(lines) <= SUMMARY_LINES


def test_a_live_view_stopped_before_its_first_trial_still_prints_the_drops_it_held() -> None:
    import io

    from rich.console import Console

    from autotune._terminal import Progress

    shown = Progress()
    out = io.StringIO()
    shown.console, shown._board = Console(file=out, width=80), Board()  # (the live table's view, on a string)
    assert shown.shown("amp: dropped 'fp16' (needs CUDA)") == []
    assert shown.shown("study s on CPU") == [
        "not on this machine (autotune doctor says why): amp=fp16",
        "study s on CPU",
    ]
    assert shown.shown("tf32: dropped true (needs CUDA)") == []
    shown.stop()  # e.g. the tracking store failed before any trial
    shown.stop()
    assert out.getvalue() == "not on this machine (autotune doctor says why): tf32=true\n"
