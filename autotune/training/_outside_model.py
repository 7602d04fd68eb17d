"""The model of an unmodified script, found from outside its code, and the model knobs applied to
it in place (``channels_last``, ``compile``).

The model is the module the script calls (outermost, not from inside another module's forward)
whose parameters an optimizer trains. Global forward hooks watch the calls until the first such
call, then go: from there on the script's modules run with no hook of ours. On that call, before
its forward runs, the module is put in channels-last memory format (with a forward pre-hook that
puts its 4-D floating-point inputs so) and compiled in place (``nn.Module.compile``: calling the
module runs the compiled forward; the module, its parameters and the optimizer's references to
them stay the same objects). That first call runs uncompiled; compiling happens at the next.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The wrappers whose buckets are built from the parameters' layout when they are made:
#: channels_last after them would change the layout under their buckets.
BUCKETED = ("DistributedDataParallel", "FullyShardedDataParallel")


class ModelFinder:
    """Finds the script's model (see the module) and applies the model knobs to it.

    Args:
        channels_last: Put the model and its 4-D inputs in channels-last format.
        compile: The ``compile`` knob's value (``off``: not compiled).
        found: Called with the model once found (the run's record of it).
        say: Prints one line of the trial's log.

    Attributes:
        model: The model, once found.
        held: Knob to why it was not applied.
        own_compile: The script compiled the model, or a part of it, before its first call.
    """

    def __init__(
        self, channels_last: bool, compile: str, found: Callable[[Any], None], say: Callable[[str], None]
    ) -> None:
        self.channels_last, self.compile = channels_last, compile
        self._found, self._say = found, say
        self.model: Any = None
        self.held: dict[str, str] = {}
        self.own_compile = False  # the script compiled the model (or a part) itself
        self.framework: str | None = None  # the framework's setting that compiles it, where one does
        self._trained: set[int] = set()  # ids of the parameters the optimizers train
        self._depth = 0
        self._handles: list[Any] = []

    def install(self) -> None:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self._handles = [
            register_module_forward_pre_hook(self._before),
            register_module_forward_hook(self._after, always_call=True),
        ]

    def remove(self) -> None:
        while self._handles:
            self._handles.pop().remove()

    def by_framework(self, setting: str) -> None:
        """The framework compiles the model itself (``autotune.training._framework_knobs``): ours does not."""
        self.framework = setting
        self._say(f"autotune: compile={self.compile} set through your framework: {setting}")
        self.compile = "off"

    def optimizer_built(self, opt: Any) -> None:
        self._trained.update(id(p) for group in opt.param_groups for p in group["params"])

    def _before(self, module: Any, args: Any) -> Any:
        self._depth += 1
        if self._depth > 1 or self.model is not None or not self._trained:
            return None
        if not any(id(p) in self._trained for p in module.parameters()):
            return None
        self.model = module
        self.remove()  # (this call's post-hook is gone too: the depth is not read again)
        self._apply(module)
        self._found(module)
        # (the pre-hook it now has runs from its next call: this call's inputs are converted here)
        return _channels_last_inputs(module, args) if self.channels_last and "channels_last" not in self.held else None

    def _after(self, module: Any, args: Any, output: Any) -> None:
        self._depth -= 1

    def _apply(self, module: Any) -> None:
        import torch

        name = type(module).__name__
        if self.channels_last:
            if name in BUCKETED:
                self.held["channels_last"] = (
                    f"your model is wrapped in {name} before its first call, whose buckets keep its parameters' layout"
                )
            else:
                module.to(memory_format=torch.channels_last)
                module.register_forward_pre_hook(_channels_last_inputs)
        # (said whatever the knob: the study stops drawing compile from the first trial that saw it)
        self.own_compile = _compiled_by_script(module)
        if self.compile != "off" and self.own_compile:
            self.held["compile"] = (
                "your script compiles its model itself (torch.compile), and its own compile is what runs"
            )
        elif self.compile != "off":
            module.compile(mode=None if self.compile == "default" else self.compile)
            self._eager_if_it_fails(module)
        for knob, why in self.held.items():
            self._say(f"autotune: {knob} not applied: {why}")

    def _eager_if_it_fails(self, module: Any) -> None:
        """A model that fails to compile (at its first compiled call: dynamo or Inductor raise) runs as
        written: that call again, uncompiled, and compile held with the error's first line. An error
        of the script's own raises again from the uncompiled call, as it would without autotune."""
        compiled = getattr(module, "_compiled_call_impl", None)
        if compiled is None:
            return
        finder = self
        decided: list[Any] = []  # the call that runs from the first on (amp's wrapper may hold this one)

        def first_call(*args: Any, **kwargs: Any) -> Any:
            if decided:
                return decided[0](*args, **kwargs)
            try:
                out = compiled(*args, **kwargs)
            except Exception as exc:
                decided.append(module._call_impl)
                if module._compiled_call_impl is first_call:
                    module._compiled_call_impl = None
                why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                finder.held["compile"] = f"torch.compile failed on {type(module).__name__}: {why}"
                finder._say(f"autotune: compile not applied: {finder.held['compile']}")
                return module._call_impl(*args, **kwargs)
            decided.append(compiled)
            if module._compiled_call_impl is first_call:  # (its later calls go straight to it)
                module._compiled_call_impl = compiled
            return out

        module._compiled_call_impl = first_call


def _compiled_by_script(module: Any) -> bool:
    """Whether the script compiled the model or a part of it: ``torch.compile(model)`` (the wrapper is
    what it calls) or ``model.compile()`` (the module's compiled call), before its first call."""
    import sys

    if "torch._dynamo.eval_frame" not in sys.modules:  # nothing compiled: dynamo's import (seconds) not paid
        return False
    from torch._dynamo.eval_frame import OptimizedModule

    return any(
        isinstance(m, OptimizedModule) or m.__dict__.get("_compiled_call_impl") is not None for m in module.modules()
    )


def _channels_last_inputs(_module: Any, args: Any) -> Any:
    """A forward pre-hook: the call's 4-D floating-point tensors in channels-last format."""
    import torch

    def convert(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.dim() == 4 and value.is_floating_point():
            return value.contiguous(memory_format=torch.channels_last)
        return value

    return tuple(convert(a) for a in args)
