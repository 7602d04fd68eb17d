"""The knob registry: the one list of everything autotune can tune.

Space validation, the worker, `doctor`, the CLI help, export and YAML loading all
read :data:`KNOBS`; nothing else names the knobs.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Callable, Mapping
from typing import Any


class Stage(str, enum.Enum):
    """Where a knob is applied. The values are also the sections of an exported YAML."""

    DATALOADER = "dataloader"
    TRANSFER = "transfer"
    OPTIMIZER = "optimizer"
    PRECISION = "precision"
    MODEL = "model"
    BACKENDS = "backends"
    ENVIRONMENT = "environment"


class Part(str, enum.Enum):
    """The part of a training step a knob can make faster or slower.

    Each has its own ceiling (see ``autotune.core._ceilings``): the loader's (batches
    made and moved to the device, no model) and the compute's (the step on
    batches already on the device).
    """

    LOADER = "loader"
    COMPUTE = "compute"


class Capability(str, enum.Enum):
    """A property of the machine that some knob values need (probed by `doctor`)."""

    CUDA = "cuda"
    CUDNN = "cudnn"
    BF16 = "bf16"
    FUSED_OPTIMIZER = "fused_optimizer"
    COMPILE = "compile"
    GLIBC_MALLOC = "glibc_malloc"


_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*x\s*$")


def parse_relative(value: Any) -> float | None:
    """Return N for a string "Nx" (N times a knob's reference), else None.

    >>> parse_relative("4x"), parse_relative("0.5x"), parse_relative(64)
    (4.0, 0.5, None)
    """
    if isinstance(value, str):
        match = _RELATIVE.match(value)
        if match:
            return float(match.group(1))
    return None


def batch_of(batch_size: Any, base_batch_size: int | None) -> int | None:
    """A ``batch_size`` knob's value in samples, as ``Run.dataloader`` passes it: ``"4x"``
    times the code's own (at least 1), an int as is, None for the code's own; None when
    that is unknown.

    >>> batch_of("4x", 64), batch_of("0.01x", 64), batch_of(100, 64), batch_of(None, 64), batch_of("2x", None)
    (256, 1, 100, 64, None)
    """
    factor = parse_relative(batch_size)
    if factor is not None:
        return max(1, round(factor * base_batch_size)) if base_batch_size else None
    return batch_size if isinstance(batch_size, int) else base_batch_size


def show_value(value: Any) -> str:
    """A knob value as people read it: booleans as YAML writes them (``true``)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclasses.dataclass(frozen=True)
class Knob:
    """One tunable setting.

    Attributes:
        name: The key in spaces, configs and exports.
        kind: ``bool``, ``int``, ``str`` (one of ``choices``) or ``batch``
            (an int, or "Nx" = N times the user's own batch size).
        stage: Where it is applied.
        default: PyTorch's own default (what the baseline gets unless the user's
            code passes something else).
        doc: One line for help texts.
        choices: Allowed values of a ``str`` knob.
        minimum: Smallest allowed value of an ``int``/``batch`` knob.
        relative_to: What "Nx" and ``auto`` mean for an int range of this knob.
        needs: Capabilities that particular values need, e.g. ``{"fp16": CUDA}``.
        active_when: ``(other knob, predicate)``: the knob only exists when the
            predicate holds for the other knob's value (conditional knobs).
        dataloader_kwarg: The ``torch.utils.data.DataLoader`` argument it sets.
        env_var: The environment variable it sets in the worker before torch
            starts (the value "default" leaves the variable as it is).
        acts_on: The parts of a step whose speed it changes (none for a knob
            that only changes the numbers, like ``lr_scaling``).
    """

    name: str
    kind: str
    stage: Stage
    default: Any
    doc: str
    choices: tuple[Any, ...] | None = None
    minimum: int | None = None
    relative_to: str | None = None
    needs: Mapping[Any, Capability] = dataclasses.field(default_factory=dict)
    active_when: tuple[str, Callable[[Any], bool]] | None = None
    dataloader_kwarg: str | None = None
    env_var: str | None = None
    acts_on: frozenset[Part] = frozenset()

    def allowed(self) -> str:
        """Describe the allowed values, for error messages."""
        if self.kind == "bool":
            return "true or false"
        if self.kind == "str":
            return "one of " + ", ".join(map(str, self.choices or ()))
        if self.kind == "batch":
            return f"an integer >= {self.minimum} or 'Nx' (N times {self.relative_to})"
        return f"an integer >= {self.minimum}"

    def validate(self, value: Any) -> Any:
        """Return ``value`` if it is one this knob takes, else raise ``ValueError``."""
        ok = False
        if self.kind == "bool":
            ok = isinstance(value, bool)
        elif self.kind == "str":
            ok = isinstance(value, str) and value in (self.choices or ())
        elif self.kind in ("int", "batch"):
            if isinstance(value, int) and not isinstance(value, bool):
                ok = self.minimum is None or value >= self.minimum
            elif self.kind == "batch":
                factor = parse_relative(value)
                ok = factor is not None and factor > 0
        if not ok:
            hint = ""
            if self.kind == "str" and isinstance(value, bool):
                hint = ' (YAML reads off/on/no/yes as booleans: quote it, e.g. "off")'
            raise ValueError(f"{value!r} is not allowed; allowed: {self.allowed()}{hint}")
        return value

    def need(self, value: Any) -> Capability | None:
        """The capability ``value`` of this knob needs, or None (any value that is not a
        plain scalar needs none)."""
        if not isinstance(value, (bool, int, str, float)):
            return None
        return self.needs.get(value)

    def is_active(self, values: Mapping[str, Any]) -> bool:
        """Whether this knob applies, given the values of the others.

        A condition on a knob that ``values`` leaves unset holds: the user's
        code decides that knob, and the run handle drops what cannot apply.
        """
        if self.active_when is None:
            return True
        other, predicate = self.active_when
        value = values.get(other)
        return value is None or predicate(value)


def _workers_on(num_workers: int) -> bool:
    return num_workers > 0


def _batch_changed(batch_size: Any) -> bool:
    return parse_relative(batch_size) != 1.0


_LOADER, _COMPUTE = frozenset({Part.LOADER}), frozenset({Part.COMPUTE})

_KNOB_LIST = [
    Knob(
        "batch_size",
        "batch",
        Stage.DATALOADER,
        "1x",
        "Samples per step.",
        minimum=1,
        relative_to="the user's batch size",
        dataloader_kwarg="batch_size",
        acts_on=_LOADER | _COMPUTE,
    ),
    Knob(
        "num_workers",
        "int",
        Stage.DATALOADER,
        0,
        "DataLoader worker processes.",
        minimum=0,
        relative_to="usable CPUs",
        dataloader_kwarg="num_workers",
        acts_on=_LOADER,
    ),
    Knob(
        "pin_memory",
        "bool",
        Stage.DATALOADER,
        False,
        "Page-locked batches, copied with non_blocking=True.",
        needs={True: Capability.CUDA},
        dataloader_kwarg="pin_memory",
        acts_on=_LOADER,
    ),
    Knob(
        "persistent_workers",
        "bool",
        Stage.DATALOADER,
        False,
        "Keep DataLoader workers alive between epochs.",
        active_when=("num_workers", _workers_on),
        dataloader_kwarg="persistent_workers",
        acts_on=_LOADER,
    ),
    Knob(
        "prefetch_factor",
        "int",
        Stage.DATALOADER,
        2,
        "Batches each worker loads ahead.",
        minimum=1,
        active_when=("num_workers", _workers_on),
        dataloader_kwarg="prefetch_factor",
        acts_on=_LOADER,
    ),
    Knob(
        "in_order",
        "bool",
        Stage.DATALOADER,
        True,
        "Batches in the sampler's order (false: as the workers finish them, so that one slow "
        "worker does not hold up the rest); applied only where the loader shuffles.",
        active_when=("num_workers", _workers_on),
        dataloader_kwarg="in_order",
        acts_on=_LOADER,
    ),
    Knob(
        "prefetch",
        "str",
        Stage.TRANSFER,
        "none",
        "How the next batches reach the device: inline, a background thread, or a CUDA side stream.",
        choices=("none", "thread", "cuda_stream"),
        needs={"cuda_stream": Capability.CUDA},
        acts_on=_LOADER,
    ),
    Knob(
        "lr_scaling",
        "str",
        Stage.OPTIMIZER,
        "none",
        "How the user's lr follows the batch size away from the user's own.",
        choices=("none", "linear", "sqrt"),
        active_when=("batch_size", _batch_changed),
    ),
    Knob(
        "fused_optimizer",
        "bool",
        Stage.OPTIMIZER,
        False,
        "Fused optimizer kernels (fused=True) where the optimizer accepts them.",
        needs={True: Capability.FUSED_OPTIMIZER},
        acts_on=_COMPUTE,
    ),
    Knob(
        "amp",
        "str",
        Stage.PRECISION,
        "off",
        "Automatic mixed precision.",
        choices=("off", "bf16", "fp16"),
        needs={"bf16": Capability.BF16, "fp16": Capability.CUDA},
        acts_on=_COMPUTE,
    ),
    Knob(
        "cudnn_benchmark",
        "bool",
        Stage.BACKENDS,
        False,
        "torch.backends.cudnn.benchmark: autotune conv algorithms per shape.",
        needs={True: Capability.CUDNN},
        acts_on=_COMPUTE,
    ),
    Knob(
        "tf32",
        "bool",
        Stage.BACKENDS,
        False,
        "TF32 matmuls (torch.set_float32_matmul_precision('high')).",
        needs={True: Capability.CUDA},
        acts_on=_COMPUTE,
    ),
    Knob(
        "malloc_retain",
        "bool",
        Stage.BACKENDS,
        False,
        "glibc's malloc keeps freed memory for the next step instead of handing it back and "
        "faulting it in again (mallopt); host RAM stays at its peak.",
        needs={True: Capability.GLIBC_MALLOC},
        acts_on=_LOADER | _COMPUTE,
    ),
    # Applied by run.model(module): a function that does not call it leaves them inactive.
    Knob(
        "channels_last",
        "bool",
        Stage.MODEL,
        False,
        "Model and 4-D inputs in channels-last (NHWC) memory format: faster convolutions on tensor cores and oneDNN.",
        acts_on=_COMPUTE,
    ),
    Knob(
        "compile",
        "str",
        Stage.MODEL,
        "off",
        "torch.compile the model (reduce-overhead captures CUDA graphs); compile time is kept out "
        "of the measured windows and reported.",
        choices=("off", "default", "reduce-overhead", "max-autotune-no-cudagraphs"),
        needs={
            "default": Capability.COMPILE,
            "max-autotune-no-cudagraphs": Capability.COMPILE,
            "reduce-overhead": Capability.CUDA,
        },
        acts_on=_COMPUTE,
    ),
    Knob(
        "cuda_alloc_conf",
        "str",
        Stage.ENVIRONMENT,
        "default",
        "The CUDA caching allocator's settings, set before torch starts.",
        choices=("default", "expandable_segments:True"),
        needs={"expandable_segments:True": Capability.CUDA},
        env_var="PYTORCH_CUDA_ALLOC_CONF",
        acts_on=_COMPUTE,
    ),
]

#: Every knob by name, in the order they are sampled (a knob's condition refers
#: only to knobs listed before it).
KNOBS: dict[str, Knob] = {k.name: k for k in _KNOB_LIST}
#: The knobs ``run.model`` applies: inactive in a run whose function never calls it.
MODEL_KNOBS = tuple(k.name for k in _KNOB_LIST if k.stage is Stage.MODEL)


def unknown_knob_message(name: str) -> str:
    """The error text for a key that names no knob."""
    return f"{name}: unknown knob; known: {', '.join(KNOBS)}"
