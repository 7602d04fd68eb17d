"""A Lightning script and a Hugging Face Trainer script (a tiny randomly initialised BERT, no
download), tuned unmodified through the same hooks as any script; the export gives the winner
in each framework's own settings too."""

from __future__ import annotations

import subprocess

import forked_cli
from autotune.tuner._standing import read_standing
from helpers import FIXTURES, SHORT_TRIALS, cli, cli_env, load_study

SCRIPTS = FIXTURES / "scripts"


def test_a_lightning_and_a_trainer_script_are_tuned_unmodified(tmp_path) -> None:
    # Reads must outweigh the model's step however loaded the machine: at 20 ms an item (320 ms a batch
    # of 16) a slow day's CI made the Trainer's step 175 ms alone and 414 ms beside its 2 workers and the
    # suite's studies, and they gained 1.04-1.19x. At 40 ms (640 ms a batch, 320 ms with 2 workers) the
    # same steps give (640 + 175) / 414 = 1.97x; windows of 2 s hold a few baseline steps of 0.8 s.
    space = tmp_path / "workers.yaml"
    space.write_text("knobs:\n  num_workers: [0, 2]\n  persistent_workers: [true]\n")
    runs = {}
    for name, args in (("lightning_style", ["--epochs", "1000"]), ("hf_trainer_style", ["--epochs", "1000"])):
        (tmp_path / name).mkdir()
        command = cli(
            "run",
            str(SCRIPTS / f"{name}.py"),
            "--trials",
            "2",
            "--store",
            "st",
            "--space",
            str(space),
            *SHORT_TRIALS,
            "--warmup",
            "0.5",
            "--window",
            "2",
            "--",
            *args,
            "--read-ms",
            "40",
        )
        runs[name] = forked_cli.popen(
            command, cwd=tmp_path / name, env=cli_env(None), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    said = {name: proc.communicate(timeout=240) for name, proc in runs.items()}
    for name, proc in runs.items():
        assert proc.returncode == 0, said[name][1]
        standing = read_standing(load_study(tmp_path / name / "st", name))
        base, drawn = standing.rows
        assert base.outcome == drawn.outcome == "complete", said[name][1]
        assert drawn.config["num_workers"] == 2 and drawn.samples_per_s > 1.2 * base.samples_per_s, said[name][1]
        assert standing.best.number == 1
    lightning = (tmp_path / "lightning_style" / "st" / "exports" / "lightning_style.yaml").read_text()
    assert "# or in your Lightning script: DataLoader(num_workers=2, persistent_workers=True)" in lightning
    trainer = (tmp_path / "hf_trainer_style" / "st" / "exports" / "hf_trainer_style.yaml").read_text()
    assert "# or in TrainingArguments: dataloader_num_workers=2, dataloader_persistent_workers=True" in trainer


def test_a_lightning_trial_gets_its_precision_through_the_trainer(tmp_path) -> None:
    space = tmp_path / "precision.yaml"
    space.write_text("knobs:\n  amp: [bf16]\n")
    done = subprocess.run(
        cli(
            "run",
            str(SCRIPTS / "lightning_style.py"),
            "--trials",
            "2",
            "--store",
            "st",
            "--space",
            str(space),
            *SHORT_TRIALS,
            "--",
            "--epochs",
            "1000",
            "--read-ms",
            "0",
        ),
        cwd=tmp_path,
        env=cli_env(None),
        text=True,
        capture_output=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    base, drawn = read_standing(load_study(tmp_path / "st", "lightning_style")).rows
    assert base.config["amp"] == "off" and drawn.config["amp"] == "bf16"  # in force, as the trial reported it
    assert not drawn.dataset.get("amp_own")  # Lightning's autocast was ours, not the script's own
    log = (tmp_path / "st" / "trials" / "lightning_style" / "trial-1.log").read_text()
    assert "amp=bf16 set through your framework: Trainer(precision='bf16-mixed')" in log
