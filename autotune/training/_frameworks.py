"""Frameworks that own some knobs: a script that trains through Lightning or the Hugging Face
``Trainer`` is tuned through the same hooks as any script (their loaders are DataLoaders, their
optimizers ``torch.optim``'s), and its export also gives the winner in the framework's own
settings, for a user who would rather write them into their config than run ``autotune exec``."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from autotune.core._knobs import KNOBS
from autotune.training._framework_knobs import LIGHTNING_PRECISION

LIGHTNING, TRANSFORMERS = "lightning", "transformers"

#: The loader knobs as the Trainer's TrainingArguments name them.
_TRAINING_ARGUMENTS = {
    "num_workers": "dataloader_num_workers",
    "persistent_workers": "dataloader_persistent_workers",
    "prefetch_factor": "dataloader_prefetch_factor",
    "pin_memory": "dataloader_pin_memory",
}
_LOADER = ("batch_size", "num_workers", "persistent_workers", "prefetch_factor", "pin_memory")


def detect(modules: Mapping[str, Any] | None = None) -> str | None:
    """The framework the script trained through, from what it imported (None: plain torch)."""
    modules = sys.modules if modules is None else modules
    if "transformers.trainer" in modules:
        return TRANSFORMERS
    if "lightning" in modules or "pytorch_lightning" in modules:
        return LIGHTNING
    return None


def own_settings(framework: str | None, config: Mapping[str, Any], baseline: Mapping[str, Any]) -> str | None:
    """The winner's knobs that differ from the baseline's (``config`` and ``baseline``: resolved
    configs) as ``framework``'s own settings, in one line (None: no framework, or nothing to set).

    >>> own_settings("transformers", {"num_workers": 4, "persistent_workers": True, "fused_optimizer": True,
    ...               "batch_size": 32, "tf32": False}, {"num_workers": 0, "batch_size": 16, "tf32": False})
    'in TrainingArguments: per_device_train_batch_size=32, dataloader_num_workers=4, dataloader_persistent_workers=True, optim="adamw_torch_fused"'
    >>> own_settings("lightning", {"num_workers": 2, "pin_memory": True, "batch_size": 16}, {"batch_size": 16})
    'in your Lightning script: DataLoader(num_workers=2, pin_memory=True)'
    >>> own_settings("lightning", {"amp": "bf16", "compile": "default"}, {"amp": "off", "compile": "off"})
    'in your Lightning script: Trainer(precision="bf16-mixed"); model.compile() before Trainer.fit'
    >>> own_settings("transformers", {"amp": "fp16", "compile": "max-autotune-no-cudagraphs"}, {"amp": "off"})
    'in TrainingArguments: fp16=True, torch_compile=True, torch_compile_mode="max-autotune-no-cudagraphs"'
    """
    # (a knob the baseline does not report, inactive there, counts at its default: prefetch_factor=2 without workers)
    changed = {
        k: v
        for k, v in config.items()
        if v is not None and baseline.get(k, KNOBS[k].default if k in KNOBS else None) != v
    }
    scaled = "batch_size" in changed and config.get("lr_scaling") not in (None, "none")
    if framework == TRANSFORMERS:
        parts = [f"per_device_train_batch_size={changed['batch_size']}"] if "batch_size" in changed else []
        parts += [f"{_TRAINING_ARGUMENTS[k]}={changed[k]!r}" for k in _TRAINING_ARGUMENTS if k in changed]
        if "fused_optimizer" in changed:
            parts.append(f'optim="{"adamw_torch_fused" if changed["fused_optimizer"] else "adamw_torch"}"')
        if "tf32" in changed:
            parts.append(f"tf32={bool(changed['tf32'])!r}")
        if changed.get("amp") in ("bf16", "fp16"):
            parts.append(f"{changed['amp']}=True")
        if changed.get("compile") not in (None, "off"):
            parts.append(
                "torch_compile=True"
                + ("" if changed["compile"] == "default" else f', torch_compile_mode="{changed["compile"]}"')
            )
        where, sep = "in TrainingArguments", ", "
    elif framework == LIGHTNING:
        loader = [f"{k}={changed[k]!r}" for k in _LOADER if k in changed]
        parts = [f"DataLoader({', '.join(loader)})"] if loader else []
        if "fused_optimizer" in changed:
            parts.append(f"fused={bool(changed['fused_optimizer'])!r} in configure_optimizers' optimizer")
        if changed.get("amp") in ("bf16", "fp16"):
            parts.append(f'Trainer(precision="{LIGHTNING_PRECISION[changed["amp"]]}")')
        if changed.get("tf32"):
            parts.append('torch.set_float32_matmul_precision("high") before Trainer.fit')
        if changed.get("channels_last"):
            parts.append("model.to(memory_format=torch.channels_last) before Trainer.fit")
        if changed.get("compile") not in (None, "off"):
            parts.append(
                "model.compile("
                + ("" if changed["compile"] == "default" else f'mode="{changed["compile"]}"')
                + ") before Trainer.fit"
            )
        where, sep = "in your Lightning script", "; "
    else:
        return None
    if not parts:
        return None
    return f"{where}: {sep.join(parts)}" + (
        f" (and the learning rate scaled {config['lr_scaling']} with the batch size)" if scaled else ""
    )
