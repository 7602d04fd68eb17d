"""The study's pure parts: which loader knobs to hold, and what a study found (its summary
and export header). The study itself runs in tests/study/."""

from __future__ import annotations

import dataclasses

import pytest

from autotune import KNOBS
from autotune.core._ceilings import Ceilings, bottleneck
from autotune.core._kinds import Kind
from autotune.stores._records import TrialRow, loss_against_baseline, loss_cell, signed_share
from autotune.tuner._confirm import decide, group_runs
from autotune.tuner._space_now import held_loader_knobs
from autotune.tuner._standing import Standing, findings


def row(
    number: int,
    sps: float,
    *,
    baseline: bool = False,
    confirms: int | None = None,
    efficiency: float = 0.5,
    wait: float = 0.0,
    sampled: dict | None = None,
    window_spread: float = 0.1,
    doubt: str | None = None,
) -> TrialRow:
    bound = bottleneck(sps, wait, sps / efficiency, None)
    return TrialRow(
        number,
        baseline,
        "complete",
        "",
        {"samples_per_s": sps, "samples_per_s_spread": window_spread},
        {},
        None,
        None,
        sampled=sampled or {},
        bottleneck=bound,
        doubt=doubt,
        kind=Kind.BASELINE if baseline else Kind.SAMPLED if confirms is None else Kind.CONFIRM,
        of=confirms,
    )


def standing_of(*rows: TrialRow) -> Standing:
    groups = group_runs(rows)
    return Standing(list(rows), groups, decide(groups), Ceilings())


@pytest.mark.parametrize(
    "efficiency, wait, held",
    [
        # compute-bound at 95%: the loader knobs are held at the trial's (None: the user's own)
        (
            0.95,
            0.01,
            {
                "num_workers": 2,
                "pin_memory": None,
                "persistent_workers": True,
                "prefetch_factor": None,
                "in_order": None,
                "prefetch": "thread",
            },
        ),
        (0.85, 0.01, {}),  # compute-bound but loading still costs 15%
        (0.95, 0.30, {}),  # waits on data: data-bound
    ],
)
def test_held_loader_knobs(efficiency: float, wait: float, held: dict) -> None:
    best = row(
        3,
        100.0,
        efficiency=efficiency,
        wait=wait,
        sampled={"num_workers": 2, "persistent_workers": True, "prefetch": "thread", "batch_size": "2x", "amp": "bf16"},
    )
    assert held_loader_knobs(best, KNOBS) == held  # batch size and amp act on compute: never held
    assert held_loader_knobs(None, KNOBS) == {}


def test_findings_of_a_confirmed_win() -> None:
    standing = standing_of(
        row(0, 100, baseline=True),
        row(1, 150, efficiency=0.94),
        row(2, 98, confirms=0),
        row(3, 102, confirms=0),
        row(4, 160, confirms=1),
        row(5, 140, confirms=1),
    )
    lines = findings(standing)
    # medians: 150 vs 100; ± is half the spread of the winner's runs: (160 - 140) / 150 / 2 = 7%
    assert lines[0] == "trial 1, 1.50x the baseline (150 vs 100 samples/s, ±7%)"
    assert lines[1] == ("runs: median of 3 runs (1, 4, 5), ±7%; the baseline's: median of 3 runs (0, 2, 3), ±2%")
    assert lines[2].startswith("bottleneck: 94% of the data-on-device ceiling")


def test_findings_say_what_samples_per_s_counts_where_every_rank_reads_every_row() -> None:
    rows = [
        dataclasses.replace(r, dataset={"name": "Shards", "ranks": 2, "splits_ranks": split})
        for r in (row(0, 100, baseline=True), row(1, 150))
        for split in (False,)
    ]
    line = findings(standing_of(*rows))[-1]
    assert line.startswith("note: each of the 2 ranks reads every row of Shards an epoch")
    assert "DistributedSampler" in line
    split = [dataclasses.replace(r, dataset={"name": "Shards", "ranks": 2, "splits_ranks": True}) for r in rows]
    assert not any(line.startswith("note: each of") for line in findings(standing_of(*split)))


def test_a_config_on_another_batch_ranks_on_its_time_to_the_baselines_loss() -> None:
    def judged(r: TrialRow, ratio: float | None, batch: int = 64) -> TrialRow:
        extra = {"to_loss_ratio": ratio, "to_loss_target": 0.31} if ratio else {}
        return dataclasses.replace(
            r,
            config={"batch_size": batch},
            base_batch_size=32,
            metrics={**r.metrics, "loss_excess": 0.3, "loss_tolerance": 0.5, **extra},
        )

    base = [judged(row(0, 100, baseline=True), 1.0, 32), judged(row(4, 100, confirms=0), 1.0, 32)]
    # 2x the samples/s at 1.5-1.7x the samples to the baseline's loss: 1.25x (the median) in time
    standing = standing_of(
        base[0],
        judged(row(1, 200), 1.5),
        judged(row(2, 200, confirms=1), 1.6),
        judged(row(3, 200, confirms=1), 1.7),
        base[1],
    )
    lines = findings(standing)
    assert standing.decision.winner.first.number == 1 and standing.speedup(standing.decision.winner) == pytest.approx(
        1.25
    )
    assert lines[0] == (
        "trial 1, 1.25x the baseline in time to its loss: 2.00x its samples/s (200 vs 100, ±0%) "
        "at 1.60x the samples for the baseline's loss (batch size 64, the code's 32)"
    )
    assert next(line for line in lines if line.startswith("loss: ")).endswith(
        "; ranked on its time to the baseline's loss (0.31), for which it took 1.60x the baseline's samples"
    )
    # 2.4x the samples/s but 3x the samples: slower to the loss than a config on the code's batch at 1.3x
    standing = standing_of(
        base[0],
        judged(row(1, 240), 3.0),
        judged(row(2, 240, confirms=1), 3.0),
        judged(row(3, 130), 1.0, 32),
        judged(row(5, 130, confirms=3), 1.0, 32),
        base[1],
    )
    assert standing.decision.winner.first.number == 3 and standing.decision.fastest.first.number == 3
    assert standing.speedup(next(g for g in standing.groups if g.first.number == 1)) == pytest.approx(0.8)
    # not there by its last sample: ranked on the bound (at most its samples/s over 2.5)
    bound = dataclasses.replace(judged(row(1, 200), None), metrics={"samples_per_s": 200.0, "to_loss_beyond": 2.5})
    assert bound.ranked_rate == pytest.approx(80.0) and bound.to_loss == 2.5


def test_findings_give_the_winners_loss_against_the_baselines_not_the_baselines_own() -> None:
    def judged(r: TrialRow, excess: float) -> TrialRow:
        return dataclasses.replace(r, metrics={**r.metrics, "loss_excess": excess, "loss_tolerance": 0.5})

    standing = standing_of(
        row(0, 100, baseline=True),
        judged(row(1, 150), 0.12),
        judged(row(2, 98, confirms=0), 0.0),
        judged(row(4, 160, confirms=1), 0.09),
        judged(row(5, 140, confirms=1), 0.15),
    )
    assert (
        "loss: +12% against the baseline's on the same samples (each run: +12%, +9%, +15%; "
        "diverged past +50%)" in findings(standing)
    )
    # the baseline winning: its re-runs are judged against itself, which says nothing
    alone = standing_of(row(0, 100, baseline=True), judged(row(2, 101, confirms=0), -0.004))
    assert not [line for line in findings(alone) if line.startswith("loss")]


@pytest.mark.parametrize(
    "excess, text",
    [
        (0.125, "+12%"),
        (-0.05, "-5%"),
        (-0.004, "+0%"),
        (0.004, "+0%"),
        (-0.006, "-1%"),
        (3.13, "+313%"),
    ],
)
def test_signed_share_never_says_minus_zero(excess: float, text: str) -> None:
    assert signed_share(excess) == text
    assert loss_cell({"loss_excess": excess}) == text


def test_loss_words() -> None:
    assert loss_cell({}) == "-"  # not judged
    assert loss_against_baseline(0.12, 0.5) == "+12% against the baseline's on the same samples (diverged past +50%)"
    assert loss_against_baseline(-0.001, None, [0.0]) == "+0% against the baseline's on the same samples"


@pytest.mark.parametrize(
    "wait, loader, batched, hinted",
    [
        (0.40, 120.0, False, True),  # data-bound on a dataset that fetches sample by sample
        (0.01, None, False, False),  # compute-bound: fetching faster buys nothing
        (0.40, 120.0, True, False),  # it already fetches whole batches
        (0.40, 120.0, None, False),  # an IterableDataset: it makes its own batches
    ],
)
def test_findings_name_the_batched_fetch_where_loading_limits(
    wait: float, loader: float | None, batched: bool | None, hinted: bool
) -> None:
    win = dataclasses.replace(
        row(1, 100),
        bottleneck=bottleneck(100.0, wait, 500.0, loader),
        dataset={"name": "Reads", "epoch_batches": 10} | ({} if batched is None else {"batched_fetch": batched}),
    )
    lines = findings(standing_of(row(0, 50, baseline=True), win))
    hint = [line for line in lines if line.startswith("hint:")]
    said = (
        "hint: Reads fetches one sample per call; a __getitems__(self, indices) method returning the batch's "
        "samples lets the DataLoader fetch each batch in one call (one read, one lock, one index), which no "
        "knob can do"
    )
    assert hint == ([said] if hinted else [])


def test_findings_when_nothing_beats_the_baseline_beyond_the_noise() -> None:
    standing = standing_of(
        row(0, 100, baseline=True),
        row(1, 104),
        row(2, 99, confirms=0),
        row(3, 103, confirms=0),
        row(4, 102, confirms=1),
        row(5, 106, confirms=1),
    )
    lines = findings(standing)
    assert standing.best.number == 0
    assert lines[0].startswith("trial 0 (the baseline: your code as written), 100 samples/s")
    assert lines[1].startswith(
        "no config beat the baseline beyond the run-to-run noise: "
        "the fastest, trial 1 (1.04x, median of 3 runs (1, 4, 5)"
    )


def test_findings_unconfirmed_say_so_and_use_the_window_spread() -> None:
    standing = standing_of(row(0, 100, baseline=True), row(1, 130, window_spread=0.08))
    lines = findings(standing)
    assert lines[0] == "trial 1, 1.30x the baseline (130 vs 100 samples/s, ±4%)"
    assert lines[1].startswith("runs: one each, not confirmed by re-runs")


def test_a_trials_own_ceilings_come_before_the_studys() -> None:
    from autotune.core._ceilings import ceiling_key
    from autotune.core._knobs import Part
    from autotune.stores._records import bottleneck_of

    config = {"batch_size": 64, "num_workers": 0, "amp": "off"}
    table = Ceilings(
        [
            {"part": "compute", "key": ceiling_key(Part.COMPUTE, config), "samples_per_s": 1000.0},
            {"part": "loader", "key": ceiling_key(Part.LOADER, config), "samples_per_s": 9000.0},
        ]
    )
    metrics = {"samples_per_s": 900.0, "data_wait_frac": 0.01}
    # measured seconds after its windows: its own compute ceiling (1200), the study's loader one
    bound = bottleneck_of(metrics, config, table, [{"part": "compute", "samples_per_s": 1200.0}])
    assert (bound.compute, bound.loader, bound.efficiency) == (1200.0, 9000.0, 0.75)
    assert bottleneck_of(metrics, config, table, []).efficiency == 0.9


NOISY = "noisy: other processes used 48% of its CPUs while it measured (over 20%)"


def test_a_noisy_run_is_not_the_one_that_speaks_for_its_config() -> None:
    # trial 0 (the baseline) ran under load at 40/s; its re-run 2 is believed: the winner's
    # figures, its bottleneck and the baseline's 1.00x come from the believed runs only
    standing = standing_of(
        row(0, 40.0, baseline=True, doubt=NOISY, efficiency=0.2),
        row(1, 300.0),
        row(2, 100.0, confirms=0, efficiency=0.95),
    )
    assert standing.best.number == 1 and standing.speedup(standing.decision.winner) == pytest.approx(3.0)
    first, *rest = findings(standing)
    assert first.startswith("trial 1, 3.00x the baseline (300 vs 100 samples/s")
    assert any(line.startswith("not ranked") for line in rest) is False  # 0's config has a believed run


def test_a_config_with_noisy_runs_only_is_named_not_ranked() -> None:
    standing = standing_of(row(0, 100.0, baseline=True), row(1, 900.0, doubt=NOISY), row(2, 150.0))
    assert standing.best.number == 2
    lines = findings(standing)
    assert "not ranked, figure not believed: noisy (trial 1: other processes used 48%" in "\n".join(lines)


def test_every_figure_doubted_says_unreliable_instead_of_a_speedup() -> None:
    standing = standing_of(row(0, 100.0, baseline=True, doubt=NOISY), row(1, 900.0, doubt=NOISY))
    assert standing.best is None
    (line,) = findings(standing)
    assert line.startswith("unreliable: no figure to rank; 2 trial(s) completed, but each was noisy")


def test_the_code_as_written_answers_where_every_other_config_was_ruled_out() -> None:
    """A loaded host doubted every run of the baseline, and every other config diverged or
    crashed: the answer is the code as written (nothing to change), with no speed claimed."""

    def ruled_out(number: int, outcome: str) -> TrialRow:
        return dataclasses.replace(row(number, 900.0, sampled={"amp": "bf16", "n": number}), outcome=outcome)

    base, again = row(0, 100.0, baseline=True, doubt=NOISY), row(3, 90.0, confirms=0, doubt=NOISY)
    standing = standing_of(base, ruled_out(1, "diverged"), ruled_out(2, "crashed"), again)
    assert (
        standing.best is not None and standing.best.number == 0 and standing.speedup(standing.decision.winner) is None
    )
    (line,) = findings(standing)
    assert line == (
        "trial 0 (the baseline: your code as written): every other config tried was ruled out "
        "(1 diverged, 1 crashed: trial 1, 2); no speed figure: every run of it was noisy (trial 0, 3: "
        "other processes used 48% of its CPUs while it measured (over 20%))"
    ), line
    # one other config whose only figure was noisy might be faster: no answer yet
    noisy = row(4, 900.0, sampled={"amp": "off"}, doubt=NOISY)
    assert standing_of(base, ruled_out(1, "diverged"), noisy).best is None
    assert standing_of(base).best is None  # (nothing else tried: nothing ruled out)
    # the code as written that crashed once (before its complete run) is no other config ruled out
    crashed_base = dataclasses.replace(row(5, 100.0, baseline=True), outcome="crashed")
    assert standing_of(crashed_base, base).best is None


def test_a_baseline_never_measured_quietly_gives_no_speedup() -> None:
    standing = standing_of(row(0, 100.0, baseline=True, doubt=NOISY), row(1, 300.0))
    assert standing.best.number == 1 and standing.speedup(standing.decision.winner) is None
    assert "no speedup: unreliable baseline, every run of it was noisy" in findings(standing)[0]


def test_a_compiled_winner_says_what_compiling_cost_and_when_it_pays_back() -> None:
    win = row(1, 200)
    win = dataclasses.replace(
        win, metrics={**win.metrics, "compile_s": 30.0}, config={"batch_size": 64, "compile": "default"}
    )
    lines = findings(standing_of(row(0, 100, baseline=True), win))
    # per sample it saves 1/100 - 1/200 = 0.005 s: 30 s back after 6,000 samples, 93.75 steps of 64
    assert lines[-1] == (
        "compile: torch.compile took 30.0 s before the first step (kept out of the figures); "
        "it pays back after 94 steps of 64 samples"
    )
    # a re-run that found the study's Inductor cache: both said, the cold one paid back
    again = dataclasses.replace(
        row(2, 200, confirms=1), metrics={**win.metrics, "compile_s": 3.0, "compile_warm": 1.0}, config=win.config
    )
    lines = findings(standing_of(row(0, 100, baseline=True), win, again))
    assert lines[-1] == (
        "compile: torch.compile took 30.0 s cold (a first run on a machine: kept out of the "
        "figures) and 3.0 s warm (a later run that finds its cache); it pays back after 94 steps "
        "of 64 samples"
    )


def test_a_compiled_winner_of_a_loop_without_a_loader_says_its_cost_without_steps() -> None:
    # a loop without a DataLoader: its batch size is the knob's multiple ("1x"), not samples
    win = dataclasses.replace(
        row(1, 200),
        metrics={**row(1, 200).metrics, "compile_s": 30.0},
        config={"batch_size": "1x", "compile": "default"},
    )
    lines = findings(standing_of(row(0, 100, baseline=True), win))
    assert lines[-1] == "compile: torch.compile took 30.0 s before the first step (kept out of the figures)"


def test_findings_of_a_confirmed_winner_in_a_study_whose_baseline_never_measured() -> None:
    # the baseline crashed (or every run of it was interrupted): no baseline group, and the
    # confirmed winner is said without one (this raised AttributeError; found by
    # tests/unit/test_properties.py)
    crashed = dataclasses.replace(row(0, 100, baseline=True), outcome="crashed", metrics={}, bottleneck=None)
    standing = standing_of(crashed, row(1, 150, sampled={"a": 1}), row(2, 140, confirms=1))
    assert standing.base is None and standing.decision.winner.confirmed
    assert findings(standing)[1] == "runs: median of 2 runs (1, 2), ±3%"  # (150 - 140) / 145 / 2
