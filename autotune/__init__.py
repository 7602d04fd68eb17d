"""autotune: find the fastest safe way to feed and step your PyTorch training loop.

A training function takes a :class:`Run` and routes its DataLoader, optimizer,
batches and step through it. ``autotune run file.py:train`` (or, from Python,
:func:`tune`, which returns a :class:`Result`) tunes it with short
real trials (each a :class:`Trial` in its own process); the best config is
exported as YAML and loaded in production with :func:`load`::

    train(autotune.load("best.yaml"))

Only light modules are imported here: torch, optuna and mlflow load on use.

The package is in layers, each a subpackage whose ``__init__`` says what it is for and what it may
import: ``core`` (the shared vocabulary), ``stores``, ``machine``, ``training`` (the user's training
process), ``worker`` (a trial's side), ``production``, ``tuner``; the command line and the Python
entry points (``_cli``, ``_api``, ``_result``, ``_show``, ``_terminal``) sit on top.
"""

from autotune import _moved
from autotune.core._config import Config, ConfigError
from autotune.core._knobs import KNOBS, Capability, Knob, Stage
from autotune.core._outcome import Outcome
from autotune.production._export import load
from autotune.production._recipe import Adaptation, Recipe
from autotune.training._handles import Run

_moved.install()  # (the modules' paths before the subpackages keep importing, with a warning)

__version__ = "0.1.0"


#: The groups ``tune(options=...)`` takes: ``Options`` holds the others.
_OPTION_GROUPS = ("Options", "Measure", "Limits", "Noise", "Judge", "Stores")


def __getattr__(name: str):
    # Loaded on use: production never loads the worker's measuring side, nor the study
    if name == "Trial":
        from autotune.worker._trial import Trial

        return Trial
    if name in ("tune", "Result"):
        from autotune import _api

        return getattr(_api, name)
    if name in _OPTION_GROUPS:  # each option's one definition: its default, bounds and help
        from autotune.tuner import _option_groups

        return getattr(_option_groups, name)
    if name in ("BaselineFailed", "Reporter"):
        from autotune.tuner import _options

        return getattr(_options, name)
    if name == "StoreDown":
        from autotune.stores._stores import StoreDown

        return StoreDown
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")


__all__ = [
    "KNOBS",
    "Adaptation",
    "BaselineFailed",
    "Capability",
    "Config",
    "ConfigError",
    "Judge",
    "Knob",
    "Limits",
    "Measure",
    "Noise",
    "Options",
    "Outcome",
    "Recipe",
    "Reporter",
    "Result",
    "Run",
    "Stage",
    "StoreDown",
    "Stores",
    "Trial",
    "load",
    "tune",
]
