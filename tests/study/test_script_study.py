"""An unmodified script tuned and run in production: ``autotune run train.py -- ARGS`` and
``autotune exec best.yaml train.py -- ARGS`` on a pytorch/examples-style MNIST script (argparse,
loss.item() every log interval, a test pass per epoch) whose loader reads slowly."""

from __future__ import annotations

import hashlib

from autotune.tuner._standing import read_standing
from helpers import FIXTURES, SHORT_TRIALS, autotune, load_study, mlflow_runs

SCRIPT = FIXTURES / "scripts" / "mnist_style.py"
#: Its own command line: epochs of 3 batches (about 1.7 s at 8 ms an item), so that test passes fall
#: between the windows; reads slow enough to outweigh what a loaded machine adds. Beside the suite's
#: other studies (CI, 2026-11-28), at 2 ms an item, 2 and 4 workers read 170 and 163 samples/s against
#: the baseline's 235: each batch handed over from a worker cost the main process about 390 ms (its
#: share of a saturated CPU, and the wake-ups of the hand-over), more than the 128 ms of reads they
#: saved. At 8 ms a batch's reads are 512 ms; quiet, 2 and 4 workers read 2.0x and 3.0x.
ARGS = ["--", "--epochs", "1000", "--train-size", "192", "--test-size", "64", "--read-ms", "8"]


def digest() -> str:
    return hashlib.sha256(SCRIPT.read_bytes()).hexdigest()


def test_a_script_is_tuned_unmodified_and_run_in_production_with_its_export(tmp_path) -> None:
    before = digest()
    space = tmp_path / "workers.yaml"
    # Workers kept across its 8-batch epochs: beside the suite's other processes, workers started anew
    # each epoch ran at a third of the baseline's rate (420 vs 1,384 samples/s, pruned), which is true of
    # such a loader but not what this test is about.
    space.write_text(
        "knobs:\n  num_workers: [0, 2, 4]\n  persistent_workers: [true]\n  amp: ['off', bf16]\n"
        "  fused_optimizer: [false, true]\n"
    )
    done = autotune(
        "run", str(SCRIPT), "--trials", "3", "--store", "st", "--space", str(space), *SHORT_TRIALS, *ARGS, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert (
        "not tuned in an unmodified script" not in done.stderr
    )  # amp reaches it from outside (autotune.training._outside)
    # its Adadelta has no fused kernel: seen at the baseline, never drawn
    assert "fused_optimizer not tuned: your code's optimizer (Adadelta) takes no fused= argument" in done.stderr
    study = load_study(tmp_path / "st", "mnist_style")
    assert study.user_attrs["target"] == f"{SCRIPT} -- " + " ".join(ARGS[1:])
    drawn = [t.params for t in study.trials[1:]]  # (the baseline's params are its code's own values)
    assert all(set(params) <= {"num_workers", "persistent_workers", "amp"} for params in drawn), drawn
    assert all("amp" in params for params in drawn), drawn
    standing = read_standing(study)
    # what each trial ran with is what it drew: autocast entered from outside, no script autocast of its own
    assert all(r.config["amp"] == r.sampled["amp"] for r in standing.rows[1:]), [r.config for r in standing.rows]
    assert not any(r.dataset.get("amp_own") for r in standing.rows)
    base = standing.rows[0]
    assert base.baseline and base.outcome == "complete"
    assert base.config["batch_size"] == 64 and base.config["num_workers"] == 0  # the script's own
    assert base.metrics["outside_loop_s"] > 0  # its test passes, kept out of samples/s
    log = (tmp_path / "st" / "trials" / "mnist_style" / "trial-0.log").read_text()
    assert "measuring the loader of SlowDigits (batch_size 64)" in log  # not the test loader (500)
    assert "Train Epoch: 1" in log  # the script's own output, its own command line
    seen = [(r.number, r.config.get("num_workers"), r.outcome, r.samples_per_s) for r in standing.rows]
    assert standing.best.config["num_workers"] > 0 and standing.best.number != 0, seen  # workers help this loader
    _, runs = mlflow_runs(tmp_path / "st", "mnist_style")
    assert len([r for r in runs if "autotune.kind" in r.data.tags]) == len(study.trials)

    export = tmp_path / "best.yaml"
    assert autotune("export", "--store", "st", "-o", str(export), cwd=tmp_path).returncode == 0
    assert f"# run with: autotune exec path {SCRIPT} -- --epochs" in export.read_text()
    ran = autotune(
        "exec", str(export), str(SCRIPT), "--", "--epochs", "1", "--train-size", "256", "--read-ms", "0", cwd=tmp_path
    )
    assert ran.returncode == 0, ran.stderr
    workers = standing.best.config["num_workers"]
    assert f"autotune: running {SCRIPT} -- --epochs 1" in ran.stderr and f"num_workers={workers}" in ran.stderr
    if standing.best.config["amp"] != "off":  # applied in production as in its trials, not dropped for the code
        assert f"amp={standing.best.config['amp']}" in ran.stderr and "not applied" not in ran.stderr
    assert "Test set: Average loss" in ran.stdout  # ran to its end
    assert digest() == before  # run and exec left the script as it was


def test_autotune_exec_applies_the_loop_knobs_to_an_unmodified_script(tmp_path) -> None:
    """An export's amp, prefetch and channels_last reach a plain script under ``autotune exec`` the way
    its trials applied them; what its loop saw is what the script itself prints."""
    from autotune.production._export import render

    probe = FIXTURES / "scripts" / "loop_probe.py"
    export = tmp_path / "loop.yaml"
    export.write_text(render({"amp": "bf16", "prefetch": "thread", "channels_last": True}, 32, []))
    ran = autotune("exec", str(export), str(probe), "--", "--epochs", "2", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "amp=bf16" in ran.stderr and "prefetch=thread" in ran.stderr and "not applied" not in ran.stderr
    said = dict(line.split(": ", 1) for line in ran.stdout.splitlines() if ": " in line)
    # its first call finds the model (before its forward: nhwc from there on); the first step finds the
    # training loader, so its first forward is fp32 and the rest under autocast
    assert said["forward"] == "bfloat16/nhwc float32/nhwc" and said["weights"] == "nhwc"
    assert "autotune-prefetch" in said["threads"].split()
    before, after = map(float, said["loss"].split(" -> "))
    assert after < before


def test_a_loop_without_a_dataloader_is_measured_in_its_optimizers_steps(tmp_path) -> None:
    """A script that slices its batches from tensors (nanoGPT's get_batch, word_language_model) is
    measured in optimizer steps: its baseline ranks, no loader knob is drawn (one line says why), and
    the study answers."""
    done = autotune(
        "run",
        str(FIXTURES / "scripts" / "sliced_lm.py"),
        "--trials",
        "3",
        "--store",
        "st",
        *SHORT_TRIALS,
        "--",
        "--iters",
        "300",
        "--eval-interval",
        "100",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "batch_size, num_workers, pin_memory" in done.stderr
    assert "not tuned: your loop takes its batches from no DataLoader (it slices its own)" in done.stderr
    rows = read_standing(load_study(tmp_path / "st", "sliced_lm")).rows
    assert rows[0].outcome == "complete" and rows[0].dataset.get("loaderless"), rows[0].reason
    drawn = [row.config for row in rows[1:]]
    assert drawn and all(c.get("batch_size") in (None, "1x") and not c.get("num_workers") for c in drawn), drawn


def test_a_loop_that_reads_its_loader_once_is_measured_in_its_optimizers_steps(tmp_path) -> None:
    """pytorch/examples' mnist_forward_forward takes its whole training set as one batch
    (``next(iter(loader))``) and then steps each layer's optimizer on it many times: no second
    batch ever comes. It ended in "startup: no batch after 60 s"; it is measured in steps instead,
    said in one line, and the study answers."""
    done = autotune(
        "run", str(FIXTURES / "scripts" / "full_batch.py"), "--trials", "2", "--store", "st", *SHORT_TRIALS,
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = read_standing(load_study(tmp_path / "st", "full_batch")).rows
    assert rows[0].outcome == "complete" and rows[0].dataset.get("loaderless"), (rows[0].outcome, rows[0].reason)
    log = (tmp_path / "st" / "trials" / "full_batch" / "trial-0.log").read_text()
    assert "autotune: Adam.step() ran again on the same batch (the loader gave one and then none)" in log, log
