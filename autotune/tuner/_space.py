"""Search spaces: YAML files mapping knobs to a fixed value, choices or an int range."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core._config import Config, ConfigError, read_yaml
from autotune.core._knobs import KNOBS, parse_relative, unknown_knob_message
from autotune.machine._probe import usable_cpus
from autotune.stores._optuna_io import fixed_params
from autotune.tuner._one_loss import Among

if TYPE_CHECKING:
    import optuna

    from autotune.machine._probe import Fingerprint


def _shipped_dir() -> Path:
    try:  # installed: search_spaces/ is the package data autotune.spaces
        return Path(str(resources.files("autotune.spaces")))
    except ModuleNotFoundError:  # a source tree on sys.path, not installed
        return Path(__file__).resolve().parents[2] / "search_spaces"


#: Shipped spaces, reachable by name (``--space loader``).
SPACES_DIR = _shipped_dir()

_RANGE_KEYS = ("low", "high", "log", "step")


@dataclasses.dataclass(frozen=True)
class Fixed:
    """A knob held at one value in every trial."""

    value: Any

    def values(self) -> tuple[Any, ...]:
        return (self.value,)


@dataclasses.dataclass(frozen=True)
class Choice:
    """A knob sampled from a list of values."""

    choices: tuple[Any, ...]

    def values(self) -> tuple[Any, ...]:
        return self.choices


@dataclasses.dataclass(frozen=True)
class IntRange:
    """An int knob sampled from ``[low, high]`` (Optuna's IntDistribution rules)."""

    low: int
    high: int
    log: bool = False
    step: int = 1
    #: ``high: auto``: the study widens ``high`` when measurement shows more helps
    #: (``autotune.tuner._loader_workers``).
    auto: bool = False

    def values(self) -> tuple[Any, ...]:
        return (self.low, self.high)


Domain = Fixed | Choice | IntRange


#: The most an int knob can usefully be, given the values drawn before it (None: no bound).
Cap = Callable[[str, Mapping[str, Any]], "int | None"]


def _suggest(trial: optuna.Trial, name: str, domain: Domain, bound: int | None = None) -> Any:
    if isinstance(domain, Fixed):
        return domain.value
    if isinstance(domain, Choice):
        return trial.suggest_categorical(name, list(domain.choices))
    high = domain.high
    if bound is not None and bound < high:  # down to the first step at or past the bound
        high = domain.low + max(0, math.ceil((bound - domain.low) / domain.step)) * domain.step
    return trial.suggest_int(name, domain.low, min(high, domain.high), step=domain.step, log=domain.log)


@dataclasses.dataclass(frozen=True)
class Space:
    """A validated search space.

    Attributes:
        name: The shipped name or the file's path.
        domains: Knob name to its domain, in registry order; knobs not named keep
            the user's own value (as in the baseline).
    """

    name: str
    domains: dict[str, Domain]

    def restrict(self, fingerprint: Fingerprint) -> tuple[Space, list[str]]:
        """Drop values (and knobs) whose capability this machine lacks.

        Returns the restricted space and one line per drop saying why.
        """
        domains: dict[str, Domain] = {}
        notes: list[str] = []
        for name, domain in self.domains.items():
            knob = KNOBS[name]
            missing = {
                v: cap
                for v in domain.values()
                if (cap := knob.need(v)) is not None and not fingerprint.capabilities[cap.value]
            }
            if not missing:
                domains[name] = domain
                continue
            kept = [v for v in domain.values() if v not in missing]
            for value, cap in missing.items():
                notes.append(f"{name}: dropped {_yaml(value)} ({fingerprint.reasons[cap.value]})")
            if len(kept) > 1:
                domains[name] = Choice(tuple(kept))
            elif len(kept) == 1:
                domains[name] = Fixed(kept[0])
        return Space(self.name, domains), notes

    def without(self, names: Sequence[str]) -> Space:
        """This space with ``names`` left to the user's code (as in the baseline)."""
        return Space(self.name, {k: v for k, v in self.domains.items() if k not in names})

    def with_high(self, name: str, high: int) -> Space:
        """This space with the int range of ``name`` reaching ``high``."""
        domain = self.domains[name]
        assert isinstance(domain, IntRange)  # (only an int range is widened)
        return dataclasses.replace(self, domains={**self.domains, name: dataclasses.replace(domain, high=high)})

    def sample(self, trial: optuna.Trial, held: Mapping[str, Any] | None = None, cap: Cap | None = None) -> Config:
        """Draw a config define-by-run, skipping knobs whose condition fails.

        Knobs in ``held`` take its value (None: the user's own; an ``Among``: its pick for this
        trial) and are not sampled, but for those the trial was enqueued with (a fixed value: whoever enqueued it asked for that
        config, e.g. a climb's or a test's); an int range is drawn up to
        ``cap(name, values drawn so far)`` where that is lower.
        """
        fixed = fixed_params(trial)
        held = {k: v for k, v in (held or {}).items() if k not in fixed}
        values: dict[str, Any] = {}
        for name, domain in self.domains.items():
            if KNOBS[name].is_active(values):
                bound = cap(name, values) if cap is not None and isinstance(domain, IntRange) else None
                value = held[name] if name in held else _suggest(trial, name, domain, bound)
                values[name] = value.pick(trial.number, name) if isinstance(value, Among) else value
        return Config(**values)


def _yaml(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else repr(value)


def resolve_space_path(space: str) -> Path:
    """A shipped space's name or a path to a YAML file."""
    path = Path(space)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path
    shipped = SPACES_DIR / f"{space}.yaml"
    if shipped.exists():
        return shipped
    known = ", ".join(sorted(p.stem for p in SPACES_DIR.glob("*.yaml")))
    raise ConfigError(f"--space {space!r}: no such file and no shipped space of that name; shipped: {known}")


def load_space(space: str) -> Space:
    """Load and validate a space by shipped name or path.

    Raises:
        ConfigError: the file, the key, the value and what is allowed, e.g.
            ``search_spaces/x.yaml: knobs.num_worker: unknown knob; known: ...``.
    """
    path = resolve_space_path(space)
    return space_from_mapping(read_yaml(path), str(path))


def space_from_mapping(data: Any, where: str) -> Space:
    """Validate the parsed YAML of a space file (see ``load_space``)."""
    if not isinstance(data, Mapping) or "knobs" not in data:
        raise ConfigError(f"{where}: a space file is a mapping with the key 'knobs'; got {data!r}")
    extra = sorted(set(data) - {"knobs"})
    if extra:
        raise ConfigError(f"{where}: {extra[0]}: unknown key; allowed: knobs")
    knobs = data["knobs"]
    if not isinstance(knobs, Mapping) or not knobs:
        raise ConfigError(f"{where}: knobs: must map knob names to values; got {knobs!r}")
    for name in knobs:
        if name not in KNOBS:
            raise ConfigError(f"{where}: knobs.{unknown_knob_message(name)}")
    domains = {name: _domain(knobs[name], name, f"{where}: knobs.{name}") for name in KNOBS if name in knobs}
    return Space(where, domains)


def _domain(raw: Any, name: str, where: str) -> Domain:
    knob = KNOBS[name]

    def check(value: Any) -> Any:
        try:
            return knob.validate(value)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    if isinstance(raw, list):
        if not raw:
            raise ConfigError(f"{where}: empty choice list; give at least one value ({knob.allowed()})")
        values = tuple(check(v) for v in raw)
        if len(set(values)) != len(values):
            raise ConfigError(f"{where}: duplicate choices in {raw!r}")
        return Choice(values) if len(values) > 1 else Fixed(values[0])
    if isinstance(raw, Mapping):
        if knob.kind not in ("int", "batch"):
            raise ConfigError(f"{where}: a range {{low, high}} needs an integer knob; {name} takes {knob.allowed()}")
        unknown = sorted(set(raw) - set(_RANGE_KEYS))
        if unknown or "low" not in raw or "high" not in raw:
            raise ConfigError(
                f"{where}: a range takes keys {', '.join(_RANGE_KEYS)} (low and high required); got {dict(raw)!r}"
            )
        low = check(_range_end(raw["low"], knob, where))
        high = check(_range_end(raw["high"], knob, where))
        log, step = raw.get("log", False), raw.get("step", 1)
        if not isinstance(log, bool):
            raise ConfigError(f"{where}.log: must be true or false; got {log!r}")
        if not isinstance(step, int) or isinstance(step, bool) or step < 1:
            raise ConfigError(f"{where}.step: must be an integer >= 1; got {step!r}")
        if low > high:
            raise ConfigError(f"{where}: low <= high must hold, but got (low={low}, high={high})")
        if log and (step != 1 or low < 1):
            raise ConfigError(f"{where}: log=true needs step=1 and low >= 1; got (low={low}, step={step})")
        return IntRange(low, high, log, step, auto=raw["high"] == "auto")
    return Fixed(check(raw))


def _range_end(value: Any, knob: Any, where: str) -> int:
    """A range end: an int, or for knobs relative to the CPU count ``auto``/``"Nx"``."""
    if isinstance(value, int):
        return value
    factor = 1.0 if value == "auto" else parse_relative(value)
    if factor is None or knob.relative_to != "usable CPUs":
        allowed = "integers" + (
            ", 'auto' or 'Nx' (N times the usable CPUs)" if knob.relative_to == "usable CPUs" else ""
        )
        raise ConfigError(f"{where}: {value!r} is not allowed as a range end; allowed: {allowed}")
    return max(1, math.floor(factor * usable_cpus()))
