"""Knobs that break a script are learnt, not retried (autotune.tuner._broke), and the batch knob
reaches the training loader only (autotune.training._hooks): real studies of unmodified scripts
(tests/fixtures/scripts/own_batch.py, main_process_handle.py)."""

from __future__ import annotations

from autotune.tuner._standing import read_standing
from helpers import FIXTURES, SHORT_TRIALS, autotune, load_study, mlflow_runs

SCRIPTS = FIXTURES / "scripts"
OWN_BATCH = SCRIPTS / "own_batch.py"
#: The line of own_batch.py that shapes a training batch with the script's own batch size.
RESHAPE = "own_batch.py:{} (recon = recon.view(args.batch_size, 1, 8, 8))".format(
    1 + OWN_BATCH.read_text().splitlines().index("            recon = recon.view(args.batch_size, 1, 8, 8)")
)
#: Short whole runs: 8 batches an epoch, a test pass after each.
EPOCHS = ["--epochs", "40"]


def test_a_batch_that_breaks_the_training_step_is_held_and_a_warm_start_holds_it(tmp_path) -> None:
    space = tmp_path / "batch.yaml"
    space.write_text("knobs:\n  batch_size: [2x, 4x]\n  fused_optimizer: [false, true]\n")
    args = ["--store", "st", "--space", str(space), *SHORT_TRIALS]
    done = autotune(
        "run", str(OWN_BATCH), "--trials", "3", *args, "--", *EPOCHS, "--reshape", "train", cwd=tmp_path, timeout=600
    )
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    assert (
        f"your code shapes a batch with its own batch size at {RESHAPE}: batch_size held at your code's own "
        "for the rest of the study (trial "
    ) in said, said
    study = load_study(tmp_path / "st", "own_batch")
    rows = read_standing(study).rows
    crashed = [r for r in rows if r.outcome == "crashed"]
    assert len(crashed) == 1, [(r.number, r.outcome, r.config) for r in rows]  # learnt, not retried
    after = [t for t in study.trials if t.number > crashed[0].number and t.user_attrs.get("kind") == "sampled"]
    assert after and all("batch_size" not in t.params for t in after), [t.params for t in after]
    _, runs = mlflow_runs(tmp_path / "st", "own_batch")
    held = [r for r in runs if "autotune.held.batch_size" in r.data.tags]
    assert held and RESHAPE in held[0].data.tags["autotune.held.batch_size"]

    # a new study of the same target holds it from its start, and says where that was learnt
    # (3 trials: where fused_optimizer=true beat the baseline there, the warm start runs it first)
    again = autotune(
        "run",
        str(OWN_BATCH),
        "--study",
        "again",
        "--warm-start",
        "on",
        "--trials",
        "3",
        *args,
        "--",
        *EPOCHS,
        "--reshape",
        "train",
        cwd=tmp_path,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr
    said = " ".join(again.stderr.split())
    assert "batch_size held at your code's own, as study own_batch found a value of it breaks your code" in said
    assert f"study own_batch learnt: your code shapes a batch with its own batch size at {RESHAPE}" in said
    drawn = [t for t in load_study(tmp_path / "st", "again").trials if t.user_attrs.get("kind") == "sampled"]
    assert drawn and all("batch_size" not in t.params for t in drawn), [t.params for t in drawn]
    assert all(t.user_attrs.get("outcome") != "crashed" for t in drawn)


def test_a_value_that_breaks_the_dataset_in_loader_workers_is_held(tmp_path) -> None:
    script = SCRIPTS / "main_process_handle.py"
    line = 1 + script.read_text().splitlines().index(
        '            raise RuntimeError("the records handle was opened in another process")'
    )
    space = tmp_path / "workers.yaml"
    space.write_text("knobs:\n  num_workers: [1, 2]\n")
    done = autotune(
        "run",
        str(script),
        "--trials",
        "3",
        "--store",
        "st",
        "--space",
        str(space),
        *SHORT_TRIALS,
        "--",
        *EPOCHS,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    # the dataset's line, from the worker's own traceback, not the loop's `for`
    assert (
        f'at main_process_handle.py:{line} (raise RuntimeError("the records handle was opened in another '
        "process\")): num_workers held at your code's own for the rest of the study"
    ) in said, said
    rows = read_standing(load_study(tmp_path / "st", "main_process_handle")).rows
    assert [r.outcome for r in rows].count("crashed") == 1, [(r.number, r.outcome, r.config) for r in rows]


def test_the_batch_knob_reaches_the_training_loader_only(tmp_path) -> None:
    """vae's case: the test pass shapes its batch with the script's own batch size. The test loader,
    built from the same arguments, keeps it; the training loader trains on the knob's."""
    space = tmp_path / "batch.yaml"
    space.write_text("knobs:\n  batch_size: [2x]\n")
    done = autotune(
        "run",
        str(OWN_BATCH),
        "--trials",
        "2",
        "--store",
        "st",
        "--space",
        str(space),
        *SHORT_TRIALS,
        "--",
        *EPOCHS,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    rows = read_standing(load_study(tmp_path / "st", "own_batch")).rows
    # (none crashed; beside the suite's load a trial may still be pruned on its speed)
    assert "crashed" not in [r.outcome for r in rows], [(r.outcome, r.reason) for r in rows]
    trial = next(r for r in rows if r.config.get("batch_size") not in (None, 32))
    log = (tmp_path / "st" / "trials" / "own_batch" / f"trial-{trial.number}.log").read_text()
    assert "measuring the loader of TensorDataset (batch_size 64)" in log
    assert "the loader of TensorDataset keeps your batch_size 32: the batch knob applies to the training loader" in log
    assert "test set loss" in log  # its test passes ran


def test_exec_applies_an_exported_batch_to_the_training_loader_only(tmp_path) -> None:
    from autotune.production._export import render

    export = tmp_path / "batch.yaml"
    export.write_text(render({"batch_size": 64}, 32, []))
    plain = autotune("exec", str(export), str(OWN_BATCH), "--", "--epochs", "2", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert "====> Epoch 2 test set loss:" in plain.stdout and "(8 images compared)" in plain.stdout
    assert "keeps your batch_size 32: the batch knob applies to the training loader only" in plain.stderr
    assert "keeps your batch_size" not in plain.stdout  # (the script's own output is as under python)
