"""The check across studies (tests/lib/lost_values.py) on hand-built in-memory Optuna storages:
trials recorded with the user attrs a study writes (``autotune.stores._records``)."""

from __future__ import annotations

import datetime

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution

from lost_values import check_journals, spent_on_losses

AMP = CategoricalDistribution(["off", "bf16"])
WORKERS = IntDistribution(0, 8)
PREFETCH = CategoricalDistribution(["none", "thread"])
DISTRIBUTIONS = {"amp": AMP, "num_workers": WORKERS, "prefetch": PREFETCH}
BASE = {"amp": "off", "num_workers": 0, "compile": "off"}
T0 = datetime.datetime(2026, 11, 29, 12, 0)


def study_of(*trials: tuple, storage=None, name: str = "s") -> optuna.Study:
    """A study whose trial n is ``(samples/s, sampled values, extra user attrs)``; trial 0 the
    baseline at 1,000 samples/s."""
    study = optuna.create_study(storage=storage or optuna.storages.InMemoryStorage(), study_name=name)
    base = {"baseline": True, "kind": "baseline", "outcome": "complete", "config": BASE}
    study.add_trial(_trial(1000.0, {}, {**base, "number": 0}))
    for number, (rate, sampled, attrs) in enumerate(trials, 1):
        user = {"kind": "sampled", "outcome": "complete", "sampled": sampled, "config": {**BASE, **sampled}}
        user |= {"number": number, **attrs}
        study.add_trial(_trial(rate, sampled, user))
    return study


def _trial(rate, sampled, user):
    distributions = {k: DISTRIBUTIONS[k] for k in sampled if k in DISTRIBUTIONS}
    number, start = user.pop("number"), user.pop("start", None)
    trial = optuna.trial.create_trial(
        params={k: v for k, v in sampled.items() if k in distributions},
        distributions=distributions,
        value=rate,
        user_attrs={**user, "metrics": {"samples_per_s": rate, "samples_per_s_spread": 0.05}},
        system_attrs=user.pop("system", {}),
    )
    # one after the other, 10 s each (``start``: a trial started while another ran)
    trial.datetime_start = T0 + datetime.timedelta(seconds=10 * number if start is None else start)
    trial.datetime_complete = trial.datetime_start + datetime.timedelta(seconds=8)
    return trial


def bf16(rate, workers=2, **attrs):
    return (rate, {"amp": "bf16", "num_workers": workers}, attrs)


def off(rate, workers=2, **attrs):
    return (rate, {"amp": "off", "num_workers": workers}, attrs)


def test_a_value_spent_three_times_after_one_clear_loss():
    # The MNIST study: bf16 at 0.14-0.17x of fp32 three times. 150/1000 = 15%.
    (found,) = spent_on_losses(study_of(bf16(150.0), off(900.0), bf16(170.0), bf16(140.0, workers=4)))
    assert (found.knob, found.value, found.trials, found.unsaid) == ("amp", "bf16", (1, 3, 4), (3, 4))
    assert found.speeds == pytest.approx((0.15, 0.17, 0.14)) and found.base == 1000.0
    assert found.line().startswith("amp=bf16: trials 1 (15%; first), 3 (17%), 4 (14%) of the baseline's 1,000")


def test_what_is_not_spent_on_a_loss():
    cases = {
        # at half the baseline's speed or more (500/1000): no clear loss
        "half": study_of(bf16(500.0), bf16(150.0)),
        # run once only
        "once": study_of(bf16(150.0), off(900.0)),
        # another value of its first trial explains its loss: it ran fast without it (1080/1000)
        "explained": study_of(
            (150.0, {"amp": "bf16", "prefetch": "thread"}, {}),
            (1080.0, {"amp": "off", "prefetch": "thread"}, {}),
            (900.0, {"amp": "off", "prefetch": "thread"}, {}),
        ),
        # a loader value beside workers that never ran fast either: those explain it
        "workers": study_of(
            (150.0, {"prefetch": "thread", "num_workers": 4}, {}), (160.0, {"prefetch": "thread", "num_workers": 6}, {})
        ),
        # its first figure doubted (measured under load): the next one is its first believed, and alone
        "doubted": study_of(bf16(150.0, doubt="noisy: load 1.8"), bf16(160.0)),
        # its first trial also compiled: a loop still compiling is compile's to judge
        "compiled": study_of((150.0, {"amp": "bf16", "compile": "default"}, {}), bf16(160.0)),
        # a repeat of one config (a confirmation) is not a trial of its own
        "repeat": study_of(bf16(150.0), bf16(150.0, kind="confirm", of=1)),
        # an int value (workers) is not a value the check holds a study to
        "int": study_of(off(150.0, workers=7), off(160.0, workers=7)),
    }
    assert {name: spent_on_losses(s) for name, s in cases.items()} == dict.fromkeys(cases, [])


def test_workers_do_not_explain_a_precision():
    # bf16 beside workers drawn anew each time (the MNIST study): bf16 is blamed, they are not
    (found,) = spent_on_losses(study_of(bf16(150.0, workers=3), bf16(170.0, workers=5), off(900.0, workers=7)))
    assert (found.value, found.unsaid) == ("bf16", (2,))


def test_a_value_run_again_with_a_reason_is_said():
    enqueued = {"system": {"fixed_params": {"amp": "bf16", "num_workers": 4}}}
    study = study_of(
        bf16(150.0),
        bf16(160.0, kind="retry", of=1),
        bf16(170.0, **enqueued),
        bf16(140.0),
        bf16(145.0, start=15),  # (started 5 s into trial 1's 8 s, by another tuner or slot)
    )
    (found,) = spent_on_losses(study)
    assert found.why == ("retry of 1", "enqueued", "", "drawn while trial 1 ran") and found.unsaid == (4,)


def test_a_study_without_a_measured_baseline_has_nothing_to_check():
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    assert spent_on_losses(study) == []


def test_the_journals_of_a_folder_are_read_by_study(tmp_path):
    from optuna.storages.journal import JournalFileBackend

    (tmp_path / "store").mkdir()
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(tmp_path / "store" / "optuna.journal")))
    study_of(bf16(150.0), bf16(160.0), storage=storage, name="spent")
    study_of(bf16(900.0), bf16(160.0), storage=storage, name="fine")
    with pytest.raises(AssertionError) as failed:
        check_journals(tmp_path)
    (line,) = str(failed.value).splitlines()[1:2]
    assert line.endswith(
        "optuna.journal spent: amp=bf16: trials 1 (15%; first), 2 (16%) of the baseline's 1,000 samples/s; unsaid: 2"
    )
