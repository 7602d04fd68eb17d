"""autotune: find the fastest safe way to feed and step your PyTorch training loop.

A training function takes a :class:`Run` and routes its DataLoader, optimizer,
batches and step through it. ``autotune run file.py:train`` tunes it with short
real trials (each a :class:`Trial` in its own process); the best config is
exported as YAML and loaded in production with :func:`load`::

    train(autotune.load("best.yaml"))

Only light modules are imported here: torch, optuna and mlflow load on use.
"""

from autotune._config import Config, ConfigError
from autotune._export import load
from autotune._knobs import KNOBS, Capability, Knob, Stage
from autotune._outcome import Outcome
from autotune._run import Recipe, Run

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "Trial":  # the worker's measuring side: production never loads it
        from autotune._trial import Trial

        return Trial
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")

__all__ = [
    "KNOBS",
    "Capability",
    "Config",
    "ConfigError",
    "Knob",
    "Outcome",
    "Recipe",
    "Run",
    "Stage",
    "Trial",
    "load",
]
