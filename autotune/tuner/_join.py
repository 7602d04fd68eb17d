"""Founding a study or joining it: exactly one tuner founds a study name (the storage's unique
key), sets it up (its attrs, the MLflow parent run, the baseline's request), and every other
tuner joins it, waiting for the founder's set-up before doing it itself.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from autotune.core._config import ConfigError
from autotune.core._kinds import baseline_request
from autotune.stores._records import ATTR_HORIZON, ATTR_PARENT, OBJECTIVE
from autotune.tuner._queue import write

if TYPE_CHECKING:
    import optuna

    from autotune.machine._probe import Fingerprint
    from autotune.stores._tracking import Tracker

#: Seconds a tuner joining a new study waits for its founder to finish setting it
#: up (the MLflow parent run) before doing it itself.
SETUP_WAIT_S = 120.0
#: Whether a study tunes an unmodified script (its export then says ``autotune exec``).
ATTR_SCRIPT = "script"


def found_or_join(storage, name: str, sampler) -> tuple[optuna.Study, bool]:
    """Create study ``name``, or load it if it exists; True when this call created it.

    Creation succeeds for one caller however many race (the storage's unique
    name), so the creator alone sets the study up.
    """
    import optuna

    try:
        return optuna.create_study(
            study_name=name, storage=storage, direction="maximize", sampler=sampler, load_if_exists=False
        ), True
    except optuna.exceptions.DuplicatedStudyError:
        return optuna.load_study(study_name=name, storage=storage, sampler=sampler), False


class Joined:
    """A study this tuner takes part in: its Optuna study, MLflow experiment and parent run."""

    def __init__(self, study: optuna.Study, experiment_id: str, parent_id: str) -> None:
        self.study, self.experiment_id, self.parent_id = study, experiment_id, parent_id


@dataclasses.dataclass(frozen=True)
class StudyFacts:
    """What a study records of itself when it is set up (``set_up``), for every tuner that joins it.

    Attributes:
        target: What it tunes (``path.py:function``, or the script).
        space: Its search space's name.
        fingerprint: The machine it tunes on.
        script: Whether the target is an unmodified script (its export then says ``autotune exec``).
        horizon_h: The founder's ``--horizon``, the study's for good (every tuner, ``show`` and
            ``export`` rank its whole runs alike); None: none given.
    """

    target: str
    space: str
    fingerprint: Fingerprint
    script: bool = False
    horizon_h: float | None = None


def join(
    storage,
    name: str,
    sampler,
    facts: StudyFacts,
    tracker: Tracker,
    say: Callable[[str], None],
    warm_start: bool = False,
) -> Joined:
    """Found study ``name`` or join it; the founder sets it up with ``facts`` (``set_up``), a
    joiner waits for that, and does it itself if the founder died first (its baseline is then
    asked for by the first tuner that finds none).

    Raises:
        ConfigError: the study tunes another target.
    """
    target = facts.target
    study, founder = found_or_join(storage, name, sampler)
    if founder:
        set_up(study, facts, tracker, baseline=True)
        if warm_start:
            from autotune.tuner._broke import BROKE_ATTR
            from autotune.tuner._warm_start import find_source

            source = find_source(storage, name, target, study.user_attrs["fingerprint"])
            for request in source.requests() if source else ():
                write(study, request)
            if source and source.broke:  # (held from the start: autotune.tuner._broke)
                study.set_user_attr(BROKE_ATTR, source.broke)
            if source:
                say(source.line())
    else:
        deadline = time.monotonic() + SETUP_WAIT_S
        while ATTR_PARENT not in study.user_attrs:
            if time.monotonic() > deadline:
                say(
                    f"study {name}: the tuner that created it did not set it up within {SETUP_WAIT_S:.0f} s; "
                    "setting it up here"
                )
                set_up(study, facts, tracker, baseline=False)
                break
            time.sleep(0.5)
    known = study.user_attrs.get("target")
    if known and known != target:
        raise ConfigError(f"--study {name!r} tunes {known}, not {target}; give another --study name")
    experiment_id = tracker.experiment(name)
    return Joined(study, experiment_id, tracker.parent_run(experiment_id, study.user_attrs[ATTR_PARENT], {}))


def set_up(study: optuna.Study, facts: StudyFacts, tracker: Tracker, baseline: bool) -> None:
    """Record what the study tunes (``facts``: its target, and whether it is an unmodified script,
    which production runs with ``autotune exec``), ask for its baseline, start its MLflow parent run.

    The parent run's id goes last: tuners joining the study wait for it.
    """
    import warnings

    target, fingerprint = facts.target, facts.fingerprint
    study.set_user_attr("target", target)
    study.set_user_attr(ATTR_SCRIPT, facts.script)
    if facts.horizon_h is not None:
        study.set_user_attr(ATTR_HORIZON, facts.horizon_h)
    study.set_user_attr("space", facts.space)
    study.set_user_attr("fingerprint", {**dataclasses.asdict(fingerprint), "summary": fingerprint.summary()})
    with warnings.catch_warnings():  # "experimental" since Optuna 3.2, and only ours to know
        warnings.simplefilter("ignore")
        study.set_metric_names([OBJECTIVE])  # what optuna-dashboard and its plots call the value
    if baseline:
        write(study, baseline_request())
    experiment_id = tracker.experiment(study.study_name)
    parent = tracker.parent_run(
        experiment_id,
        None,
        {"autotune.study": study.study_name, "autotune.target": target, "autotune.fingerprint": fingerprint.summary()},
    )
    study.set_user_attr(ATTR_PARENT, parent)
