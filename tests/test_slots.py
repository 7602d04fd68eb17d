"""Trial slots (--jobs): how a host is split, and that real workers and their DataLoader
workers stay on their slot's CPUs."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import psutil
import pytest
from conftest import TAG
from helpers import cli, cli_env, load_study, mlflow_runs, seed_store

from autotune import Config, ConfigError
from autotune._launch import build_command, TRIAL_TAG_ENV, TrialSpec
from autotune._slots import CPUS_ENV, Slot, cpu_list, devices_of, plan_slots


@pytest.mark.parametrize("jobs, cpus, expected", [
    (1, [0, 1, 2, 3], [()]),                      # one slot: not pinned, as before --jobs
    (2, [0, 1, 2, 3], [(0, 1), (2, 3)]),
    (3, [0, 1, 2, 3, 4, 5, 6], [(0, 1, 2), (3, 4), (5, 6)]),  # 7 = 3 + 2 + 2: the first gets the extra
    (2, [8, 2, 3, 9], [(2, 3), (8, 9)]),          # an affinity mask, sorted
])
def test_slots_split_the_cpus_disjointly(jobs, cpus, expected) -> None:
    slots = plan_slots(jobs, cpus, ["cpu"])
    assert [s.cpus for s in slots] == expected
    assert all(s.of_cpus == len(cpus) and s.device == "cpu" for s in slots)


def test_one_gpu_per_slot() -> None:
    slots = plan_slots(2, range(16), ["cuda:0", "cuda:3"])
    assert [(s.cpus, s.device) for s in slots] == [(tuple(range(8)), "cuda:0"), (tuple(range(8, 16)), "cuda:3")]
    assert slots[1].share() == "CPUs 8-15 (8 of 16), cuda:3"
    with pytest.raises(ConfigError, match=r"--jobs 3: one trial per GPU, and --device gives 2 \(cuda:0, cuda:3\)"):
        plan_slots(3, range(16), ["cuda:0", "cuda:3"])


def test_more_slots_than_cpus_is_refused_with_what_is_allowed() -> None:
    with pytest.raises(ConfigError, match=r"--jobs 3: more trial slots than the 2 CPUs .* \(0-1\); allowed: 1 to 2"):
        plan_slots(3, [0, 1], ["cpu"])


def test_devices_and_cpu_lists_read_as_people_write_them() -> None:
    assert devices_of("cuda", 3) == ["cuda:0", "cuda:1", "cuda:2"]
    assert devices_of("cuda:0,cuda:2", 3) == ["cuda:0", "cuda:2"]
    with pytest.raises(ConfigError, match=r"cuda:4 is not visible; this host shows 2 CUDA device"):
        devices_of("cuda:0,cuda:4", 2)
    assert cpu_list([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert Slot(0, (), 4, "cpu").share() == "all 4 CPUs"


def test_a_pinned_slot_reaches_the_workers_environment() -> None:
    spec = TrialSpec("x.py:train", Config(), cpus=(2, 3))
    _, env = build_command(spec, 5, {}, tag="t")
    assert env[CPUS_ENV] == "2,3"
    _, env = build_command(TrialSpec("x.py:train", Config()), 5, {}, tag="t")
    assert CPUS_ENV not in env


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="--jobs 2 needs 2 CPUs to split")
def test_jobs_2_pins_each_trial_and_its_dataloader_workers_to_disjoint_cpus(tmp_path: Path) -> None:
    """Real tuner, real workers: their masks are read from outside with psutil while they run."""
    import subprocess

    space = tmp_path / "workers.yaml"
    space.write_text("knobs:\n  num_workers: 2\n  batch_size: [1x, 2x]\n")
    target = f"{Path(__file__).parent / 'fixtures' / 'tiny_train.py'}:train"
    args = cli("run", target, "--jobs", "2", "--trials", "5", "--space", str(space),
               "--warmup", "0.5", "--window", "0.5", "--windows", "3", "--ceiling-windows", "0", "--confirm", "0",
               "--prune", "0", "--study", "jobs")
    seed_store(tmp_path, args[3:])  # after [python, -m, autotune]
    tuner = subprocess.Popen(args, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    mine = os.environ[TAG]
    seen: dict[int, tuple[str, int, frozenset[int]]] = {}  # pid -> (trial tag, ppid, cpus)
    at_once: list[set[str]] = []  # trial tags seen running together
    deadline = time.monotonic() + 240
    while tuner.poll() is None and time.monotonic() < deadline:
        tags = set()
        for proc in psutil.process_iter():
            try:
                env = proc.environ()
                if env.get(TAG) != mine or TRIAL_TAG_ENV not in env or proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                seen[proc.pid] = (env[TRIAL_TAG_ENV], proc.ppid(), frozenset(proc.cpu_affinity()))
                tags.add(env[TRIAL_TAG_ENV])
            except psutil.Error:
                continue
        if len(tags) > 1:
            at_once.append(tags)
        time.sleep(0.05)
    out, _ = tuner.communicate(timeout=60)
    assert tuner.returncode == 0, out
    by_trial: dict[str, set[frozenset[int]]] = {}
    for tag, _, cpus in seen.values():
        by_trial.setdefault(tag, set()).add(cpus)
    # Every process of a trial (the worker and its DataLoader workers) on one CPU, the same one;
    # the workers' children were seen too (a DataLoader worker's parent is a trial worker).
    assert all(len(masks) == 1 and len(next(iter(masks))) == 1 for masks in by_trial.values()), by_trial
    assert any(ppid in seen for _, ppid, _ in seen.values()), "no DataLoader worker was seen"
    # Two trials that ran at the same time never shared a CPU.
    assert at_once, "the two slots never ran trials at the same time"
    for tags in at_once:
        masks = [next(iter(by_trial[t])) for t in tags]
        assert len(set(masks)) == len(masks), masks
    # The share is recorded with every trial, in both stores, and in the export's header.
    study = load_study(tmp_path / "mlflow", "jobs")
    trials = study.get_trials()
    assert [t.number for t in trials] == list(range(5))  # --trials 5: the baseline and 4 sampled, once each
    assert sum(bool(t.user_attrs["baseline"]) for t in trials) == 1  # the other slot waited for it
    shares = {t.number: t.user_attrs["slot"] for t in trials}
    assert {s["slot"] for s in shares.values()} == {0, 1}
    assert all(len(s["cpus"]) == 1 and s["of_cpus"] == 2 for s in shares.values())
    _, runs = mlflow_runs(tmp_path / "mlflow", "jobs")
    children = [r for r in runs if "autotune.trial" in r.data.tags]
    assert sorted(r.data.tags["autotune.share"] for r in children) == \
        sorted(shares[int(r.data.tags["autotune.trial"])]["share"] for r in children)
    export = (tmp_path / "mlflow" / "exports" / "jobs.yaml").read_text()
    assert re.search(r"^# measured on: .*; each trial on CPUs [01] \(1 of 2\) \(--jobs\)$", export, re.M), export
    assert "2 trials at once: slot 0: CPUs 0 (1 of 2); slot 1: CPUs 1 (1 of 2)" in out
