"""Config: one value per knob, frozen; ``None`` means "as the user's code has it"."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from autotune._knobs import KNOBS


class ConfigError(ValueError):
    """Bad user input (a space file, an exported YAML, a CLI argument).

    The message names the file or argument, the key, the value and what is allowed;
    the CLI turns it into exit status 2.
    """


def read_yaml(path: Path) -> Any:
    """``yaml.safe_load`` a user's file; an unreadable or invalid one is a ConfigError naming it."""
    import yaml

    try:
        return yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None


def _as_dict(self) -> dict[str, Any]:
    """Every knob's value, in registry order (``None`` = the user's own / PyTorch's)."""
    return dataclasses.asdict(self)


def _set_values(self) -> dict[str, Any]:
    """Only the knobs this config sets."""
    return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


# The fields come from the registry, so a new knob needs no edit here.
Config = dataclasses.make_dataclass(
    "Config",
    [(name, Any, dataclasses.field(default=None)) for name in KNOBS],
    frozen=True,
    namespace={"as_dict": _as_dict, "set_values": _set_values},
)
Config.__doc__ = """The frozen value of every knob for one run.

A field left ``None`` keeps what the user's code passes (or PyTorch's default):
``Config()`` is the baseline.

Example:
    >>> Config(num_workers=4).num_workers
    4
"""
