"""A DDP script under torchrun, tuned unmodified with ``--nproc-per-node 2`` (gloo on the CPU) and run
in production with ``autotune exec --nproc-per-node 2``; a rank that raises, and one that hangs, end
their trial with nothing left running (the autouse fixture checks every process the test started)."""

from __future__ import annotations

import subprocess

import forked_cli
from autotune.core._kinds import Kind
from autotune.tuner._standing import read_standing
from helpers import FIXTURES, autotune, cli, cli_env, load_study

SCRIPT = FIXTURES / "scripts" / "ddp_style.py"
TRIALS = ["--warmup", "0.5", "--window", "0.5", "--windows", "3", "--seed", "0", "--confirm", "0"]


def test_a_ddp_script_is_tuned_on_two_ranks_and_run_in_production_on_two(tmp_path) -> None:
    space = tmp_path / "workers.yaml"
    space.write_text("knobs:\n  num_workers: [0, 2]\n  persistent_workers: [true]\n")
    # reads of 3 ms an item (96 ms a batch): at 1 ms, beside a CPU hog and the suite, the workers'
    # hand-offs and the ranks' steps took as long as the reads they hid, and 2 workers read 1.19x
    # the baseline (1,579 vs 1,328 samples/s, 2026-11-28)
    done = autotune(
        "run",
        str(SCRIPT),
        "--nproc-per-node",
        "2",
        "--trials",
        "2",
        "--store",
        "st",
        "--space",
        str(space),
        *TRIALS,
        "--",
        "--epochs",
        "1000",
        "--read-ms",
        "3",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "no ceilings on 2 ranks" in done.stderr
    study = load_study(tmp_path / "st", "ddp_style")
    assert study.user_attrs["target"].startswith(f"--nproc-per-node 2 {SCRIPT} -- --epochs 1000")
    standing = read_standing(study)
    base, drawn = standing.rows
    assert base.outcome == drawn.outcome == "complete" and drawn.config["num_workers"] == 2
    # its DistributedSampler gives each rank its share: nothing to say (without one: a note line)
    assert (base.dataset["ranks"], base.dataset["splits_ranks"]) == (2, True)
    assert "ranks reads every row" not in done.stdout
    # 2 workers per rank read twice as fast as each rank's main process: the job's samples/s, summed
    assert drawn.samples_per_s > 1.2 * base.samples_per_s, (base.samples_per_s, drawn.samples_per_s)
    log = (tmp_path / "st" / "trials" / "ddp_style" / "trial-1.log").read_text()
    assert "2 ranks through torch.distributed.run" in log and "(rank 1 of 2)" in log

    export = tmp_path / "best.yaml"
    assert autotune("export", "--store", "st", "-o", str(export), cwd=tmp_path).returncode == 0
    assert f"# run with: autotune exec path --nproc-per-node 2 {SCRIPT} -- --epochs 1000" in export.read_text()
    ran = autotune(
        "exec",
        str(export),
        "--nproc-per-node",
        "2",
        str(SCRIPT),
        "--",
        "--epochs",
        "2",
        "--size",
        "256",
        "--read-ms",
        "0",
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr
    # the export's config (the baseline's, where the drawn trial's lead was inside the noise of
    # the loaded machine's windows), and no warning that the export came from another machine:
    # each rank keeps to its share of the CPUs, and the job's are those the study measured on
    workers = standing.best.config["num_workers"]
    assert "autotune: 2 ranks, each running" in ran.stderr and f"num_workers={workers}" in ran.stderr, ran.stderr
    assert "measured on another machine" not in ran.stderr, ran.stderr
    assert "epoch 1: loss" in ran.stdout  # both ranks ran to the end (rank 0 prints after the last all-reduce)


def test_a_ddp_study_whose_ranks_wait_on_reads_climbs_past_the_cores(tmp_path) -> None:
    # 1 ms an item, no workers as written: each rank waits on its reads most of its time, and its
    # main thread, sleeping, is hardly busy. Each rank's range widens past its 1 CPU by Little's
    # law on the baseline's own figures, and the leader runs again with twice its workers
    space = tmp_path / "workers.yaml"
    space.write_text("knobs:\n  num_workers: {low: 1, high: auto}\n  persistent_workers: [true]\n")
    # (figures believed under the suite's load: what is checked is what the study asks, not how fast)
    done = autotune(
        "run",
        str(SCRIPT),
        "--nproc-per-node",
        "2",
        "--trials",
        "3",
        "--store",
        "st",
        "--space",
        str(space),
        *TRIALS,
        "--max-load",
        "1",
        "--max-spread",
        "1000",
        "--",
        "--epochs",
        "1000",
        "--read-ms",
        "1",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    assert "trial 0's loader on each of 2 ranks" in said, said
    rows = read_standing(load_study(tmp_path / "st", "ddp_style")).rows
    assert [r.kind for r in rows] == [Kind.BASELINE, Kind.SAMPLED, Kind.MORE_WORKERS], said
    drawn, climbed = rows[1].config["num_workers"], rows[2].config["num_workers"]
    assert rows[2].of == 1 and drawn < climbed <= 2 * drawn, (drawn, climbed)  # (twice, or the range's top)
    assert rows[1].workers_high > 2 and rows[2].outcome == "complete", rows[2].reason  # past the 2 CPUs; it ran
    assert f"trial 1, the fastest then, drew num_workers={drawn}" in said, said


def test_a_rank_that_raises_or_hangs_ends_its_trial_and_a_run_handle_function_trains_on_two(tmp_path) -> None:
    runs = {}
    # a stall timeout of 10 s: at 3, beside the suite's load, torchrun had not yet ended the job of
    # the rank that raised (its peer waits in a collective, no step finishing) when the timer fired,
    # and that trial read as a stall (CI, 2026-11-28)
    for name, fault in (("raises", "--fail-rank"), ("hangs", "--hang-rank")):
        (tmp_path / name).mkdir()
        command = cli(
            "run",
            str(SCRIPT),
            "--nproc-per-node",
            "2",
            "--trials",
            "1",
            "--store",
            "st",
            *TRIALS,
            "--stall-timeout",
            "10",
            "--",
            "--epochs",
            "1000",
            "--read-ms",
            "0",
            fault,
            "1",
            "--fail-after",
            "20",
        )
        runs[name] = forked_cli.popen(
            command, cwd=tmp_path / name, env=cli_env(None), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    # a function that takes the Run, on 2 ranks: one rank may finish its windows first, and the
    # other's collective then loses its peer; the trial still ends complete
    (tmp_path / "handle").mkdir()
    runs["handle"] = forked_cli.popen(
        cli(
            "run",
            f"{FIXTURES / 'ddp_train.py'}:train",
            "--nproc-per-node",
            "2",
            "--trials",
            "1",
            "--store",
            "st",
            *TRIALS,
        ),
        cwd=tmp_path / "handle",
        env=cli_env(None),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    said = {name: proc.communicate(timeout=180) for name, proc in runs.items()}
    assert runs["handle"].returncode == 0, said["handle"]
    assert read_standing(load_study(tmp_path / "handle" / "st", "ddp_train")).rows[0].outcome == "complete"
    assert runs["raises"].returncode == 1, said["raises"]
    assert "rank 1: rank 1 lost its disk" in said["raises"][1]  # the failing rank's own error, named
    assert runs["hangs"].returncode == 1, said["hangs"]
    rows = read_standing(load_study(tmp_path / "hangs" / "st", "ddp_style")).rows
    assert rows[0].outcome == "timeout" and "stalled: no step finished" in rows[0].reason, rows[0].reason
