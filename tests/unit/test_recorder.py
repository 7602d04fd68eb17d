"""The recorder (autotune.tuner._recorder) and the queue (autotune.tuner._queue), on a real Optuna journal and a
real MLflow SQLite store in a temporary folder: no worker process, hand-built results."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path

import optuna
import pytest
from optuna.storages.journal import JournalFileBackend

from autotune.core._config import Config
from autotune.core._kinds import Kind, Request
from autotune.core._outcome import Outcome
from autotune.machine._slots import Slot
from autotune.stores._stores import Spool
from autotune.stores._tracking import Tracker
from autotune.tuner._join import Joined
from autotune.tuner._option_groups import Noise
from autotune.tuner._queue import attrs_of, claim_waiting, write
from autotune.tuner._recorder import Recorder
from autotune.tuner._space import Choice, IntRange, Space
from autotune.tuner._watch import TrialResult

SPACE = Space("s", {"num_workers": IntRange(0, 4), "batch_size": Choice(("1x", "2x"))})
NOISY = {"samples_per_s": 900.0, "samples_per_s_spread": 0.05, "foreign_cpu": 0.6}


@pytest.fixture
def recorder(tmp_path: Path):
    tracker = Tracker(f"sqlite:///{tmp_path}/mlflow/mlflow.db", tmp_path / "artifacts")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name="s",
        direction="maximize",
        storage=optuna.storages.JournalStorage(JournalFileBackend(str(tmp_path / "j"))),
    )
    experiment = tracker.experiment("s")
    parent = tracker.parent_run(experiment, None, {"autotune.study": "s"})
    lines: list[str] = []
    recorder = Recorder(
        Joined(study, experiment, parent),
        tracker,
        Spool(tmp_path / "pending", "s"),
        SPACE,
        lines.append,
        tmp_path / "trials",
        Noise(max_load=0.2, max_spread=1.0),
    )
    recorder.lines = lines
    return recorder


def result(outcome: Outcome, metrics: dict, tmp_path: Path, resolved: dict | None = None) -> TrialResult:
    log = tmp_path / "trial.log"
    log.write_text("a log line\n")
    return TrialResult(
        outcome,
        "" if outcome == Outcome.COMPLETE else f"{outcome.value}: why",
        metrics,
        {},
        [],
        resolved or {"num_workers": 0, "batch_size": 16},
        16,
        0.01,
        log,
    )


def begun(recorder: Recorder, request: Request, config: Config = Config()) -> tuple:  # type: ignore[valid-type]
    write(recorder.study, request)
    trial = claim_waiting(recorder.study, lambda t: True)
    run_id = recorder.begin(
        trial,
        {"host": "h", "pid": 1, "started": 1.0},
        config,
        Slot(0, (), 2, "cpu"),
        0,
        {"autotune.fingerprint": "here"},
    )
    return trial, run_id


def test_a_request_is_written_once_per_job_with_its_kind(recorder: Recorder) -> None:
    study = recorder.study
    again = Request(Kind.CONFIRM, {"num_workers": 2}, 1, baseline=False)
    assert attrs_of(again) == {"kind": "confirm", "baseline": False, "of": 1, "sampled": {"num_workers": 2}}
    climb = Request(Kind.MORE_WORKERS, {"num_workers": 4}, 1, once="more-workers-1", enqueue_params=True)
    assert write(study, climb) and not write(study, climb)  # one tuner's climb, however many ask
    waiting = study.get_trials()
    assert len(waiting) == 1 and waiting[0].user_attrs == {"kind": "more_workers", "baseline": False, "of": 1}
    assert waiting[0].system_attrs["fixed_params"] == {"num_workers": 4}  # drawn as fixed values


def test_a_baseline_re_run_says_what_it_is_in_both_stores(recorder: Recorder) -> None:
    trial, run_id = begun(recorder, Request(Kind.CONFIRM, {}, 0, baseline=True))
    attrs = recorder.study.trials[trial.number].user_attrs
    assert (attrs["kind"], attrs["of"], attrs["baseline"], attrs["seed"]) == ("confirm", 0, True, 0)
    tags = recorder.tracker.client.get_run(run_id).data.tags
    assert (tags["autotune.kind"], tags["autotune.of"], tags["autotune.baseline"]) == ("confirm", "0", "true")


def test_a_result_goes_through_the_spool_to_optuna_then_mlflow(recorder: Recorder, tmp_path: Path) -> None:
    trial, run_id = begun(recorder, Request(Kind.BASELINE, baseline=True))
    done = result(Outcome.COMPLETE, {"samples_per_s": 1000.0, "samples_per_s_spread": 0.05}, tmp_path)
    from autotune.core._ceilings import Ceilings

    assert recorder.end(trial, run_id, done, Ceilings(), None)
    frozen = recorder.study.trials[trial.number]
    assert frozen.state.name == "COMPLETE" and frozen.value == 1000.0 and frozen.constraints == {"diverged": 0.0}
    assert frozen.params == {"num_workers": 0, "batch_size": "1x"}  # the code's own values, as the space writes them
    assert recorder.spool.all() == []  # both stores hold it: the spool is empty
    run = recorder.tracker.client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.metrics["samples_per_s"] == 1000.0


def test_a_noisy_figure_is_failed_for_the_sampler_and_doubted(recorder: Recorder, tmp_path: Path) -> None:
    from autotune.core._ceilings import Ceilings

    trial, run_id = begun(recorder, Request(Kind.SAMPLED))
    assert recorder.end(trial, run_id, result(Outcome.COMPLETE, NOISY, tmp_path), Ceilings(), 1000.0)
    frozen = recorder.study.trials[trial.number]
    assert frozen.state.name == "FAIL" and frozen.user_attrs["doubt"].startswith("noisy: other processes used 60%")
    tags = recorder.tracker.client.get_run(run_id).data.tags
    assert tags["autotune.doubt"].startswith("noisy") and "Not ranked: noisy" in tags["mlflow.note.content"]


def test_replaying_a_result_changes_nothing_and_one_closed_otherwise_is_not_used(
    recorder: Recorder, tmp_path: Path
) -> None:
    from autotune.core._ceilings import Ceilings
    from autotune.tuner._judge import TrialIds, result_record

    trial, run_id = begun(recorder, Request(Kind.SAMPLED))
    record = result_record(
        TrialIds(trial.number, trial._trial_id, run_id),
        trial.user_attrs,
        result(Outcome.PRUNED, {"samples_per_s": 10.0}, tmp_path),
        Ceilings(),
        None,
        Noise(max_load=0.2, max_spread=1.0),
        {},
    )
    recorder.spool.write(trial.number, record)
    recorder.replay()
    assert recorder.study.trials[trial.number].state.name == "PRUNED" and recorder.spool.all() == []
    assert recorder.lines == [
        f"trial {trial.number}: its result, kept in {recorder.spool.folder} while a store was down, is now recorded"
    ]
    assert recorder.apply(record)  # again: the same values, nothing changes
    assert recorder.study.trials[trial.number].state.name == "PRUNED"
    other = dict(record, attrs={**record["attrs"], "outcome": "crashed"})
    assert not recorder.apply(other)  # the trial says something else: that stays
    assert recorder.lines[-1].startswith(f"trial {trial.number}: closed by another tuner while it ran")


def test_a_stale_trial_is_closed_once(recorder: Recorder) -> None:
    trial, run_id = begun(recorder, Request(Kind.SAMPLED))
    frozen = recorder.study.trials[trial.number]
    assert recorder.close_stale(frozen, "left RUNNING: its tuner is gone")
    assert not recorder.close_stale(frozen, "left RUNNING: again")  # another tuner got there first
    closed = recorder.study.trials[trial.number]
    assert closed.state.name == "FAIL" and closed.user_attrs["outcome"] == "interrupted"
    assert closed.user_attrs["reason"] == "left RUNNING: its tuner is gone"
    assert recorder.tracker.client.get_run(run_id).info.status == "KILLED"


def test_a_study_whose_baseline_is_never_believed_closes_its_parent_run_with_no_speedup(
    recorder: Recorder, tmp_path: Path
) -> None:
    # (the finish once crashed here reading the median of the baseline's believed runs: none)
    from autotune.tuner._finish import parent_record
    from autotune.tuner._report import throughput_png
    from standings import standing_from as standing_of_rows
    from standings import trial

    noisy = "noisy: other processes used 70% of its CPUs while it measured (over 60%)"
    found = standing_of_rows(trial(0, 900.0, doubt=noisy), trial(1, 1200.0, sampled={"num_workers": 2}))
    assert found.base is not None and not found.base.rates and found.best.number == 1
    plot = throughput_png(recorder.study.study_name, found)
    record = parent_record(recorder.study, found, "finished", tuners=1, throughput=plot)
    assert record.metrics["best_samples_per_s"] == 1200.0
    assert "best_speedup" not in record.metrics and "baseline_samples_per_s" not in record.metrics
    assert record.tags["autotune.result"].startswith(
        "trial 1, 1,200 samples/s, ±2%; no speedup: unreliable baseline, every run of it was noisy"
    )
    recorder.close_parent(record, {"throughput.png": plot}, "FINISHED")
    parent = recorder.tracker.client.get_run(recorder.parent_id)
    artifacts = {a.path: a.file_size for a in recorder.tracker.client.list_artifacts(recorder.parent_id)}
    assert artifacts["throughput.png"] == len(plot) and plot.startswith(b"\x89PNG")
    assert base64.b64encode(plot).decode() in record.artifacts["report.html"]  # the same picture
    assert parent.info.status == "FINISHED" and parent.data.metrics["best_samples_per_s"] == 1200.0
    assert "best_speedup" not in parent.data.metrics


def test_a_whole_run_of_other_samples_is_recorded_as_another_training_in_both_stores(
    recorder: Recorder, tmp_path: Path
) -> None:
    # A script that stops after 200 steps, at 8x the batch: 51,200 samples against the baseline's 6,400.
    # Its own samples over its run time (3,657/s in 14 s) would draw the sampler to it; the standing never ranks it.
    from autotune.core._ceilings import Ceilings
    from autotune.worker._streams import same_training
    from standings import trial as row

    shape = {"ended": True, "epochs": 1, "steps": 200}
    base = row(0, 400.0, config={"batch_size": 32}, shape={**shape, "samples": 6_400}, run_s=10.0)
    trial, run_id = begun(recorder, Request(Kind.SAMPLED))
    wide = result(
        Outcome.COMPLETE,
        {"samples_per_s": 4000.0, "samples_per_s_spread": 0.05, "run_s": 14.0, "run_samples_per_s": 51_200 / 14.0},
        tmp_path,
        {"num_workers": 0, "batch_size": 256},
    )
    wide = same_training(dataclasses.replace(wide, shape={**shape, "samples": 51_200}), base)
    assert recorder.end(trial, run_id, wide, Ceilings(), 400.0)
    frozen = recorder.study.trials[trial.number]
    assert frozen.state.name == "FAIL" and frozen.value is None and frozen.user_attrs["outcome"] == "distorted"
    assert frozen.user_attrs["reason"].startswith("its whole run trained 51,200 samples, 8.00x the baseline's 6,400")
    run = recorder.tracker.client.get_run(run_id)
    assert run.info.status == "FAILED" and run.data.tags["autotune.outcome"] == "distorted"
    assert run.data.tags["autotune.reason"] == frozen.user_attrs["reason"]
