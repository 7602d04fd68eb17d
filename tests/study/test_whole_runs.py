"""Short code runs whole (autotune.tuner._training_shape): every trial runs the script to its end and is ranked on
its wall time, none is a "short measure"; the study says up front what its trials will cost, and
its answer in the wall time a user waits for, which ``autotune exec`` holds its own run against."""

from __future__ import annotations

import re

import yaml

from autotune.tuner._standing import read_standing
from helpers import FIXTURES, autotune, load_study, mlflow_runs

SCRIPT = FIXTURES / "scripts" / "mnist_style.py"
#: Four epochs of 8 batches, each item read in 6 ms: about 1.6 s an epoch without workers, a
#: whole run of about 8 s with its start-up (the interpreter and torch's import counted back);
#: four workers read four items at once. At 3 ms (2026-11-29, the suite's 4 processes on 2 CPUs)
#: the baseline ran 5.2-6.4 s and the workers 6.9-9.5 s: what they saved was under the noise
#: their start-up and the load added. At 6 ms, with trials started cold (as python starts), a loaded
#: fresh-clone suite's baseline ran 27.9 and 15.8 s, the workers 18.6 and 11.5 s: inside its noise.
ARGS = ["--", "--epochs", "4", "--train-size", "256", "--test-size", "64", "--batch-size", "32", "--read-ms", "12"]
TRIALS = [
    "--whole-run",
    "60",
    "--warmup",
    "0.2",
    "--window",
    "0.3",
    "--ceiling-windows",
    "1",
    "--seed",
    "0",
    "--confirm",
    "1",
]


def test_a_short_script_runs_whole_in_every_trial_and_exec_holds_its_run_against_the_study(tmp_path) -> None:
    space = tmp_path / "workers.yaml"
    space.write_text("knobs:\n  num_workers: [4]\n  persistent_workers: [true]\n")
    done = autotune(
        "run", str(SCRIPT), "--trials", "2", "--store", "st", "--space", str(space), *TRIALS, *ARGS, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert re.search(
        r"each trial runs your script whole: about \d+ s as written; 1 trial and 2 confirmation "
        r"runs: about [\d.]+ (?:s|min)",
        done.stderr,
    ), done.stderr  # (minutes on a loaded host)
    standing = read_standing(load_study(tmp_path / "st", "mnist_style"))
    rows = [(r.number, r.kind.value, r.outcome, r.doubt, r.run_s) for r in standing.rows]
    assert len(standing.rows) == 4 and all(r.outcome == "complete" and r.doubt is None for r in standing.rows), rows
    assert all(r.run_s and "short measure" not in r.reason for r in standing.rows), rows
    base = standing.rows[0]
    # the shape it learned: where its warmup and windows ended, and that the code ended by itself
    # (its first batch comes before an optimizer step shows the loader trains: not counted)
    assert base.shape["ended"] and base.shape["epochs"] == 4 and base.shape["samples"] == 4 * 256 - 32
    assert base.metrics["startup_s"] < base.metrics["run_s"] and base.metrics["loop_s"] > 0
    # its ceilings, from a run of their own after its whole run (none is measured inside one)
    ceilings = load_study(tmp_path / "st", "mnist_style").trials[0].user_attrs["ceilings"]
    assert {e["part"] for e in ceilings} == {"compute", "loader"}, ceilings
    assert (tmp_path / "st" / "trials" / "mnist_style" / "trial-0-ceilings.log").exists()
    # later trials measured the same samples as the baseline: its marks (a window shorter than
    # autotune.worker._marks.MIN_WINDOW_S merged into the next), then the code's end
    for row in standing.rows[1:]:
        assert row.shape["marks"][0] == base.shape["marks"][0], (row.number, row.shape, base.shape)
        assert set(row.shape["marks"][:-1]) <= set(base.shape["marks"]), (row.number, row.shape, base.shape)
    # four workers against none, as the user waits for it: in the summary and the export
    assert standing.decision.winner.first.number == 1, rows
    assert standing.decision.winner.run_s < standing.base.run_s, rows
    assert "run time, measured whole (medians of 2 and 2 runs): as written" in done.stdout
    export = tmp_path / "best.yaml"
    assert autotune("export", "--store", "st", "-o", str(export), cwd=tmp_path).returncode == 0
    text = export.read_text()
    assert "# run time, measured whole" in text and "your script's whole run in" in text
    measured = yaml.safe_load(text)["measured_on"]
    assert measured["run_s"] > measured["winner_run_s"] > 0
    # the MLflow parent run holds the answer too, and each run's name its wall time
    _, runs = mlflow_runs(tmp_path / "st", "mnist_style")
    parent = next(r for r in runs if "autotune.trial" not in r.data.tags)
    assert parent.data.metrics["baseline_run_s"] > parent.data.metrics["best_run_s"] > 0
    assert parent.data.tags["autotune.run_time"].startswith("run time, measured whole")
    assert all(re.search(r" [\d.]+ s", r.data.tags["mlflow.runName"]) for r in runs if "autotune.trial" in r.data.tags)

    ran = autotune("exec", str(export), str(SCRIPT), *ARGS, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    last = ran.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        r"autotune: ran \S+ -- .* in [\d.]+ s \(process start to its exit\); as written it "
        r"ran [\d.]+ s in the study on this machine: [\d.]+x \(the study's runs of this config: "
        r"[\d.]+ s\)",
        last,
    ), last


def test_code_that_runs_past_whole_run_is_measured_at_the_baselines_marks(tmp_path) -> None:
    """A training function that trains for ever: its baseline measures on until --whole-run (1 s),
    then the study says what each trial measures, and every later trial ends its warmup and
    windows where the baseline's did, in samples."""
    # (a knob that keeps its speed: a larger batch is measured over the same steps, its marks times
    # the ratio; a config under a quarter of the baseline's speed closes its windows short of them)
    space = tmp_path / "malloc.yaml"
    space.write_text("knobs:\n  malloc_retain: [true]\n")
    done = autotune(
        "run",
        f"{FIXTURES / 'tiny_train.py'}:train",
        "--trials",
        "2",
        "--store",
        "st",
        "--whole-run",
        "1",
        "--space",
        str(space),
        "--warmup",
        "0.2",
        "--window",
        "0.3",
        "--windows",
        "2",
        "--confirm",
        "0",
        "--ceiling-windows",
        "0",
        "--seed",
        "0",
        "--prune",
        "0",
        cwd=tmp_path,
    )  # (a slow draw measures its windows too)
    assert done.returncode == 0, done.stderr
    assert re.search(
        r"your code runs past the 1 s a trial may run whole \(--whole-run\): each trial measures the same "
        r"[\d,]+ samples after a warmup of [\d,]+",
        done.stderr,
    ), done.stderr
    base, later = read_standing(load_study(tmp_path / "st", "tiny_train")).rows
    # its warmup, 2 windows (and more while its loss had not fallen: it learns for every trial's verdict)
    assert not base.run_s and not base.shape.get("ended") and len(base.shape["marks"]) >= 3
    assert later.outcome == "complete" and later.doubt is None, later.reason
    assert later.shape["marks"] == base.shape["marks"][:3]  # the same samples, whatever its speed


def test_under_a_horizon_optunas_sampler_learns_the_projection_the_study_ranks_on(tmp_path) -> None:
    """Under --horizon whole runs rank on start-up + compile + the loop's projected time for the
    production run; Optuna's value for each is that figure (``production_samples_per_s``, in MLflow
    too), not the short run's own samples over its wall time, which weighs start-up as the
    horizon does not."""
    space = tmp_path / "workers.yaml"
    space.write_text("knobs:\n  num_workers: [2]\n")
    args = ["--", "--epochs", "2", "--train-size", "128", "--test-size", "32", "--batch-size", "32", "--read-ms", "2"]
    done = autotune(
        "run",
        str(SCRIPT),
        "--trials",
        "2",
        "--store",
        "st",
        "--space",
        str(space),
        "--horizon",
        "2",
        *TRIALS[:-2],
        "--confirm",
        "0",
        *args,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "objective: a production run of 2 h of the baseline's training (--horizon 2)" in done.stderr + done.stdout
    study = load_study(tmp_path / "st", "mnist_style")
    for trial in study.trials:
        metrics = trial.user_attrs["metrics"]
        if trial.user_attrs.get("outcome") != "complete":
            continue
        assert metrics["run_s"] > 0 and trial.value == metrics["production_samples_per_s"], (trial.number, metrics)
        assert trial.value != metrics["run_samples_per_s"]
    standing = read_standing(study)
    assert standing.horizon_h == 2 and all(r.wall_rate for r in standing.rows if r.outcome == "complete")
    _, runs = mlflow_runs(tmp_path / "st", "mnist_style")
    assert all("production_samples_per_s" in r.data.metrics for r in runs if "autotune.trial" in r.data.tags)
