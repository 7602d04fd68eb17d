"""The best config as a YAML snippet, and loading it back as a Recipe."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune._config import Config, ConfigError, read_yaml
from autotune._knobs import KNOBS, Stage, unknown_knob_message
from autotune._run import Recipe

#: The one key of an export that is not a knob: the batch size the lr was written for.
BASE_BATCH_KEY = "base_batch_size"


def render(resolved: Mapping[str, Any], base_batch_size: int | None, header: list[str]) -> str:
    """A YAML snippet: one flow mapping per stage, comment lines first.

    Args:
        resolved: Every active knob's effective value (absolute batch size).
        base_batch_size: The user's own batch size (the base of lr scaling).
        header: Comment lines (without "# ").
    """
    import yaml

    sections: dict[str, dict[str, Any]] = {}
    for name, value in resolved.items():
        sections.setdefault(KNOBS[name].stage.value, {})[name] = value
    if base_batch_size is not None:
        sections.setdefault(Stage.OPTIMIZER.value, {})[BASE_BATCH_KEY] = base_batch_size
    lines = [f"# {line}" for line in header]
    for stage in Stage:
        if stage.value in sections:
            body = yaml.safe_dump(sections[stage.value], default_flow_style=True, sort_keys=False,
                                  width=1 << 16).strip()
            lines.append(f"{stage.value}: {body}")
    return "\n".join(lines) + "\n"


def recipe_from_mapping(data: Any, where: str, device: Any = "auto") -> Recipe:
    """Validate a parsed export (same rules as a space file) and build its Recipe."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: an autotune export is a mapping of sections "
                          f"({', '.join(s.value for s in Stage)}); got {data!r}")
    values: dict[str, Any] = {}
    base = None
    for section, body in data.items():
        if section not in {s.value for s in Stage}:
            raise ConfigError(f"{where}: {section}: unknown section; allowed: "
                              f"{', '.join(s.value for s in Stage)}")
        if not isinstance(body, Mapping):
            raise ConfigError(f"{where}: {section}: must be a mapping of knob: value; got {body!r}")
        for key, value in body.items():
            if section == Stage.OPTIMIZER.value and key == BASE_BATCH_KEY:
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise ConfigError(f"{where}: {section}.{key}: must be an integer >= 1; "
                                      f"got {value!r}")
                base = value
                continue
            if key not in KNOBS:
                raise ConfigError(f"{where}: {section}.{unknown_knob_message(key)}")
            if KNOBS[key].stage.value != section:
                raise ConfigError(f"{where}: {section}.{key}: {key} belongs in section "
                                  f"{KNOBS[key].stage.value}")
            try:
                values[key] = KNOBS[key].validate(value)
            except ValueError as exc:
                raise ConfigError(f"{where}: {section}.{key}: {exc}") from None
    return Recipe(Config(**values), device, base_batch_size=base)


def load(path: str | Path | None = None, device: Any = "auto") -> Recipe:
    """Load an exported YAML as a Recipe for production training.

    ``load()`` with no path gives the baseline: the code as written, PyTorch's
    defaults for the rest.

    Example:
        >>> train(autotune.load("best.yaml"))

    Raises:
        ConfigError: the file, the key, the value and what is allowed.
    """
    if path is None:
        return recipe_from_mapping({}, "defaults", device)
    return recipe_from_mapping(read_yaml(Path(path)), str(path), device)
