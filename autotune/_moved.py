"""The modules' old paths, before they moved into subpackages or were renamed: ``autotune._watch`` is
``autotune.tuner._watch`` now. Importing an old path gives the module at its new one, the same object,
with a DeprecationWarning that names it; nothing stored in a study names a module, so only code that
imported autotune's private modules sees this.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Any

from autotune.core._config import REMOVED_IN

MOVED = {
    "autotune._adapt": "autotune.production._adapt",
    "autotune._adapt_rule": "autotune.production._adapt_rule",
    "autotune._bounds": "autotune.core._bounds",
    "autotune._ceiling_run": "autotune.tuner._ceiling_run",
    "autotune._ceilings": "autotune.core._ceilings",
    "autotune._config": "autotune.core._config",
    "autotune._confirm": "autotune.tuner._confirm",
    "autotune._events": "autotune.core._events",
    "autotune._exec": "autotune.production._exec",
    "autotune._exits": "autotune.stores._exits",
    "autotune._export": "autotune.production._export",
    "autotune._figures": "autotune.machine._figures",
    "autotune._finish": "autotune.tuner._finish",
    "autotune._framework_knobs": "autotune.training._framework_knobs",
    "autotune._frameworks": "autotune.training._frameworks",
    "autotune._guard": "autotune.core._guard",
    "autotune._handles": "autotune.training._handles",
    "autotune._hooks": "autotune.training._hooks",
    "autotune._judge": "autotune.tuner._judge",
    "autotune._kinds": "autotune.core._kinds",
    "autotune._knobs": "autotune.core._knobs",
    "autotune._launch": "autotune.machine._launch",
    "autotune._loader_workers": "autotune.tuner._loader_workers",
    "autotune._loaders": "autotune.core._loaders",
    "autotune._malloc": "autotune.machine._malloc",
    "autotune._margin": "autotune.machine._margin",
    "autotune._memline": "autotune.core._memline",
    "autotune._monitor": "autotune.machine._monitor",
    "autotune._noise": "autotune.machine._noise",
    "autotune._options": "autotune.tuner._options",
    "autotune._optuna_io": "autotune.stores._optuna_io",
    "autotune._outcome": "autotune.core._outcome",
    "autotune._outside": "autotune.training._outside",
    "autotune._outside_amp": "autotune.training._outside_amp",
    "autotune._outside_model": "autotune.training._outside_model",
    "autotune._planner": "autotune.tuner._planner",
    "autotune._precision": "autotune.tuner._precision",
    "autotune._prefetch": "autotune.training._prefetch",
    "autotune._probe": "autotune.machine._probe",
    "autotune._proctree": "autotune.machine._proctree",
    "autotune._prodlog": "autotune.production._prodlog",
    "autotune._profile": "autotune.worker._profile",
    "autotune._profiling": "autotune.tuner._profiling",
    "autotune._queue": "autotune.tuner._queue",
    "autotune._ranks": "autotune.training._ranks",
    "autotune._reap": "autotune.machine._reap",
    "autotune._recipe": "autotune.production._recipe",
    "autotune._recorder": "autotune.tuner._recorder",
    "autotune._records": "autotune.stores._records",
    "autotune._report": "autotune.tuner._report",
    "autotune._scheduler": "autotune.tuner._scheduler",
    "autotune._schema": "autotune.stores._schema",
    "autotune._script": "autotune.training._script",
    "autotune._script_trial": "autotune.worker._script_trial",
    "autotune._shape": "autotune.tuner._training_shape",
    "autotune.tuner._shape": "autotune.tuner._training_shape",
    "autotune._slots": "autotune.machine._slots",
    "autotune._space": "autotune.tuner._space",
    "autotune._space_now": "autotune.tuner._space_now",
    "autotune._standing": "autotune.tuner._standing",
    "autotune._stores": "autotune.stores._stores",
    "autotune._streams": "autotune.worker._streams",
    "autotune._stretch": "autotune.worker._marks",
    "autotune.worker._stretch": "autotune.worker._marks",
    "autotune._study": "autotune.tuner._study",
    "autotune._target": "autotune.training._target",
    "autotune._to_loss": "autotune.core._to_loss",
    "autotune._tracking": "autotune.stores._tracking",
    "autotune._trial": "autotune.worker._trial",
    "autotune._trial_main": "autotune.worker._trial_main",
    "autotune._trial_phases": "autotune.worker._trial_phases",
    "autotune._tuners": "autotune.tuner._tuners",
    "autotune._warm": "autotune.worker._warm",
    "autotune._warm_start": "autotune.tuner._warm_start",
    "autotune._watch": "autotune.tuner._watch",
    "autotune._window": "autotune.worker._window",
}


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> Any:
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} has moved to {new}; import it from there (the old path is removed in {REMOVED_IN})",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(new)

    def exec_module(self, module: Any) -> None:
        """(the module at its new path has run already)"""


def install() -> None:
    """Let the old paths import (once per process)."""
    if not any(isinstance(finder, _Moved) for finder in sys.meta_path):
        sys.meta_path.append(_Moved())
