"""A trial of an unmodified script: the trial's windows over the loader the script trains
from (``autotune.training._hooks`` finds it), with nothing routed through a handle."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from autotune.training._hooks import Hooks
from autotune.training._script import SCRIPT_STAGES
from autotune.worker._trial import Trial


class ScriptTrial(Trial):
    """``Trial`` for a script: the batches are the loader's own (the script moves them to its
    device), every CUDA device is synchronised at window edges (the script chose which), and the
    backend flags it reports are the ones in force, the script's own settings included."""

    stages = SCRIPT_STAGES

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hooks = Hooks(self, measure=True)

    def facts(self) -> dict[str, Any]:
        from autotune.training._frameworks import detect

        loop = self.hooks.loop
        assert loop is not None  # installed with measure=True, before the script runs
        found = {**super().facts(), **loop.facts(), **({"loaderless": True} if self.loaderless else {})}
        framework = detect()
        return {**found, "framework": framework} if framework else found

    def _source(self, loader: Iterable[Any]) -> Iterator[Any]:
        return self.hooks.source(loader)

    def _after_step(self, loss: Any) -> None:
        if loss is not None:  # (no backward() seen: an optimizer with a closure; no loss to judge)
            super()._after_step(loss)

    def _sync(self) -> None:
        import torch

        if torch.cuda.is_initialized():
            torch.cuda.synchronize()

    def resolved(self) -> dict[str, Any]:
        import torch

        values = super().resolved()
        loop = self.hooks.loop
        assert loop is not None  # installed with measure=True, before the script runs
        values.update({k: v for k, v in loop.observed().items() if k in values})
        # What is in force now: a script that sets a flag itself after the config did wins, and says so here.
        values["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
        values["tf32"] = torch.get_float32_matmul_precision() != "highest"
        return values
