"""An unmodified script as a target: ``autotune run train.py -- ARGS`` (or ``-m package.module``).

The script runs as ``python train.py ARGS`` would run it, its own command line and all;
the config reaches it from outside (``autotune.training._hooks``): the DataLoaders and optimizers
it builds, and the backend flags, are set before its code runs; autocast, the prefetchers
and the model's memory format and compile act on its training loop from outside it too
(``autotune.training._outside``).
"""

from __future__ import annotations

import ast
import importlib.util
import runpy
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from autotune.core._config import ConfigError, read_text
from autotune.core._knobs import Stage

#: What an unmodified script gets: every stage, applied from outside its code.
SCRIPT_STAGES = frozenset(Stage)
#: How each stage reaches an unmodified script (``autotune doctor`` says it knob by knob).
SCRIPT_WAYS = {
    Stage.DATALOADER: "every DataLoader it builds, over its own arguments",
    Stage.TRANSFER: "its training loader's batches, moved ahead to its trained parameters' device",
    Stage.OPTIMIZER: "every torch.optim optimizer it builds",
    Stage.PRECISION: "autocast from its training batch to backward(), fp16 through a GradScaler "
    "(Lightning, the HF Trainer: their own precision setting)",
    Stage.MODEL: "its model (the module called with the parameters an optimizer trains), in place",
    Stage.BACKENDS: "set before it runs",
    Stage.ENVIRONMENT: "set before torch starts",
}
#: The prefix of a module target: ``-m package.module``.
MODULE = "-m "
#: The option of a job on several ranks, as a study's target and an export's header name it.
NPROC = "--nproc-per-node"


def module_of(target: str) -> str | None:
    """The module of a ``-m package.module`` target, or None for a script's path."""
    return target[len(MODULE) :].strip() if target.startswith(MODULE) else None


def is_script(target: str) -> bool:
    """Whether ``target`` is a script (``train.py``, ``-m package.module``), not a function
    that takes the Run (``train.py:train``, ``package.module:train``)."""
    return target.startswith(MODULE) or ":" not in target


def label(target: str, argv: Sequence[str] = ()) -> str:
    """The target as a command line: what a study tunes, and the name its records keep."""
    return " -- ".join(filter(None, [target, shlex.join(argv)]))


def study_name(target: str) -> str:
    """``path/train.py`` -> ``train``; ``-m package.module`` -> ``module``."""
    module = module_of(target)
    return Path(target).stem if module is None else module.rsplit(".", 1)[-1]


def check_script(target: str) -> None:
    """Check a script target without running it.

    Raises:
        ConfigError: the file does not exist or does not parse; the module cannot be found.
    """
    module = module_of(target)
    if module is not None:
        if not module or not all(part.isidentifier() for part in module.split(".")):
            raise ConfigError(f"-m {module!r}: expected a module name, e.g. -m package.train")
        try:
            found = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            found = None
        if found is None:
            raise ConfigError(f"-m {module}: no module named {module!r} (from {Path.cwd()})")
        return
    path = Path(target)
    if not path.is_file():
        raise ConfigError(
            f"script {target}: no such file"
            + (
                "; a training function that takes the Run is named file.py:function"
                if not target.endswith(".py")
                else ""
            )
        )
    try:
        ast.parse(read_text(path), filename=target)
    except SyntaxError as exc:
        raise ConfigError(f"script {target}, line {exc.lineno}: {exc.msg}") from None


class ScriptExited(Exception):
    """The script called ``sys.exit`` with a failing status (argparse does, on a bad command line).

    Attributes:
        status: What it passed to ``sys.exit``.
    """

    def __init__(self, message: str, status: object) -> None:
        super().__init__(message)
        self.status = status


class NotTunable(Exception):
    """The script ran but gave autotune nothing to measure: it built no DataLoader, took no batch,
    stepped no optimizer, or ended before one measured window. Bad input, said in one line."""


#: The errors of a script's baseline that are the input's, not the code's (exit status 2, one line).
BAD_INPUT = (ScriptExited.__name__, NotTunable.__name__)


def run_script(target: str, argv: Sequence[str]) -> str:
    """Run the script as ``python SCRIPT ARGS`` (or ``python -m MODULE ARGS``) would, in this process.

    Returns:
        The last lines it printed (stdout and stderr), joined by " / ".

    Raises:
        ScriptExited: it exited with a non-zero status; its own message is in its output.
    """
    module = module_of(target)
    if module is not None:
        sys.argv = [module, *argv]
        call = lambda: runpy.run_module(module, run_name="__main__", alter_sys=True)  # noqa: E731
    else:
        path = Path(target).resolve()
        sys.argv = [str(path), *argv]
        sys.path.insert(0, str(path.parent))  # as python puts the script's folder first
        call = lambda: runpy.run_path(str(path), run_name="__main__")  # noqa: E731
    out, err = sys.stdout, sys.stderr
    kept = _Kept()
    sys.stdout, sys.stderr = _Tail(out, kept), _Tail(err, kept)
    try:
        call()
    except SystemExit as exc:
        if exc.code not in (None, 0):
            said = kept.lines(3)
            raise ScriptExited(
                f"{label(target, argv)} exited with status {exc.code!r}"
                + (f"; its last words: {said}" if said else ""),
                exc.code,
            ) from None
    finally:
        sys.stdout, sys.stderr = out, err
    return kept.lines(3)


class _Kept:
    """The last characters written to the streams a script prints on: argparse says what was wrong
    on stderr, then exits; a script that ends early said why on stdout."""

    KEEP = 4000

    def __init__(self) -> None:
        self.text = ""

    def lines(self, n: int) -> str:
        """The last ``n`` lines the script printed (autotune's own log lines left out)."""
        said = [line.strip() for line in self.text.splitlines() if line.strip() and not line.startswith("autotune: ")]
        return " / ".join(said[-n:])


class _Tail:
    """Passes a stream's writes on, and keeps their end in ``kept``."""

    def __init__(self, stream, kept: _Kept) -> None:
        self.stream, self.kept = stream, kept

    def write(self, text: str) -> int:
        self.kept.text = (self.kept.text + text)[-_Kept.KEEP :]
        return self.stream.write(text)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def command_line(target: str | None, args: tuple[str, ...], module: str | None) -> tuple[str, list[str] | None]:
    """The target and a script's command line (None: a function's), from ``run``'s or ``exec``'s
    arguments: ``TARGET [ARGS]`` or ``-m MODULE [ARGS]``."""
    if module is not None:
        return MODULE + module, [target, *args] if target is not None else list(args)
    if target is None:
        raise ConfigError(
            "TARGET: missing; give a script (train.py -- ARGS), -m package.module, "
            "or a function that takes the Run (file.py:train)"
        )
    if is_script(target):
        return target, list(args)
    if args:
        raise ConfigError(
            f"{' '.join(args)}: {target} is a function that takes the Run; a command line "
            "after -- is for a script (train.py -- ARGS)"
        )
    return target, None
