"""The climb in DataLoader workers: a leading trial that still waits on data runs again with more.

A range only bounds the draws: on jpeg, with the range widened to 0-34 and an epoch of 24
batches at the winner's batch size, three studies' winners drew 24, 18 and 19 workers, and
the 18 and 19 ran 9-11% slower than 24 in turns. So a trial that leads, still waits on data
and drew fewer workers than could help runs again with twice as many (``more_workers``), up
to the range's high end and an epoch's batches at its batch size, once per trial. One that
already drew a worker per batch of its epoch runs again at the next smaller batch size in the
space, whose epoch has more batches, with twice its workers: a jpeg study that climbed to 4x
with 12 workers (an epoch's 12 batches) stopped there at 80% of the sweep's best, 2x with 24;
with this step, three studies' winners came to 98-104% of it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from autotune.core._ceilings import Ceilings
from autotune.core._knobs import KNOBS, show_value
from autotune.tuner._loader_workers import TOP_WAITS, evidence, leads, led_when, prefetch_high


@dataclasses.dataclass(frozen=True)
class MoreWorkers:
    """A leading trial's config to run again with ``workers`` workers (and ``persistent``
    workers where it drew them started anew each epoch), and the line that says why."""

    workers: int
    why: str
    persistent: bool = False
    #: The batch size to run it at instead of its own (None: its own).
    batch_size: Any = None


def more_workers(
    row: Any,
    rows: Iterable[Any],
    ceilings: Ceilings,
    cpus: int,
    high: int,
    useful: int | None,
    can_persist: bool = True,
    smaller: tuple[Any, int | None] | None = None,
) -> MoreWorkers | None:
    """``row``'s config with twice the workers it drew, when ``row`` leads (``leads``), waited on
    data ``TOP_WAITS`` of its time or more, and the study's loaders wait (``evidence``): at
    most ``high`` (the range now) and ``useful`` (an epoch's batches at its batch size); None
    when that adds none.

    Where ``row`` drew as many workers as its epoch has batches (``useful``) and the range
    allows more, its config runs at ``smaller`` instead (the next smaller batch size, and the
    batches of an epoch at it), whose epoch gives twice the workers each a batch.

    Where ``row`` drew ``persistent_workers=False`` (and the space has True: ``can_persist``),
    the config also keeps its workers across epochs: started anew each epoch, twice the
    workers cost twice the start-up each epoch, and a climb along that line measures the
    restarts more than the workers (a jpeg study's climb to 24 workers read 1,033 samples/s
    so, 1,900 with them kept; benchmarks/results/reach.md)."""
    rows = list(rows)
    drawn = row.sampled.get("num_workers")
    waits = row.metrics.get("data_wait_frac", 0.0)
    led = {r.number: behind for r, behind in leads(rows)}
    if (
        not isinstance(drawn, int)
        or drawn < 1
        or row.number not in led
        or waits < TOP_WAITS
        or not evidence(rows, ceilings, cpus)
    ):
        return None
    size, at = None, ""
    if useful is not None and drawn >= useful and smaller is not None and high > drawn:
        size, useful = smaller  # (its own epoch gives no worker a batch more)
        at = (
            f", one per batch of its epoch at batch_size={show_value(row.sampled.get('batch_size'))}: "
            f"its config runs again at batch_size={show_value(size)}"
        )
    epoch = f"an epoch's batches at {'that' if at else 'its'} batch size"
    bounds = {"the range's high end": high, **({epoch: useful} if useful else {})}
    bound = min(bounds.items(), key=lambda kv: kv[1])
    workers = min(2 * drawn, bound[1])
    if workers <= drawn:
        return None
    capped = f" ({bound[0]}, {bound[1]})" if workers < 2 * drawn else ""
    persistent = can_persist and row.sampled.get("persistent_workers") is False
    kept = (
        " and persistent_workers=true (started anew each epoch, twice the workers restart twice the work)"
        if persistent
        else ""
    )
    runs = f"{at} with" if at else ": its config runs again with"
    return MoreWorkers(
        workers,
        f"trial {row.number}, {led_when(led[row.number])}, drew num_workers={drawn} and waited on data "
        f"{waits:.0%} of its time{runs} num_workers={workers}{capped}{kept}",
        persistent,
        size,
    )


def climbed(sampled: Mapping[str, Any], more: MoreWorkers, useful: int | None) -> dict[str, Any]:
    """The knobs to run a leader's drawn ones (``sampled``) again with, as ``more`` says:
    its workers, kept workers, its batch size; without the knobs that no longer apply there
    (``lr_scaling`` at the code's own batch size), and with ``prefetch_factor`` at most what
    ``useful`` workers (an epoch's batches at the batch size it runs at) can ask of an epoch,
    as the search draws it.

    >>> climbed({"batch_size": "2x", "num_workers": 12, "lr_scaling": "linear", "prefetch_factor": 4},
    ...         MoreWorkers(24, "", batch_size="1x"), 48)
    {'batch_size': '1x', 'num_workers': 24, 'prefetch_factor': 2}
    """
    params = {k: v for k, v in {**sampled, "num_workers": more.workers}.items() if v is not None}
    if more.persistent:
        params["persistent_workers"] = True
    if more.batch_size is not None:
        params["batch_size"] = more.batch_size
    params = {k: v for k, v in params.items() if k not in KNOBS or KNOBS[k].is_active(params)}
    if useful and isinstance(params.get("prefetch_factor"), int):
        params["prefetch_factor"] = min(params["prefetch_factor"], prefetch_high(useful, more.workers))
    return params
