"""Mixed precision applied to an unmodified script from outside its code (the ``amp`` knob).

The training loader's batch starts a step: autocast is entered then, left for ``backward()``
and the optimizer's ``step()`` and entered again after each, and left when the epoch ends,
so the forward pass and the loss run under autocast and the backward pass outside it, as
PyTorch's AMP guide asks (a step with two losses, a GAN's, gets both forwards under it).
Under fp16 a ``GradScaler`` scales the loss at ``backward()``, the optimizer's ``step()``
goes through it (a step it skips on inf/nan gradients is counted), the gradients are unscaled
before a ``clip_grad_norm_``/``clip_grad_value_`` the script calls, and ``update()`` runs once
after the step, before the next backward (gradient accumulation's backwards are all scaled
by the same factor).

A script that enters an enabled ``torch.autocast`` or builds an enabled ``GradScaler``
itself keeps its own precision: ours is left at once and not entered again, and the trial
says so (``own``). Autocast is thread-local state: everything here runs on the loop's thread.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

#: The autocast dtypes by the ``amp`` knob's values.
DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def dtype_name(dtype: Any) -> str:
    """``torch.bfloat16`` -> ``bf16`` (the knob's word for a dtype; else the dtype's name)."""
    name = str(dtype).removeprefix("torch.")
    return next((knob for knob, torch_name in DTYPES.items() if torch_name == name), name)


class OutsideAmp:
    """The ``amp`` knob for a script (see the module).

    Args:
        value: The knob's value: ``off``, ``bf16`` or ``fp16``.
        device_type: Where autocast acts (``cuda``, ``cpu``): the trained parameters' device.
        say: Prints one line of the trial's log.

    Attributes:
        held: Why ours does not apply (None: it does, or the knob is off).
        own: The script's own precision (``bf16``, ``fp16``), once seen.
        skipped: fp16 steps the scaler skipped (inf or nan gradients).
        steps: Optimizer steps taken through the scaler.
    """

    def __init__(self, value: str, device_type: str, say: Callable[[str], None]) -> None:
        self.value = value
        self.device_type = device_type
        self._say = say
        self.held: str | None = None
        self.own: str | None = None
        self.framework: str | None = None  # the framework's setting that carries the knob, where one does
        self.skipped = self.steps = 0
        self._ctx: Any = None  # our autocast, while entered
        self._in_backward = False  # (activation checkpointing re-enters the forward's autocast there)
        self._training = False  # between the training epoch's first batch and its end
        self._scaler: Any = None
        self._in_step = False  # inside the scaler's step: the optimizer's own step runs as is
        self._stepped_inner = False
        self._pending_update = False  # a step went through the scaler: update() before the next scale
        self._unscaled: set[int] = set()  # optimizers unscaled since the last update (clip)
        self._optimizers: list[Any] = []

    @property
    def active(self) -> bool:
        """Whether ours applies (a value on, nothing holds it, no framework applies it instead)."""
        return self.value != "off" and self.held is None and self.framework is None

    @property
    def applied(self) -> str:
        """The precision in force, as the ``amp`` knob names it (the script's own where it has one)."""
        if self.framework is not None:
            return self.value
        return self.own or (self.value if self.held is None else "off")

    def by_framework(self, setting: str) -> None:
        """The framework the script trains with applies the knob (``autotune.training._framework_knobs``):
        its autocast and scaler are ours, not the script's."""
        self.framework = setting
        self._say(f"autotune: amp={self.value} set through your framework: {setting}")

    # -- the patches (autotune.training._hooks installs them) -----------------------------------------

    def patch_autocast(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``torch.autocast.__enter__``: the script's own (enabled) autocast wins over ours."""
        amp = self

        def __enter__(ctx: Any) -> Any:
            if amp.framework is None and not amp._in_backward and not getattr(ctx, "_autotune", False) \
                    and getattr(ctx, "_enabled", False):
                amp.hold_own(f"your script uses torch.autocast ({dtype_name(ctx.fast_dtype)}) itself, and its own "
                          "precision is what runs", dtype_name(ctx.fast_dtype))
            return original(ctx)
        return __enter__

    def patch_scaler(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``GradScaler.__init__``: the script's own (enabled) scaler wins over ours."""
        amp = self

        def __init__(scaler: Any, *args: Any, **kwargs: Any) -> None:
            original(scaler, *args, **kwargs)
            if amp.framework is None and scaler is not amp._scaler and scaler.is_enabled():
                amp.hold_own("your script uses a GradScaler itself, and its own precision is what runs", "fp16")
        return __init__

    def patch_clip(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``clip_grad_norm_`` / ``clip_grad_value_``: under our fp16 scaler, the gradients are
        unscaled first (each optimizer once per step), so the clip sees their true values."""
        amp = self

        @functools.wraps(original)
        def clip(parameters: Any, *args: Any, **kwargs: Any) -> Any:
            if amp._scaler is not None and amp.active:
                import torch

                parameters = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
                ids = {id(p) for p in parameters}
                for opt in amp._optimizers:
                    if id(opt) not in amp._unscaled and any(id(p) in ids for g in opt.param_groups
                                                            for p in g["params"]):
                        amp._unscaled.add(id(opt))
                        try:
                            amp._scaler.unscale_(opt)
                        except RuntimeError:  # (a clip after its step: its gradients were unscaled by it)
                            pass
            return original(parameters, *args, **kwargs)
        return clip

    def optimizer_built(self, opt: Any) -> None:
        """Under fp16, route ``opt.step()`` through the scaler (an instance attribute over the class's)."""
        self._optimizers.append(opt)
        if self.value != "fp16":
            return
        original = opt.step
        amp = self

        @functools.wraps(original)
        def step(*args: Any, **kwargs: Any) -> Any:
            if amp._in_step or not amp.active or amp._scaler is None:
                amp._stepped_inner = True
                return original(*args, **kwargs)
            if args or "closure" in kwargs:  # GradScaler refuses a closure (LBFGS): held before its backward
                amp.hold(f"{type(opt).__name__} steps with a closure, which a GradScaler cannot take")
                return original(*args, **kwargs)
            if not any(p.grad is not None for g in opt.param_groups for p in g["params"]):
                return original()  # nothing scaled for it this step: the scaler would refuse it
            amp._leave()
            amp._in_step, amp._stepped_inner = True, False
            try:
                result = amp._scaler.step(opt)
            finally:
                amp._in_step = False
                amp._pending_update = True
                amp.steps += 1
                amp.skipped += not amp._stepped_inner
                amp._enter()
            return result
        opt.step = step

    # -- the step's edges -----------------------------------------------------------------

    def batch(self) -> None:
        """The training loader yielded a batch: a step starts under autocast."""
        self._training = True
        self._leave()
        self._enter()

    def epoch_ended(self) -> None:
        self._training = False
        self._leave()

    def backward(self, original: Callable[..., Any], tensor: Any, *args: Any, **kwargs: Any) -> Any:
        """``tensor.backward(...)`` outside autocast, the loss scaled under our fp16."""
        if not self.active and self._ctx is None:
            return original(tensor, *args, **kwargs)
        self._leave()
        self._in_backward = True
        try:
            if self.value == "fp16" and self.active:
                tensor = self._scaled(tensor)
            return original(tensor, *args, **kwargs)
        finally:
            self._in_backward = False
            self._enter()

    def _scaled(self, tensor: Any) -> Any:
        import torch

        if self._scaler is None:
            self._scaler = torch.amp.GradScaler.__new__(torch.amp.GradScaler)  # (ours: the patch knows it)
            self._scaler.__init__(self.device_type)
        elif self._pending_update:
            self._scaler.update()
            self._unscaled.clear()
        self._pending_update = False
        return self._scaler.scale(tensor)

    def _enter(self) -> None:
        if not self._training or not self.active or self._ctx is not None:
            return
        import torch

        ctx = torch.autocast(self.device_type, dtype=getattr(torch, DTYPES[self.value]))
        ctx._autotune = True
        ctx.__enter__()
        self._ctx = ctx

    def _leave(self) -> None:
        ctx, self._ctx = self._ctx, None
        if ctx is not None:
            ctx.__exit__(None, None, None)

    def hold_own(self, why: str, own: str) -> None:
        """The script sets its own precision (``own``): it runs, and ours is held (``hold``)."""
        if self.own is None:
            self.own = own
        self.hold(why)

    def hold(self, why: str) -> None:
        """Ours stops here for good (left before the script's own autocast saves the state it
        will restore); said once where the knob was on."""
        self._leave()
        if self.held is None:
            self.held = why
            if self.value != "off":
                self._say(f"autotune: amp={self.value} not applied: {why}")

    def counts(self) -> dict[str, int]:
        """The scaler's step counts (empty where none ran), for the trial's facts."""
        return {"fp16_steps": self.steps, "fp16_skipped_steps": self.skipped} if self.steps else {}


def say(line: str) -> None:
    print(line, file=sys.stdout, flush=True)
