"""The command line's flags of the options (``autotune.tuner._option_groups``): one flag per field,
``--name-with-dashes``, with the field's default, bounds and help (``autotune run``'s, and the
store flags of ``show``, ``export``, ``report`` and ``ui``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from autotune.core._bounds import Bound
from autotune.tuner._option_fields import fields_of

F = TypeVar("F", bound=Callable[..., Any])


def ranged(bound: Bound) -> click.ParamType:
    """The click type of a numeric option within ``bound``: the same bounds as ``tune``'s."""
    if bound.integer:
        low, high = (None if end is None else int(end) for end in (bound.low, bound.high))
        return click.IntRange(low, high, min_open=bound.low_open, max_open=bound.high_open)
    return click.FloatRange(bound.low, bound.high, min_open=bound.low_open, max_open=bound.high_open)


def flag(field: dataclasses.Field[Any]) -> Callable[[F], F]:
    """The flag of an option's field (``autotune.tuner._option_groups``): ``--name-with-dashes``,
    its default, bounds and help; a bool reads ``on``/``off``."""
    meta, default = field.metadata, field.default
    kw: dict[str, Any] = {
        "default": default,
        "show_default": default is not None,
        "help": meta["help"],
        "metavar": meta["metavar"],
        "envvar": meta["envvar"],
    }
    if meta["bound"]:
        kw["type"] = ranged(meta["bound"])
    elif isinstance(default, bool):
        kw.update(
            type=click.Choice(["on", "off"]),
            default="on" if default else "off",
            callback=lambda _ctx, _param, value: value == "on",
        )
    elif isinstance(default, Path):
        kw["type"] = click.Path(path_type=Path)
    elif str(field.type).startswith("int"):
        kw["type"] = int
    names = [f"--{field.name.replace('_', '-')}", *filter(None, [meta["short"]])]
    return click.option(*names, field.name, **kw)


def flags(*groups: type, only: tuple[str, ...] = ()) -> Callable[[F], F]:
    """A flag for each option of ``groups`` (or those named in ``only``), in their order."""
    fields = [f for group in groups for _, f in fields_of(group) if not only or f.name in only]

    def decorate(fn: F) -> F:
        for field in reversed(fields):
            fn = flag(field)(fn)
        return fn

    return decorate
