"""A config whose windows disagree in every run on a quiet host is believed after three runs
(autotune.tuner._bursty): ranked on the median of its runs, measured again no more."""

from __future__ import annotations

from autotune.core._kinds import Kind
from autotune.tuner._bursty import BURSTY_RUNS
from autotune.tuner._planner import measure_again
from autotune.tuner._standing import findings
from standings import standing_from, trial

WORKERS = {"num_workers": 128, "batch_size": "2x"}


def spread_doubt(spread: float) -> str:
    return f"noisy: its windows disagree, from lowest to highest {spread:.0%} of their median (over 100%)"


def bursty_run(number: int, rate: float, spread: float, first: int = 1, attempt: int = 0):
    """A run of the 128-worker config, doubted for its windows alone (the host quiet)."""
    kind = Kind.SAMPLED if number == first else Kind.REMEASURE
    return trial(
        number,
        rate,
        sampled=WORKERS,
        spread=spread,
        doubt=spread_doubt(spread),
        kind=kind,
        of=None if number == first else first,
        remeasure=attempt,
    )


def test_three_runs_whose_windows_disagree_are_believed_and_rank_on_their_median() -> None:
    """The sweep's study: 128 workers at 33,562, 30,106 and 25,337 samples/s, windows 207%,
    231% and 176% apart in each run, the host quiet; the baseline at 849."""
    base = trial(0, 849.0)
    runs = [bursty_run(1, 33_562.0, 2.07), bursty_run(2, 30_106.0, 2.31, attempt=1)]
    two = standing_from(base, *runs)
    assert two.best.number == 0  # two runs: still doubted, measured again
    assert measure_again(next(r for r in two.rows if r.number == 2), 2) is not None
    three = standing_from(base, *runs, bursty_run(3, 25_337.0, 1.76, attempt=2))
    winner = three.decision.winner
    assert len(runs) + 1 == BURSTY_RUNS and winner.first.number == 1 and winner.median == 30_106.0
    assert all(r.doubt is None for r in winner.runs)
    third = next(r for r in three.rows if r.number == 3)
    assert third.reason.startswith("bursty: its windows disagreed in each of its 3 runs on a quiet host (176%-231%")
    assert measure_again(third, 2) is None  # its rhythm: measured again, it disagrees again
    assert findings(three)[0].startswith("trial 1, 35.46x the baseline (30,106 vs 849 samples/s")


def test_a_run_doubted_for_the_hosts_load_keeps_its_config_doubted() -> None:
    """One of its runs was slowed by others: that doubt is not the config's rhythm, and measuring
    again on a quiet host may lift it."""
    loaded = trial(
        3,
        25_000.0,
        sampled=WORKERS,
        doubt="noisy: other processes used 23% of its CPUs while it measured (over 20%)",
        kind=Kind.REMEASURE,
        of=1,
        remeasure=2,
    )
    standing = standing_from(
        trial(0, 849.0), bursty_run(1, 33_562.0, 2.07), bursty_run(2, 30_106.0, 2.31, attempt=1), loaded
    )
    assert standing.best.number == 0
    assert all(r.doubt is not None for r in standing.rows if r.number)


def test_a_bursty_config_ranks_on_its_windows_taken_together_not_their_median() -> None:
    """Batch 32 with 52 persistent workers on the sweep's loop: the median of its windows read
    16,791, 13,876 and 12,074 samples/s, its windows together 10,742, 10,046 and 9,646; the plain
    loop ran it at 9,748. A steady config at 12,000 beats it; ranked on the medians, it lost."""
    runs = [
        trial(
            n, rate, sampled=WORKERS, spread=3.0, doubt=spread_doubt(3.0), kind=kind, of=of, samples_per_s_all=together
        )
        for n, rate, together, kind, of in (
            (1, 16_791.0, 10_742.0, Kind.SAMPLED, None),
            (2, 13_876.0, 10_046.0, Kind.REMEASURE, 1),
            (3, 12_074.0, 9_646.0, Kind.REMEASURE, 1),
        )
    ]
    standing = standing_from(trial(0, 755.0), *runs, trial(4, 12_000.0, sampled={"num_workers": 64}))
    assert standing.decision.winner.first.number == 4
    bursty = next(g for g in standing.groups if g.first.number == 1)
    assert bursty.median == 10_046.0 and [r.metrics["samples_per_s_median"] for r in bursty.runs][0] == 16_791.0
    assert bursty.runs[2].reason.endswith(
        "believed, each run ranked on its windows taken together (9,646 samples/s; their median: 12,074), "
        "the median of its runs"
    )
