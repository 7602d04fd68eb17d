"""A real study of a function that never hands its model to run.model: the model knobs are not tuned, and it says so."""

from __future__ import annotations

from pathlib import Path

from helpers import FIXTURES, autotune, load_study

FIXTURE = FIXTURES / "model_train.py"


def test_a_study_does_not_tune_the_model_knobs_of_a_function_that_never_calls_run_model(tmp_path: Path) -> None:
    space = tmp_path / "model.yaml"
    space.write_text('knobs:\n  channels_last: [false, true]\n  compile: ["off", default]\n  batch_size: [1x, 2x]\n')
    done = autotune(
        "run",
        f"{FIXTURE}:train_without_model",
        "--trials",
        "3",
        "--study",
        "nomodel",
        "--space",
        str(space),
        "--warmup",
        "0.2",
        "--window",
        "0.3",
        "--windows",
        "2",
        "--ceiling-windows",
        "0",
        "--confirm",
        "0",
        "--prune",
        "0",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert (
        said.count(
            "channels_last and compile not tuned: no model was found (a training function hands it to run.model(...)"
        )
        == 1
    )
    sampled = [t.params for t in load_study(tmp_path / "mlflow", "nomodel").get_trials()[1:]]
    assert sampled and all(set(p) == {"batch_size"} for p in sampled), sampled
