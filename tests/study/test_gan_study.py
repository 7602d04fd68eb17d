"""A GAN script tuned to an answer (issue 58: pytorch/examples' dcgan ended in "no complete trial",
its baseline judged diverged from itself on a generator loss that is no convergence curve), and its
export run in production to the script's own end."""

from __future__ import annotations

from autotune.tuner._standing import findings, read_standing
from helpers import FIXTURES, SHORT_TRIALS, autotune, load_study

SCRIPT = FIXTURES / "scripts" / "gan_style.py"
ARGS = ["--", "--epochs", "40", "--size", "1024"]  # (1,280 steps: windows to measure on a quiet host)


def test_a_gan_is_tuned_to_an_answer_and_its_export_runs_to_the_scripts_end(tmp_path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text("knobs:\n  num_workers: [0, 2]\n  persistent_workers: [true]\n  malloc_retain: [false, true]\n")
    done = autotune(
        "run", str(SCRIPT), "--trials", "3", "--store", "st", "--space", str(space), "--confirm", "1",
        *SHORT_TRIALS, *ARGS, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    standing = read_standing(load_study(tmp_path / "st", "gan_style"))
    said = findings(standing)
    assert said[0] != "no complete trial" and not said[0].startswith("unreliable"), said
    # the code as written is never diverged from itself, whatever its two losses did
    base_runs = [r for r in standing.rows if r.baseline]
    assert base_runs and all(r.outcome != "diverged" for r in base_runs), [(r.number, r.reason) for r in base_runs]
    # every other config ran to a figure: none judged diverged on the GAN's losses, none crashed
    assert all(r.outcome in ("complete", "pruned") for r in standing.rows[1:]), [
        (r.number, r.outcome, r.reason) for r in standing.rows
    ]
    export = tmp_path / "best.yaml"
    assert autotune("export", "--store", "st", "-o", str(export), cwd=tmp_path).returncode == 0
    ran = autotune("exec", str(export), str(SCRIPT), *ARGS, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "netG.pth").stat().st_size > 0 and (tmp_path / "netD.pth").stat().st_size > 0
    assert "Loss_G:" in ran.stdout
