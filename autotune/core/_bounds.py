"""A numeric option's bounds (``Bound``) and the rule that reads them: one rule for ``tune``'s
options (``autotune.tuner._option_fields``), the CLI's ranges and ``autotune.load``."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from autotune.core._config import ConfigError

#: The least RAM budget, in GiB, that a study or a recipe takes (less holds no Python process).
RAM_BUDGET_LEAST = 0.01


@dataclasses.dataclass(frozen=True)
class Bound:
    """Where a numeric option may lie: ``low`` and ``high`` (None: unbounded), each included
    unless ``low_open`` / ``high_open``; ``integer``: whole numbers only; ``optional``: None
    allowed (it means the option's computed default)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    optional: bool = False

    def words(self) -> str:
        """``>= 0 and <= 1``: the bounds as the error says them."""
        said = []
        if self.low is not None:
            said.append(f"{'>' if self.low_open else '>='} {self.low:g}")
        if self.high is not None:
            said.append(f"{'<' if self.high_open else '<='} {self.high:g}")
        return " and ".join(said)


#: ``ram_budget``'s bound: a study's (``Limits.ram_budget``) and ``autotune.load``'s.
RAM_BUDGET = Bound(low=RAM_BUDGET_LEAST, optional=True)


def _wrong_type(value: Any, bound: Bound) -> bool:
    return isinstance(value, bool) or not isinstance(value, int if bound.integer else (int, float))


def allowed(value: Any, bound: Bound) -> bool:
    """Whether ``value`` is allowed: its type, finite (nan passes every comparison), within ``bound``.

    >>> allowed(0.5, RAM_BUDGET), allowed(0.001, RAM_BUDGET), allowed(float("nan"), Bound(low=0.05))
    (True, False, False)
    """
    if _wrong_type(value, bound) or not math.isfinite(value):
        return False
    low, high = bound.low, bound.high
    return not (
        (low is not None and (value <= low if bound.low_open else value < low))
        or (high is not None and (value >= high if bound.high_open else value > high))
    )


def problem(name: str, value: Any, bound: Bound) -> str | None:
    """What is wrong with ``value`` for option ``name``, as the CLI and ``tune`` say it; None: nothing.

    >>> problem("prune", 1.5, Bound(low=0, high=1))
    'prune=1.5: must be a number >= 0 and <= 1'
    """
    if (value is None and bound.optional) or allowed(value, bound):
        return None
    kind = "an integer" if bound.integer else "a number"
    if not _wrong_type(value, bound) and not math.isfinite(value):
        kind = "a finite number"
    return f"{name}={value!r}: must be {kind} {bound.words()}".rstrip()


def check(name: str, value: Any, bound: Bound) -> None:
    """Raise ConfigError unless ``value`` is allowed for option ``name`` (None: where ``optional``)."""
    said = problem(name, value, bound)
    if said:
        raise ConfigError(said)
