"""A fast config that learned too little per sample for its lr runs again with the lr scaled, and wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.stores._records import signed_share
from helpers import FIXTURES, SHORT_TRIALS, autotune, load_study, mlflow_runs


def test_a_fast_config_slow_to_the_baselines_loss_runs_again_with_the_lr_scaled(tmp_path: Path) -> None:
    """2x the batch without lr scaling learns half as much per sample (lr_train.py; as much
    per step): complete, at twice the samples/s, but it took about twice the baseline's samples
    to the baseline's loss, so it ranks near 1x. The study runs its config again with
    lr_scaling linear (none and linear in the space; sqrt is not), which trains as the baseline
    per sample and wins.
    Shorter warmups and more windows than SHORT_TRIALS: the fast trial's warmup must end before
    the samples the baseline's loss is judged on begin."""
    target = f"{FIXTURES / 'lr_train.py'}:train"
    space = tmp_path / "lr.yaml"
    space.write_text("knobs:\n  batch_size: [1x, 2x]\n  lr_scaling: [none, linear]\n")
    args = ["--study", "lr", "--space", str(space), *SHORT_TRIALS, "--warmup", "0.1", "--windows", "4"]
    first = autotune("run", target, "--trials", "1", *args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    load_study(tmp_path / "mlflow", "lr").enqueue_trial({"batch_size": "2x", "lr_scaling": "none"})
    out = autotune("run", target, "--trials", "2", *args, "--seed", "5", cwd=tmp_path)  # a tuner's own seed
    assert out.returncode == 0, out.stderr
    base, held, retry = load_study(tmp_path / "mlflow", "lr").get_trials()
    # every trial trains from the baseline's seed, whatever the tuner that runs it was given
    assert [t.user_attrs["seed"] for t in (base, held, retry)] == [0, 0, 0]
    assert ", seed 0, " in (tmp_path / "mlflow" / "trials" / "lr" / f"trial-{retry.number}.log").read_text()
    assert held.user_attrs["outcome"] == "complete", held.user_attrs["reason"]
    slow = held.user_attrs["metrics"]
    assert (slow.get("to_loss_ratio") or slow["to_loss_beyond"]) >= 1.5  # more samples to the same loss
    assert slow["samples_per_s"] > 1.5 * base.user_attrs["metrics"]["samples_per_s"]  # fast: worth another lr
    assert held.value < slow["samples_per_s"]  # what it ranks on: its time to the loss
    assert (retry.user_attrs["kind"], retry.user_attrs["of"]) == ("retry", held.number)
    assert retry.user_attrs["sampled"] == {"batch_size": "2x", "lr_scaling": "linear"}
    assert retry.params == {"batch_size": "2x", "lr_scaling": "linear"}  # the sampler learns from it
    assert retry.user_attrs["outcome"] == "complete", retry.user_attrs["reason"]
    assert retry.user_attrs["lr"] == pytest.approx(2 * held.user_attrs["lr"])
    assert retry.constraints == {"diverged": 0.0}
    said = " ".join(out.stderr.split())  # the study's notes, beside its progress
    assert f"trial {held.number} took " in said
    assert (
        "x the baseline's samples to its loss at batch size 16 (2x the code's) with lr_scaling none, but ran at" in said
    )
    assert "its config runs again with lr_scaling linear" in said
    _, runs = mlflow_runs(tmp_path / "mlflow", "lr")
    run = next(r for r in runs if r.data.tags.get("autotune.trial") == str(retry.number))
    assert (run.data.tags["autotune.kind"], run.data.tags["autotune.of"]) == ("retry", str(held.number))
    assert (
        f"trial {held.number}'s config, whose lr held it back, with lr_scaling linear"
        in run.data.tags["mlflow.note.content"]
    )
    # How near the tolerance the complete retry's loss came, wherever a user looks: its metrics,
    # its MLflow run (metric and note), the run's terminal line, `show` and the export's header.
    excess = retry.user_attrs["metrics"]["loss_excess"]
    assert -0.5 < excess <= 0.5 and retry.user_attrs["metrics"]["loss_tolerance"] == 0.5
    assert "loss_excess" not in base.user_attrs["metrics"]  # the baseline is the reference
    assert run.data.metrics["loss_excess"] == pytest.approx(excess)
    words = f"{signed_share(excess)} against the baseline's on the same samples"
    assert f"Loss {words} (diverged past +50%)." in run.data.tags["mlflow.note.content"]
    assert f"loss {signed_share(excess)}" in said
    table = autotune("show", "--study", "lr", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if line.lstrip().startswith(f"{retry.number} *"))
    assert signed_share(excess) in row.split()
    shown = autotune("export", "--study", "lr", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert f"trial {retry.number}," in shown.stdout.splitlines()[0]
    assert f"# loss: {words} (diverged past +50%)" in shown.stdout
