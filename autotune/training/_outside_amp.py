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
import types
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
        device_type: Where autocast acts now (``cuda``, ``cpu``): the trained parameters' device.
        say: Prints one line of the trial's log.
        optimizers: The optimizers the script built, as its run keeps them (read, never written here).

    Attributes:
        held: Why ours does not apply (None: it does, or the knob is off).
        own: The script's own precision (``bf16``, ``fp16``), once seen.
        skipped: fp16 steps the scaler skipped (inf or nan gradients).
        steps: Optimizer steps taken through the scaler.
    """

    def __init__(self, value: str, device_type: Callable[[], str], say: Callable[[str], None],
                 optimizers: list[Any]) -> None:
        self.value = value
        self._device_type = device_type  # read when needed: a model may move after its optimizer is built
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
        self._outstanding = False  # gradients scaled by a backward and not yet updated past
        self._routed: set[int] = set()  # optimizers whose step goes through the scaler
        self._unscaled: set[int] = set()  # optimizers unscaled since the last update (clip)
        self._optimizers = optimizers
        self._stepped: set[int] = set()  # optimizers that stepped since the training batch
        self._foreign_open = 0  # the script's own autocasts entered and not left (ours leaves only when innermost)
        self._fused_skips: Any = None  # found_inf of the steps a fused optimizer took through the scaler (device)
        self._model_hook: Any = None

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
            if getattr(ctx, "_autotune", False):
                return original(ctx)
            if amp.framework is None and not amp._in_backward and getattr(ctx, "_enabled", False):
                amp.hold_own(f"your script uses torch.autocast ({dtype_name(ctx.fast_dtype)}) itself, and its own "
                             "precision is what runs", dtype_name(ctx.fast_dtype))
            amp._foreign_open += 1
            return original(ctx)
        return __enter__

    def patch_autocast_exit(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``torch.autocast.__exit__``: counts the script's own autocasts still open."""
        amp = self

        def __exit__(ctx: Any, *exc: Any) -> Any:
            if not getattr(ctx, "_autotune", False):
                amp._foreign_open = max(0, amp._foreign_open - 1)
            return original(ctx, *exc)
        return __exit__

    def model_called(self, module: Any, args: Any) -> None:
        """A forward pre-hook on the script's model, checked once under our autocast: a script that
        turns autocast off around its model (``torch.autocast(enabled=False)``, the switch of its own
        ``--amp`` flag) decides its precision itself, and ours would not reach the forward. Gone at
        once where ours does not apply (held, or a framework's): no hook of ours on every forward."""
        if not self.active:
            self._model_hook.remove()
            return
        if self._ctx is None:
            return
        self._model_hook.remove()
        import torch

        if not torch.is_autocast_enabled(self._device_type()):
            self.hold_own("your script turns autocast off around its model (torch.autocast(enabled=False)): "
                          "its own switch decides its precision", "off")

    def watch_model(self, module: Any) -> None:
        if self.value != "off":
            self._model_hook = module.register_forward_pre_hook(self.model_called)

    def patch_scaler(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``GradScaler.__init__``: the script's own (enabled) scaler wins over ours."""
        amp = self

        def __init__(scaler: Any, *args: Any, **kwargs: Any) -> None:
            original(scaler, *args, **kwargs)
            if amp.framework is None and scaler is not amp._scaler and scaler.is_enabled():
                amp.hold_own("your script uses a GradScaler itself, and its own precision is what runs", "fp16")
        return __init__

    def patch_clip(self, original: Callable[..., Any], grads: bool = False) -> Callable[..., Any]:
        """``clip_grad_norm_``, ``clip_grad_value_``, ``clip_grads_with_norm_`` (parameters) and
        ``get_total_norm`` (``grads``: gradients): under our fp16 scaler the gradients are unscaled
        first (each optimizer once per step), so the script sees and clips their true values."""
        amp = self

        @functools.wraps(original)
        def clip(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if amp._scaler is not None and amp.active:
                import torch

                tensors = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
                amp._unscale_for({id(t) for t in tensors}, grads)
            return original(tensors, *args, **kwargs)
        return clip

    def _unscale_for(self, ids: set[int], grads: bool) -> None:
        for opt in self._optimizers:
            if id(opt) in self._unscaled:
                continue
            params = [p for g in opt.param_groups for p in g["params"]]
            if any(id(p.grad if grads else p) in ids for p in params):
                self._unscaled.add(id(opt))
                try:
                    self._scaler.unscale_(opt)
                except RuntimeError:  # (a clip after its step: its gradients were unscaled by it)
                    pass

    def optimizer_built(self, opt: Any) -> None:
        """Under fp16, route ``opt.step()`` through the scaler: a bound method over the class's (LR
        schedulers wrap it as they wrap the class's)."""
        if self.value != "fp16":
            return
        original = opt.step
        amp = self

        def step(self_: Any, *args: Any, **kwargs: Any) -> Any:
            # (while scaled gradients wait for a step, even held: they reach no optimizer scaled)
            if amp._in_step or not amp._outstanding:
                amp._stepped_inner = True
                return original(*args, **kwargs)
            closure = args[0] if args else kwargs.get("closure")
            if closure is not None:  # GradScaler refuses a closure (LBFGS): held before its backward runs
                amp.hold(f"{type(opt).__name__} steps with a closure, which a GradScaler cannot take")
                return original(*args, **kwargs)
            if not any(p.grad is not None for g in opt.param_groups for p in g["params"]):
                return original()  # nothing scaled for it this step: the scaler would refuse it
            amp._in_step, amp._stepped_inner = True, False
            try:
                result = amp._scaler.step(opt)
            finally:
                amp._in_step = False
                amp._pending_update = True
                amp.steps += 1
                amp._count_skip(opt)
            return result
        opt.step = types.MethodType(functools.wraps(original)(step), opt)
        self._routed.add(id(opt))

    def _count_skip(self, opt: Any) -> None:
        """A step the scaler skipped on inf/nan gradients: its optimizer's own step never ran; a fused
        one's always runs and skips inside its kernel, so its found_inf is summed on the device."""
        if not getattr(opt, "_step_supports_amp_scaling", False):
            self.skipped += not self._stepped_inner
            if not self._stepped_inner:
                self.after_step(opt)  # (the step hooks did not run: the step ends here)
            return
        try:
            found = sum(self._scaler._per_optimizer_states[id(opt)]["found_inf_per_device"].values())
        except (AttributeError, KeyError, TypeError):  # (a scaler of another make: not counted)
            return
        self._fused_skips = found if self._fused_skips is None else self._fused_skips + found

    # -- the step's edges -----------------------------------------------------------------

    def batch(self) -> None:
        """The training loader yielded a batch: a step starts under autocast."""
        self._training = True
        self._stepped.clear()
        self._leave()
        self._enter()

    def before_step(self, opt: Any) -> None:
        """Any optimizer's step runs outside autocast. Under fp16, an optimizer whose step does not go
        through the scaler (one built before autotune's hooks, or whose class skips ``Optimizer.__init__``)
        holds fp16: its gradients are unscaled for this step, and no later backward is scaled."""
        self._leave()
        if self._outstanding and not self._in_step and id(opt) not in self._routed:
            self.hold(f"{type(opt).__name__} steps outside autotune's GradScaler, which would hand it "
                      "gradients scaled by 65536 and skip none on inf")
            if any(p.grad is not None for g in opt.param_groups for p in g["params"]):
                self._scaler.unscale_(opt)

    def after_step(self, opt: Any) -> None:
        """After a step, autocast again only while an optimizer has not stepped since the batch (a
        GAN's generator after its discriminator): a loop that ends on a step leaves it off for what
        follows (an evaluation, an export), as a plain loop would."""
        self._stepped.add(id(opt))
        if any(id(o) not in self._stepped for o in self._optimizers):
            self._enter()

    def epoch_ended(self) -> None:
        self._training = False
        self._leave()

    def backward(self, original: Callable[..., Any], tensor: Any, *args: Any, **kwargs: Any) -> Any:
        """``tensor.backward(...)`` outside autocast, the loss scaled under our fp16."""
        scale = self.value == "fp16" and self.active
        if not scale:  # (held: this backward's gradients are not scaled)
            self._outstanding = False
        if not self.active and self._ctx is None:
            return original(tensor, *args, **kwargs)
        self._leave()
        self._in_backward = True
        try:
            if scale:
                tensor = self._scaled(tensor)
            return original(tensor, *args, **kwargs)
        finally:
            self._in_backward = False
            self._enter()

    def _scaled(self, tensor: Any) -> Any:
        import torch

        if self._scaler is None:
            self._scaler = torch.amp.GradScaler.__new__(torch.amp.GradScaler)  # (ours: the patch knows it)
            self._scaler.__init__(self._device_type())
        elif self._pending_update:
            self._scaler.update()
            self._unscaled.clear()
        self._pending_update = False
        self._outstanding = True
        return self._scaler.scale(tensor)

    def _enter(self) -> None:
        if not self._training or not self.active or self._ctx is not None:
            return
        import torch

        ctx = torch.autocast(self._device_type(), dtype=getattr(torch, DTYPES[self.value]))
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
        """Ours stops here for good, said once where the knob was on. It is left now where it is the
        innermost autocast (before the script's own saves the state it will restore), else at the
        step's next edge, so that every autocast is left in the order it was entered."""
        if self._foreign_open == 0:
            self._leave()
        if self.held is None:
            self.held = why
            if self.value != "off":
                self._say(f"autotune: amp={self.value} not applied: {why}")

    def counts(self) -> dict[str, int]:
        """The scaler's step counts (empty where none ran), for the trial's facts."""
        if not self.steps:
            return {}
        fused = 0 if self._fused_skips is None else int(self._fused_skips.item())
        return {"fp16_steps": self.steps, "fp16_skipped_steps": self.skipped + fused}
