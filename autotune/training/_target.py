"""The training function, checked before any trial spawns: it exists, takes the Run, loops
over ``run.batches``, and does not sync the host every step.

A trial costs a process spawn and a torch import (seconds) before the user's code
runs; a mistake these checks can see from the source is answered in milliseconds.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from autotune.core._config import ConfigError, read_text

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
        raise ConfigError(f"target {target!r}: expected path/to/file.py:function or package.module:function")
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
    assigned = {
        t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)
    }
    if func in classes:
        raise ConfigError(
            f"target {target!r}: {func} is a class in {module}; the target is the training "
            "function that takes the Run, e.g. def train(run): ..."
        )
    if func not in functions and func not in assigned:
        raise ConfigError(
            f"target {target!r}: {module} defines no top-level {func!r}; "
            f"its functions: {', '.join(sorted(functions)) or 'none'}"
        )
    parsed = _parses_at_import(tree)
    if parsed is not None:
        raise ConfigError(
            f"target {target!r}: {module}, line {parsed} parses the command line when imported "
            "(argparse at module level): each trial imports it, and argparse would exit it. Tune "
            f"it as the script it is: autotune run {module} -- ARGS; or move that line under "
            'if __name__ == "__main__":'
        )
    node = functions.get(func)
    if node is None:  # assigned (a decorated or wrapped function): nothing more to see statically
        return []
    where = f"target {target!r}: {func}() ({module}, line {node.lineno})"
    try:
        run = _run_parameter(node, where)
    except ConfigError as exc:
        if not _has_main_guard(tree):
            raise
        raise ConfigError(f"{exc}; or tune the script as it is, unmodified: autotune run {module} -- ARGS") from None
    if run is not None and not _reaches_batches(tree, node, run):
        raise ConfigError(
            f"{where} never iterates {run}.batches(...) and passes {run} to no other function: "
            f"autotune measures the loop through it. Write: for batch in {run}.batches(loader): ..."
        )
    return _host_syncs(node, module)


def _run_parameter(node: ast.FunctionDef | ast.AsyncFunctionDef, where: str) -> str | None:
    """The name of the parameter that receives the Run (None: ``*args``)."""
    args = node.args
    positional = args.posonlyargs + args.args
    if not positional:
        if args.vararg is not None:
            return None
        raise ConfigError(f"{where} takes no argument; autotune calls it with one, the Run: def {node.name}(run): ...")
    required = len(positional) - len(args.defaults)
    if required > 1:
        names = [a.arg for a in positional[1:required]]
        raise ConfigError(
            f"{where} needs {required} arguments; autotune passes one, the Run: give "
            f"{', '.join(names)} {'a default' if len(names) == 1 else 'defaults'}"
        )
    required_kw = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    if required_kw:
        raise ConfigError(
            f"{where} needs keyword argument(s) {', '.join(required_kw)}; autotune passes "
            "only the Run: give them defaults"
        )
    return positional[0].arg


def _reaches_batches(tree: ast.Module, node: ast.AST, run: str) -> bool:
    """Whether the file calls ``.batches(`` anywhere, or the function hands the Run on (to a
    helper, a class, a closure's caller) where the call may be."""
    if any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "batches"
        for n in ast.walk(tree)
    ):
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
    """Notes for ``x.item()``, ``.cpu()``, ``.tolist()``, ``.numpy()`` in a loop over
    ``*.batches(...)`` (direct, wrapped as ``enumerate(run.batches(...))`` or ``tqdm(...)``, through
    a name bound to it, or a ``while`` loop calling ``next()`` on one): a host sync every step.
    One under ``if step % N == 0`` runs every N steps, which is what to do: not noted."""

    def has_batches(expr: ast.AST) -> bool:
        return any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "batches"
            for n in ast.walk(expr)
        )

    bound = {
        t.id
        for n in ast.walk(node)
        if isinstance(n, ast.Assign) and has_batches(n.value)
        for t in n.targets
        if isinstance(t, ast.Name)
    }

    def over_batches(loop: ast.AST) -> str | None:
        if isinstance(loop, (ast.For, ast.AsyncFor)) and (
            has_batches(loop.iter) or any(isinstance(n, ast.Name) and n.id in bound for n in ast.walk(loop.iter))
        ):
            return ast.unparse(loop.iter)
        if isinstance(loop, ast.While):
            for n in (n for stmt in loop.body for n in ast.walk(stmt)):
                if (
                    isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Name)
                    and n.func.id == "next"
                    and n.args
                    and isinstance(n.args[0], ast.Name)
                    and n.args[0].id in bound
                ):
                    return f"next({n.args[0].id})"
        return None

    def calls_in(value: object) -> list[ast.Call]:
        values = value if isinstance(value, list) else [value]
        return [n for v in values if isinstance(v, ast.AST) for n in ast.walk(v) if isinstance(n, ast.Call)]

    def every_step(stmts: list[ast.stmt]) -> list[ast.Call]:
        calls = []
        for stmt in stmts:
            if isinstance(stmt, ast.If) and any(
                isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(stmt.test)
            ):
                calls += every_step(stmt.orelse)  # its body runs every N steps
                continue
            if not isinstance(getattr(stmt, "body", None), list):
                calls += calls_in(stmt)
                continue
            for field, value in ast.iter_fields(stmt):  # a compound statement: its header, then its blocks
                if field in ("body", "orelse", "finalbody"):
                    calls += every_step(value)
                elif field == "handlers":
                    calls += every_step([b for h in value for b in h.body])
                else:
                    calls += calls_in(value)
        return calls

    notes = []
    for loop in ast.walk(node):
        over = over_batches(loop)
        if over is None or not isinstance(loop, (ast.For, ast.AsyncFor, ast.While)):  # (over: one of them)
            continue
        for n in every_step(loop.body):
            if isinstance(n.func, ast.Attribute) and n.func.attr in HOST_SYNCS and not n.args:
                notes.append(
                    f"{module}, line {n.lineno}: {ast.unparse(n)} inside the loop over "
                    f"{over} copies to the host every step, and on a GPU waits "
                    "for the step's kernels: read it every N steps (or once per epoch), in "
                    "production too; no knob can win that time back"
                )
    return notes


def _is_main_guard(node: ast.stmt) -> bool:
    """``if __name__ == "__main__":``"""
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
    )


def _has_main_guard(tree: ast.Module) -> bool:
    return any(_is_main_guard(node) for node in tree.body)


def _parses_at_import(tree: ast.Module) -> int | None:
    """The line of a ``parse_args()`` (or ``parse_known_args()``) call that runs on import, if any:
    outside every function, class and ``if __name__ == "__main__":``."""

    def found(node: ast.AST) -> int | None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return None
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("parse_args", "parse_known_args")
        ):
            return node.lineno
        return next(filter(None, map(found, ast.iter_child_nodes(node))), None)

    return next(filter(None, (found(stmt) for stmt in tree.body if not _is_main_guard(stmt))), None)
