"""Two tuners on one study retry a config held back by its lr once, at the baseline's seed."""

from __future__ import annotations

import uuid
from pathlib import Path

from helpers import FIXTURES
from tuners import study_of


def test_two_tuners_retry_a_config_held_back_by_its_lr_once_at_the_baselines_seed(
    postgres: str, mlflow_server, tmp_path: Path, launch
) -> None:
    """A fast config held back by its lr (lr_train.py: 2x the batch, lr as is: complete, but
    about 2x the baseline's samples to its loss) while a second
    tuner works on the study: its config runs again with lr_scaling linear exactly once,
    whichever tuner claims it, and every trial trains from the baseline's seed whatever seed
    its tuner was given.

    Every trial is enqueued (the tuners draw none): their samplers mostly drew that config
    with linear, which leaves nothing to retry (``autotune.tuner._planner.retry_lr``; tests/unit/test_planner.py checks that),
    and when they let the tuners draw, this test raced on which trial ended first (it
    failed once in CI and in 1 of 9 runs beside a CPU hog)."""
    import optuna

    target = f"{FIXTURES / 'lr_train.py'}:train"
    space = tmp_path / "lr.yaml"
    space.write_text("knobs:\n  batch_size: [1x, 2x]\n  lr_scaling: [none, linear]\n")
    name = f"retry-{uuid.uuid4().hex[:6]}"
    args = [
        "--study",
        name,
        "--storage",
        postgres,
        "--tracking-uri",
        mlflow_server.url,
        "--space",
        str(space),
        "--warmup",
        "0.1",
        "--window",
        "0.3",
        "--windows",
        "4",
        "--ceiling-windows",
        "0",
        "--prune",
        "0",
        "--confirm",
        "0",
    ]
    folders = [tmp_path / f"host{i}" for i in range(3)]
    for folder in folders:
        folder.mkdir()
    first = launch(folders[0], "--trials", "1", "--seed", "0", *args, target=target)
    out = first.wait()
    assert first.proc.returncode == 0, out
    # four own trials in all: the one held back by its lr, two at the code's batch (slower than it, so
    # its retry is worth running) and the retry, claimed by whichever tuner asks first
    for batch_size, lr_scaling in (("2x", "none"), ("1x", "linear"), ("1x", "none")):
        study_of(postgres, name).enqueue_trial({"batch_size": batch_size, "lr_scaling": lr_scaling})
    tuners = [
        launch(folder, "--trials", "2", "--seed", seed, *args, target=target)
        for folder, seed in zip(folders[1:], ("5", "9"))
    ]
    outputs = [tuner.wait() for tuner in tuners]
    for tuner, out in zip(tuners, outputs):
        assert tuner.proc.returncode == 0, out
    trials = study_of(postgres, name).get_trials()
    assert all(t.state.is_finished() for t in trials), [(t.number, t.state) for t in trials]
    assert {t.user_attrs["seed"] for t in trials} == {0}  # the baseline's, not the tuners' 5 and 9
    held = trials[1]
    assert held.params == {"batch_size": "2x", "lr_scaling": "none"}
    assert held.user_attrs["outcome"] == "complete", held.user_attrs["reason"]
    slow = held.user_attrs["metrics"]
    assert (slow.get("to_loss_ratio") or slow["to_loss_beyond"]) >= 1.5
    retries = [t for t in trials if t.user_attrs["kind"] == "retry"]
    assert [t.user_attrs["of"] for t in retries] == [held.number], outputs
    (retry,) = retries
    assert retry.number == 4 and len(trials) == 5
    assert retry.params == {"batch_size": "2x", "lr_scaling": "linear"}
    assert retry.user_attrs["outcome"] == "complete", retry.user_attrs["reason"]
    assert retry.state == optuna.trial.TrialState.COMPLETE
