"""Each numeric option's bounds, one source for ``tune``, the CLI (``autotune._cli._bounded``) and
``autotune.load``: ``LIMITS``, and the rule that reads them (``allowed``, ``check``)."""

from __future__ import annotations

import math
from typing import Any

from autotune.core._config import ConfigError

#: The least RAM budget, in GiB, that a study or a recipe takes (less holds no Python process).
RAM_BUDGET_LEAST = 0.01
#: (least, inclusive?), (most, inclusive?) of each option.
LIMITS: dict[str, tuple[tuple[float, bool] | None, tuple[float, bool] | None]] = {
    "trials": ((1, True), None), "jobs": ((1, True), None), "warmup": ((0, True), None),
    "window": ((0.05, True), None), "windows": ((1, True), None), "timeout": ((1, True), None),
    "startup_timeout": ((1, True), None), "stall_timeout": ((0.5, True), None),
    "compile_timeout": ((1, True), None),
    "ram_budget": ((RAM_BUDGET_LEAST, True), None), "divergence_tolerance": ((0, False), None),
    "prune": ((0, True), (1, True)), "confirm": ((0, True), None), "ceiling_windows": ((0, True), None),
    "max_load": ((0, True), (1, True)), "max_spread": ((0, True), None), "remeasure": ((0, True), None),
    "quiet_wait": ((0, True), None), "store_patience": ((0, True), None), "nproc_per_node": ((1, True), None),
    "horizon": ((0, False), None), "whole_run": ((0, True), None),
}
INTEGERS = frozenset({"trials", "jobs", "windows", "confirm", "ceiling_windows", "remeasure", "nproc_per_node"})


def _wrong_type(name: str, value: Any) -> bool:
    return isinstance(value, bool) or not isinstance(value, int if name in INTEGERS else (int, float))


def allowed(name: str, value: Any) -> bool:
    """Whether ``value`` is allowed for option ``name``: its type, finite (nan passes every
    comparison), within its bounds.

    >>> allowed("ram_budget", 0.5), allowed("ram_budget", 0.001), allowed("window", float("nan"))
    (True, False, False)
    """
    if _wrong_type(name, value) or not math.isfinite(value):
        return False
    low, high = LIMITS[name]
    return not ((low and (value < low[0] if low[1] else value <= low[0]))
                or (high and (value > high[0] if high[1] else value >= high[0])))


def check(name: str, value: Any) -> None:
    """Raise ConfigError unless ``value`` is allowed for option ``name`` (None: its default)."""
    if (value is None and name in ("timeout", "ram_budget", "horizon")) or allowed(name, value):
        return
    low, high = LIMITS[name]
    kind = "an integer" if name in INTEGERS else "a number"
    bounds = " and ".join(filter(None, [
        low and f"{'>=' if low[1] else '>'} {low[0]}", high and f"{'<=' if high[1] else '<'} {high[0]}"]))
    finite = "a finite number" if not _wrong_type(name, value) and not math.isfinite(value) else kind
    raise ConfigError(f"{name}={value!r}: must be {finite} {bounds}")
