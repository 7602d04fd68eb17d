"""A config whose windows disagree in every run on a quiet host: its own rhythm, not noise.

A trial whose windows' samples/s disagree past ``--max-spread`` is doubted as noisy and measured
again once the host is quiet (``autotune.machine._noise.doubt``; the doubt says the host's load
first, so a run doubted for its windows alone had the host to itself). Some configs disagree with
themselves however quiet the host: 128 DataLoader workers on 2 CPUs fill their queues in waves.
The sweep's study (benchmarks/results/sweep.md) ran one such config 20 times, each run's windows
146-365% apart and its figure 18,000-36,000 samples/s, never believed one, and spent 20 of its 45
trials measuring it again. After ``BURSTY_RUNS`` runs of one config doubted for that alone, the
disagreement is the config's own: each of those runs is believed, the config ranks on the median
of its runs (and must beat the baseline in every one of them to win), and its reason says so.

Each such run ranks on its windows taken together (``samples_per_s_all``: their samples over their
seconds), not on their median: where the windows disagree because of the config's own rhythm, the
slow ones are part of it, and a run of the config pays for them. Batch 32 with 52 persistent
workers (128 batches an epoch; each epoch's start waits for its first batches) read 12,074-16,791
samples/s by the median of its windows and 9,646-10,742 by its windows together; the plain loop
of ``benchmarks/_io_loop.py`` ran it at 9,748 (this 2-CPU host, 2026-11-29; sweep.md). Ranked on
the median, a study exported it at 70% of the sweep's best.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from autotune.machine._noise import WINDOWS_DISAGREE
from autotune.stores._records import TrialRow
from autotune.tuner._confirm import group_runs

#: Runs of one config doubted only because their windows disagree, from which on that is its own.
BURSTY_RUNS = 3


def believed_bursts(rows: Sequence[TrialRow]) -> list[TrialRow]:
    """``rows`` with the runs of every bursty config believed (see the module).

    >>> from autotune.core._kinds import Kind
    >>> def run(n, spread, doubt="noisy: its windows disagree, from lowest to highest 2 of their median"):
    ...     metrics = {"samples_per_s": 900.0, "samples_per_s_spread": spread, "samples_per_s_all": 600.0}
    ...     return TrialRow(n, False, "complete", "", metrics, {}, None, None, sampled={"num_workers": 128},
    ...                     doubt=doubt, kind=Kind.SAMPLED if n == 1 else Kind.REMEASURE, of=None if n == 1 else 1)
    >>> [r.doubt is None for r in believed_bursts([run(1, 2.0), run(2, 1.5)])]
    [False, False]
    >>> rows = believed_bursts([run(1, 2.0), run(2, 1.5), run(3, 3.4)])
    >>> [r.doubt is None for r in rows], [r.metrics["samples_per_s"] for r in rows], rows[2].reason
    ([True, True, True], [600.0, 600.0, 600.0], "bursty: its windows disagreed in each of its 3 runs on a quiet host (150%-340% of their median): the config's own, not others' load; believed, each run ranked on its windows taken together (600 samples/s; their median: 900), the median of its runs")
    """
    bursty: dict[int, str] = {}
    for group in group_runs(rows):
        runs = [r for r in group.runs if r.measured and r.doubt is not None and WINDOWS_DISAGREE in r.doubt]
        if len(runs) < BURSTY_RUNS or len(runs) < len(group.doubted):  # (another doubt: not only its rhythm)
            continue
        spreads = [r.metrics.get("samples_per_s_spread", 0.0) for r in runs]
        line = (
            f"bursty: its windows disagreed in each of its {len(runs)} runs on a quiet host "
            f"({min(spreads):.0%}-{max(spreads):.0%} of their median): the config's own, not others' load; "
            "believed, "
        )
        bursty.update({r.number: line for r in runs})
    return [_believed(r, bursty[r.number]) if r.number in bursty else r for r in rows]


def _believed(row: TrialRow, line: str) -> TrialRow:
    """A bursty run believed: ranked on its windows taken together, where it measured them (a run
    from before ``samples_per_s_all`` was recorded keeps its median), and its reason says so."""
    metrics, together = dict(row.metrics), row.metrics.get("samples_per_s_all")
    if together:
        line += (
            f"each run ranked on its windows taken together ({together:,.0f} samples/s; their median: "
            f"{metrics['samples_per_s']:,.0f}), the median of its runs"
        )
        metrics.update(samples_per_s=together, samples_per_s_median=metrics["samples_per_s"])
    else:
        line += "ranked on the median of its runs"
    return dataclasses.replace(row, doubt=None, metrics=metrics, reason="\n".join(filter(None, [row.reason, line])))
