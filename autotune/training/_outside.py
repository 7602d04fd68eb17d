"""The loop's knobs applied to an unmodified script from outside its code: ``amp``
(``autotune.training._outside_amp``), ``prefetch`` (here) and the model knobs (``autotune.training._outside_model``).

``autotune.training._hooks`` drives it: the training loader's epochs come through :meth:`OutsideLoop.epoch`,
its ``backward()`` calls through :meth:`OutsideLoop.backward`, every optimizer the script builds
through :meth:`OutsideLoop.optimizer_built`. Prefetch moves the training loader's batches to the
device of the parameters the optimizers train, ahead of the loop (a background thread, or a CUDA
side stream), so the script's own ``.to(device)`` finds them there and returns them as they are;
it moves the tensors the script's first training step moved itself, and leaves the rest where the
loader made them (the lengths of a packed sequence stay on the host).
Each knob that cannot apply to the script is held with one line that says why, never a crash.
"""

from __future__ import annotations

import functools
import itertools
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from autotune.core._loaders import close_epoch
from autotune.training._framework_knobs import FrameworkKnobs
from autotune.training._outside_amp import OutsideAmp, patch_clip
from autotune.training._outside_model import ModelFinder
from autotune.training._prefetch import count_tensors, iter_batches, paths_of


class OutsideLoop:
    """The loop knobs of one run of a script (see the module).

    Args:
        run: The run's handle (a ScriptTrial, or a Recipe under ``autotune exec``).
        find_model: Find the model even with the model knobs off (a trial: whether the script has
            one is what decides if they are tuned).
        stream: Where its lines go (a trial's log: stdout; production: stderr).
    """

    def __init__(self, run: Any, find_model: bool, stream: Any = None) -> None:
        self.run = run
        self._stream = stream
        self._optimizers: list[Any] = []  # every optimizer the script built (amp's too: one list)
        self.amp = OutsideAmp(run._value("amp"), lambda: (self.device or run.device).type, self.say, self._optimizers)
        self.prefetch: str = run._value("prefetch")
        self._step_hooks: list[Any] = []
        self.held: dict[str, str] = {}  # knob -> why it does not apply (prefetch's; amp and model keep their own)
        # Prefetch moves what the script moves itself: the paths in its batch of the tensors its first
        # training step moved to another device (a packed sequence's lengths stay on the host)
        self._learning = self.prefetch != "none"
        # the tensors moved off their device while learning, by id, each with a weak reference: an id
        # is an address CPython reuses once a tensor is freed (a set-up temporary), the reference is not
        self._moved: dict[int, Any] = {}
        self._fetched: Any = None  # the last batch a loader not yet known to train yielded
        self.moved_paths: set[tuple] | None = None
        self._unshadow: list[str] = []
        channels_last, compile = bool(run._value("channels_last")), run._value("compile")
        # (under amp, the model is watched for a script that turns autocast off around it)
        wants_model = find_model or channels_last or compile != "off" or self.amp.value != "off"
        self.finder = ModelFinder(channels_last, compile, self._model_found, self.say) if wants_model else None
        #: amp and compile through Lightning's or the Trainer's own settings, where the script uses one
        self.frameworks = FrameworkKnobs(self) if self.amp.value != "off" or compile != "off" else None

    @property
    def active(self) -> bool:
        """Whether anything here acts on the loop (in production: whether to install it)."""
        return self.amp.value != "off" or self.prefetch != "none" or self.finder is not None

    def say(self, line: str) -> None:
        print(line, file=self._stream or sys.stdout, flush=True)

    def install(self, patch: Callable[[Any, str, Callable[[Callable[..., Any]], Callable[..., Any]]], None]) -> None:
        """Patch torch for the run (``patch(owner, name, make)``, undone with the rest of the hooks)."""
        import torch
        import torch.nn.utils as nn_utils
        from torch.nn.utils import clip_grad

        patch(torch.amp.autocast_mode.autocast, "__enter__", self.amp.patch_autocast)
        patch(torch.amp.autocast_mode.autocast, "__exit__", self.amp.patch_autocast_exit)
        patch(torch.amp.GradScaler, "__init__", self.amp.patch_scaler)
        patch(torch.amp.GradScaler, "scale", _marks_unscaled)
        if self.amp.value == "fp16":
            for owner in (nn_utils, clip_grad):
                for name in ("clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm"):
                    if name in vars(owner):
                        patch(owner, name, functools.partial(patch_clip, self.amp, grads=name == "get_total_norm"))
        if self.amp.value != "off":
            from torch.optim.optimizer import register_optimizer_step_pre_hook

            self._step_hooks = [register_optimizer_step_pre_hook(lambda opt, *_: self.amp.before_step(opt))]
        if self._learning:  # (Tensor.to and .cuda are TensorBase's: shadowed on Tensor, the shadow removed after)
            for name in ("to", "cuda"):
                setattr(torch.Tensor, name, self._watch_moves(getattr(torch.Tensor, name)))
                self._unshadow.append(name)
        if self.finder is not None:
            self.finder.install()
        if self.frameworks is not None:
            self.frameworks.install(patch)

    def _remove_shadows(self) -> None:
        import torch

        while self._unshadow:
            name = self._unshadow.pop()
            if name in vars(torch.Tensor):
                delattr(torch.Tensor, name)

    def remove(self) -> None:
        self._remove_shadows()
        while self._step_hooks:
            self._step_hooks.pop().remove()
        if self.frameworks is not None:
            self.frameworks.remove()
        if self.finder is not None:
            self.finder.remove()
        self.amp.epoch_ended()
        self.amp.remove()

    @property
    def device(self) -> Any:
        """Where the trained parameters are now (the first optimizer's; None before one is built): read
        when needed, as a script may build its optimizer and then move its model."""
        for opt in self._optimizers:
            for group in opt.param_groups:
                for param in group["params"]:
                    return param.device
        return None

    def optimizer_built(self, opt: Any) -> None:
        self._optimizers.append(opt)
        self.amp.optimizer_built(opt)
        if self.finder is not None:
            self.finder.optimizer_built(opt)

    def _watch_moves(self, original: Callable[..., Any]) -> Callable[..., Any]:
        loop = self

        @functools.wraps(original)
        def move(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            out = original(tensor, *args, **kwargs)
            if loop._learning and out is not tensor and out.device != tensor.device:
                loop._moved[id(tensor)] = weakref.ref(tensor)
            return out

        return move

    def fetched(self, batch: Any) -> None:
        """A loader not yet known to train yielded ``batch`` (kept while learning what the script moves)."""
        if self._learning:
            self._fetched = batch

    def training_found(self) -> None:
        """The first optimizer step: the last batch fetched trains, and what of it the script moved is
        what prefetch moves from now on."""
        if not self._learning:
            return
        self._learning = False
        self.moved_paths = {
            path
            for path, tensor in paths_of(self._fetched)
            if (ref := self._moved.get(id(tensor))) is not None and ref() is tensor
        }
        self._fetched, self._moved = None, {}
        self._remove_shadows()  # (nothing of ours on Tensor.to for the rest of the run)

    def backward(self, original: Callable[..., Any], tensor: Any, *args: Any, **kwargs: Any) -> Any:
        return self.amp.backward(original, tensor, *args, **kwargs)

    def epoch(self, it: Iterator[Any]) -> Iterator[Any]:
        """An epoch of the training loader: its batches prefetched to the device, each one the start
        of a step under autocast."""
        it = self._prefetched(it)
        try:
            for batch in it:
                self.amp.batch()
                yield batch
        finally:
            self.amp.epoch_ended()
            close_epoch(it)  # (a prefetcher's generator: its thread stops)

    def _prefetched(self, it: Iterator[Any]) -> Iterator[Any]:
        if self.prefetch == "none" or "prefetch" in self.held:
            return it
        why = None
        if self.device is None:
            why = "no optimizer was built, so the device the batches go to is unknown"
        elif self.prefetch == "cuda_stream" and self.device.type != "cuda":
            why = f"the model trains on {self.device.type}, and the side stream is CUDA's"
        if why is None:
            try:
                first = next(it)
            except StopIteration:
                return iter(())
            if not count_tensors(first):
                why = f"the loader's batches are {type(first).__name__}, which holds no tensor autotune can move"
            it = itertools.chain([first], it)
        if why is not None:
            self.held["prefetch"] = why
            self.say(f"autotune: prefetch={self.prefetch} not applied: {why}")
            return it
        return iter_batches(it, self.device, self.prefetch, self.run._non_blocking(), only=self.moved_paths)

    def _model_found(self, module: Any) -> None:
        self.run._model_seen = True
        self.amp.watch_model(module)
        if self.finder is not None and self.finder.compile != "off" and "compile" not in self.finder.held:
            self.run._compiled(module)  # (a trial: its first compiled call is said, its cost reported)

    def observed(self) -> dict[str, Any]:
        """The loop knobs in force, as ``resolved()`` reports them: a held knob at its default,
        the script's own precision where it has one."""
        values: dict[str, Any] = {
            "amp": self.amp.applied,
            "prefetch": "none" if "prefetch" in self.held else self.prefetch,
        }
        if self.finder is not None and self.finder.model is not None:
            values.update(
                {
                    knob: default
                    for knob, default in (("channels_last", False), ("compile", "off"))
                    if knob in self.finder.held
                }
            )
        return values

    def facts(self) -> dict[str, Any]:
        """What the trial keeps of the script's loop: its own precision, its model (and whether it compiles
        it itself), the scaler's steps."""
        found: dict[str, Any] = {**self.amp.counts()}
        if self.amp.own is not None:
            found["amp_own"] = self.amp.own
        if self.finder is not None and self.finder.model is not None:
            found["model"] = type(self.finder.model).__name__
            if self.finder.own_compile:
                found["compile_own"] = True
        return found


def _marks_unscaled(original: Callable[..., Any]) -> Callable[..., Any]:
    """``GradScaler.scale``: the scaled loss carries the loss it scaled, so that the loss the run reads
    at ``backward()`` is the script's true one where it scales its own (``scaler.scale(loss).backward()``),
    not loss x 2^16 with its back-offs. On the tensor itself: it lives and goes with it, and cannot alias."""

    def scale(scaler: Any, outputs: Any) -> Any:
        scaled = original(scaler, outputs)
        if scaled is not outputs and hasattr(scaled, "grad_fn") and hasattr(outputs, "grad_fn"):
            scaled._autotune_unscaled = outputs
        return scaled

    return scale
