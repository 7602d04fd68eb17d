"""The examples in the package's docstrings run as written (the rules' doctests: ``_guard``,
``_profile``, ``_records`` ...): one test per module that has any."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import autotune

MODULES = sorted(
    name
    for _, name, _ in pkgutil.walk_packages(autotune.__path__, "autotune.")
    if name not in ("autotune.__main__", "autotune.worker._trial_main", "autotune._moved")
)


@pytest.mark.parametrize("name", MODULES)
def test_the_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    failed, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert failed == 0, f"{name}: {failed} docstring example(s) failed (run: python -m doctest -v {module.__file__})"
