"""The loop knobs of a script that trains through a framework, set through the framework's own
settings: Lightning's ``Trainer(precision=...)`` and the Hugging Face ``TrainingArguments``
(``bf16``/``fp16``, ``torch_compile``). The framework then enters autocast, scales the loss and
compiles the model itself, as it would for a user who set them; ours stands aside for those knobs.

The framework's modules are patched when the script imports them (an import hook; at once where
they are already imported), and the patches go with the rest of the hooks. A setting the script
passes itself wins: its own precision is what runs, and the study stops drawing the knob.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import inspect
import sys
from collections.abc import Callable
from typing import Any

#: The ``amp`` knob in Lightning's words.
LIGHTNING_PRECISION = {"bf16": "bf16-mixed", "fp16": "16-mixed"}
#: Lightning's precisions that are full fp32 (what a Trainer left at its default trains in).
_FULL = (None, 32, "32", "32-true")
_TRAINERS = ("lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer")
_TRAINING_ARGUMENTS = "transformers.training_args"

Patch = Callable[[Any, str, Callable[[Callable[..., Any]], Callable[..., Any]]], None]


def lightning_own(precision: Any) -> str:
    """The ``amp`` a Lightning precision the script passes itself means (``off``: no mixed precision).

    >>> lightning_own("bf16-mixed"), lightning_own(16), lightning_own("32-true"), lightning_own("64-true")
    ('bf16', 'fp16', 'off', 'off')
    """
    if precision in _FULL or str(precision).startswith("64"):
        return "off"
    return "bf16" if "bf16" in str(precision) else "fp16"


class FrameworkKnobs:
    """Sets ``amp`` and ``compile`` through a framework the script trains with (see the module).

    Args:
        loop: The run's ``OutsideLoop``: its amp and model finder stand aside for what the
            framework takes (``OutsideAmp.by_framework``).
    """

    def __init__(self, loop: Any) -> None:
        self.loop = loop
        self._patch: Patch | None = None
        self._finder: _AfterImport | None = None

    def install(self, patch: Patch) -> None:
        self._patch = patch
        wanted: dict[str, Callable[[Any], None]] = {name: self._trainer for name in _TRAINERS}
        wanted[_TRAINING_ARGUMENTS] = self._training_arguments
        for name, then in list(wanted.items()):
            if name in sys.modules:
                then(sys.modules[name])
                del wanted[name]
        self._finder = _AfterImport(wanted)
        sys.meta_path.insert(0, self._finder)

    def remove(self) -> None:
        if self._finder is not None and self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)

    def _trainer(self, module: Any) -> None:
        amp = self.loop.amp
        knobs = self

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            signature = inspect.signature(original)

            def __init__(trainer: Any, *args: Any, **kwargs: Any) -> None:
                bound = signature.bind(trainer, *args, **kwargs)
                if "precision" in bound.arguments:  # (passed, even as 32: the script's own setting wins)
                    given = bound.arguments["precision"]
                    amp.hold_own(
                        f"your Trainer sets precision={given!r} itself, and it is what runs", lightning_own(given)
                    )
                elif amp.value != "off" and amp.held is None:
                    bound.arguments["precision"] = LIGHTNING_PRECISION[amp.value]
                    amp.by_framework(f"Trainer(precision={LIGHTNING_PRECISION[amp.value]!r})")
                return original(*bound.args, **bound.kwargs)

            return __init__

        assert knobs._patch is not None  # (set by install, before any framework module is seen)
        knobs._patch(module.Trainer, "__init__", make)

    def _training_arguments(self, module: Any) -> None:
        amp, finder = self.loop.amp, self.loop.finder

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def __post_init__(args: Any) -> None:
                _compiled(args, finder)
                if args.bf16 or args.fp16:
                    own = "bf16" if args.bf16 else "fp16"
                    amp.hold_own(f"your TrainingArguments set {own}=True itself, and it is what runs", own)
                elif amp.value != "off" and amp.held is None:
                    before = dict(vars(args))
                    setattr(args, amp.value, True)
                    try:
                        original(args)
                    except ValueError as exc:  # (bf16 where the Trainer finds no support for it)
                        vars(args).clear()
                        vars(args).update(before)
                        amp.hold(f"the Trainer refuses {amp.value}=True here ({exc})")
                    else:
                        amp.by_framework(f"TrainingArguments({amp.value}=True)")
                        return
                original(args)

            return __post_init__

        assert self._patch is not None  # (set by install, before any framework module is seen)
        self._patch(module.TrainingArguments, "__post_init__", make)


def _compiled(args: Any, finder: Any) -> None:
    """``compile`` through ``torch_compile`` (the Trainer compiles its model itself; ours stands aside)."""
    if finder is None or finder.compile == "off" or args.torch_compile:
        return
    args.torch_compile = True
    if finder.compile != "default":
        args.torch_compile_mode = finder.compile
    mode = "" if finder.compile == "default" else f", torch_compile_mode={finder.compile!r}"
    finder.by_framework(f"TrainingArguments(torch_compile=True{mode})")


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``wanted[name](module)`` once the module ``name`` has been executed by its own loader."""

    def __init__(self, wanted: dict[str, Callable[[Any], None]]) -> None:
        self.wanted = wanted
        self._busy: set[str] = set()

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        then = self.wanted.get(fullname)
        if then is None or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Then(spec.loader, then)
        return spec


class _Then(importlib.abc.Loader):
    def __init__(self, loader: Any, then: Callable[[Any], None]) -> None:
        self._loader, self._then = loader, then

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        self._then(module)
