"""Production's handle: a tuned config applied to a training function, ``train(autotune.load(path))``,
or to an unmodified script by ``autotune exec`` (``autotune.training._hooks``)."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

from autotune.core._config import REMOVED_IN, Config
from autotune.core._knobs import KNOBS, show_value
from autotune.core._loaders import batch_len
from autotune.training._handles import Run


@dataclasses.dataclass(frozen=True)
class Adaptation:
    """How a recipe's loaders adapt between epochs (``autotune.load(path, adapt=True)`` makes one
    from the export; see the manual's production page).

    Attributes:
        tracking_uri: The MLflow store the production job's epochs are logged to; None: not logged.
        ram_budget: GiB of host RAM the training process and its workers may hold (None: the default,
            the share of the machine's RAM a study's budget takes).
        ram_peak: GiB of host RAM the study's winner held (the export's), where known.
        gpu_peak: GiB of GPU memory the study's winner held (the export's), where known.
    """

    tracking_uri: str | None = None
    ram_budget: float | None = None
    ram_peak: float | None = None
    gpu_peak: float | None = None


#: ``Recipe``'s keyword arguments before they were grouped in an ``Adaptation``.
ADAPT_KWARGS = ("tracking_uri", "ram_budget", "ram_peak", "gpu_peak")


def adaptation(adapt: Adaptation | bool | None, moved: dict[str, Any]) -> Adaptation | None:
    """``Recipe``'s ``adapt`` as an ``Adaptation`` (None: its loaders do not adapt). ``True``, with
    the keyword arguments it took before they were grouped (``moved``: with a DeprecationWarning),
    is one as before; ``False`` is None.

    >>> adaptation(True, {}), adaptation(False, {}), adaptation(Adaptation(ram_budget=4.0), {}).ram_budget
    (Adaptation(tracking_uri=None, ram_budget=None, ram_peak=None, gpu_peak=None), None, 4.0)
    """
    unknown = sorted(set(moved) - set(ADAPT_KWARGS))
    if unknown:
        raise TypeError(f"Recipe() got an unexpected keyword argument {unknown[0]!r}")
    if moved:
        if isinstance(adapt, Adaptation):
            raise TypeError(f"Recipe(): {', '.join(moved)} belong in adapt=Adaptation(...), which is given")
        listed = ", ".join(f"{k}=" for k in moved)
        warnings.warn(
            f"Recipe({listed}...) is deprecated and will be removed in {REMOVED_IN}: pass "
            f"adapt=autotune.Adaptation({listed}...)",
            DeprecationWarning,
            stacklevel=3,
        )
    if isinstance(adapt, Adaptation):
        return adapt
    return Adaptation(**moved) if adapt else None


class Recipe(Run):
    """A tuned config applied in production: ``train(autotune.load("best.yaml"))``.

    Says once, on its first batch, what it trains with (on stderr); with
    ``report_every``, also samples/s every that many seconds, so that production
    can be held against the figure the study measured.

    Attributes:
        base_batch_size: The user batch size the recipe was tuned from (the base of
            its lr scaling), or None.
        origin: Where it came from (an export's path and what the study found there).
        adaptive: With ``adapt``, the loaders it moves between epochs (``autotune.load(path,
            adapt=True)``); else None.
    """

    def __init__(
        self,
        config: Config,
        device: Any = "auto",
        base_batch_size: int | None = None,
        *,
        origin: str | None = None,
        report_every: float | None = None,
        quiet: bool = False,
        adapt: Adaptation | bool | None = None,
        **moved: Any,
    ) -> None:
        adapt = adaptation(adapt, moved)
        super().__init__(config, device)
        self.base_batch_size = base_batch_size
        self._loaders = 0  # built so far
        self.origin = origin
        self._report_every, self._quiet = report_every, quiet
        self.adaptive = None  # with adapt: the loaders it moves between epochs (autotune.production._adapt)
        if adapt is not None:
            from autotune.machine._probe import usable_cpus
            from autotune.production._adapt import AdaptiveLoaders
            from autotune.production._prodlog import production_log

            self.adaptive = AdaptiveLoaders(
                usable_cpus(),
                log=production_log(adapt.tracking_uri, origin),
                budget=int(adapt.ram_budget * 2**30) if adapt.ram_budget else None,
            )
            self.adaptive.ram_peak, self.adaptive.gpu_peak = adapt.ram_peak, adapt.gpu_peak  # GiB, from the export
        self._reported: tuple[float, int] | None = None  # (since, samples) of the report under way
        self._said = False
        self.apply_backends()
        self._apply_alloc_conf()

    def dataloader(self, dataset: Any, **kwargs: Any):
        loader = super().dataloader(dataset, **kwargs)
        if self._loaders == 1 and self.base_batch_size is not None and self._base_batch_size != self.base_batch_size:
            warnings.warn(
                f"the recipe was tuned with batch_size={self.base_batch_size} in the code, which now "
                f"passes {self._base_batch_size}: it runs at {loader.batch_size}, as many times the code's "
                "as tuned, and its lr scaling starts from the code's value",
                stacklevel=2,
            )
        return loader

    def _batch_value(self, value: Any) -> Any:
        """The export's batch size as the study applied it: relative to each loader's own (a test
        loader of 500 stays 500 where the training loader's 64 stays 64; written absolute, the
        export gave every loader the training's batch size)."""
        if isinstance(value, int) and not isinstance(value, bool) and self.base_batch_size:
            return f"{value / self.base_batch_size!r}x"
        return value

    def _loader_built(self, loader: Any, dataset: Any, kw: dict[str, Any]) -> None:
        super()._loader_built(loader, dataset, kw)
        self._loaders += 1
        if self.adaptive is not None:
            self.adaptive.built(loader, dataset, kw)

    def batches(self, loader: Iterable[Any]) -> Iterator[Any]:
        if not self._said and not self._quiet:
            self._said = True
            knobs = " ".join(f"{k}={show_value(v)}" for k, v in self.resolved().items())
            print(
                f"autotune: training with {self.origin or 'the defaults'} on {self.device}: {knobs}"
                + (self._adapting() if self.adaptive else ""),
                file=sys.stderr,
                flush=True,
            )
        epoch = (
            self.adaptive.iterate(loader, lambda chosen: Run.batches(self, chosen), batch_len)
            if self.adaptive is not None
            else Run.batches(self, loader)
        )
        if not self._report_every:
            yield from epoch
            return
        # The count spans epochs (one call of batches each): epochs shorter than report_every
        # would otherwise never report. A batch counts once its step is done (when the loop
        # asks for the next), so a period's rate is steps finished in it, never one ahead.
        if self._reported is None:
            self._reported = (time.perf_counter(), 0)
        for batch in epoch:
            yield batch
            start, samples = self._reported
            samples += batch_len(batch)
            now = time.perf_counter()
            if now - start >= self._report_every:
                print(
                    f"autotune: {samples / (now - start):,.0f} samples/s over the last {now - start:.3g} s",
                    file=sys.stderr,
                    flush=True,
                )
                start, samples = now, 0
            self._reported = (start, samples)

    def _adapting(self) -> str:
        from autotune.production._adapt import adapting_line

        return adapting_line(self.adaptive) if self.adaptive is not None else ""

    def _apply_alloc_conf(self) -> None:
        """Set ``cuda_alloc_conf`` for the CUDA allocator, or say it is too late for it."""
        value = self.config.cuda_alloc_conf
        knob = KNOBS["cuda_alloc_conf"]
        if value is None or value == knob.default or knob.env_var is None:  # (the registry gives it one)
            return
        if os.environ.get(knob.env_var) == value:
            return
        import torch

        if torch.cuda.is_initialized():
            warnings.warn(
                f"cuda_alloc_conf={value} not applied: CUDA had started before the recipe was "
                f"made; set {knob.env_var}={value} in the environment (or load the recipe before "
                "any CUDA call)",
                stacklevel=3,
            )
            return
        os.environ[knob.env_var] = value  # read by the caching allocator when CUDA starts
