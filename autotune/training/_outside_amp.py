"""Mixed precision applied to an unmodified script from outside its code (the ``amp`` knob).

Autocast is in force around the training forward of the script's model (the one
``autotune.training._outside_model`` finds) and nowhere else: a call of it in train mode, with
gradients on, during the training loader's epoch; its floating-point outputs come back in fp32,
so the loss is computed as autocast computes it (accelerate's ``convert_outputs_to_fp32``), and
the backward pass, the steps and every evaluation (eval mode, ``no_grad``) run as the script wrote
them, whatever its optimizers' schedule. Under fp16 a ``GradScaler`` scales the loss at
``backward()``, every optimizer's ``step()`` goes through it (a step it skips on inf/nan
gradients is counted; an optimizer it cannot route holds fp16), the gradients are unscaled
before a ``clip_grad_norm_``/``clip_grad_value_`` the script calls, and ``update()`` runs once
after the step, before the next backward (gradient accumulation's backwards are all scaled
by the same factor).

A script's own precision is what is in force during its training forwards: an autocast of
its own open around one (enabled or not), one its model enters inside its forward, or an enabled
``GradScaler``; ours is held, and the trial says so (``own``). An autocast the script enters
only for evaluation is not its training precision. Autocast is thread-local state: everything
here runs on the loop's thread.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

from autotune.training._prefetch import map_tensors

#: The autocast dtypes by the ``amp`` knob's values.
DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def _to_fp32(tensor: Any) -> Any:
    """An output of autocast's dtypes in fp32 (others as they are)."""
    import torch

    return tensor.float() if tensor.dtype in (torch.float16, torch.bfloat16) else tensor


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

    def __init__(
        self, value: str, device_type: Callable[[], str], say: Callable[[str], None], optimizers: list[Any]
    ) -> None:
        self.value = value
        self._device_type = device_type  # read when needed: a model may move after its optimizer is built
        self._say = say
        self.held: str | None = None
        self.own: str | None = None
        self.framework: str | None = None  # the framework's setting that carries the knob, where one does
        self.skipped = self.steps = 0
        self._ctx: Any = None  # our autocast, while a training forward runs under it
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
        self._foreign: list[Any] = []  # the script's own autocasts entered and not left, innermost last
        self._fused_skips: Any = None  # found_inf of the steps a fused optimizer took through the scaler (device)
        self._model: Any = None  # the model whose calls ours wraps
        self._inner: Any = None  # (our wrapper, and the compiled call it wraps or None)

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
        """``torch.autocast.__enter__``: an enabled autocast the model enters inside our training
        forward is the script's own precision (one open around the forward: ``_training_forward``)."""
        amp = self

        def __enter__(ctx: Any) -> Any:
            if getattr(ctx, "_autotune", False):
                return original(ctx)
            if amp._ctx is not None and not amp._in_backward and getattr(ctx, "_enabled", False):
                amp.hold_own(
                    f"your model enters torch.autocast ({dtype_name(ctx.fast_dtype)}) itself, and its "
                    "own precision is what runs",
                    dtype_name(ctx.fast_dtype),
                )
            amp._foreign.append(ctx)
            return original(ctx)

        return __enter__

    def patch_autocast_exit(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``torch.autocast.__exit__``: the script's own autocasts still open."""
        amp = self

        def __exit__(ctx: Any, *exc: Any) -> Any:
            if not getattr(ctx, "_autotune", False) and ctx in amp._foreign:
                del amp._foreign[len(amp._foreign) - 1 - amp._foreign[::-1].index(ctx)]
            return original(ctx, *exc)

        return __exit__

    def watch_model(self, module: Any) -> None:
        """Wrap the model's calls (found at its first call): its training forwards run under ours.
        The wrapper takes the slot ``nn.Module.compile`` fills (``_compiled_call_impl``, called before
        the hooks and outside the compiled code; left out when the module is pickled or deep-copied),
        so ``torch.save(model)`` and an EMA copy carry nothing of autotune."""
        if self.value == "off" or not self.active or self._model is not None:
            return
        compiled = module.__dict__.get("_compiled_call_impl")
        inner = compiled or module._call_impl
        amp = self

        def call(*args: Any, **kwargs: Any) -> Any:
            if not amp._training_forward(module):
                return inner(*args, **kwargs)
            import torch

            ctx = torch.autocast(amp._device_type(), dtype=getattr(torch, DTYPES[amp.value]))
            ctx._autotune = True  # type: ignore[attr-defined]  # our mark on torch's object (read by getattr)
            with ctx:
                amp._ctx = ctx
                try:
                    out = inner(*args, **kwargs)
                finally:
                    amp._ctx = None
            return map_tensors(out, _to_fp32)

        self._model, self._inner = module, (call, compiled)
        module._compiled_call_impl = call
        self._training_forward(module)  # (this first call, already under way: the script's own precision)

    def _training_forward(self, module: Any) -> bool:
        """Whether this call of the model is a training forward that ours applies to; the script's
        own autocast open around it (its own precision, or its switch off) holds ours here."""
        if not (self.active and self._ctx is None and not self._in_backward and module.training):
            return False
        import torch

        if not torch.is_grad_enabled():
            return False
        if self._foreign:  # (the step that finds the training loader too: its own precision from the first)
            ctx = self._foreign[-1]
            if getattr(ctx, "_enabled", False):
                self.hold_own(
                    f"your script uses torch.autocast ({dtype_name(ctx.fast_dtype)}) itself, and its "
                    "own precision is what runs",
                    dtype_name(ctx.fast_dtype),
                )
            else:
                self.hold_own(
                    "your script turns autocast off around its model (torch.autocast(enabled=False)): "
                    "its own switch decides its precision",
                    "off",
                )
            return False
        return self._training

    def remove(self) -> None:
        """The model's calls as they were (the run's end)."""
        module, self._model = self._model, None
        if module is not None and module.__dict__.get("_compiled_call_impl") is self._inner[0]:
            if self._inner[1] is None:
                del module._compiled_call_impl
            else:
                module._compiled_call_impl = self._inner[1]

    def patch_scaler(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``GradScaler.__init__``: the script's own (enabled) scaler wins over ours."""
        amp = self

        def __init__(scaler: Any, *args: Any, **kwargs: Any) -> None:
            original(scaler, *args, **kwargs)
            if amp.framework is None and scaler is not amp._scaler and scaler.is_enabled():
                amp.hold_own("your script uses a GradScaler itself, and its own precision is what runs", "fp16")

        return __init__

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
            return
        try:
            found = sum(self._scaler._per_optimizer_states[id(opt)]["found_inf_per_device"].values())
        except (AttributeError, KeyError, TypeError):  # (a scaler of another make: not counted)
            return
        self._fused_skips = found if self._fused_skips is None else self._fused_skips + found

    # -- the step's edges -----------------------------------------------------------------

    def batch(self) -> None:
        """The training loader yielded a batch: its training forwards take ours."""
        self._training = True

    def before_step(self, opt: Any) -> None:
        """Under fp16, an optimizer whose step does not go through the scaler (one built before
        autotune's hooks, or whose class skips ``Optimizer.__init__``) holds fp16: its gradients are
        unscaled for this step, and no later backward is scaled."""
        if self._outstanding and not self._in_step and id(opt) not in self._routed:
            self.hold(
                f"{type(opt).__name__} steps outside autotune's GradScaler, which would hand it "
                "gradients scaled by 65536 and skip none on inf"
            )
            if any(p.grad is not None for g in opt.param_groups for p in g["params"]):
                self._scaler.unscale_(opt)

    def epoch_ended(self) -> None:
        self._training = False

    def backward(self, original: Callable[..., Any], tensor: Any, *args: Any, **kwargs: Any) -> Any:
        """``tensor.backward(...)``, the loss scaled under our fp16."""
        scale = self.value == "fp16" and self.active
        if not scale:  # (held: this backward's gradients are not scaled)
            self._outstanding = False
        self._in_backward = True  # (activation checkpointing re-enters the forward's autocast there)
        try:
            return original(self._scaled(tensor) if scale else tensor, *args, **kwargs)
        finally:
            self._in_backward = False

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

    def hold_own(self, why: str, own: str) -> None:
        """The script sets its own precision (``own``): it runs, and ours is held (``hold``)."""
        if self.own is None:
            self.own = own
        self.hold(why)

    def hold(self, why: str) -> None:
        """Ours stops here for good (a forward under it now ends under it), said once where the knob
        was on."""
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


def patch_clip(amp: OutsideAmp, original: Callable[..., Any], grads: bool = False) -> Callable[..., Any]:
    """``clip_grad_norm_``, ``clip_grad_value_``, ``clip_grads_with_norm_`` (parameters) and
    ``get_total_norm`` (``grads``: gradients): under our fp16 scaler the gradients are unscaled
    first (each optimizer once per step, by ``amp``), so the script sees and clips their true values."""

    @functools.wraps(original)
    def clip(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        if amp._scaler is not None and amp.active:
            import torch

            tensors = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
            amp._unscale_for({id(t) for t in tensors}, grads)
        return original(tensors, *args, **kwargs)

    return clip
