"""Public docstrings name public things only (issue 60): a user reads ``help(autotune.tune)`` or the
API page, where a private module's path means nothing and moves with the next refactor."""

from __future__ import annotations

import inspect
import re

import autotune

PRIVATE = re.compile(r"autotune(?:\.\w+)*\._\w+")


def public_docs() -> dict[str, str]:
    """Every docstring of ``autotune.__all__``: its objects' and their public methods'."""
    docs = {}
    for name in autotune.__all__:
        obj = getattr(autotune, name)
        docs[name] = inspect.getdoc(obj) or ""
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if not attr.startswith("_") and (callable(member) or isinstance(member, property)):
                    docs[f"{name}.{attr}"] = inspect.getdoc(member) or ""
    return docs


def test_no_public_docstring_names_a_private_module() -> None:
    named = {where: sorted(set(PRIVATE.findall(doc))) for where, doc in public_docs().items()}
    assert {where: found for where, found in named.items() if found} == {}
    assert len(named) > 40  # (every public name and method read)
