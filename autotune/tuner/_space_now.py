"""The space as of now: what the next draw may take, from what the study measured so far.

The space a user gives is where a study starts. As trials come in, the study widens an
``auto`` worker range (``autotune.tuner._loader_workers``), draws the int knobs only up to what an epoch
can use, and holds knobs that measuring has settled: the loader knobs once the best trial
is compute-bound at high efficiency, the model knobs when the function never hands its
model to ``run.model``, ``fused_optimizer`` when no optimizer of the code takes ``fused=``, ``amp`` and ``compile`` where
the script sets its own, ``amp`` at the one precision this machine does not run far
slower than another (``autotune.tuner._precision``), a knob at its one value left once each
other lost clearly in a trial (``autotune.tuner._one_loss``), and a knob at the code's own once a
value of it broke the code (``autotune.tuner._broke``). Pure functions of the standing; each
returns what it decided and the line that says so (``Line``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from autotune.core._ceilings import loader_only
from autotune.core._kinds import Line
from autotune.core._knobs import KNOBS, Stage, batch_of, show_value
from autotune.core._whole_runs import HORIZON_H
from autotune.machine._noise import doubt
from autotune.tuner._loader_workers import (
    epoch_samples,
    prefetch_high,
    useful_workers,
    widened_range,
)
from autotune.tuner._model_holds import amp_hold, compile_hold, model_hold, own_compile_hold, own_precision_hold
from autotune.tuner._space import Cap, Choice, IntRange, Space
from autotune.worker._streams import duplicating

FUSED = "fused_optimizer"

if TYPE_CHECKING:
    from autotune.stores._records import TrialRow
    from autotune.tuner._standing import Standing


def base_batch_size(standing: Standing) -> int | None:
    """The batch size the user's code passes (every trial's loader reports the same)."""
    return next((r.base_batch_size for r in standing.rows if r.base_batch_size), None)


def space_now(space: Space, standing: Standing, cpus: int, ram_budget: int | None) -> tuple[Space, Line | None]:
    """``space``, with an ``auto`` worker range widened as far as the measured loaders ask
    (``autotune.tuner._loader_workers.widened_range``), and the line that says so (said once per range)."""
    domain = space.domains.get("num_workers")
    if not isinstance(domain, IntRange) or not domain.auto:
        return space, None
    # At the space's smallest batch size an epoch has the most batches: no more workers help.
    epoch = {}
    samples, base = epoch_samples(standing.rows), base_batch_size(standing)
    sizes = space.domains.get("batch_size")
    counts = {b: useful_workers(b, base, samples) for b in (sizes.values() if sizes else (None,))}
    known = {b: n for b, n in counts.items() if n}
    if len(known) == len(counts):  # (every size's count known)
        size, most = max(known.items(), key=lambda kv: kv[1])
        epoch[f"an epoch's {most} batches at batch size {batch_of(size, base)}"] = most
    wider = widened_range(
        domain.high,
        domain.low,
        [r for r in standing.rows if r.measured],
        standing.ceilings,
        standing.ceilings.cpus or cpus,
        ram_budget,
        also=epoch,
    )
    if wider is None:
        return space, None
    return space.with_high("num_workers", wider.high), Line(wider.why, f"workers-{wider.high}")


def draw_caps(standing: Standing, space: Space, say: Callable[[Line], None]) -> Cap | None:
    """Draw ``num_workers`` only up to the batches of an epoch at the batch size drawn
    (a worker makes whole batches; ``Run.dataloader`` would clamp the rest), and
    ``prefetch_factor`` only up to the batches each of those workers has in an epoch
    (the loader asks for at most an epoch's batches ahead). ``say`` hears each cap that
    bites, as a line to say once. None before any trial reported its epoch."""
    samples, base = epoch_samples(standing.rows), base_batch_size(standing)
    duplicated = duplicating(standing.rows)
    broke = _broke_caps(standing, space)
    if samples is None and duplicated is None and not broke:
        return None

    def cap(name: str, values: Mapping[str, Any]) -> int | None:
        most = epoch_cap(name, values)
        if name in broke:
            high, line = broke[name]
            if most is None or high < most:
                say(Line(line, f"broke-{name}-{high}"))
                return high
        return most

    def epoch_cap(name: str, values: Mapping[str, Any]) -> int | None:
        if samples is None and duplicated is None:
            return None
        batches = useful_workers(values.get("batch_size"), base, samples)  # an epoch's, at this size
        workers = values.get("num_workers")
        domain = space.domains.get(name)  # (as widened)
        if duplicated is not None and name == "num_workers" and isinstance(domain, IntRange):
            say(
                Line(
                    f"num_workers drawn up to 1: with {duplicated.config.get('num_workers')} the loader delivered "
                    f"rows more than once (trial {duplicated.number}), as it will with any number past one",
                    "duplicated-workers",
                )
            )
            return 1
        if batches is None or not isinstance(domain, IntRange):
            return None
        size = batch_of(values.get("batch_size"), base)
        if name == "num_workers":
            if batches < domain.high:
                say(
                    Line(
                        f"num_workers drawn up to the batches of an epoch ({samples:,} samples; {batches} "
                        f"batches at batch size {size}): past one worker per batch, the rest would sit idle",
                        "epoch-workers",
                    )
                )
            return batches
        if name == "prefetch_factor" and isinstance(workers, int) and workers > 0:
            most = prefetch_high(batches, workers)
            if most < domain.high:
                say(
                    Line(
                        f"prefetch_factor drawn up to an epoch's batches per worker (e.g. {batches} batches at "
                        f"batch size {size} over {workers} workers: {most}): the loader never asks for more "
                        "than an epoch ahead, so a larger one holds nothing more",
                        "epoch-prefetch",
                    )
                )
            return most
        return None

    return cap


@dataclasses.dataclass(frozen=True)
class Holds:
    """The knobs not to sample now, and why.

    Attributes:
        values: Knob to the value it is held at (None: the user's own; an ``Among``: drawn from its
            values, each trial its own).
        why: Knob to why, for the trial's MLflow tags (``autotune.held.<knob>``): the
            precision hold's, a clear loss's and a broken value's (the others are said in the terminal).
        lines: What to say about them (each once per its key).
        settled_by: The trial whose loader knobs are held (None: none are), which the
            next call takes as ``settled_by``: holding and lifting are said once each.
    """

    values: dict[str, Any]
    why: dict[str, str]
    lines: tuple[Line, ...]
    settled_by: int | None


def holds(
    standing: Standing,
    space: Space,
    settled_by: int | None,
    max_load: float,
    max_spread: float,
    horizon_h: float = HORIZON_H,
    learnt: Mapping[str, str] | None = None,
) -> Holds:
    """The holds of the space now (see the module): the model knobs, the loader knobs and
    ``amp``. ``settled_by``: the trial whose loader hold was last said (None: none);
    ``horizon_h``: the hours production trains for (compile must pay back within them);
    ``learnt``: knob -> line, knobs an earlier study found to break the code (a warm start's)."""
    model, model_line = model_hold(standing, space)
    if not model:
        model, model_line = own_compile_hold(standing, space)
    if not model:
        model, model_line = compile_hold(standing, space, horizon_h)
    fused, fused_line = _fused_hold(standing, space)
    no_loader, no_loader_line = _no_loader_hold(standing, space)
    own, own_line = own_precision_hold(standing, space)
    order, order_line = _order_hold(standing, space)
    loader, settled, loader_line = _loader_hold(standing, space, settled_by)
    precision, precision_why = amp_hold(standing, space, max_load, max_spread)
    lines = [line for line in (model_line, fused_line, no_loader_line, own_line, order_line, loader_line) if line]
    if own:
        precision, precision_why = own, None
    if precision_why:
        lines.append(Line(precision_why, f"precision-{precision['amp']}"))
    held = {**model, **fused, **order, **loader, **no_loader, **precision}
    why = {"amp": precision_why} if precision_why else {}
    for knob, (value, line) in _broke_holds(standing, space, learnt).items():
        if knob not in held:  # (a hold above says its own reason)
            held[knob], why[knob] = value, line
            lines.append(Line(line, f"broke-{knob}"))
    for knob, (value, line) in _loss_holds(standing, space, max_load, max_spread).items():
        if knob not in held:  # (a hold above says its own reason)
            held[knob], why[knob] = value, line
            lines.append(Line(line, f"lost-{knob}-{show_value(value)}"))
    return Holds(held, why, tuple(lines), settled)


def _broke_holds(standing: Standing, space: Space, learnt: Mapping[str, str] | None) -> dict[str, tuple[Any, str]]:
    """Knobs held at the code's own after a value of theirs broke it (``autotune.tuner._broke``)."""
    from autotune.tuner._broke import broke_holds, broken

    if standing.base is None:
        return {}
    learnt = {k: v for k, v in (learnt or {}).items() if k in space.domains}
    return broke_holds(broken(standing.rows, space.domains, standing.base.first.config), learnt)


def _broke_caps(standing: Standing, space: Space) -> dict[str, tuple[int, str]]:
    """Int knobs drawn below a value that broke the code (``autotune.tuner._broke.broke_caps``)."""
    from autotune.tuner._broke import broke_caps, broken

    ints = [name for name, domain in space.domains.items() if isinstance(domain, IntRange)]
    if standing.base is None or not ints:
        return {}
    return broke_caps(broken(standing.rows, space.domains, standing.base.first.config), standing.rows, ints)


def _loss_holds(standing: Standing, space: Space, max_load: float, max_spread: float) -> dict[str, tuple[Any, str]]:
    """Knobs held after one clear loss of each other value (``autotune.tuner._one_loss``)."""
    from autotune.tuner._one_loss import clear_losses, loss_holds

    choices = {name: domain.values() for name, domain in space.domains.items() if isinstance(domain, Choice)}
    if standing.base is None or not choices:
        return {}
    losses = clear_losses(
        standing.rows,
        standing.base.loop_median,
        space.domains,
        standing.base.first.config,
        lambda row: row.doubt is None and doubt(row.metrics, "", max_load, max_spread) is None,
    )
    return loss_holds(losses, choices)


def _fused_hold(standing: Standing, space: Space) -> tuple[dict[str, Any], Line | None]:
    """``fused_optimizer`` not drawn once a trial saw that none of the code's optimizers takes
    ``fused=`` (Adadelta, LBFGS, ...): it would change nothing, and a config saying it is on would be untrue."""
    if FUSED not in space.domains:
        return {}, None
    built = next((r.dataset["optimizers"] for r in standing.rows if r.dataset.get("optimizers")), None)
    if not built or any(built.values()):
        return {}, None
    names = ", ".join(built)
    return {FUSED: None}, Line(
        f"{FUSED} not tuned: your code's optimizer ({names}) takes no fused= argument, so no config can fuse it",
        "fused",
    )


def _no_loader_hold(standing: Standing, space: Space) -> tuple[dict[str, Any], Line | None]:
    """The loader's and the transfer's knobs not drawn once a trial saw a loop that takes no batch
    from a DataLoader (``autotune.worker._loaderless``): none of them would reach it."""
    if not any(r.dataset.get("loaderless") for r in standing.rows):
        return {}, None
    names = [n for n in space.domains if KNOBS[n].stage in (Stage.DATALOADER, Stage.TRANSFER)]
    if not names:
        return {}, None
    return dict.fromkeys(names, None), Line(
        f"{', '.join(names)} not tuned: your loop takes its batches from no DataLoader (it slices its own), so "
        "none of them reaches it; it is measured in optimizer steps",
        "no-loader",
    )


def _order_hold(standing: Standing, space: Space) -> tuple[dict[str, Any], Line | None]:
    """``in_order`` not drawn once a trial saw that the training loader does not shuffle: its
    order may mean something (a curriculum, a stream's sequence), and the loader keeps it."""
    if "in_order" not in space.domains or not any(r.dataset.get("shuffles") is False for r in standing.rows):
        return {}, None
    return {"in_order": None}, Line(
        "in_order not tuned: your training loader does not shuffle, so the order of its batches is kept", "in-order"
    )


def _loader_hold(
    standing: Standing, space: Space, settled_by: int | None
) -> tuple[dict[str, Any], int | None, Line | None]:
    """The loader-only knobs held at the best trial's values once it is compute-bound at high
    efficiency (``held_loader_knobs``); the line when the hold starts, moves or is lifted."""
    best = standing.best
    held = held_loader_knobs(best, space.domains)
    if held and best is not None and best.bottleneck is not None and best.number != settled_by:  # (held: both)
        knobs = ", ".join(f"{k}={'as in your code' if v is None else show_value(v)}" for k, v in held.items())
        return (
            held,
            best.number,
            Line(
                f"loader knobs held at trial {best.number}'s ({knobs}): it is "
                f"compute-bound at {best.bottleneck.efficiency:.0%} of its data-on-device "
                "ceiling"
            ),
        )
    if not held and settled_by is not None:
        now = f"the best is trial {best.number}, " if best is not None and best.number != settled_by else ""
        return (
            held,
            None,
            Line(
                f"loader knobs sampled again: {now}not compute-bound at high efficiency "
                f"(trial {settled_by}'s hold is lifted)"
            ),
        )
    return held, settled_by, None


def held_loader_knobs(best: TrialRow | None, knobs: Mapping[str, Any]) -> dict[str, Any]:
    """The loader-only knobs among ``knobs`` to hold at ``best``'s sampled values (None:
    the user's own), once ``best`` is compute-bound at high efficiency: more loader
    trials cannot buy much then. Empty otherwise."""
    if best is None or best.bottleneck is None or not best.bottleneck.settled:
        return {}
    return {name: best.sampled.get(name) for name in knobs if loader_only(name)}
