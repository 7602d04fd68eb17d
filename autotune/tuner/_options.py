"""What a study is asked to do (``StudyOptions``), who hears how it goes (``Reporter``), and
how it stops when the user's code as written does not run (``BaselineFailed``)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core._kinds import Kind
from autotune.core._outcome import headline
from autotune.core._whole_runs import HORIZON_H
from autotune.machine._launch import Budget
from autotune.training._script import BAD_INPUT, NPROC, is_script, label, study_name
from autotune.tuner._option_groups import Basics, Judge, Noise, Options, Stores

if TYPE_CHECKING:
    from autotune.core._config import Config
    from autotune.stores._records import TrialRow
    from autotune.tuner._standing import Standing

#: Where a study's notes and each trial's end go (named as the package, as ``optuna`` and
#: ``lightning.pytorch`` name theirs): silent until the application gives it a handler; ``autotune
#: run`` and ``tune(progress=True)`` print it on their terminal (``autotune._terminal.notes_on``).
LOGGER = logging.getLogger("autotune")
LOGGER.addHandler(logging.NullHandler())  # (else logging's last resort prints a warning to stderr)


@dataclasses.dataclass(frozen=True)
class StudyOptions:
    """What ``autotune run`` was asked to do: the target, and every option as the user gave it
    (``Basics``, ``Options``: each option's one definition, read here by its own name)."""

    target: str
    basics: Basics = dataclasses.field(default_factory=Basics)
    options: Options = dataclasses.field(default_factory=Options)
    #: A script target's command line (None: the target is a function that takes the Run).
    argv: tuple[str, ...] | None = None

    @property
    def trials(self) -> int:
        return self.basics.trials

    @property
    def store(self) -> Path:
        return self.basics.store

    @property
    def seed(self) -> int | None:
        return self.options.seed

    @property
    def nproc_per_node(self) -> int:
        """Ranks per trial: over 1, each trial runs through torchrun (``autotune.training._ranks``)."""
        return self.options.nproc_per_node

    @property
    def profile(self) -> bool:
        return self.options.profile

    @property
    def warm_start(self) -> bool:
        return self.options.warm_start

    @property
    def judge(self) -> Judge:
        return self.options.judge

    @property
    def noise(self) -> Noise:
        return self.options.noise

    @property
    def stores(self) -> Stores:
        return self.options.stores

    @property
    def budget(self) -> Budget:
        """A trial's budget, from ``Measure`` and ``Limits``; no ceilings on several ranks (a part
        measured alone on one rank would wait on the others' collectives)."""
        measure, limits = self.options.measure, self.options.limits
        return Budget(
            warmup_s=measure.warmup,
            window_s=measure.window,
            windows=measure.windows,
            ceiling_windows=0 if self.nproc_per_node > 1 else measure.ceiling_windows,
            startup_s=limits.startup_timeout,
            stall_s=limits.stall_timeout,
            compile_s=limits.compile_timeout,
            timeout_s=limits.timeout,
            whole_s=measure.whole_run,
        )

    @property
    def hold_limits(self) -> tuple[float, float, float]:
        """What ``autotune.tuner._space_now.holds`` takes after the study's settled trial: the load and
        spread a believed figure may have, and the production horizon in hours (``Judge.horizon``:
        compile is held where its cost would not pay back within it; ``HORIZON_H`` where none is given)."""
        return self.noise.max_load, self.noise.max_spread, self.judge.horizon or HORIZON_H

    @property
    def label(self) -> str:
        """What the study tunes, as a command line for a script (``train.py -- --epochs 3``), after
        ``--nproc-per-node N`` for a job on several ranks (another training: another study)."""
        what = self.target if self.argv is None else label(self.target, self.argv)
        return what if self.nproc_per_node == 1 else f"{NPROC} {self.nproc_per_node} {what}"


class Reporter:
    """Receives a study's progress (the CLI draws it; the default logs each note and each trial's
    end to the ``autotune`` logger, ``LOGGER``, at INFO)."""

    def note(self, line: str) -> None:
        """A line worth showing once (capability drops, paths)."""
        LOGGER.info(line)

    def trial_started(
        self,
        number: int,
        index: int,
        total: int,
        config: Config,
        share: str | None = None,
        kind: Kind = Kind.SAMPLED,
        of: int | None = None,
    ) -> None:
        """Trial ``index`` of ``total`` of this invocation is starting, of ``kind`` (its ``of``:
        the trial whose config it runs again or starts from); on ``share`` of the host, with
        ``--jobs``."""

    def event(self, event: Mapping[str, Any]) -> None:
        """An event from a running worker (``event["trial"]`` says whose)."""

    def trial_done(self, row: TrialRow, standing: Standing, seconds_left: float) -> None:
        """A trial ended; ``standing`` is the study's standing with it (its winner so far)."""
        figures = [
            f"{row.samples_per_s:,.1f} samples/s" if row.samples_per_s else "",
            f"{row.speedup:.2f}x the baseline" if row.speedup else "",
            headline(row.doubt or row.reason),
        ]
        LOGGER.info(", ".join([f"trial {row.number} {row.outcome}", *filter(None, figures)]))


class BaselineFailed(RuntimeError):
    """The user's code as written does not run, so no trial can: stop the study.

    Attributes:
        status: The exit status ``autotune run`` gives: 2 when the input is at fault (a script's
            command line it refused, or a script that gave nothing to measure: said in one line,
            and the study is discarded), 1 when the code failed (its traceback follows).
    """

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def baseline_failed(row: TrialRow) -> BaselineFailed:
    """The error that stops a study whose baseline ``row`` ended without a figure."""
    kind, _, said = headline(row.reason).partition(": ")
    if kind in BAD_INPUT:
        return BaselineFailed(said, status=2)
    return BaselineFailed(
        f"the baseline (trial {row.number}: your code as written) ended as "
        f"{row.outcome}; every trial would fail the same way:\n{row.reason}"
    )


def default_study_name(target: str) -> str:
    """``runners/mnist.py:train`` -> ``mnist``; another function name is appended; a script's
    stem (``train.py``, ``-m package.train``) -> ``train``."""
    if is_script(target):
        return study_name(target)
    module, _, func = target.rpartition(":")
    stem = Path(module).stem if module.endswith(".py") else module.rsplit(".", 1)[-1]
    return stem if func == "train" else f"{stem}.{func}"
