"""The training function, checked before any trial spawns: it exists, takes the Run, loops
over ``run.batches``, and does not sync the host every step.

A trial costs a process spawn and a torch import (seconds) before the user's code
runs; a mistake these checks can see from the source is answered in milliseconds.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from autotune._config import ConfigError, read_text

#: Tensor methods that copy to the host and wait for the device: once per step, they
#: stall a GPU's queue (the step's kernels must finish before Python goes on).
HOST_SYNCS = frozenset({"item", "cpu", "tolist", "numpy"})


def check_target(target: str) -> list[str]:
    """Check ``path/to/file.py:func`` or ``package.module:func`` without running it; return
    notes on what costs speed (per-step host syncs), each naming the file and line.

    Raises:
        ConfigError: the target is malformed; its file or function is missing; the name
            is a class; the function takes no argument (or needs more than the Run);
            or it never iterates ``run.batches`` and hands the Run to nothing that could.
    """
    module, sep, func = target.rpartition(":")
    if not sep or not module or not func.isidentifier():
        raise ConfigError(f"target {target!r}: expected path/to/file.py:function or "
                          "package.module:function")
    if not module.endswith(".py"):
        if importlib.util.find_spec(module.split(".")[0]) is None:
            raise ConfigError(f"target {target!r}: no module named {module.split('.')[0]!r}")
        return []
    path = Path(module)
    if not path.is_file():
        raise ConfigError(f"target {target!r}: no such file {module}")
    try:
        tree = ast.parse(read_text(path), filename=module)
    except SyntaxError as exc:
        raise ConfigError(f"target {target!r}: {module}, line {exc.lineno}: {exc.msg}") from None
    functions = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    assigned = {t.id for node in tree.body if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)}
    if func in classes:
        raise ConfigError(f"target {target!r}: {func} is a class in {module}; the target is the training "
                          "function that takes the Run, e.g. def train(run): ...")
    if func not in functions and func not in assigned:
        raise ConfigError(f"target {target!r}: {module} defines no top-level {func!r}; "
                          f"its functions: {', '.join(sorted(functions)) or 'none'}")
    node = functions.get(func)
    if node is None:  # assigned (a decorated or wrapped function): nothing more to see statically
        return []
    where = f"target {target!r}: {func}() ({module}, line {node.lineno})"
    run = _run_parameter(node, where)
    if run is not None and not _reaches_batches(tree, node, run):
        raise ConfigError(f"{where} never iterates {run}.batches(...) and passes {run} to no other function: "
                          f"autotune measures the loop through it. Write: for batch in {run}.batches(loader): ...")
    return _host_syncs(node, module)


def _run_parameter(node: ast.FunctionDef | ast.AsyncFunctionDef, where: str) -> str | None:
    """The name of the parameter that receives the Run (None: ``*args``)."""
    args = node.args
    positional = args.posonlyargs + args.args
    if not positional:
        if args.vararg is not None:
            return None
        raise ConfigError(f"{where} takes no argument; autotune calls it with one, the Run: "
                          f"def {node.name}(run): ...")
    required = len(positional) - len(args.defaults)
    if required > 1:
        names = [a.arg for a in positional[1:required]]
        raise ConfigError(f"{where} needs {required} arguments; autotune passes one, the Run: give "
                          f"{', '.join(names)} {'a default' if len(names) == 1 else 'defaults'}")
    required_kw = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    if required_kw:
        raise ConfigError(f"{where} needs keyword argument(s) {', '.join(required_kw)}; autotune passes "
                          "only the Run: give them defaults")
    return positional[0].arg


def _reaches_batches(tree: ast.Module, node: ast.AST, run: str) -> bool:
    """Whether the file calls ``.batches(`` anywhere, or the function hands the Run on (to a
    helper, a class, a closure's caller) where the call may be."""
    if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "batches"
           for n in ast.walk(tree)):
        return True
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            for arg in [*n.args, *(k.value for k in n.keywords)]:
                if isinstance(arg, ast.Name) and arg.id == run:
                    return True
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and n is not node:
            return True  # a nested function may use it: beyond what the source can say
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Name) and n.value.id == run:
            return True  # aliased
    return False


def _host_syncs(node: ast.AST, module: str) -> list[str]:
    """Notes for ``x.item()``, ``.cpu()``, ``.tolist()``, ``.numpy()`` inside a loop over
    ``*.batches(...)``: a host sync every step."""
    notes = []
    for loop in ast.walk(node):
        if not (isinstance(loop, (ast.For, ast.AsyncFor)) and isinstance(loop.iter, ast.Call)
                and isinstance(loop.iter.func, ast.Attribute) and loop.iter.func.attr == "batches"):
            continue
        for n in (n for stmt in loop.body for n in ast.walk(stmt)):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in HOST_SYNCS \
                    and not n.args:
                notes.append(f"{module}, line {n.lineno}: {ast.unparse(n)} inside the loop over "
                             f"{ast.unparse(loop.iter)} copies to the host every step, and on a GPU waits "
                             "for the step's kernels: read it every N steps (or once per epoch), in "
                             "production too; no knob can win that time back")
    return notes
