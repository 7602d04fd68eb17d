"""Config: one value per knob, frozen; ``None`` means "as the user's code has it"."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from autotune.core._knobs import KNOBS

#: The release that removes what is deprecated now: ``tune()``'s flat keyword arguments, the
#: modules' old paths (``autotune._moved``), ``Recipe``'s adaptation keywords.
REMOVED_IN = "0.2.0"


class ConfigError(ValueError):
    """Bad user input (a space file, an exported YAML, a CLI argument).

    The message names the file or argument, the key, the value and what is allowed;
    the CLI turns it into exit status 2.
    """


def read_text(path: Path) -> str:
    """A user's file as UTF-8 text; an unreadable or undecodable one is a ConfigError naming it."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}: line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); save it as UTF-8"
        ) from None


def read_yaml(path: Path) -> Any:
    """``yaml.safe_load`` a user's file; an unreadable or invalid one, or one with a key twice
    in a mapping (YAML keeps the last silently), is a ConfigError naming it."""
    import yaml

    text = read_text(path)
    try:
        return yaml.load(text, Loader=_unique_keys_loader())  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    except _DuplicateKey as exc:
        raise ConfigError(f"{path}: line {exc.line}: {exc.key!r} appears twice in one mapping; keep one") from None


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int) -> None:
        super().__init__(key)
        self.key, self.line = key, line


def _unique_keys_loader():
    """A SafeLoader that refuses a key given twice in one mapping."""
    import yaml

    class UniqueKeys(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if key in seen:
                    raise _DuplicateKey(key, key_node.start_mark.line + 1)
                seen.add(key)
            return super().construct_mapping(node, deep)

    return UniqueKeys


def _as_dict(self) -> dict[str, Any]:
    """Every knob's value, in registry order (``None`` = the user's own / PyTorch's)."""
    return dataclasses.asdict(self)


def _set_values(self) -> dict[str, Any]:
    """Only the knobs this config sets."""
    return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


if TYPE_CHECKING:
    # What the type checker sees: the fields are made at run time from the registry, so a knob
    # reads as Any here rather than being listed a second time.
    class Config:
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

        def __init__(self, **knobs: Any) -> None: ...
        def __getattr__(self, name: str) -> Any: ...
        def as_dict(self) -> dict[str, Any]: ...
        def set_values(self) -> dict[str, Any]: ...
else:
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
