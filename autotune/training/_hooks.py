"""A config applied to an unmodified script from outside its code.

Installed in the process before the script runs: every ``torch.utils.data.DataLoader`` it
builds gets the run's loader knobs over its own arguments, every ``torch.optim`` optimizer
its lr scaled to the batch size and ``fused=True`` where the knob says so (the same rules
as ``run.dataloader`` and ``run.optimizer``: ``Run._loader_kwargs``, ``Run._optimizer_kwargs``).

Under tuning, the hooks also find the loader to measure, the *training* loader: the one
whose batch was the last one fetched when an optimizer stepped. From then on its
batches go through the trial's windows (``Trial._measured``), and the loss it reads is
the tensor ``backward()`` was last called on; a validation or test loader is never
measured as training. A loader built by a framework's subclass is a DataLoader too.

The batch knob is the training loader's: once the first step tells it apart, each other loader
built so far (an evaluation loader, often built from the same arguments) is built again with the
script's own batch size, under tuning and in production alike. pytorch/examples' vae shapes its
test batch with its own ``args.batch_size``, and every trial on another batch crashed in its test
pass. A loader built after the first step keeps the knob (a training loader built anew each epoch).
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from autotune.core._loaders import batch_len
from autotune.training._epoch import EpochIterator
from autotune.training._handles import Run
from autotune.training._outside import OutsideLoop


def optimizer_classes(torch: Any) -> list[type]:
    """The optimizers ``torch.optim`` defines (``Optimizer`` itself left out)."""
    base = torch.optim.Optimizer
    return [c for c in vars(torch.optim).values() if isinstance(c, type) and issubclass(c, base) and c is not base]


class Hooks:
    """Patches torch for one run: ``install()`` before the script, ``remove()`` after.

    Args:
        run: What applies the config: a ``ScriptTrial`` (tuning; ``measure=True``) or a
            script ``Recipe`` (production).
        measure: Route the training loader through the trial's windows.

    Attributes:
        training: The training loader, once an optimizer has stepped.
        built_loader: Whether the script built a DataLoader (after the hooks were installed).
        last_fetched: The loader whose batch was fetched last (None: no loader yielded a batch).
        optimizers: The names of the optimizer classes the script built.
        steps: Optimizer steps taken on the training loader's batches.
    """

    def __init__(self, run: Run, measure: bool = False) -> None:
        self.run: Any = run  # (a ScriptTrial or a script Recipe: each has attributes the other lacks)
        self.measure = measure
        self.training: Any = None
        self.optimizers: list[str] = []
        self.last_fetched: Any = None
        self.steps = 0  # optimizer steps since the training loader was found (the first one found it)
        self._built: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # loader -> its record
        self._made_persistent: weakref.WeakSet = weakref.WeakSet()  # loaders whose workers persist by our knob
        self.built_loader = False  # (the first loader's batch size is lr scaling's base until one trains)
        self._local = threading.local()  # depth of our own calls (a loader built inside one passes as is)
        self._loss: Any = None
        self._stepped_at = -1
        self._undo: list[Callable[[], None]] = []
        self._original_iter: Callable[[Any], Iterator[Any]] | None = None
        #: The loop knobs (amp, prefetch, the model's): always under tuning (the baseline learns
        #: whether the script has a model, its own precision), in production where one is on.
        self.loop: OutsideLoop | None = None

    # -- installing --------------------------------------------------------------------

    def install(self) -> Hooks:
        import torch
        from torch.utils.data import DataLoader

        self._patch(DataLoader, "__init__", self._loader_init)
        from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

        self._patch(
            _MultiProcessingDataLoaderIter, "_reset", functools.partial(persistent_reset, self._made_persistent)
        )
        for cls in optimizer_classes(torch):
            if "__init__" in vars(cls):
                self._patch(cls, "__init__", functools.partial(optimizer_init, self, cls))
        loop = OutsideLoop(self.run, find_model=self.measure, stream=None if self.measure else sys.stderr)
        if self.measure or loop.active:
            self.loop = loop
            loop.install(self._patch)
            self._undo.append(loop.remove)
        # (production, another batch, no loop knob: the first step finds the training loader all the same)
        told_apart = self.loop is None and getattr(self.run.config, "batch_size", None) is not None
        if self.loop is not None or told_apart:
            from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

            self._original_iter = DataLoader.__iter__
            self._patch(DataLoader, "__iter__", self._loader_iter)
            self._undo.append(register_optimizer_step_post_hook(self._stepped).remove)
        if self.loop is not None:
            self._patch(torch.Tensor, "backward", self._backward)
            # every Optimizer subclass (a script's own, bitsandbytes', timm's) reaches the loop, as
            # torch's global step hooks see them all: fp16's scaler must route each one's step
            self._patch(torch.optim.Optimizer, "__init__", self._any_optimizer_init)
            if self.measure:
                before = register_optimizer_step_pre_hook(lambda *_: self.run._edge("optimizer"))
                self._undo.append(before.remove)
        elif not told_apart and getattr(self.run, "adaptive", None) is not None:  # production, adapt: every loader
            self._original_iter = DataLoader.__iter__
            self._patch(DataLoader, "__iter__", self._adapted_iter)
        if getattr(self.run, "adaptive", None) is not None:
            self.run.adaptive.make = lambda dataset, **kw: self._call_ours(lambda: DataLoader(dataset, **kw))
        self.run._retain_host_memory()  # (malloc_retain: from the script's start on)
        return self

    def remove(self) -> None:
        while self._undo:
            self._undo.pop()()

    def source(self, loader: Any) -> Iterator[Any]:
        """An epoch of ``loader`` as the script would get it, unmeasured (the loader ceiling's)."""
        assert self._original_iter is not None  # (install patched DataLoader.__iter__ for a trial)
        return self._original_iter(loader)

    def _patch(self, owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        original = vars(owner)[name]
        setattr(owner, name, functools.wraps(original)(make(original)))
        self._undo.append(lambda: setattr(owner, name, original))

    def _ours(self) -> bool:
        return getattr(self._local, "depth", 0) > 0

    def _call_ours(self, call: Callable[[], Any]) -> Any:
        self._local.depth = getattr(self._local, "depth", 0) + 1
        try:
            return call()
        finally:
            self._local.depth -= 1

    # -- DataLoader ----------------------------------------------------------------------

    def _loader_init(self, original: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(original)
        hooks = self

        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            if hooks._ours():
                return original(loader, *args, **kwargs)
            given = dict(signature.bind(loader, *args, **kwargs).arguments)
            given.pop(next(iter(signature.parameters)))  # self
            dataset = given.pop("dataset")
            run = hooks.run
            kept = run._base_batch_size
            kw = hooks._call_ours(lambda: run._loader_kwargs(dataset, given))
            base = run._base_batch_size
            hooks._call_ours(lambda: original(loader, dataset, **kw))
            hooks._built[loader] = (dataset, kw, base)
            if kw.get("persistent_workers") and not given.get("persistent_workers"):
                hooks._made_persistent.add(loader)
            if not hooks.built_loader:
                hooks.built_loader = True
                hooks._call_ours(lambda: run._loader_built(loader, dataset, kw))  # (a recipe's adapt: its loader)
            else:
                run._base_batch_size = kept  # the first loader's stays the base until one trains
                if getattr(run, "adaptive", None) is not None:
                    hooks._call_ours(lambda: run.adaptive.built(loader, dataset, kw))

        return __init__

    def _adapted_iter(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Production with ``adapt``: an epoch of a loader the script built comes from the loader
        in force for it (``autotune.production._adapt.AdaptiveLoaders``), measured, its values moved between
        epochs and stepped down near the RAM budget."""
        hooks = self

        def __iter__(loader: Any) -> Iterator[Any]:
            return original(loader) if hooks._ours() else hooks._epoch_of(loader, original)

        return __iter__

    def _epoch_of(self, loader: Any, original: Callable[..., Any]) -> Iterator[Any]:
        """An epoch of ``loader`` as the script gets it before the loop knobs: in production with
        ``adapt``, of a loader the script built, from the adaptive loaders (``_adapted_iter``)."""
        adaptive = None if self.measure else getattr(self.run, "adaptive", None)
        if adaptive is None or loader not in self._built:
            return original(loader)
        return adaptive.iterate(loader, original, batch_len)

    def _loader_iter(self, original: Callable[..., Any]) -> Callable[..., Any]:
        hooks = self

        def __iter__(loader: Any) -> Iterator[Any]:
            if hooks._ours():
                return original(loader)
            asked = time.perf_counter()  # (its workers start now: inside the epoch's time)
            it = hooks._epoch_of(loader, original)
            # (the script's iterator keeps its API: len(), its class, its workers' shutdown)
            if loader is hooks.training:
                return EpochIterator(it, hooks._trained(loader, it, asked))
            return EpochIterator(it, hooks._watched(loader, it))

        return __iter__

    def _trained(self, loader: Any, it: Iterator[Any], asked: float | None = None) -> Iterator[Any]:
        """An epoch of the training loader (its iterator ``asked`` for then): through the loop
        knobs, and under tuning the trial's windows."""
        if self.loop is not None:
            it = self.loop.epoch(it)
        return self.run._measured(loader, it, asked) if self.measure else it

    def _watched(self, loader: Any, it: Iterator[Any]) -> Iterator[Any]:
        """A loader not known to train: each batch marks it as the last fetched; once it is the
        training loader, the rest of its epoch is trained (``_trained``)."""
        for batch in it:
            self.last_fetched = loader
            if self.loop is not None:
                self.loop.fetched(batch)
            yield batch
            if loader is self.training:
                yield from self._trained(loader, it)
                return

    def _identify(self, loader: Any) -> None:
        """``loader`` trains: the run reports its values, and the log says which one it is."""
        self.training = loader
        record = self._built.get(loader)
        if record is None:  # built before the hooks (or by a class that skips DataLoader.__init__)
            print(
                "autotune: the training loader was built before autotune's hooks; its own settings are measured",
                flush=True,
            )
            return
        dataset, kw, base = record
        self.run._base_batch_size = base
        self.run._loader_built(loader, dataset, kw)
        print(
            f"autotune: measuring the loader of {type(dataset).__name__} (batch_size {kw.get('batch_size')}): "
            "its batches are the ones optimizer.step() follows",
            flush=True,
        )
        self._batch_to_training(loader)

    def _batch_to_training(self, training: Any) -> None:
        from torch.utils.data import DataLoader  # (its __init__, ours, is torch's own under _call_ours)

        own_batch_elsewhere(self._built, training, DataLoader.__init__, self._call_ours, sys.stderr)

    # -- optimizers, backward ------------------------------------------------------------

    def _any_optimizer_init(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``Optimizer.__init__``, which every optimizer class calls: the loop learns of each one once
        its parameter groups are made (the rest of a subclass's ``__init__`` runs after)."""
        loop = self.loop
        assert loop is not None  # (patched only where the loop knobs are: install)

        def __init__(opt: Any, *args: Any, **kwargs: Any) -> None:
            original(opt, *args, **kwargs)
            loop.optimizer_built(opt)

        return __init__

    def _backward(self, original: Callable[..., Any]) -> Callable[..., Any]:
        hooks, loop = self, self.loop
        assert loop is not None  # (patched only where the loop knobs are: install)

        def backward(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            # (read at window edges only: ``Trial._after_step`` keeps it on the device); unscaled where
            # the script's own GradScaler scaled it (``OutsideLoop``'s patch of ``GradScaler.scale``)
            hooks._loss = getattr(tensor, "_autotune_unscaled", tensor)
            hooks.run._edge("backward")
            out = loop.backward(original, tensor, *args, **kwargs)
            if (
                hooks.measure
                and hooks.training is None
                and not loop._optimizers
                and (hooks.last_fetched is None or hooks.run.loaderless)
            ):
                # no optimizer at all (word_language_model, pytorch/examples' regression update their
                # parameters by hand): each backward() is a step of the loop's clock
                hooks.steps += 1
                hooks.run._loaderless_step(hooks._loss)
            return out

        return backward

    def _stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """After any optimizer's step: the loader fetched last trains; its step's loss is counted
        once per batch (a second optimizer stepping on the same batch adds nothing)."""
        self.run._edge("other")
        if self.training is None:
            if self.last_fetched is None or getattr(self.run, "loaderless", False):
                if self.measure:  # a loop without a DataLoader: its steps are the trial's clock
                    self.steps += 1
                    self.run._loaderless_step(self._loss)
                return
            if self.loop is not None:
                self.loop.training_found()
            if not self.measure:  # production: the loop knobs' loader, nothing to report
                self.training = self.last_fetched
                self._batch_to_training(self.training)
                return
            self._identify(self.last_fetched)
        if not self.measure:
            return
        self.steps += 1
        run = self.run
        if not run._announced and run._loader_read_once(optimizer, self._loss):
            self.training = None  # its steps are the clock from here (autotune.worker._loaderless)
        elif run._announced and self._stepped_at != run._step:
            self._stepped_at = run._step
            run._after_step(self._loss)


def own_batch_elsewhere(
    built: Any, training: Any, init: Callable[..., Any], call: Callable[[Callable[[], Any]], Any], out: Any
) -> None:
    """Each loader in ``built`` (loader -> its dataset, kwargs and the script's batch size) but
    ``training``, built with a batch size the knob changed, built again by ``init``
    (``DataLoader.__init__``, run through ``call``) with the script's own, said on ``out``; one that
    holds live workers (persistent, iterated before the first step) is left as it is."""
    for loader, (dataset, kw, base) in list(built.items()):
        if (
            loader is training
            or base is None
            or kw.get("batch_size") in (None, base)
            or getattr(loader, "_iterator", None) is not None
        ):
            continue
        own = {**kw, "batch_size": base}
        loader._DataLoader__initialized = False  # (DataLoader refuses a new batch_size once built)
        call(functools.partial(init, loader, dataset, **own))
        built[loader] = (dataset, own, base)
        print(
            f"autotune: the loader of {type(dataset).__name__} keeps your batch_size {base}: the batch knob "
            "applies to the training loader only",
            flush=True,
            file=out,
        )


def persistent_reset(made_persistent: Any, original: Callable[..., Any]) -> Callable[..., Any]:
    """An epoch of a loader whose workers persist by our knob draws from the loader's generator
    (torch's global one by default) what a new epoch's iterator draws: its workers' base seed.
    A persistent iterator is reset instead and draws nothing, so every random number the script
    drew after its first epoch (the shuffle's order, dropout) differed from its run as written
    (a seeded script's final loss 0.563 under python, 1.219 with 2 persistent workers).
    ``made_persistent``: the loaders whose workers persist by our knob."""
    import torch

    def _reset(it: Any, loader: Any, first_iter: bool = False) -> None:
        if not first_iter and loader in made_persistent:
            torch.empty((), dtype=torch.int64).random_(generator=loader.generator)
        return original(it, loader, first_iter)

    return _reset


def optimizer_init(hooks: Hooks, cls: type, original: Callable[..., Any]) -> Callable[..., Any]:
    """``cls.__init__`` under ``hooks``: the script's arguments, with the config's lr scaling and
    optimizer kwargs (``fused=``) applied, the optimizer named for the trial's facts."""
    signature = inspect.signature(original)
    names = list(signature.parameters)

    def __init__(opt: Any, *args: Any, **kwargs: Any) -> None:
        if hooks._ours():
            return original(opt, *args, **kwargs)
        given = dict(signature.bind(opt, *args, **kwargs).arguments)
        given.pop(names[0])  # self
        params = given.pop(names[1])
        for name, p in signature.parameters.items():  # **kwargs of a subclass: flattened
            if p.kind is p.VAR_KEYWORD:
                given.update(given.pop(name, {}))
        lr = given.pop("lr", signature.parameters["lr"].default if "lr" in signature.parameters else None)
        lr = None if lr is inspect.Parameter.empty else lr
        run = hooks.run
        if "batch_size" not in run._observed and (run.config.lr_scaling or "none") != "none":
            warnings.warn(
                f"{cls.__name__} was built before any DataLoader: its lr is not scaled to the batch size",
                stacklevel=2,
            )
            kw = dict(given)
        else:
            lr, kw = run._optimizer_kwargs(cls, lr, given)
        if lr is not None:
            kw["lr"] = lr
        hooks.optimizers.append(cls.__name__)
        hooks._call_ours(lambda: original(opt, params, **kw))

    return __init__
