"""Every option of a study, each defined once: its default, bounds and help in one field.

``Basics`` holds the everyday options, which ``autotune.tune`` takes flat; ``Options`` holds the
rest, in groups: how a trial is measured (``Measure``), its limits (``Limits``), when a figure is
believed (``Noise``), how trials are judged (``Judge``) and where the study is kept (``Stores``).
``autotune run``'s flags are generated from the same fields (one flag per field, same name), and
each group checks its values on construction, with the error the CLI prints.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from autotune.core._bounds import RAM_BUDGET, Bound
from autotune.core._bounds import check as check_bound
from autotune.core._guard import DIVERGENCE_TOLERANCE
from autotune.core._prune import PRUNE_FRACTION
from autotune.core._whole_runs import HORIZON_HELP
from autotune.machine._launch import Budget
from autotune.machine._noise import (
    FOREIGN_LOAD_MAX,
    QUIET_WAIT_S,
    REMEASURES,
    SPREAD_MAX,
)
from autotune.stores._stores import STORE_PATIENCE_S
from autotune.tuner._confirm import CONFIRM_TOP
from autotune.tuner._option_fields import OptionGroup, fields_of, option
from autotune.tuner._space import SPACES_DIR
from autotune.tuner._training_shape import WHOLE_RUN_S

#: A trial's measuring defaults and limits (``Budget``'s, where each is explained).
_BUDGET = Budget()
#: Default store folder (relative to where autotune runs): the Optuna journal,
#: the MLflow database and artifacts, and the trials' logs.
DEFAULT_STORE = Path("mlflow")
_SPACES = ", ".join(sorted(p.stem for p in SPACES_DIR.glob("*.yaml")))


@dataclasses.dataclass(frozen=True)
class Basics(OptionGroup):
    """The everyday options: ``autotune.tune`` takes them flat, ``autotune run`` as flags."""

    trials: int = option(
        12,
        "Trials to run now (the baseline first, if the study has none).",
        bound=Bound(low=1, integer=True),
        short="-n",
    )
    space: str = option("default", f"Search space: a shipped name ({_SPACES}) or a YAML file.")
    store: Path = option(  # noqa: RUF009 (a Path is immutable)
        DEFAULT_STORE, "Store folder: Optuna journal, MLflow database, artifacts, trial logs.", envvar="AUTOTUNE_STORE"
    )
    device: str = option(
        "auto", "auto, cpu, cuda:N, or with --jobs a list (cuda:0,cuda:1) or cuda (every visible GPU)."
    )


@dataclasses.dataclass(frozen=True)
class Measure(OptionGroup):
    """How a trial is measured: the baseline's warmup and windows (later trials measure the same
    samples), the ceilings, and when the code runs whole."""

    warmup: float = option(
        _BUDGET.warmup_s,
        "Seconds of the baseline's warmup before measuring (later trials: the same samples).",
        bound=Bound(low=0),
    )
    window: float = option(
        _BUDGET.window_s, "Seconds per baseline window (later trials: the same samples).", bound=Bound(low=0.05)
    )
    windows: int = option(
        _BUDGET.windows, "Measured windows per trial (samples/s is their median).", bound=Bound(low=1, integer=True)
    )
    ceiling_windows: int = option(
        _BUDGET.ceiling_windows,
        "Windows per ceiling (compute: the loop on batches already on the device; loader: the loader alone), "
        "measured once per distinct config (0: none).",
        bound=Bound(low=0, integer=True),
    )
    whole_run: float = option(
        WHOLE_RUN_S,
        "Code whose baseline returns within this many seconds runs whole in every trial, ranked on its wall "
        "time; longer code is measured at the baseline's windows, in samples (0: never whole).",
        bound=Bound(low=0),
        metavar="SECONDS",
    )


@dataclasses.dataclass(frozen=True)
class Limits(OptionGroup):
    """How long and how much a trial may take before it is stopped."""

    timeout: float | None = option(
        None,
        "Seconds a trial may run in all (default: the startup timeout + 5x its measuring time).",
        bound=Bound(low=1, optional=True),
    )
    startup_timeout: float = option(
        _BUDGET.startup_s,
        "Seconds from a trial's start to its first batch (imports, dataset, workers).",
        bound=Bound(low=1),
    )
    stall_timeout: float = option(
        _BUDGET.stall_s, "Seconds without a finished step before a trial counts as hung.", bound=Bound(low=0.5)
    )
    compile_timeout: float = option(
        _BUDGET.compile_s,
        "Seconds torch.compile may take at a trial's first step (with compile in the space).",
        bound=Bound(low=1),
    )
    ram_budget: float | None = option(
        None,
        "GiB one trial's processes may use (default: 75% of the RAM available at start).",
        bound=RAM_BUDGET,
        metavar="GIB",
    )


@dataclasses.dataclass(frozen=True)
class Noise(OptionGroup):
    """When a trial's figure is believed: a figure measured under others' load, or whose windows
    spread too far, is noisy: shown, never ranked, and measured again once the machine is quiet."""

    max_load: float = option(
        FOREIGN_LOAD_MAX,
        "Share of a trial's CPUs (or GPU) other processes may use while it measures; above it the trial "
        "is noisy: shown, never ranked, and measured again once the machine is quiet (1: never noisy by load).",
        bound=Bound(low=0, high=1),
    )
    max_spread: float = option(
        SPREAD_MAX,
        "(highest - lowest) / median of a trial's window rates above which it is noisy, as above "
        "(a large value: never noisy by spread).",
        bound=Bound(low=0),
    )
    remeasure: int = option(
        REMEASURES, "Times a noisy trial is measured again at most (0: never).", bound=Bound(low=0, integer=True)
    )
    quiet_wait: float = option(
        QUIET_WAIT_S,
        "How long to wait for a quiet machine before measuring a noisy trial again.",
        bound=Bound(low=0),
        metavar="SECONDS",
    )


@dataclasses.dataclass(frozen=True)
class Judge(OptionGroup):
    """How trials are judged and the winner chosen."""

    divergence_tolerance: float = option(
        DIVERGENCE_TOLERANCE,
        "How much worse than the baseline's loss, at matched samples, a trial's may be (0.5 = 50%) "
        "before it is diverged.",
        bound=Bound(low=0, low_open=True),
    )
    prune: float = option(
        PRUNE_FRACTION,
        "Stop a trial whose windows all run under this share of the best's samples/s (0: never).",
        bound=Bound(low=0, high=1),
    )
    confirm: int = option(
        2,
        f"Re-runs of each of the top {CONFIRM_TOP} configs and of the baseline after the trials; the winner "
        "is chosen on the median of its runs (0: none).",
        bound=Bound(low=0, integer=True),
    )
    horizon: float | None = option(
        None, HORIZON_HELP, bound=Bound(low=0, low_open=True, optional=True), metavar="HOURS"
    )


@dataclasses.dataclass(frozen=True)
class Stores(OptionGroup):
    """Where the study is kept, under what name, and how long its stores may be down."""

    study: str | None = option(
        None, "Study name (default: from the target; for show/export: the most recent study).", metavar="NAME"
    )
    storage: str | None = option(
        None,
        "Optuna storage: an RDB URL (e.g. postgresql://...) or a journal file; default: STORE/optuna.journal.",
        metavar="URL",
    )
    tracking_uri: str | None = option(
        None,
        "MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite in the store folder).",
        metavar="URI",
    )
    store_patience: float = option(
        STORE_PATIENCE_S,
        "How long the study database or tracking store may keep failing (a restart, a full disk) before "
        "the tuner stops with exit status 3; finished results wait in the store folder meanwhile.",
        bound=Bound(low=0),
        metavar="SECONDS",
    )


@dataclasses.dataclass(frozen=True)
class Options(OptionGroup):
    """Every option of a study but the everyday ones (``Basics``), which ``tune`` takes flat.

    Example:
        >>> from autotune import Measure, Options
        >>> options = Options(jobs=2, measure=Measure(windows=6))
        >>> options.measure.windows, options.measure.warmup
        (6, 1.0)
    """

    jobs: int = option(
        1,
        "Trials at once on this host, each on its own share: a disjoint set of the CPUs, 1/N of the RAM budget "
        "and, with several GPUs, a GPU of its own.",
        bound=Bound(low=1, integer=True),
        short="-j",
    )
    nproc_per_node: int = option(
        1,
        "Ranks per trial: each trial runs through torch.distributed.run (torchrun), each rank on its share of "
        "the CPUs (on CUDA, its own GPU); samples/s is summed over the ranks.",
        bound=Bound(low=1, integer=True),
    )
    seed: int | None = option(
        None,
        "Seed for the sampler and the trials: every trial trains from the baseline's seed (a tuner joining a "
        "study takes it).",
    )
    profile: bool = option(
        True,
        "After the confirmation, run the baseline and the winner once more with each step timed by part "
        "(data wait, copy, forward, backward, optimizer step) and a few steps traced by torch.profiler: the "
        "traces go to the MLflow parent run (traces/), the parts to the report and the summary.",
    )
    warm_start: bool = option(
        True,
        "A new study of a target that an earlier study in the same storage tuned runs that study's top "
        "configs first (each measured here, not copied).",
    )
    measure: Measure = option(Measure, "How a trial is measured (``Measure``).")
    limits: Limits = option(Limits, "How long and how much a trial may take (``Limits``).")
    noise: Noise = option(Noise, "When a trial's figure is believed (``Noise``).")
    judge: Judge = option(Judge, "How trials are judged and the winner chosen (``Judge``).")
    stores: Stores = option(Stores, "Where the study is kept, under what name (``Stores``).")

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "profile", bool(self.profile))
        object.__setattr__(self, "warm_start", bool(self.warm_start))


def check(name: str, value: Any) -> None:
    """Raise ConfigError unless ``value`` is allowed for option ``name`` (its field's bound), as
    the group holding it would on construction.

    >>> check("prune", 1.5)
    Traceback (most recent call last):
    autotune.core._config.ConfigError: prune=1.5: must be a number >= 0 and <= 1
    """
    for cls in (Basics, Options):
        for _, field in fields_of(cls):
            if field.name == name:
                if field.metadata["bound"]:
                    check_bound(name, value, field.metadata["bound"])
                return
    raise KeyError(f"no option {name!r}")
