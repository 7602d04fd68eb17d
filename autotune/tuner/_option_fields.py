"""How an option is defined once: ``option`` makes a dataclass field that carries its default, its
bounds and its help; an ``OptionGroup`` (a frozen dataclass of them) checks itself on construction
and documents its fields. ``fields_of`` walks a group and the groups inside it:
``tune``'s deprecated keywords, the CLI's flags and the tests read every option from there.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, TypeVar

from autotune.core._bounds import Bound, problem
from autotune.core._config import ConfigError

T = TypeVar("T", bound="OptionGroup")


def option(
    default: Any,
    help: str,
    *,
    bound: Bound | None = None,
    metavar: str | None = None,
    short: str | None = None,
    envvar: str | None = None,
) -> Any:
    """A field of an option group: its ``default``, its ``help`` (the CLI's and the docstring's),
    its ``bound`` (numeric options), and how its flag reads (``metavar``, a ``short`` alias, an
    ``envvar`` that sets it). A group's class as ``default``: a field holding that group."""
    meta = {"help": help, "bound": bound, "metavar": metavar, "short": short, "envvar": envvar}
    if is_group(default):  # a group of options: its own defaults
        return dataclasses.field(default_factory=default, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


class OptionGroup:
    """A group of options: subclasses are frozen dataclasses whose fields are ``option``s. Each
    checks its bounded fields on construction (the error names the option, its value and what is
    allowed), and its docstring lists each field's help."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]  # (each subclass is a dataclass)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # (before @dataclass runs, each field's class attribute is the Field ``option`` made)
        helps = [(name, vars(cls).get(name)) for name in inspect.get_annotations(cls)]
        lines = [f"    {name}: {f.metadata['help']}" for name, f in helps if isinstance(f, dataclasses.Field)]
        cls.__doc__ = (cls.__doc__ or "").rstrip() + "\n\nAttributes:\n" + "\n".join(lines) + "\n"

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            bound = field.metadata.get("bound")
            said = bound and problem(field.name, getattr(self, field.name), bound)
            if said:
                raise ConfigError(said)


def is_group(value: Any) -> bool:
    """Whether ``value`` is an option group's class."""
    return isinstance(value, type) and issubclass(value, OptionGroup)


def fields_of(
    cls: type[OptionGroup], path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], dataclasses.Field[Any]]]:
    """Every option of group ``cls`` and of the groups it holds: (the path of groups to it, its field)."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        kind = hints[field.name]
        if is_group(kind):
            yield from fields_of(kind, (*path, field.name))
        else:
            yield path, field


def defaults_of(cls: type[OptionGroup]) -> dict[str, Any]:
    """Each option's default, by its name (the names are unique across the groups)."""
    return {field.name: field.default for _, field in fields_of(cls)}


def place_of(cls: type[OptionGroup], name: str) -> str:
    """Where option ``name`` is set, as code: ``options=Options(measure=Measure(warmup=...))``."""
    for path, field in fields_of(cls):
        if field.name == name:
            kinds: list[type] = [cls]
            for attr in path:
                kinds.append(typing.get_type_hints(kinds[-1])[attr])
            inner = f"{name}=..."
            for attr, kind in reversed(list(zip(path, kinds[1:], strict=True))):
                inner = f"{attr}={kind.__name__}({inner})"
            return f"options={cls.__name__}({inner})"
    raise KeyError(name)


def from_flat(cls: type[T], values: Mapping[str, Any]) -> T:
    """A ``cls`` with the options named in ``values`` set (the rest at their defaults): the CLI's
    flags, ``tune``'s deprecated keywords. Each group checks its own."""
    hints = typing.get_type_hints(cls)
    given: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        kind = hints[field.name]
        if is_group(kind):
            given[field.name] = from_flat(kind, values)
        elif field.name in values:
            given[field.name] = values[field.name]
    return cls(**given)


def replace_flat(value: T, values: Mapping[str, Any]) -> T:
    """``value`` with the options named in ``values`` replaced, in whichever group each is."""
    hints = typing.get_type_hints(type(value))
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(value):
        kind = hints[field.name]
        if is_group(kind):
            inner = replace_flat(getattr(value, field.name), values)
            if inner is not getattr(value, field.name):
                changes[field.name] = inner
        elif field.name in values:
            changes[field.name] = values[field.name]
    return dataclasses.replace(value, **changes) if changes else value
