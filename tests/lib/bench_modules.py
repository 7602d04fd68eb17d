"""Benchmarks' modules, imported in a test by their path: ``benchmarks/`` is no package, and its
modules import their shared helpers (``_results``, ``_host_load`` ...) by bare name."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def load_module(name: str, path: Path) -> ModuleType:
    """The module at ``path`` under ``name``, registered in ``sys.modules`` (its dataclasses look
    their module up), with ``benchmarks/`` on the path while it imports."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(BENCH))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module
