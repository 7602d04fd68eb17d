"""A trial on several ranks (autotune.training._ranks): each rank's CPUs, the job's window from its ranks',
torchrun's environment, and --nproc-per-node bounded by the CPUs before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune._cli import cli
from autotune.machine._probe import usable_cpus
from autotune.training._ranks import JOB_CPUS_ENV, combine, job_cpus, rank_environ, rank_share, torchrun


def test_each_rank_gets_its_own_share_of_the_cpus() -> None:
    assert [rank_share(range(8), r, 2) for r in range(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [rank_share([0, 1, 2], r, 2) for r in range(2)] == [[0], [1]]  # the odd one is left idle
    assert [rank_share([3], r, 2) for r in range(2)] == [[3], [3]]  # fewer CPUs than ranks: shared


def test_a_window_of_the_job_sums_the_ranks_rates_and_keeps_the_slowest_ranks_wait() -> None:
    ranks = [
        {"index": 0, "samples": 320, "seconds": 0.5, "data_wait": 0.1, "loss": 1.0},
        {"index": 0, "samples": 288, "seconds": 0.6, "data_wait": 0.3, "loss": 1.2},
    ]
    window = combine(ranks)
    assert window["samples"] / window["seconds"] == pytest.approx(640 + 480, rel=1e-3)
    assert window["data_wait"] / window["seconds"] == pytest.approx(0.5)  # rank 1 waited half its time
    assert window["loss"] == 1.0 and window["rank_samples_per_s"] == [640.0, 480.0]


def test_torchrun_gets_each_ranks_threads_unless_the_user_set_them() -> None:
    assert rank_environ({}, 2, [0, 1, 2, 3])["OMP_NUM_THREADS"] == "2"
    assert rank_environ({"OMP_NUM_THREADS": "1"}, 2, [0, 1, 2, 3])["OMP_NUM_THREADS"] == "1"
    assert rank_environ({}, 2, [0, 1, 2, 3])[JOB_CPUS_ENV] == "4"  # the job's, for what an export is checked on
    assert torchrun(2, ["autotune", "exec"])[1:6] == [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "-m",
    ]


def test_the_jobs_cpus_are_counted_as_the_studys_probe_counts_them(monkeypatch: pytest.MonkeyPatch) -> None:
    import autotune.machine._probe

    monkeypatch.setattr(autotune.machine._probe, "usable_cpus", lambda: 1)  # (a cgroup's CPU quota of one)
    assert rank_environ({}, 2)[JOB_CPUS_ENV] == "1"


def test_a_rank_knows_the_jobs_cpus_and_a_process_outside_one_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(JOB_CPUS_ENV, "4")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert job_cpus() is None  # not a rank: its own CPUs are the job's
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert job_cpus() == 4
    for bad in ("", "0", "x"):
        monkeypatch.setenv(JOB_CPUS_ENV, bad)
        assert job_cpus() is None


@pytest.mark.parametrize("command", ["run", "exec"])
def test_more_ranks_than_cpus_is_bad_input(tmp_path: Path, command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text("print('hi')\n")
    Path("best.yaml").write_text("dataloader: {num_workers: 2}\n")
    too_many = str(usable_cpus() + 1)
    args = (
        ["run", "train.py", "--nproc-per-node", too_many]
        if command == "run"
        else ["exec", "best.yaml", "--nproc-per-node", too_many, "train.py"]
    )
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 2, done.output
    assert f"--nproc-per-node {too_many}: this machine gives" in done.output and "each rank needs one" in done.output
    assert not Path("autotune-store").exists() and not Path("mlflow").exists()  # nothing created
