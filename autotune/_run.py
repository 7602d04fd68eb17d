"""Run handles: what a training function receives, under tuning and in production."""

from __future__ import annotations

import collections
import contextlib
import inspect
import math
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from autotune._ceilings import CACHED_BATCHES, ceiling_key
from autotune._config import Config
from autotune._knobs import KNOBS, Part, parse_relative
from autotune._prefetch import iter_batches

#: Batches after which a loader ceiling window may close at a quarter of its length.
QUICK_LOADER_BATCHES = 32

#: Pieces a window's loss is reported in (``curve`` in its event): each the mean loss of
#: consecutive steps and the samples they span, so that two runs' losses can be
#: compared over the same samples however their windows fall (``autotune._guard``).
CURVE_CHUNKS = 16

#: Seconds between a trial's ``progress`` events: the parent's stall detector
#: (DESIGN 5) needs a sign of life, and a clock read per step costs nothing.
PROGRESS_S = 1.0


class Run:
    """What ``Trial`` (under tuning) and ``Recipe`` (production) share.

    A training function routes four things through it: the DataLoader, the
    optimizer, the batches and the step; ``autocast()`` wraps the forward pass.

    Example:
        >>> def train(run: autotune.Run) -> None:
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

    def __init__(self, config: Config, device: Any = "auto") -> None:  # type: ignore[valid-type]
        import torch

        from autotune._probe import resolve_device

        self.config = config
        self.device = device if isinstance(device, torch.device) else resolve_device(str(device), torch)
        self._observed: dict[str, Any] = {}
        self._base_batch_size: int | None = None
        self._scaler = None
        self.lr: float | None = None

    # -- the four calls --------------------------------------------------------------

    def dataloader(self, dataset: Any, **kwargs: Any):
        """Build a ``torch.utils.data.DataLoader`` with this run's loader knobs.

        The user's kwargs are the baseline; a knob the config sets wins over them.
        ``batch_size="2x"`` means twice the user's ``batch_size``.
        """
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
                factor = parse_relative(value)
                value = value if factor is None else max(1, round(factor * self._base_batch_size))
            kw[knob.dataloader_kwarg] = value
        if kw.get("num_workers", 0) == 0:
            # DataLoader refuses these without workers; they are inactive knobs then.
            kw.pop("prefetch_factor", None)
            kw.pop("persistent_workers", None)
        if kw.get("pin_memory") and self.device.type == "cpu":
            kw["pin_memory"] = False  # nothing to pin for; torch would only warn
        for knob in KNOBS.values():
            if knob.dataloader_kwarg:
                self._observed[knob.name] = kw.get(knob.dataloader_kwarg, knob.default)
        return DataLoader(dataset, **kw)

    def optimizer(self, cls: Callable[..., Any], params: Iterable[Any], lr: float | None = None,
                  **kwargs: Any):
        """Build ``cls(params, lr=..., **kwargs)`` with this run's optimizer knobs.

        ``lr`` is the user's lr for their own batch size; it is scaled to the run's
        batch size by ``lr_scaling`` (linear / sqrt / none), so call
        :meth:`dataloader` first. ``fused=True`` is passed where ``cls`` takes it.
        """
        scaling = self.config.lr_scaling or "none"
        if lr is not None and scaling != "none":
            if "batch_size" not in self._observed:
                raise RuntimeError("run.optimizer(...) was called before run.dataloader(...): "
                                   "lr_scaling needs the batch size the loader uses")
            # No base (batch_size=None, or the user's own batch_sampler): nothing was resized.
            base = self._base_batch_size
            ratio = 1.0 if base is None else self._observed["batch_size"] / base
            lr = lr * (ratio if scaling == "linear" else math.sqrt(ratio))
        if self.config.fused_optimizer:
            # Feature detection, not version checks: not every optimizer has fused kernels.
            if "fused" in inspect.signature(cls).parameters:
                kwargs["fused"] = True
            else:
                warnings.warn(f"{getattr(cls, '__name__', cls)} takes no fused= argument; "
                              "running it unfused", stacklevel=2)
        self._observed["fused_optimizer"] = bool(kwargs.get("fused", False))
        self.lr = lr
        return cls(params, **kwargs) if lr is None else cls(params, lr=lr, **kwargs)

    def batches(self, loader: Iterable[Any]) -> Iterator[Any]:
        """Yield the loader's batches already on :attr:`device`, per the prefetch knob."""
        return iter_batches(loader, self.device, self._value("prefetch"), self._non_blocking())

    def autocast(self):
        """A context manager for the forward pass: AMP per the ``amp`` knob, or nothing."""
        import torch

        amp = self._value("amp")
        if amp == "off":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if amp == "bf16" else torch.float16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def step(self, loss: Any, optimizer: Any) -> None:
        """Backward, optimizer step (through a GradScaler under fp16 only), zero_grad."""
        if self._value("amp") == "fp16":
            if self._scaler is None:
                import torch

                self._scaler = torch.amp.GradScaler(self.device.type)
            self._scaler.scale(loss).backward()
            self._scaler.step(optimizer)
            self._scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        self._after_step(loss)

    # -- internals ----------------------------------------------------------------------

    def _after_step(self, loss: Any) -> None:
        """Hook for Trial's loss accounting; production does nothing per step."""

    def _value(self, name: str) -> Any:
        value = getattr(self.config, name)
        return KNOBS[name].default if value is None else value

    def _non_blocking(self) -> bool:
        return bool(self._observed.get("pin_memory", self._value("pin_memory")))

    def resolved(self) -> dict[str, Any]:
        """Every active knob's effective value in this run, e.g. ``batch_size`` as an int.

        What the user's code passed counts where the config sets nothing.
        """
        values = {name: self._observed.get(name, self._value(name)) for name in KNOBS}
        return {name: v for name, v in values.items() if KNOBS[name].is_active(values)}

    def apply_backends(self) -> None:
        """Set the process-wide backend flags of this config (cudnn.benchmark, tf32)."""
        import torch

        torch.backends.cudnn.benchmark = bool(self._value("cudnn_benchmark"))
        torch.set_float32_matmul_precision("high" if self._value("tf32") else "highest")


class Recipe(Run):
    """A tuned config applied in production: ``train(autotune.load("best.yaml"))``.

    Attributes:
        base_batch_size: The user batch size the recipe was tuned from (the base of
            its lr scaling), or None.
    """

    def __init__(self, config: Config, device: Any = "auto",  # type: ignore[valid-type]
                 base_batch_size: int | None = None) -> None:
        super().__init__(config, device)
        self.base_batch_size = base_batch_size
        self.apply_backends()

    def dataloader(self, dataset: Any, **kwargs: Any):
        loader = super().dataloader(dataset, **kwargs)
        if self.base_batch_size is not None and self._base_batch_size != self.base_batch_size:
            warnings.warn(f"the recipe was tuned with batch_size={self.base_batch_size} in the "
                          f"code, which now passes {self._base_batch_size}; its lr scaling "
                          "starts from the code's value", stacklevel=2)
        return loader


class BudgetSpent(BaseException):
    """Ends a trial's training function once its measured windows are done.

    A BaseException, like KeyboardInterrupt, so that a user's ``except Exception``
    around the loop cannot swallow it; the worker catches it.
    """


class Trial(Run):
    """A run under tuning: measures the loop in windows and stops it when done.

    Warmup steps come first (``warmup_steps`` and at least ``warmup_s``); then
    ``windows`` windows of at least ``window_s`` seconds. The device is
    synchronised only at window edges; the loss is summed on the device and read
    once per window.

    Each window also reports its loss curve: the step losses (kept on the device,
    read with the window's) in ``CURVE_CHUNKS`` pieces, each with the samples it
    spans, so that divergence is judged on the same samples for every config.

    Then, with ``ceiling_windows``, the two ceilings (``autotune._ceilings``), each
    over that many windows and skipped when ``known_ceilings`` has its key: the
    same loop fed its last few batches again from the device (compute), then the
    loader iterated alone with the transfer (loader).
    """

    def __init__(self, config: Config, device: Any, emit: Callable[..., None], *,  # type: ignore[valid-type]
                 warmup_steps: int, warmup_s: float, window_s: float, windows: int,
                 min_window_steps: int = 2, ceiling_windows: int = 0,
                 known_ceilings: Mapping[str, Sequence[str]] | None = None) -> None:
        super().__init__(config, device)
        self._emit = emit
        self._warmup_steps, self._warmup_s = warmup_steps, warmup_s
        self._window_s, self._windows, self._min_window_steps = window_s, windows, min_window_steps
        self._ceiling_windows = ceiling_windows
        self._known = {part: set(keys) for part, keys in (known_ceilings or {}).items()}
        self._pending: list[Part] = []  # the ceilings still to measure, fixed when measuring starts
        self._ceiling_index = 0
        self._replayed = 0
        self._cached: collections.deque = collections.deque(maxlen=CACHED_BATCHES)
        self._loss_sum = None
        self._loss_steps = 0
        self._step = 0
        self._seen = 0  # samples consumed since the first batch: the x axis of loss comparisons
        self._phase = _WARMUP
        self._windows_done = 0
        self._reset_window(time.perf_counter())
        self._started = self._window_start
        self._beat = self._window_start
        self._announced = False
        self._batch_samples = 0  # of the batch the user's step is training on

    def _after_step(self, loss: Any) -> None:
        loss = loss.detach().float()
        self._loss_sum = loss if self._loss_sum is None else self._loss_sum + loss
        self._loss_steps += 1
        if self._phase == _MEASURE:  # the window's curve: where each step ends, and its loss
            self._step_losses.append(loss)
            self._step_ends.append(self._seen + self._batch_samples)

    def batches(self, loader: Iterable[Any]) -> Iterator[Any]:
        it = super().batches(loader)
        try:
            while True:
                if self._phase == Part.LOADER:
                    self._loader_ceiling(loader, it)  # ends the trial
                t0 = time.perf_counter()
                if self._phase == Part.COMPUTE:  # data already on the device: no loader, no copy
                    batch = self._cached[self._replayed % len(self._cached)]
                    self._replayed += 1
                else:
                    try:
                        batch = next(it)
                    except StopIteration:
                        return
                waited = time.perf_counter() - t0
                if not self._announced:  # the first batch: warmup starts now
                    self._announced = True
                    self._started = self._beat = time.perf_counter()
                    self._emit("resolved", config=self.resolved(), base_batch_size=self._base_batch_size,
                               lr=self.lr)
                if self._phase == _MEASURE and Part.COMPUTE in self._pending:
                    self._cached.append(batch)
                self._batch_samples = _batch_len(batch)
                yield batch
                self._count(batch, waited, t0)
        finally:
            it.close()

    def _reset_window(self, now: float) -> None:
        self._window_start = now
        if isinstance(self._phase, Part):  # a ceiling's window: what it costs the CPUs, too
            from autotune._monitor import tree_cpu_s

            self._win_cpu = tree_cpu_s()
        self._win_steps = 0
        self._win_samples = 0
        self._win_wait = 0.0
        self._step_times: list[float] = []
        self._loss_sum = None
        self._loss_steps = 0
        self._step_losses: list[Any] = []
        self._step_ends: list[int] = []

    def _count(self, batch: Any, waited: float, t0: float) -> None:
        now = time.perf_counter()
        samples = _batch_len(batch)
        self._step += 1
        self._win_steps += 1
        self._win_samples += samples
        self._win_wait += waited
        self._beat_if_due(now)
        if self._phase == Part.COMPUTE:
            if self._window_due(now):
                self._close_ceiling_window(Part.COMPUTE)
            return
        self._seen += samples
        self._step_times.append(now - t0)
        if self._phase == _WARMUP:
            if self._step >= self._warmup_steps and now - self._started >= self._warmup_s:
                self._sync()
                self._phase = _MEASURE
                self._pending = [part for part in (Part.COMPUTE, Part.LOADER) if self._wants(part)]
                loss = self._read_loss()
                self._emit("warmup", steps=self._step, seconds=time.perf_counter() - self._started,
                           samples=self._win_samples, samples_seen=self._seen, loss=loss)
                self._reset_window(time.perf_counter())
                self._stop_if_nonfinite(loss)
        elif self._window_due(now):
            loss = self._close_window()
            self._stop_if_nonfinite(loss)
            if self._windows_done >= self._windows:
                self._next_phase()

    def _beat_if_due(self, now: float) -> None:
        if now - self._beat >= PROGRESS_S:  # the parent's stall detector counts on these
            self._beat = now
            self._emit("progress", step=self._step)

    def _window_due(self, now: float) -> bool:
        return self._win_steps >= self._min_window_steps and now - self._window_start >= self._window_s

    def _read_loss(self) -> float | None:
        """The mean loss since the last read: one device read, at a window edge (already synced)."""
        if self._loss_sum is None:
            return None
        return self._loss_sum.item() / self._loss_steps

    @staticmethod
    def _stop_if_nonfinite(loss: float | None) -> None:
        # A nan or inf loss never recovers: end the trial now, not after its budget.
        if loss is not None and not math.isfinite(loss):
            raise BudgetSpent

    def _close_window(self) -> float | None:
        self._sync()
        now = time.perf_counter()
        loss = self._read_loss()
        extra = {}
        if self.device.type == "cuda":
            import torch

            extra["gpu_mem_peak"] = torch.cuda.max_memory_allocated(self.device)
        self._emit("window", index=self._windows_done, steps=self._win_steps,
                   samples=self._win_samples, samples_seen=self._seen, seconds=now - self._window_start,
                   data_wait=self._win_wait, loss=loss, step_times=self._step_times,
                   curve=self._curve(), wall=time.time(), **extra)
        self._windows_done += 1
        self._reset_window(now)
        return loss

    def _curve(self) -> list[list[float]]:
        """The window's step losses in up to ``CURVE_CHUNKS`` pieces: ``[start, end, mean loss,
        steps]``, samples from the first batch (one device read; the device is synced)."""
        if not self._step_losses:
            return []
        import torch

        losses = torch.stack(self._step_losses).tolist()
        ends = self._step_ends
        start = self._seen - self._win_samples
        curve, n = [], len(losses)
        for i in range(min(CURVE_CHUNKS, n)):
            lo, hi = i * n // min(CURVE_CHUNKS, n), (i + 1) * n // min(CURVE_CHUNKS, n)
            begin = start if lo == 0 else ends[lo - 1]
            curve.append([begin, ends[hi - 1], sum(losses[lo:hi]) / (hi - lo), hi - lo])
        return curve

    # -- ceilings -------------------------------------------------------------------

    def _wants(self, part: Part) -> bool:
        """Whether this trial still has to measure the ceiling of ``part``."""
        if not self._ceiling_windows:
            return False
        return ceiling_key(part, self.resolved()) not in self._known.get(part.value, ())

    def _next_phase(self) -> None:
        """After the windows: the compute ceiling, then the loader's, then the end."""
        if not self._pending:
            self._phase = _DONE
            raise BudgetSpent
        self._phase = self._pending.pop(0)
        self._ceiling_index = 0
        self._reset_window(time.perf_counter())

    def _close_ceiling_window(self, part: Part) -> None:
        from autotune._monitor import tree_cpu_s
        from autotune._probe import usable_cpus

        self._sync()
        now = time.perf_counter()
        self._emit("ceiling", part=part.value, key=ceiling_key(part, self.resolved()),
                   index=self._ceiling_index, steps=self._win_steps, samples=self._win_samples,
                   seconds=now - self._window_start, cpu_s=tree_cpu_s() - self._win_cpu, cpus=usable_cpus(),
                   wall=time.time())
        self._ceiling_index += 1
        self._reset_window(now)
        if self._ceiling_index >= self._ceiling_windows:
            self._next_phase()

    def _loader_ceiling(self, loader: Iterable[Any], it: Iterator[Any]) -> None:
        """Iterate the loader alone, with the transfer, no model; raises BudgetSpent at the end.

        The batches the workers (and the thread prefetcher) queued ahead while the
        model ran are drained first: they cost nothing now and would flatter it.
        """
        from autotune._prefetch import THREAD_DEPTH

        resolved = self.resolved()
        queued = resolved.get("num_workers", 0) * resolved.get("prefetch_factor", 0) \
            + (THREAD_DEPTH if resolved.get("prefetch") == "thread" else 0)
        drain = queued + 1
        epochs = [it]
        try:
            while True:
                try:
                    batch = next(epochs[-1])
                except StopIteration:  # a new epoch: its worker start-up is part of the cost
                    epochs.append(super().batches(loader))
                    continue
                now = time.perf_counter()
                self._step += 1
                self._beat_if_due(now)
                if drain:
                    drain -= 1
                    if not drain:
                        self._sync()
                        self._reset_window(time.perf_counter())
                    continue
                self._win_steps += 1
                self._win_samples += _batch_len(batch)
                elapsed = now - self._window_start
                # A fast loader is timed over a quarter window: its rate is precise by then.
                if self._window_due(now) or (elapsed >= self._window_s / 4
                                             and self._win_steps >= QUICK_LOADER_BATCHES):
                    self._close_ceiling_window(Part.LOADER)  # the last one raises BudgetSpent
        finally:
            for extra in epochs[1:]:
                extra.close()

    def finish(self) -> None:
        """Close a last partial window if the function returned mid-window."""
        if self._phase == _MEASURE and self._win_steps >= self._min_window_steps \
                and self._windows_done < self._windows:
            self._close_window()
        self._emit("end", steps=self._step, windows=self._windows_done,
                   config=self.resolved(), base_batch_size=self._base_batch_size, lr=self.lr)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)


# Phases of a Trial besides the two ceilings (Part.COMPUTE, Part.LOADER).
_WARMUP, _MEASURE, _DONE = "warmup", "measure", "done"


def _batch_len(batch: Any) -> int:
    """Samples in a batch: the leading dimension of its first tensor."""
    import torch

    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            n = _batch_len(item)
            if n:
                return n
    return 0
