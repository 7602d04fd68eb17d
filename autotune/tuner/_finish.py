"""A study's finish: the export, and the MLflow parent run closed with what the study found.

Each tuner that leaves exports the winner so far (``STORE/exports/STUDY.yaml``); the last one
running the study closes its parent run with the trials table, the ceilings, the report,
the throughput plot, the winner's figures and every child run renamed after how it ended.
"""

from __future__ import annotations

import dataclasses
import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core._kinds import Kind
from autotune.core._knobs import show_value
from autotune.machine._noise import is_noisy
from autotune.stores._records import kind_of, run_name
from autotune.tuner._confirm import UNFINISHED
from autotune.tuner._export_text import export_text
from autotune.tuner._profiling import PROFILE_ATTR, parent_figures
from autotune.tuner._recorder import ParentRecord, Recorder
from autotune.tuner._standing import Standing, findings, read_standing
from autotune.tuner._tuners import Liveness, Registry, TunerPhase, describe

if TYPE_CHECKING:
    import optuna


def finish(
    study: optuna.Study,
    store: Path,
    registry: Registry,
    liveness: Liveness,
    recorder: Recorder,
    signum: int | None,
    say: Callable[[str], None],
) -> Standing:
    """Export the winner; close the MLflow parent run with the study's figures if this is the
    last tuner running the study (else the last one does); return the standing."""
    standing = read_standing(study)
    export(study, standing, store)
    ended = f"interrupted by {signal.Signals(signum).name}" if signum else "finished"
    others = leave(registry, liveness, ended, recorder)
    if others:
        say(
            f"the study's MLflow parent run stays open: {describe(others)} still run study {study.study_name}, "
            "and the last one closes it"
        )
        return standing
    from autotune.tuner._report import throughput_png

    plot = throughput_png(study.study_name, standing)  # once: the report and the parent run share it
    record = parent_record(study, standing, ended, 1 + len(registry.others()), plot)
    recorder.close_parent(record, {"throughput.png": plot}, "KILLED" if signum else "FINISHED")
    return standing


def leave(
    registry: Registry, liveness: Liveness, ended: str, recorder: Recorder, killed: bool = False
) -> list[dict[str, Any]]:
    """Mark this tuner done; return the other tuners still running the study.

    Marked done first, then the others read: of tuners leaving together at least one sees
    all done, so the parent run is always closed by someone. When none is left running and
    this tuner stops on an error (``killed``), the parent run is closed as KILLED here.
    """
    registry.enter(TunerPhase.DONE, ended)
    others = registry.live_others(liveness, (TunerPhase.SAMPLING, TunerPhase.CONFIRMING, TunerPhase.PROFILING))
    if not others and killed:
        recorder.kill_parent()
    return others


def discard(study: optuna.Study, recorder: Recorder, store: Path, store_created: bool) -> bool:
    """A study stopped by bad input at its baseline (``BaselineFailed.status`` 2) leaves nothing:
    its Optuna study, MLflow runs, trial logs and pending results are deleted, and the store
    folder too when this run created it. Only while the baseline is all the study holds: another
    tuner's trials, or a study with results, are kept. Whether it discarded."""
    import shutil

    import optuna

    from autotune.stores._optuna_io import storage_of

    if any(kind_of(t.user_attrs) is not Kind.BASELINE for t in study.get_trials(deepcopy=False)):
        return False
    recorder.discard()
    optuna.delete_study(study_name=study.study_name, storage=storage_of(study))
    if store_created:
        shutil.rmtree(store, ignore_errors=True)
    return True


def export(study: optuna.Study, standing: Standing, store: Path) -> Path | None:
    """Write the winner as ``STORE/exports/STUDY.yaml``; its path (None: no winner yet)."""
    if standing.best is None:
        return None
    path = store / "exports" / f"{study.study_name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(export_text(study, standing))
    return path


def parent_record(
    study: optuna.Study, standing: Standing, ended: str, tuners: int, throughput: bytes | None = None
) -> ParentRecord:
    """The parent run's closing record, from the study's standing (``throughput``: its samples/s
    plot as PNG, if rendered already)."""
    from autotune.tuner._report import report_html

    name, rows, best = study.study_name, standing.rows, standing.best
    artifacts = {
        "trials.json": json.dumps([dataclasses.asdict(r) for r in rows], indent=1),
        "ceilings.json": json.dumps(standing.ceilings.table(), indent=1),
        "report.html": report_html(
            name, standing, study.user_attrs.get("fingerprint"), study.user_attrs.get(PROFILE_ATTR), throughput
        ),
    }
    metrics: dict[str, float] = {
        "trials": float(len(rows)),
        "noisy_trials": float(sum(1 for r in rows if is_noisy(r.doubt))),
    }
    lines = findings(standing)
    tags = {
        "autotune.ended": f"{ended} (last of {tuners} tuner(s))",
        "autotune.result": lines[0],
        "mlflow.note.content": f"Study {name}: " + "\n\n".join(lines),
    }
    if best is not None:
        win = standing.decision.winner
        assert win is not None  # (best is its lead)
        artifacts["best.yaml"] = export_text(study, standing)
        metrics.update(best_trial=float(best.number), best_runs=float(len(win.rates)), best_spread=win.spread)
        if win.rates:  # (none where the code as written is the answer with no figure: ``findings``)
            metrics["best_samples_per_s"] = win.median
        speedup = standing.speedup(win)  # (None when every baseline run was noisy)
        if standing.base is not None and standing.base.rates and speedup is not None:
            metrics.update(
                best_speedup=speedup, baseline_samples_per_s=standing.base.median, baseline_spread=standing.base.spread
            )
            tags["mlflow.runName"] = f"{name}: trial {best.number} wins, {speedup:.2f}x"
        if win.run_s and standing.base is not None and standing.base.run_s:  # whole runs: the answer in wall time
            metrics.update(best_run_s=win.run_s, baseline_run_s=standing.base.run_s)
        run_line = next((line for line in lines if line.startswith("run time")), None)
        if run_line:
            tags["autotune.run_time"] = run_line
        if best.bottleneck is not None and best.bottleneck.efficiency is not None:
            metrics["best_efficiency"] = best.bottleneck.efficiency
        if win.loss_excess is not None and win is not standing.base:  # (the baseline is judged against itself)
            metrics["best_loss_excess"] = win.loss_excess
        tags.update(
            {
                "autotune.winner_trial": str(best.number),
                "autotune.winner_config": " ".join(f"{k}={show_value(v)}" for k, v in best.config.items()),
            }
        )
    profiled, traces = parent_figures(study.user_attrs.get(PROFILE_ATTR) or {})
    metrics.update(profiled)
    winners = {r.number for r in standing.decision.winner.runs} if standing.decision.winner else set()
    # The runs page shows names by default: each says how its trial ended, and which won
    runs = {
        r.run_id: {
            "autotune.winner": str(r.number in winners).lower(),
            "mlflow.runName": run_name(r, r.number in winners),
        }
        for r in rows
        if r.run_id and r.outcome not in UNFINISHED
    }
    return ParentRecord(artifacts, metrics, tags, runs, traces)
