"""What a study is asked to do (``StudyOptions``), who hears how it goes (``Reporter``), and
how it stops when the user's code as written does not run (``BaselineFailed``)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core._guard import DIVERGENCE_TOLERANCE, PRUNE_FRACTION
from autotune.core._kinds import Kind
from autotune.machine._launch import Budget
from autotune.machine._margin import RAM_BUDGET_FRACTION  # (re-exported: the share of RAM a trial may use)
from autotune.machine._noise import FOREIGN_LOAD_MAX, QUIET_WAIT_S, REMEASURES, SPREAD_MAX
from autotune.core._outcome import headline
from autotune.core._whole_runs import HORIZON_H
from autotune.training._script import BAD_INPUT, NPROC, is_script, label, study_name
from autotune.stores._stores import STORE_PATIENCE_S

if TYPE_CHECKING:
    from autotune.core._config import Config
    from autotune.stores._records import TrialRow
    from autotune.tuner._standing import Standing

#: Default store folder (relative to where autotune runs): the Optuna journal,
#: the MLflow database and artifacts, and the trials' logs.
DEFAULT_STORE = Path("mlflow")
#: Where a study's notes and each trial's end go (named as the package, as ``optuna`` and
#: ``lightning.pytorch`` name theirs): silent until the application gives it a handler; ``autotune
#: run`` and ``tune(progress=True)`` print it on their terminal (``autotune._terminal.notes_on``).
LOGGER = logging.getLogger("autotune")
LOGGER.addHandler(logging.NullHandler())  # (else logging's last resort prints a warning to stderr)


@dataclasses.dataclass(frozen=True)
class StudyOptions:
    """What ``autotune run`` was asked to do."""

    target: str
    trials: int = 12
    study: str | None = None
    storage: str | None = None
    tracking_uri: str | None = None
    store: Path = DEFAULT_STORE
    device: str = "auto"
    budget: Budget = Budget()
    ram_budget: int | None = None
    seed: int | None = None
    tolerance: float = DIVERGENCE_TOLERANCE
    prune: float = PRUNE_FRACTION
    confirm: int = 2
    store_patience: float = STORE_PATIENCE_S
    max_load: float = FOREIGN_LOAD_MAX
    remeasure: int = REMEASURES
    quiet_wait: float = QUIET_WAIT_S
    max_spread: float = SPREAD_MAX
    #: A script target's command line (None: the target is a function that takes the Run).
    argv: tuple[str, ...] | None = None
    #: Ranks per trial (``--nproc-per-node``): over 1, each trial runs through torchrun (``autotune.training._ranks``).
    nproc: int = 1
    #: Hours the exported config will train for (``--horizon``; None: the script's whole run as given
    #: is the production run): whole runs rank on their projected time for them
    #: (``autotune.core._whole_runs.horizon_rate``), and compile is held where its cost would not pay
    #: back within them (``autotune.tuner._space_now``; within ``HORIZON_H`` where none is given).
    horizon_h: float | None = None
    #: Profile runs of the baseline and the winner after the confirmation (``--profile``).
    profile: bool = True
    #: A new study runs an earlier study's top configs of the same target first (``--warm-start``).
    warm_start: bool = True

    @property
    def hold_limits(self) -> tuple[float, float, float]:
        """What ``autotune.tuner._space_now.holds`` takes after the study's settled trial: the load and
        spread a believed figure may have, and the production horizon in hours."""
        return self.max_load, self.max_spread, self.horizon_h or HORIZON_H

    @property
    def label(self) -> str:
        """What the study tunes, as a command line for a script (``train.py -- --epochs 3``), after
        ``--nproc-per-node N`` for a job on several ranks (another training: another study)."""
        what = self.target if self.argv is None else label(self.target, self.argv)
        return what if self.nproc == 1 else f"{NPROC} {self.nproc} {what}"


class Reporter:
    """Receives a study's progress (the CLI draws it; the default logs each note and each trial's
    end to the ``autotune`` logger, ``LOGGER``, at INFO)."""

    def note(self, line: str) -> None:
        """A line worth showing once (capability drops, paths)."""
        LOGGER.info(line)

    def trial_started(self, number: int, index: int, total: int, config: Config,  # type: ignore[valid-type]
                      share: str | None = None, kind: Kind = Kind.SAMPLED, of: int | None = None) -> None:
        """Trial ``index`` of ``total`` of this invocation is starting, of ``kind`` (its ``of``:
        the trial whose config it runs again or starts from); on ``share`` of the host, with
        ``--jobs``."""

    def event(self, event: Mapping[str, Any]) -> None:
        """An event from a running worker (``event["trial"]`` says whose)."""

    def trial_done(self, row: TrialRow, found: Standing, seconds_left: float) -> None:
        """A trial ended; ``found`` is the study's standing with it (its winner so far)."""
        figures = [f"{row.samples_per_s:,.1f} samples/s" if row.samples_per_s else "",
                   f"{row.speedup:.2f}x the baseline" if row.speedup else "", headline(row.doubt or row.reason)]
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
    return BaselineFailed(f"the baseline (trial {row.number}: your code as written) ended as "
                          f"{row.outcome}; every trial would fail the same way:\n{row.reason}")


def default_study_name(target: str) -> str:
    """``runners/mnist.py:train`` -> ``mnist``; another function name is appended; a script's
    stem (``train.py``, ``-m package.train``) -> ``train``."""
    if is_script(target):
        return study_name(target)
    module, _, func = target.rpartition(":")
    stem = Path(module).stem if module.endswith(".py") else module.rsplit(".", 1)[-1]
    return stem if func == "train" else f"{stem}.{func}"
