"""The rules that stop a running trial early: a config far slower than the best so far (pruning).

Pure functions over numbers, tested on hand-written rates.
"""

from __future__ import annotations

from collections.abc import Sequence

#: A trial is pruned when its fastest window so far is under this share of the
#: best complete trial's samples/s. One config's runs on the 2-core CPU machine spread
#: 16-25% (each process draws its speed level at its start: benchmarks/results/levels.md),
#: so half the best is far outside the noise: no plausible measurement makes such a
#: trial the winner.
PRUNE_FRACTION = 0.5
#: Windows a trial measures before it may be pruned: one window can be a fluke
#: (a cache filling, a neighbour's burst).
PRUNE_MIN_WINDOWS = 2


def prune_so_far(
    samples: float,
    seconds: float,
    best: float | None,
    fraction: float = PRUNE_FRACTION,
    min_s: float = 0.0,
    window_s: float | None = None,
) -> str | None:
    """Why a running trial should stop before its windows are done, or None: the window under
    way has lasted ``min_s`` seconds or more (``window_s``; its whole measure when not given),
    and its ``samples`` over its ``seconds`` of measure so far are under ``fraction`` of ``best``.
    Its windows end at the baseline's marks, so a config 25x slower takes 25x the time for them;
    this decides it when ``PRUNE_MIN_WINDOWS`` windows in seconds would have (``min_s``: that
    many ``--window``). Windows that close in time are judged by ``prune_reason`` (their
    fastest), as before: a config whose workers start slowly is not cut on its first second.

    >>> prune_so_far(600, 2.0, 1000.0, min_s=0.6)
    '300 samples/s in its first 2.0 s, under 50% of the best so far (1,000)'
    >>> prune_so_far(600, 0.5, 1000.0, min_s=0.6) is None, prune_so_far(1200, 2.0, 1000.0, min_s=0.6) is None
    (True, True)
    >>> prune_so_far(600, 2.0, 1000.0, min_s=0.6, window_s=0.2) is None  # its windows close in time
    True
    """
    if (
        not best
        or fraction <= 0
        or not min_s
        or seconds < min_s
        or not samples
        or (window_s is not None and window_s < min_s)
    ):
        return None
    rate = samples / seconds
    if rate >= fraction * best:
        return None
    return f"{rate:,.0f} samples/s in its first {seconds:.1f} s, under {fraction:.0%} of the best so far ({best:,.0f})"


def prune_reason(
    rates: Sequence[float], best: float | None, fraction: float = PRUNE_FRACTION, min_windows: int = PRUNE_MIN_WINDOWS
) -> str | None:
    """Why a running trial should stop now, or None.

    Args:
        rates: samples/s of the windows the trial has finished.
        best: samples/s of the best complete, feasible trial so far (None: no best yet).
        fraction: Prune below this share of ``best``; 0 never prunes.
        min_windows: Windows needed before judging.
    """
    if not best or fraction <= 0 or len(rates) < min_windows:
        return None
    fastest = max(rates)
    if fastest >= fraction * best:
        return None
    return (
        f"{fastest:,.0f} samples/s at best in {len(rates)} windows, under {fraction:.0%} "
        f"of the best so far ({best:,.0f})"
    )
