"""The Run handle: what a training function receives (a Trial under tuning, autotune.worker._trial; a Recipe
in production, autotune.production._recipe)."""

from __future__ import annotations

import contextlib
import inspect
import math
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from autotune.core._config import Config
from autotune.core._knobs import KNOBS, MODEL_KNOBS, Stage, batch_of
from autotune.core._loaders import (
    batches_per_epoch,
    dataset_facts,
    drop_worker_kwargs,
    keep_order,
)
from autotune.training._prefetch import iter_batches


class Run:
    """What ``Trial`` (under tuning) and ``Recipe`` (production) share.

    A training function routes four things through it: the DataLoader, the
    optimizer, the batches and the step; ``autocast()`` wraps the forward pass.
    Handing the model to ``run.model`` is optional: it lets the model-side knobs
    (``channels_last``, ``compile``) be tuned too.

    Example:
        >>> def train(run: autotune.Run) -> None:
        ...     model = run.model(Net())
        ...     loader = run.dataloader(ds, batch_size=64, shuffle=True)
        ...     opt = run.optimizer(torch.optim.AdamW, model.parameters(), lr=1e-3)
        ...     for x, y in run.batches(loader):
        ...         with run.autocast():
        ...             loss = F.cross_entropy(model(x), y)
        ...         run.step(loss, opt)

    Attributes:
        config: The frozen knob values of this run (``None`` = the user's own).
        device: The ``torch.device`` to train on.
    """

    #: The stages of knobs this run applies (None: all); an unmodified script routes nothing
    #: through a handle, so it has no transfer, autocast or model stage (``autotune.training._script``).
    stages: frozenset[Stage] | None = None

    def __init__(self, config: Config, device: Any = "auto") -> None:
        import torch

        from autotune.machine._probe import resolve_device

        self.config = config
        self.device = device if isinstance(device, torch.device) else resolve_device(str(device), torch)
        self._observed: dict[str, Any] = {}
        self._model_seen = False  # run.model was called: the model knobs are in effect
        self._malloc_applied = False  # malloc_retain was applied (at the first batches)
        self._base_batch_size: int | None = None
        #: What the last loader built reads (``dataset_facts``).
        self._dataset: dict[str, Any] = {}
        #: The optimizers built, by class name: whether each takes ``fused=`` (``facts``).
        self._optimizers: dict[str, bool] = {}
        self._scaler: Any = None  # a torch.amp.GradScaler, made at the first fp16 step
        self._micro: dict[int, int] = {}  # id of an optimizer -> run.step calls on it (accumulation)
        self.lr: float | None = None

    # -- the four calls, and the model -------------------------------------------------

    def model(self, module: Any) -> Any:
        """Move ``module`` to :attr:`device` and apply the model knobs; train what it returns.

        ``channels_last`` puts the parameters (and, in :meth:`batches`, every 4-D
        floating-point input) in channels-last memory format; ``compile`` wraps the
        module in ``torch.compile`` with that mode. The compiled module shares the
        original's parameters, so ``model.parameters()`` goes to the optimizer as
        usual. Compiling happens at the first forward and backward: under tuning,
        that time is kept out of the measured windows and reported as ``compile_s``.
        """
        import torch

        self._model_seen = True
        module = module.to(self.device)
        if self._value("channels_last"):
            module = module.to(memory_format=torch.channels_last)
        mode = self._value("compile")
        if mode != "off":
            module = self._compiled(torch.compile(module, mode=None if mode == "default" else mode))
        return module

    def _compiled(self, module: Any) -> Any:
        """Hook for Trial's compile timing; production trains the compiled module as is."""
        return module

    def dataloader(self, dataset: Any, **kwargs: Any):
        """Build a ``torch.utils.data.DataLoader`` with this run's loader knobs.

        The user's kwargs are the baseline; a knob the config sets wins over them.
        ``batch_size="2x"`` means twice the user's ``batch_size``.
        """
        from torch.utils.data import DataLoader

        kw = self._loader_kwargs(dataset, kwargs)
        loader = DataLoader(dataset, **kw)
        self._loader_built(loader, dataset, kw)
        return loader

    def _loader_kwargs(self, dataset: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The DataLoader kwargs of this run: the user's, with the config's loader knobs over them
        (also what ``autotune.training._hooks`` passes to a loader an unmodified script builds)."""
        from torch.utils.data import DataLoader

        kw = {"batch_size": 1, **kwargs}  # 1 is DataLoader's own default
        # batch_size=None turns automatic batching off: then there is no batch to resize.
        self._base_batch_size = None if "batch_sampler" in kw else kw["batch_size"]
        for knob in KNOBS.values():
            value = getattr(self.config, knob.name)
            if knob.dataloader_kwarg is None or value is None:
                continue
            if knob.name == "batch_size":
                if self._base_batch_size is None:
                    continue
                value = batch_of(self._batch_value(value), self._base_batch_size)
            kw[knob.dataloader_kwarg] = value
        drop_worker_kwargs(kw)
        keep_order(kw, kwargs)
        if kw.get("pin_memory") and self.device.type == "cpu":
            kw["pin_memory"] = False  # nothing to pin for; torch would only warn
        workers = kw.get("num_workers", 0)
        if workers:
            # The same batches from a loader without workers (which refuses these kwargs).
            alone = {
                k: v
                for k, v in kw.items()
                if k not in ("num_workers", "prefetch_factor", "persistent_workers", "multiprocessing_context")
            }
            batches = batches_per_epoch(DataLoader(dataset, **alone))
            if batches is not None and 0 < batches < workers:
                # A worker makes whole batches: past one per batch of the epoch, the rest never work.
                kw["num_workers"] = batches
                warnings.warn(
                    f"num_workers={workers} exceeds the {batches} batches of an epoch; using {batches}", stacklevel=3
                )
        return kw

    def _batch_value(self, value: Any) -> Any:
        """The ``batch_size`` knob as a loader takes it: relative (``2x``) or in samples."""
        return value

    def _loader_built(self, loader: Any, dataset: Any, kw: dict[str, Any]) -> None:
        """Record what the loader built with ``kw`` uses (``resolved``, the dataset's facts)."""
        self._dataset = dataset_facts(dataset, batches_per_epoch(loader), kw)
        for knob in KNOBS.values():
            if knob.dataloader_kwarg:
                self._observed[knob.name] = kw.get(knob.dataloader_kwarg, knob.default)

    def optimizer(self, cls: Callable[..., Any], params: Iterable[Any], lr: float | None = None, **kwargs: Any):
        """Build ``cls(params, lr=..., **kwargs)`` with this run's optimizer knobs.

        ``lr`` is the user's lr for their own batch size; it is scaled to the run's
        batch size by ``lr_scaling`` (linear / sqrt / none), so call
        :meth:`dataloader` first. ``fused=True`` is passed where ``cls`` takes it.
        """
        lr, kwargs = self._optimizer_kwargs(cls, lr, kwargs)
        return cls(params, **kwargs) if lr is None else cls(params, lr=lr, **kwargs)

    def _optimizer_kwargs(self, cls: Callable[..., Any], lr: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The lr and kwargs of an optimizer of this run (also what ``autotune.training._hooks`` passes to one
        an unmodified script builds)."""
        kwargs = dict(kwargs)
        scaling = self.config.lr_scaling or "none"
        if lr is not None and scaling != "none":
            if "batch_size" not in self._observed:
                raise RuntimeError(
                    "run.optimizer(...) was called before run.dataloader(...): "
                    "lr_scaling needs the batch size the loader uses"
                )
            # No base (batch_size=None, or the user's own batch_sampler): nothing was resized.
            base = self._base_batch_size
            ratio = 1.0 if base is None else self._observed["batch_size"] / base
            lr = lr * (ratio if scaling == "linear" else math.sqrt(ratio))
        # Feature detection, not version checks: not every optimizer has fused kernels.
        fusable = "fused" in inspect.signature(cls).parameters
        self._optimizers[getattr(cls, "__name__", str(cls))] = fusable
        if self.config.fused_optimizer:
            if fusable:
                kwargs["fused"] = True
                kwargs.pop("foreach", None)  # torch refuses both at once
            else:
                warnings.warn(
                    f"{getattr(cls, '__name__', cls)} takes no fused= argument; running it unfused", stacklevel=3
                )
        self._observed["fused_optimizer"] = bool(kwargs.get("fused", False))
        self.lr = lr
        return lr, kwargs

    def batches(self, loader: Iterable[Any]) -> Iterator[Any]:
        """Yield the loader's batches already on :attr:`device`, per the prefetch knob (4-D
        floating-point inputs in channels-last format when the model is)."""
        self._retain_host_memory()
        channels_last = self._model_seen and bool(self._value("channels_last"))
        return iter_batches(
            loader, self.device, self._value("prefetch"), self._non_blocking(), channels_last, self._copy_edge()
        )

    def autocast(self):
        """A context manager for the forward pass: AMP per the ``amp`` knob, or nothing."""
        import torch

        amp = self._value("amp")
        if amp == "off":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if amp == "bf16" else torch.float16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def step(self, loss: Any, optimizer: Any, *, clip_grad_norm: float | None = None, accumulate: int = 1) -> None:
        """Backward; then, every ``accumulate`` calls (gradient accumulation: each backward takes
        ``loss / accumulate``), the optimizer step with the gradients' norm clipped to
        ``clip_grad_norm`` first (unscaled first under fp16), and zero_grad. The step goes through
        a GradScaler under fp16 only. The loss the trial watches is ``loss`` as given."""
        import torch

        if accumulate < 1:
            raise ValueError(f"run.step(accumulate={accumulate!r}): must be 1 or more")
        fp16 = self._value("amp") == "fp16"
        if fp16 and self._scaler is None:
            self._scaler = torch.amp.GradScaler(self.device.type)
        part = loss / accumulate if accumulate > 1 else loss
        self._edge("backward")
        (self._scaler.scale(part) if fp16 else part).backward()
        calls = self._micro[id(optimizer)] = self._micro.get(id(optimizer), 0) + 1
        if calls % accumulate == 0:
            self._edge("optimizer")
            if clip_grad_norm is not None:
                if fp16:
                    self._scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]], clip_grad_norm)
            if fp16:
                self._scaler.step(optimizer)
                self._scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        self._edge("other")
        self._after_step(loss)

    # -- internals ----------------------------------------------------------------------

    def _after_step(self, loss: Any) -> None:
        """Hook for Trial's loss accounting; production does nothing per step."""

    def _edge(self, part: str | None) -> None:
        """Hook for a profile run's step parts (``autotune.worker._profile``): the loop enters ``part``."""

    def _copy_edge(self) -> Any:
        """Hook for a profile run: called before each batch's copy to the device (None: nothing)."""
        return None

    def _value(self, name: str) -> Any:
        value = getattr(self.config, name)
        return KNOBS[name].default if value is None else value

    def _non_blocking(self) -> bool:
        return bool(self._observed.get("pin_memory", self._value("pin_memory")))

    def facts(self) -> dict[str, Any]:
        """What the code built, as the study keeps it (``ATTR_DATASET``): the last loader's dataset
        (``dataset_facts``) and, under ``optimizers``, each optimizer class and whether it takes
        ``fused=`` (the study stops drawing ``fused_optimizer`` for code whose optimizers take none)."""
        return {**self._dataset, **({"optimizers": dict(self._optimizers)} if self._optimizers else {})}

    def resolved(self) -> dict[str, Any]:
        """Every active knob's effective value in this run, e.g. ``batch_size`` as an int.

        What the user's code passed counts where the config sets nothing. The model
        knobs are inactive, and left out, when the model never went through :meth:`model`.
        """
        values = {
            name: self._observed.get(name, self._value(name))
            for name in KNOBS
            if (self._model_seen or name not in MODEL_KNOBS)
            and (self.stages is None or KNOBS[name].stage in self.stages)
        }
        return {name: v for name, v in values.items() if KNOBS[name].is_active(values)}

    def apply_backends(self) -> None:
        """Set the process-wide backend flags of this config (cudnn.benchmark, tf32)."""
        import torch

        torch.backends.cudnn.benchmark = bool(self._value("cudnn_benchmark"))
        torch.set_float32_matmul_precision("high" if self._value("tf32") else "highest")

    def _retain_host_memory(self) -> None:
        """With ``malloc_retain``, glibc's malloc keeps freed memory from here on, for the rest of
        the process (it cannot be undone): applied when training starts (the first
        :meth:`batches`), so that making a Recipe, e.g. ``Result.winner``, changes nothing in a
        process that does not train with it."""
        if self._malloc_applied or not self._value("malloc_retain"):
            return
        self._malloc_applied = True
        from autotune.machine import _malloc

        reason = _malloc.unavailable_reason()
        if reason:
            warnings.warn(f"malloc_retain=true not applied: {reason}", stacklevel=4)
        else:
            _malloc.retain()
