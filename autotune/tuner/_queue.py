"""The study's queue of requested trials: the one place that writes a request into Optuna,
and where an enqueued trial is claimed.

Everything rests on the Optuna storage's own atomicity, never on locks of ours: an enqueued
(WAITING) trial becomes RUNNING for exactly one claimer (``claim_waiting``; ``Study.ask``
relies on the same), and a job that must happen once per study (a baseline owed again, a
confirmation round, a climb) is claimed by creating a marker study, which succeeds once
(``claim``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from autotune.core._kinds import Request
from autotune.stores._optuna_io import claim_state, create_sibling
from autotune.stores._records import ATTR_BASELINE, ATTR_KIND, ATTR_OF, ATTR_REMEASURE, ATTR_SAMPLED

if TYPE_CHECKING:
    import optuna

#: Marker studies (one per claimed job) are named ``<study><CLAIM_MARK><job>``;
#: ``show``, ``export`` and the study lists skip them.
CLAIM_MARK = "::autotune-claim:"


def claim(study: optuna.Study, job: str) -> bool:
    """Whether this tuner is the one to do ``job`` (once per study and job name).

    The claim is the creation of a marker study: it succeeds once. Markers stay
    (an empty study each) so a tuner that crashed mid-job cannot let a second
    one do it again; a later round of the job names a new job.
    """
    import optuna

    try:
        create_sibling(study, f"{study.study_name}{CLAIM_MARK}{job}")
        return True
    except optuna.exceptions.DuplicatedStudyError:
        return False


def is_marker(study_name: str) -> bool:
    """Whether a study is a claim marker, not a user's study."""
    return CLAIM_MARK in study_name


def claim_waiting(study: optuna.Study, want: Callable[[optuna.trial.FrozenTrial], bool]) -> optuna.Trial | None:
    """Claim the oldest enqueued trial that ``want`` accepts; None if there is none left."""
    import optuna

    for frozen in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
        if want(frozen):
            trial = claim_state(study, frozen)
            if trial is not None:
                return trial
    return None


def attrs_of(request: Request) -> dict[str, Any]:
    """The user attrs an enqueued trial carries for ``request`` (``autotune.stores._records``)."""
    attrs: dict[str, Any] = {ATTR_KIND: request.kind.value, ATTR_BASELINE: request.baseline}
    if request.of is not None:
        attrs[ATTR_OF] = request.of
    if request.attempt:
        attrs[ATTR_REMEASURE] = request.attempt
    if not request.enqueue_params:  # (else the sampler draws them, as fixed params)
        attrs[ATTR_SAMPLED] = dict(request.config)
    return attrs


def write(study: optuna.Study, request: Request) -> bool:
    """Enqueue ``request``; False when its job (``Request.once``) was claimed by another tuner."""
    if request.once is not None and not claim(study, request.once):
        return False
    study.enqueue_trial(dict(request.config) if request.enqueue_params else {}, user_attrs=attrs_of(request))
    return True
