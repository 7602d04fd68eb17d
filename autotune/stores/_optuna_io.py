"""Every use of Optuna's private attributes, in one place.

autotune drives a study through Optuna's storage where its public API has no door: a
trial by number, an enqueued trial claimed by one tuner (``ask`` does the same inside
Optuna), a param recorded for a trial the sampler did not draw, the study's system attrs.
Each private name used is used here only, so that an Optuna release that moves one
breaks one small module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna


def storage_of(study: optuna.Study) -> Any:
    """The storage a study reads and writes (a ``BaseStorage``)."""
    return study._storage


def trial_id_of(trial: optuna.Trial | optuna.trial.FrozenTrial) -> int:
    """A trial's id in its storage (not its number)."""
    return trial._trial_id


def fixed_params(trial: optuna.Trial) -> dict[str, Any]:
    """The values a trial was enqueued with (``Study.enqueue_trial``): its suggestions return them."""
    return dict(trial._fixed_params)


def trial_id(study: optuna.Study, number: int) -> int:
    return study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number)


def frozen_trial(study: optuna.Study, number: int) -> optuna.trial.FrozenTrial:
    """One trial as the storage holds it now, by number (not the whole study)."""
    return study._storage.get_trial(trial_id(study, number))


def frozen_by_id(study: optuna.Study, tid: int) -> optuna.trial.FrozenTrial:
    return study._storage.get_trial(tid)


def handle(study: optuna.Study, tid: int) -> optuna.Trial:
    """A live handle on trial ``tid`` (to set its attrs, constraints, report values)."""
    import optuna

    return optuna.Trial(study, tid)


def claim_state(study: optuna.Study, frozen: optuna.trial.FrozenTrial) -> optuna.Trial | None:
    """Move an enqueued (WAITING) trial to RUNNING; its handle for the one caller that did.

    ``set_trial_state_values`` takes a row lock in an RDB (the journal: its file lock), so
    exactly one claimer succeeds, as in ``Study.ask``.
    """
    import optuna

    try:
        if study._storage.set_trial_state_values(frozen._trial_id, state=optuna.trial.TrialState.RUNNING):
            return optuna.Trial(study, frozen._trial_id)
    except optuna.exceptions.UpdateFinishedTrialError:
        pass
    return None


def set_param(study: optuna.Study, tid: int, name: str, distribution: Any, value: Any) -> None:
    """Record ``name=value`` in a trial's params, as if the sampler had drawn it."""
    study._storage.set_trial_param(tid, name, distribution.to_internal_repr(value), distribution)


def create_sibling(study: optuna.Study, name: str) -> None:
    """Create an empty study named ``name`` in ``study``'s storage.

    Raises:
        optuna.exceptions.DuplicatedStudyError: it exists.
    """
    import optuna

    optuna.create_study(study_name=name, storage=study._storage)


def system_attrs(study: optuna.Study) -> dict[str, Any]:
    return study._storage.get_study_system_attrs(study._study_id)


def set_system_attr(study: optuna.Study, key: str, value: Any) -> None:
    study._storage.set_study_system_attr(study._study_id, key, value)
