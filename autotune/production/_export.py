"""The best config as a YAML snippet, and loading it back as a Recipe."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.core._bounds import RAM_BUDGET, RAM_BUDGET_LEAST, allowed
from autotune.core._config import Config, ConfigError, read_yaml
from autotune.core._knobs import KNOBS, Stage, show_value, unknown_knob_message
from autotune.production._recipe import Adaptation, Recipe

#: The one key of an export that is not a knob: the batch size the lr was written for.
BASE_BATCH_KEY = "base_batch_size"
#: The section saying where the config was measured, and what it found there; ``load``
#: holds it against the machine it runs on.
MEASURED_SECTION = "measured_on"
#: The machine's properties that section keeps (``autotune.machine._probe.Fingerprint`` fields).
MEASURED_ON = ("device", "gpu", "cpus", "torch", "date")


def render(
    resolved: Mapping[str, Any],
    base_batch_size: int | None,
    header: list[str],
    measured_on: Mapping[str, Any] | None = None,
    found: str | None = None,
) -> str:
    """A YAML snippet: one flow mapping per stage, comment lines first.

    Args:
        resolved: Every active knob's effective value (absolute batch size).
        base_batch_size: The user's own batch size (the base of lr scaling).
        header: Comment lines (without "# ").
        measured_on: The machine it was measured on (``MEASURED_ON``), as a last section.
        found: What the study found, in a few words (kept in that section).
    """
    import yaml

    sections: dict[str, dict[str, Any]] = {}
    for name, value in resolved.items():
        sections.setdefault(KNOBS[name].stage.value, {})[name] = value
    if base_batch_size is not None:
        sections.setdefault(Stage.OPTIMIZER.value, {})[BASE_BATCH_KEY] = base_batch_size
    if measured_on:
        plain = {k: v if v is None or isinstance(v, (bool, int, float)) else str(v) for k, v in measured_on.items()}
        sections[MEASURED_SECTION] = {**plain, **({"found": found} if found else {})}
    lines = [f"# {line}" for line in header]
    for section in [*(s.value for s in Stage), MEASURED_SECTION]:
        if section in sections:
            body = yaml.safe_dump(sections[section], default_flow_style=True, sort_keys=False, width=1 << 16).strip()
            lines.append(f"{section}: {body}")
    return "\n".join(lines) + "\n"


def recipe_from_mapping(data: Any, where: str, device: Any = "auto", **recipe: Any) -> Recipe:
    """Validate a parsed export (same rules as a space file) and build its Recipe."""
    allowed = ", ".join([*(s.value for s in Stage), MEASURED_SECTION])
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: an autotune export is a mapping of sections ({allowed}); got {data!r}")
    values: dict[str, Any] = {}
    base = None
    for section, body in data.items():
        if section == MEASURED_SECTION:
            continue
        if section not in {s.value for s in Stage}:
            raise ConfigError(f"{where}: {section}: unknown section; allowed: {allowed}")
        if not isinstance(body, Mapping):
            raise ConfigError(f"{where}: {section}: must be a mapping of knob: value; got {body!r}")
        for key, value in body.items():
            if section == Stage.OPTIMIZER.value and key == BASE_BATCH_KEY:
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise ConfigError(f"{where}: {section}.{key}: must be an integer >= 1; got {value!r}")
                base = value
                continue
            if key not in KNOBS:
                raise ConfigError(f"{where}: {section}.{unknown_knob_message(key)}")
            if KNOBS[key].stage.value != section:
                raise ConfigError(f"{where}: {section}.{key}: {key} belongs in section {KNOBS[key].stage.value}")
            try:
                values[key] = KNOBS[key].validate(value)
            except ValueError as exc:
                raise ConfigError(f"{where}: {section}.{key}: {exc}") from None
    return Recipe(Config(**values), device, base_batch_size=base, **recipe)


def load(
    path: str | Path | None = None,
    device: Any = "auto",
    *,
    check: bool = True,
    report_every: float | None = None,
    quiet: bool = False,
    adapt: bool = False,
    tracking_uri: str | None = None,
    ram_budget: float | None = None,
) -> Recipe:
    """Load an exported YAML as a Recipe for production training.

    ``load()`` with no path gives the baseline: the code as written, PyTorch's
    defaults for the rest.

    With ``check`` (the default), the export is held against this machine: a
    knob value it cannot honour (pinned memory, a CUDA stream, fp16 or cuDNN
    without CUDA; bf16 or fused kernels where they do not run) is dropped,
    your code's own value used instead, with a warning naming it; a different
    GPU, CPU count or torch version than the export was measured on is warned
    about (the config may not be the fastest here: tune again).

    Example:
        >>> train(autotune.load("best.yaml", report_every=60))  # doctest: +SKIP

    Args:
        report_every: Print the samples/s training reaches every that many seconds.
        quiet: Do not print the line saying what the recipe trains with.
        adapt: Keep measuring the loop's data wait and, between epochs, move ``num_workers``
            and ``prefetch_factor`` when it rises or falls past thresholds, each move printed
            once (docs/production.md says how); nothing that changes the math moves.
        tracking_uri: With ``adapt``, log the production job's epochs and the loader values in
            force to an MLflow run there (experiment ``autotune-production``).
        ram_budget: With ``adapt``, the GiB of host RAM the training process and its workers
            may hold (default: 75% of what this machine has available, as a study's trial);
            past 85% of it, ``num_workers`` and ``prefetch_factor`` step down to what fits
            (the memory margin of docs/production.md), each step printed, instead of the job being killed.

    Raises:
        ConfigError: the file, the key, the value and what is allowed.
    """
    if ram_budget is not None and not allowed(ram_budget, RAM_BUDGET):
        raise ConfigError(
            f"load(ram_budget={ram_budget!r}): must be a finite number of GiB >= {RAM_BUDGET_LEAST} "
            "(as a study's --ram-budget)"
        )
    if path is None:
        adaptation = Adaptation(tracking_uri, ram_budget) if adapt else None
        return recipe_from_mapping({}, "defaults", device, report_every=report_every, quiet=quiet, adapt=adaptation)
    data = read_yaml(Path(path))
    measured = data.get(MEASURED_SECTION) if isinstance(data, Mapping) else None
    section = measured if isinstance(measured, Mapping) else {}

    def gib(key: str) -> float | None:  # what the study's winner held, where the export says
        value = section.get(key)
        return float(value) if isinstance(value, (int, float)) else None

    adaptation = Adaptation(tracking_uri, ram_budget, gib("ram_peak_gib"), gib("gpu_mem_peak_gib")) if adapt else None
    origin = f"{path}" + (f" ({measured['found']})" if isinstance(measured, Mapping) and measured.get("found") else "")
    if check and isinstance(data, Mapping):
        data = _honourable(data, str(path), device, section)
    return recipe_from_mapping(
        data, str(path), device, origin=origin, report_every=report_every, quiet=quiet, adapt=adaptation
    )


def _honourable(data: Mapping[str, Any], where: str, device: Any, measured: Mapping[str, Any]) -> dict[str, Any]:
    """The export without the knob values this machine cannot honour, each dropped with a
    warning; and a warning when this machine is not the one it was measured on."""
    import warnings

    from autotune.machine._probe import probe
    from autotune.training._ranks import job_cpus

    # A fused step is tried only for an export that wants it: in a DDP rank, one tried first made
    # gloo's process group deadlock at the script's end (autotune.machine._probe._fused_reason).
    wants_fused = any(isinstance(body, Mapping) and body.get("fused_optimizer") is True for body in data.values())
    # (in a rank of `autotune exec --nproc-per-node`, kept to its share of the CPUs: the job's count,
    # else every rank warned that a study on the same machine was "measured on another machine")
    here = probe(str(device) if device != "auto" else "auto", cpus=job_cpus(), try_fused=wants_fused)
    kept: dict[str, Any] = {}
    dropped = []
    for section, body in data.items():
        if not isinstance(body, Mapping) or section == MEASURED_SECTION:
            kept[section] = body
            continue
        kept[section] = {}
        for key, value in body.items():
            cap = KNOBS[key].need(value) if key in KNOBS else None
            if cap is not None and not here.capabilities[cap.value]:
                dropped.append(f"{key}={show_value(value)} ({here.reasons[cap.value]})")
            else:
                kept[section][key] = value
    if dropped:
        warnings.warn(
            f"{where}: this machine cannot honour {'; '.join(dropped)}: your code's own value is used for each",
            stacklevel=3,
        )
    differs = differences(measured, here)
    if differs:
        warnings.warn(
            f"{where} was measured on another machine ({'; '.join(differs)}): its config may not "
            "be the fastest here; `autotune run` tunes for this one",
            stacklevel=3,
        )
    return kept


def differences(measured: Mapping[str, Any], here: Any) -> list[str]:
    """How this machine (``here``, a ``autotune.machine._probe.Fingerprint``) differs from the one an
    export was measured on (its ``measured_on``): ``["cpus 16 there, 2 here"]``; empty: the same."""
    return [
        f"{name} {measured[name] or 'none'} there, {mine or 'none'} here"
        for name, mine in (
            ("device", here.device.split(":")[0]),
            ("gpu", here.gpu),
            ("cpus", here.cpus),
            ("torch", here.torch),
        )
        if name in measured and _differs(name, measured[name], mine)
    ]


def _differs(name: str, there: Any, here: Any) -> bool:
    if name == "device":
        return str(there).split(":")[0] != str(here)
    if name == "torch":  # a patch release changes no speed that matters here
        return str(there).split("+")[0].rsplit(".", 1)[0] != str(here).split("+")[0].rsplit(".", 1)[0]
    return there != here
