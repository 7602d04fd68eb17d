"""Launching a trial's worker: its command and environment (pure), and the two launchers
behind one interface: a warm worker forks it (``autotune.worker._warm``), else a new interpreter
starts it (cold).

What every worker needs to start (its budget, its spec) is here too: pure data.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from autotune.core._config import Config
from autotune.core._events import FD_ENV
from autotune.core._guard import DIVERGENCE_TOLERANCE, LEARN_WINDOWS, learned_share
from autotune.core._knobs import KNOBS
from autotune.machine._slots import CPUS_ENV

#: The worker's environment names its trial here. Every process it starts inherits it,
#: whatever its session or parent, so the trial's processes can be found after they
#: called ``setsid`` or were reparented to PID 1 (a helper that daemonises itself).
TRIAL_TAG_ENV = "AUTOTUNE_TRIAL_TAG"


@dataclasses.dataclass(frozen=True)
class Budget:
    """How long a trial measures, and how long it may take.

    Attributes:
        warmup_steps: Steps before measuring (at least).
        warmup_s: Seconds before measuring (at least): DataLoader workers start,
            cudnn.benchmark searches, caches fill.
        window_s: Seconds per measured window (at least ``min_window_steps`` steps).
        windows: Measured windows per trial; samples/s is their median.
        min_window_steps: Steps a window needs before it may close.
        ceiling_windows: Windows (of ``window_s``) per ceiling, measured after the
            trial's own windows (``autotune.core._ceilings``); 0 measures none.
        learn_windows: Windows the trial may measure past ``windows`` while its loss
            over its judged span (``autotune.core._guard.judged_span``) is above ``learn_to``
            times its warmup's: the baseline's, so that its curve reaches samples where a
            config that does not learn shows as diverged, however slow the machine is.
        learn_to: See ``learn_windows``.
        startup_s: Seconds from spawn to the first batch (imports, the dataset,
            DataLoader workers starting).
        stall_s: Seconds without a finished step, once training runs, before the
            trial counts as hung.
        compile_s: Seconds ``torch.compile`` may take at the model's first step (no step
            finishes meanwhile) before the trial counts as hung: a ResNet's first compile
            on a fresh 2-core machine took over 60 s (the compiler's caches empty), 32 s
            with them warm.
        timeout_s: Wall-clock limit for the whole worker, start-up included;
            ``None`` derives one from the others.
        whole_s: The baseline's: after its windows it measures on until the code returns by
            itself or this many seconds have passed since its worker started; a code that
            returned runs whole in every later trial (``autotune.tuner._training_shape``). 0: never.
        whole: Run the code to its end, measuring all the way (a study of a short script).
        marks: Where the warmup and each window end, in samples since the first batch: the
            baseline's (``autotune.worker._marks``); empty: by ``warmup_s`` and ``window_s``.
        step_samples: The baseline's samples per step: a trial on larger batches ends at the
            marks times the ratio, the same steps (``autotune.worker._marks``). 0: unknown.
    """

    warmup_steps: int = 5
    warmup_s: float = 1.0
    window_s: float = 1.5
    windows: int = 4
    min_window_steps: int = 2
    ceiling_windows: int = 2
    learn_windows: int = 0
    learn_to: float = 0.0
    startup_s: float = 60.0
    stall_s: float = 30.0
    compile_s: float = 600.0
    timeout_s: float | None = None
    whole_s: float = 0.0
    whole: bool = False
    marks: tuple[int, ...] = ()
    step_samples: float = 0.0

    def deadline(self) -> float:
        """The worker's wall-clock limit: its start-up, then 5x the measured time."""
        if self.timeout_s is not None:
            return self.timeout_s
        return self.startup_s + 5 * self.measuring_s()

    def learning(self, tolerance: float = DIVERGENCE_TOLERANCE) -> Budget:
        """This budget for a baseline, whose curve judges every trial's divergence: it measures
        up to ``LEARN_WINDOWS`` times its windows more until its loss has fallen to
        ``learned_share(tolerance)`` of its warmup's."""
        return dataclasses.replace(self, learn_windows=LEARN_WINDOWS * self.windows, learn_to=learned_share(tolerance))

    def measuring_s(self) -> float:
        """The most time a trial measures, as planned: warmup, windows (and those it may add
        while its loss falls), and both ceilings' windows."""
        windows = self.warmup_s + (self.windows + self.learn_windows) * self.window_s
        return max(windows, self.whole_s) + 2 * self.ceiling_windows * self.window_s

    def worker_args(self) -> dict[str, Any]:
        """What the worker's Trial measures by, as JSON data (the limits are the parent's to
        enforce): ``from_worker_args`` makes it a budget again."""
        args = dataclasses.asdict(self)
        for limit in ("startup_s", "stall_s", "compile_s", "timeout_s"):
            del args[limit]
        return args

    @classmethod
    def from_worker_args(cls, args: dict[str, Any]) -> Budget:
        """The budget ``worker_args`` gave the worker (its limits at their defaults: not the worker's).

        >>> Budget.from_worker_args(Budget(windows=2, marks=(8, 16)).worker_args()).marks
        (8, 16)
        """
        return cls(**{**args, "marks": tuple(args.get("marks", ()))})


@dataclasses.dataclass(frozen=True)
class TrialSpec:
    """Everything the worker needs; pure data."""

    target: str
    config: Config
    device: str = "cpu"
    budget: Budget = Budget()
    seed: int = 0
    #: Ceiling keys per part already measured in the study: the worker skips them.
    known_ceilings: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    #: CPUs the worker pins itself to (its slot's share, ``autotune.machine._slots``); empty: not pinned.
    cpus: tuple[int, ...] = ()
    #: A script target's command line (None: a function that takes the Run).
    argv: tuple[str, ...] | None = None
    #: Ranks (over 1: the worker runs them through torchrun, ``autotune.training._ranks``).
    nproc: int = 1
    #: The study's own Inductor cache (torch.compile's compiled kernels), where the environment names
    #: none: trials of one study share it; a study never starts warm on another's (or the user's own).
    compile_cache: str | None = None
    #: A profile run's trace file (``autotune.tuner._profiling``): its step's parts are timed and a few
    #: steps recorded by torch.profiler after its windows. None: a trial.
    trace: str | None = None


def worker_environ(environ: Mapping[str, str], tag: str) -> dict[str, str]:
    """What every trial worker's interpreter starts with, cold or warm
    (``autotune.worker._warm``): unbuffered output, this package importable, and its tag."""
    env = dict(environ)
    env[TRIAL_TAG_ENV] = tag
    env["PYTHONUNBUFFERED"] = "1"
    package_root = str(Path(__file__).resolve().parents[2])  # (autotune/machine/_launch.py: the folder above autotune/)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, environ.get("PYTHONPATH")) if p)
    return env


def new_tag() -> str:
    """A tag unique across tuners and trials, starting with this tuner's pid (which
    ``sweep_orphans`` reads)."""
    return f"{os.getpid()}-{uuid.uuid4().hex[:12]}"


#: Where torch.compile's Inductor keeps its compiled kernels (read when it compiles).
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def build_command(
    spec: TrialSpec, event_fd: int, environ: Mapping[str, str], python: str = sys.executable, *, tag: str
) -> tuple[list[str], dict[str, str]]:
    """The worker's argv and environment (pure: no process is started).

    A CUDA trial sees only its own device (as cuda:0); environment knobs are set
    here because they must be in place before torch starts. ``tag`` goes in
    ``TRIAL_TAG_ENV``, which marks the worker and everything it starts.
    """
    env = worker_environ(environ, tag)
    env[FD_ENV] = str(event_fd)
    if spec.cpus:
        env[CPUS_ENV] = ",".join(map(str, spec.cpus))
    device = spec.device
    if device.startswith("cuda") and spec.nproc > 1:
        device = "cuda"  # (each rank takes cuda:LOCAL_RANK)
    elif device.startswith("cuda"):
        index = int(device.partition(":")[2] or 0)
        visible = [v.strip() for v in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        env["CUDA_VISIBLE_DEVICES"] = visible[index] if index < len(visible) else str(index)
        device = "cuda:0"
    if spec.compile_cache and INDUCTOR_CACHE_ENV not in environ:
        env[INDUCTOR_CACHE_ENV] = spec.compile_cache
    for knob in KNOBS.values():
        value = getattr(spec.config, knob.name)
        if knob.env_var and value not in (None, "default"):
            env[knob.env_var] = value
    payload = {
        "target": spec.target,
        "config": spec.config.set_values(),
        "device": device,
        "budget": spec.budget.worker_args(),
        "seed": spec.seed,
        "known_ceilings": {part: list(keys) for part, keys in spec.known_ceilings.items()},
    }
    if spec.argv is not None:
        payload["argv"] = list(spec.argv)
    if spec.nproc > 1:
        payload["nproc"] = spec.nproc
    if spec.trace is not None:
        payload["trace"] = spec.trace
    return [python, "-m", "autotune.worker._trial_main", json.dumps(payload)], env


class Process(Protocol):
    """A started worker as ``subprocess.Popen`` shows a child (a forked one shows the same)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...


class Launcher(Protocol):
    """Something that can start a trial's worker faster than a new interpreter (a warm worker)."""

    tag: str

    @property
    def pid(self) -> int:
        """Its process id (read only: a warm worker's is its process's)."""

    @property
    def environ(self) -> Mapping[str, str]:
        """The environment its workers start from (``worker_environ``)."""

    def takes(self, env: Mapping[str, str]) -> bool:
        """Whether it can start a worker with this environment."""

    def spawn(self, payload: str, env: Mapping[str, str], log_fd: int, event_fd: int) -> Process | None:
        """Start the worker; None when it cannot now (the caller starts it cold)."""

    def close(self) -> None:
        """End it (it starts no more workers)."""


def launch(spec: TrialSpec, log_fd: int, event_fd: int, warm: Launcher | None = None) -> tuple[Process, str]:
    """Start the worker of ``spec`` in its own session, its output on ``log_fd``, its events on
    ``event_fd``: forked by ``warm`` where it takes the trial's environment and is not to run whole,
    else cold. Returns
    the process and the trial's tag (a warm worker's trials share its tag)."""
    # A run that may go on to the code's end is timed as ``python train.py`` is, process start to exit,
    # so it starts as that does: cold. A fork skips the interpreter's start and torch's import, which
    # its figure would have to add back as an estimate (a study of pytorch/examples' MNIST measured
    # 23.4 s for a run that took 30.3 s under ``autotune exec``).
    if spec.budget.whole or spec.budget.whole_s:
        warm = None
    tag = warm.tag if warm is not None else new_tag()
    argv, env = build_command(spec, event_fd, os.environ, tag=tag)
    proc = warm.spawn(argv[-1], env, log_fd, event_fd) if warm is not None and warm.takes(env) else None
    if proc is None:
        proc = subprocess.Popen(
            argv,
            env=env,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            pass_fds=(event_fd,),
            start_new_session=True,
        )
    return proc, tag
