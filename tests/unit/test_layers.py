"""The package's layers (issue 52): each subpackage of ``autotune`` imports only the ones its
``__init__`` names, none imports the command line or the Python entry points on top, and no module
is left at the top but those. Imports under ``if TYPE_CHECKING:`` are types only, never run, and
are not counted."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import autotune

PACKAGE = Path(autotune.__file__).parent
#: What each layer may import, lowest first (the top, autotune's own modules, may import any).
LAYERS = {
    "core": set(),
    "stores": {"core"},
    "machine": {"core"},
    "training": {"core", "machine"},
    "worker": {"core", "machine", "training"},
    "production": {"core", "machine", "stores", "training"},
    "tuner": {"core", "machine", "stores", "training", "worker", "production"},
}
TOP = {"__init__", "__main__", "_api", "_cli", "_moved", "_result", "_show", "_terminal"}


def imports_of(path: Path) -> list[tuple[int, str]]:
    """The autotune modules ``path`` imports when it runs: (line, dotted name)."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for part in child.orelse:
                    visit(part)
                continue
            if isinstance(child, ast.ImportFrom) and child.module and child.module.split(".")[0] == "autotune":
                found.extend(
                    (child.lineno, f"{child.module}.{a.name}" if child.module == "autotune" else child.module)
                    for a in child.names
                )
            elif isinstance(child, ast.Import):
                found.extend((child.lineno, a.name) for a in child.names if a.name.split(".")[0] == "autotune")
            visit(child)

    visit(ast.parse(path.read_text(), filename=str(path)))
    return found


def layer_of(name: str) -> str | None:
    """``autotune.tuner._watch`` -> ``tuner``; a top module or the package itself -> None."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def test_the_top_holds_only_the_entry_points_and_the_layers() -> None:
    top = {p.stem for p in PACKAGE.glob("*.py")}
    assert top == TOP, f"modules at autotune's top that belong in a layer: {sorted(top - TOP)}"
    # (autotune.spaces is search_spaces/, which the wheel installs there: not a folder of the source tree)
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == set(LAYERS)


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_a_layer_imports_only_the_layers_below_it(layer: str) -> None:
    wrong = []
    for path in sorted((PACKAGE / layer).glob("*.py")):
        for line, name in imports_of(path):
            target = layer_of(name)
            if target is None and name not in ("autotune", f"autotune.{layer}"):
                wrong.append(f"{path.name}:{line} imports {name} (autotune's top: only the entry points import it)")
            elif target not in (None, layer) and target not in LAYERS[layer]:
                wrong.append(
                    f"{path.name}:{line} imports {name} (layer {target}; {layer} may import "
                    f"{', '.join(sorted(LAYERS[layer])) or 'nothing of autotune'})"
                )
    assert not wrong, f"autotune.{layer}: " + "; ".join(wrong)


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_each_layer_says_its_job_and_what_it_may_import(layer: str) -> None:
    doc = importlib.import_module(f"autotune.{layer}").__doc__ or ""
    named = {part.strip("`., ") for part in doc.split("May import:", 1)[-1].split()}
    assert "May import:" in doc and len(doc.split("May import:")[0].split()) >= 10, doc
    assert {n.removeprefix("autotune.") for n in named if n.startswith("autotune.")} == LAYERS[layer]


def test_the_layering_check_sees_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "bad.py"
    module.write_text(
        "from autotune.tuner._watch import run_trial\nif TYPE_CHECKING:\n"
        "    from autotune.tuner._records import TrialRow\n"
        "def f():\n    from autotune import _api\n"
    )
    assert imports_of(module) == [(1, "autotune.tuner._watch"), (5, "autotune._api")]
    assert layer_of("autotune.tuner._watch") == "tuner" and "tuner" not in LAYERS["core"]


def test_an_old_module_path_still_imports_the_module_with_a_warning() -> None:
    import sys

    sys.modules.pop("autotune._watch", None)
    with pytest.warns(
        DeprecationWarning,
        match=r"autotune._watch has moved to autotune.tuner._watch; import it from there \(the old path is removed in 0\.2\.0\)",
    ):
        old = importlib.import_module("autotune._watch")
    assert old is importlib.import_module("autotune.tuner._watch")


def test_exec_loads_none_of_the_tuner_nor_the_study() -> None:
    """``autotune exec`` runs in the user's process: the command line and the modules its path
    imports load none of the tuner (its option groups but the flag helpers), the worker, optuna,
    mlflow or rich; ``autotune run``'s flags still come from the option groups."""
    import subprocess
    import sys

    code = (
        "import sys, autotune._cli as cli; cli.cli.get_command(None, 'exec'); "
        "import autotune.production._exec, autotune.production._export, autotune.training._hooks, "
        "autotune.training._ranks, autotune.machine._probe; loaded = sorted(sys.modules); "
        "heavy = ('autotune.worker', 'optuna', 'mlflow', 'rich', 'sqlalchemy', 'pandas', 'torch'); "
        "print([m for m in loaded if m.startswith(heavy) or (m.startswith('autotune.tuner.') and "
        "m not in ('autotune.tuner._option_fields', 'autotune.tuner._option_flags'))]); "
        "print(len(cli.cli.get_command(None, 'run').params) > 30, 'autotune.tuner._option_groups' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines() == ["[]", "True True"], done.stderr
