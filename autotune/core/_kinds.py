"""What a trial is for: its kind, and the request the planner returns for one.

Every trial of a study has one kind, stored with it (Optuna user attr ``kind``, MLflow tag
``autotune.kind``), and, when it runs again a config another trial ran first, that trial's
number (``of``, ``autotune.of``). The planner (``autotune.tuner._planner``) decides and returns a
``Request``; the queue (``autotune.tuner._queue``) is the one place that writes it into the study.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any


class Kind(str, enum.Enum):
    """Why a trial runs."""

    #: The user's code as written: every other trial's divergence and speedup reference.
    BASELINE = "baseline"
    #: A config the sampler drew.
    SAMPLED = "sampled"
    #: A config run again after the trials, so that the winner is chosen on medians (``of``: its first trial).
    CONFIRM = "confirm"
    #: A noisy trial's config run again once the machine is quiet (``of``: its first trial).
    REMEASURE = "remeasure"
    #: A diverged config run again with the next ``lr_scaling`` (``of``: the config's first trial).
    RETRY = "retry"
    #: A leader's config run again with more DataLoader workers (``of``: the leader).
    MORE_WORKERS = "more_workers"
    #: A leader's config run again at the next smaller batch size, with twice the workers (``of``: the leader).
    SMALLER_BATCH = "smaller_batch"
    #: A top config of an earlier study of the same target, run first (``autotune.tuner._warm_start``).
    WARM_START = "warm_start"
    #: The winner's config after the confirmation, with the knobs beside its shape as the code has
    #: them (``of``: the winner; ``autotune.tuner._trim``).
    TRIM = "trim"

    @property
    def repeats(self) -> bool:
        """It runs its ``of`` trial's config unchanged: one more run of that config, not a trial
        of this tuner's own (``--trials`` does not count it)."""
        return self in (Kind.CONFIRM, Kind.REMEASURE)

    @property
    def closing(self) -> bool:
        """It runs in the study's closing rounds (a repeat, or the winner trimmed), claimed there
        like the confirmation's re-runs and not one of the trials ``--trials`` counts."""
        return self.repeats or self is Kind.TRIM

    @property
    def explores(self) -> bool:
        """It runs a config other than the baseline for the first time: the follow-up rules
        (a retry with another lr, more workers) look at it."""
        return self in (Kind.SAMPLED, Kind.RETRY, Kind.MORE_WORKERS, Kind.SMALLER_BATCH, Kind.WARM_START)

    @property
    def label(self) -> str:
        """As people read it: ``more workers``."""
        return self.value.replace("_", " ")


@dataclasses.dataclass(frozen=True)
class Request:
    """A trial the planner asks for.

    Attributes:
        kind: Why it runs.
        config: The knobs to run, as the space writes them (``2x``, not 128); for a
            ``sampled`` request, the sampler draws them (empty here); for the baseline,
            none (the code's own).
        of: The trial whose config it runs again or starts from.
        why: The line said when it is written (empty: nothing to say).
        baseline: It runs the user's code as written (the baseline, or a re-run of it).
        attempt: Which measuring again of a noisy trial this is (1, 2, ...).
        once: A job name: the request is written once per study, however many tuners
            or slots ask for it (``autotune.tuner._tuners.claim``).
        enqueue_params: Put ``config`` in the trial's Optuna params (the sampler then
            draws it as fixed values, under the holds and caps of the space now):
            a config built from a leader's draw; a repeat or retry is recorded as
            its first trial's.
    """

    kind: Kind
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    of: int | None = None
    why: str = ""
    baseline: bool = False
    attempt: int = 0
    once: str | None = None
    enqueue_params: bool = False

    def __post_init__(self) -> None:
        if self.kind.repeats and self.of is None:
            raise ValueError(f"a {self.kind.value} request names the trial it repeats (of=None)")


def baseline_request(generation: int | None = None) -> Request:
    """The user's code as written. Owed again (an interrupted one, or one a gone tuner owed):
    once per ``generation`` (the baseline trials so far), however many tuners find it missing."""
    return Request(Kind.BASELINE, baseline=True, once=None if generation is None else f"baseline-{generation}")


@dataclasses.dataclass(frozen=True)
class Line:
    """A line a rule returns for people to read: said once per tuner per ``once`` key, or
    every time it is returned when that is None."""

    text: str
    once: str | None = None
