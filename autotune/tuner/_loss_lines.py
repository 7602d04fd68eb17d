"""The winner's loss in the findings: against the baseline's on the same samples, and, on another
batch size, the samples it took to the baseline's loss and whether its ranking counted them."""

from __future__ import annotations

import statistics

from autotune.stores._records import changes_batch, loss_against_baseline
from autotune.tuner._confirm import Group


def winner_loss_line(win: Group) -> str | None:
    """The winner's loss against the baseline's on the same samples (the median of its judged
    runs, ``Group.loss_excess``) as a findings line; None when no run of it was judged."""
    if win.loss_excess is None:
        return None
    tolerance = next((r.metrics["loss_tolerance"] for r in win.runs if "loss_tolerance" in r.metrics), None)
    return f"loss: {loss_against_baseline(win.loss_excess, tolerance, win.losses)}"


def to_loss_of(group: Group) -> float | None:
    """For a config on another batch size than the code's: the median over its believed runs of
    the samples it took to the baseline's loss over the baseline's, as it ranks (``TrialRow.to_loss``:
    a whole run's only where it costs); None for one on the code's batch size, or where none counts."""
    ratios = [r.to_loss for r in group.runs if r.reliable and r.to_loss]
    return statistics.median(ratios) if ratios else None


def to_loss_clause(win: Group) -> str:
    """For a winner on another batch size: the loss it was ranked on reaching (the baseline's
    over its judged span, ``autotune.core._guard.to_loss``); for a whole run that got there on
    fewer samples, that it did and that its ranking did not count it (the production run trains
    all of them); else nothing.

    >>> from autotune.tuner._confirm import group_runs
    >>> from autotune.stores._records import TrialRow
    >>> row = TrialRow(3, False, "complete", "", {"samples_per_s": 90.0, "run_s": 8.0, "to_loss_ratio": 0.5,
    ...                "to_loss_target": 0.412}, {"batch_size": 128}, 32, None)
    >>> to_loss_clause(group_runs([row])[0])
    "; it reached the baseline's loss (0.412) on 0.50x the baseline's samples: not counted, as your run trains all of them"
    """
    ratio = to_loss_of(win)
    target = next((r.metrics["to_loss_target"] for r in win.runs if r.metrics.get("to_loss_target")), None)
    if ratio is None:
        early = [
            r.metrics["to_loss_ratio"]
            for r in win.runs
            if r.reliable
            and r.run_s
            and r.metrics.get("to_loss_ratio")
            and changes_batch(r.config.get("batch_size"), r.base_batch_size)
        ]
        if not early or target is None:
            return ""
        return (
            f"; it reached the baseline's loss ({target:.3g}) on {statistics.median(early):.2f}x the "
            "baseline's samples: not counted, as your run trains all of them"
        )
    return (
        f"; ranked on its time to the baseline's loss ({target:.3g}), for which it took {ratio:.2f}x "
        "the baseline's samples"
    )
