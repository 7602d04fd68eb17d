"""A script that cannot be tuned as given is bad input: one line that says why (with the script's
last words), exit status 2, and nothing left of the study, whose store is removed if the run made it."""

from __future__ import annotations

import subprocess

import forked_cli
from helpers import FIXTURES, SHORT_TRIALS, cli, cli_env, load_study, mlflow_runs

SCRIPTS = FIXTURES / "scripts"
MNIST = str(SCRIPTS / "mnist_style.py")


def run_all(cases: dict[str, list[str]], tmp_path) -> dict[str, subprocess.CompletedProcess]:
    """Each case's ``autotune run`` in its own folder, all at once (a baseline each)."""
    procs = {}
    for name, args in cases.items():
        (tmp_path / name).mkdir(exist_ok=True)
        command = cli("run", args[0], "--trials", "2", "--store", "st", *SHORT_TRIALS, *args[1:])
        procs[name] = forked_cli.popen(
            command, cwd=tmp_path / name, env=cli_env(None), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    done = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=180)
        done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return done


def test_a_script_with_nothing_to_tune_stops_at_its_baseline_in_one_line_with_status_2(tmp_path) -> None:
    kept = tmp_path / "early" / "st" / "notes.txt"  # a store that was there before: kept, the study not
    kept.parent.mkdir(parents=True)
    kept.write_text("mine")
    done = run_all(
        {
            "bogus": [MNIST, "--", "--bogus", "3"],
            "no_step": [str(SCRIPTS / "no_step.py")],
            "inference": [str(SCRIPTS / "inference_only.py")],
            "early": [MNIST, "--", "--epochs", "1", "--train-size", "128", "--read-ms", "0"],
            # trains to its end (run whole: measured in windows it may be stopped first), then fails a check
            # of its own: the code as written fails, said as such
            "fails_after": [
                MNIST,
                "--whole-run",
                "60",
                "--",
                "--epochs",
                "2",
                "--train-size",
                "640",
                "--read-ms",
                "0",
                "--exit-status",
                "3",
            ],
        },
        tmp_path,
    )
    said = {
        name: [line for line in d.stderr.splitlines() if line.startswith("autotune: error: ")]
        for name, d in done.items()
    }
    for name, d in done.items():
        assert d.returncode == 2, (name, d.stderr)
        assert len(said[name]) == 1 and "Traceback" not in d.stderr, (name, d.stderr)
    assert "exited with status 2" in said["bogus"][0] and "unrecognized arguments: --bogus 3" in said["bogus"][0]
    assert "no_step.py stepped no torch.optim optimizer after taking a batch" in said["no_step"][0]
    # no loop at all (an evaluation script): said as such, not as a missing DataLoader
    assert (
        "inference_only.py has no training loop: it built no DataLoader, stepped no optimizer and called no backward()"
        in said["inference"][0]
        and "its last lines: accuracy 0." in said["inference"][0]
    )
    # (too few steps for any measure: said with its numbers and what a measure needs)
    assert (
        "ended after 2 training steps, before one measured window: a measure needs a warmup "
        "(at least 5 steps and 0.2 s" in said["early"][0]
    )
    assert "shorten --warmup" in said["early"][0] and "Test set: Average loss" in said["early"][0]
    assert "exited with status 3" in said["fails_after"][0] and "Test set: Average loss" in said["fails_after"][0]
    for name in ("bogus", "no_step", "inference"):
        assert not (tmp_path / name / "st").exists(), name  # the run made the store: removed
    assert kept.read_text() == "mine"
    assert not (kept.parent / "trials" / "mnist_style").exists()
    try:
        load_study(kept.parent, "mnist_style")
        raise AssertionError("the study was kept")
    except KeyError:
        pass
    _, runs = mlflow_runs(kept.parent, "mnist_style")
    assert runs == []  # deleted: not in searches, not in the UI


def test_training_in_child_processes_is_refused_in_one_line_before_it_runs_whole(tmp_path) -> None:
    """pytorch/examples' mnist_hogwild trains in processes it forks, DDP without torchrun in processes
    torch.multiprocessing.spawn starts: each is said at the children's first optimizer step (or at the
    spawn), not after a whole run (200 epochs a child here: minutes) with "stepped no optimizer".
    mnist_hogwild itself sets the start method to spawn: its children are fresh interpreters that
    inherit no watch (it ended in a 60 s start-up timeout, "no batch")."""
    hogwild = SCRIPTS / "hogwild_style.py"
    lines = hogwild.read_text().splitlines()
    step, spawn = (1 + next(i for i, t in enumerate(lines) if code in t) for code in ("opt.step()", "mp.spawn("))
    done = run_all(
        {
            "forked": [str(hogwild)],
            "spawn_method": [str(hogwild), "--", "--start-method", "spawn"],
            "spawned": [str(hogwild), "--", "--spawn"],
        },
        tmp_path,
    )
    for name, d in done.items():
        errors = [line for line in d.stderr.splitlines() if line.startswith("autotune: error: ")]
        assert d.returncode == 2 and len(errors) == 1, (name, d.stderr)
        assert "--nproc-per-node (torchrun)" in errors[0], errors[0]
    for name in ("forked", "spawn_method"):
        said = f"trains in child processes: SGD.step() at hogwild_style.py:{step} ran in process"
        assert said in done[name].stderr, (name, done[name].stderr)
    assert (
        f"starts its training in child processes (torch.multiprocessing.spawn at hogwild_style.py:{spawn})"
        in done["spawned"].stderr
    )
