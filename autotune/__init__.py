"""autotune: find the fastest safe way to feed and step your PyTorch training loop.

A training function takes a :class:`Run` and routes its DataLoader, optimizer,
batches and step through it. ``autotune run file.py:train`` (or, from Python,
:func:`tune`, which returns a :class:`Result`) tunes it with short
real trials (each a :class:`Trial` in its own process); the best config is
exported as YAML and loaded in production with :func:`load`::

    train(autotune.load("best.yaml"))

Only light modules are imported here: torch, optuna and mlflow load on use.
"""

from autotune._config import Config, ConfigError
from autotune._export import load
from autotune._knobs import KNOBS, Capability, Knob, Stage
from autotune._outcome import Outcome
from autotune._handles import Run
from autotune._recipe import Recipe

__version__ = "0.1.0"


def __getattr__(name: str):
    # Loaded on use: production never loads the worker's measuring side, nor the study
    if name == "Trial":
        from autotune._trial import Trial

        return Trial
    if name in ("tune", "Result"):
        from autotune import _api

        return getattr(_api, name)
    if name in ("BaselineFailed", "Reporter"):
        from autotune import _options

        return getattr(_options, name)
    if name == "StoreDown":
        from autotune._stores import StoreDown

        return StoreDown
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")

__all__ = [
    "KNOBS",
    "BaselineFailed",
    "Capability",
    "Config",
    "ConfigError",
    "Knob",
    "Outcome",
    "Recipe",
    "Reporter",
    "Result",
    "Run",
    "Stage",
    "StoreDown",
    "Trial",
    "load",
    "tune",
]
