"""--jobs 2 on a real tuner: each trial and its DataLoader workers pinned to disjoint CPUs."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import psutil
import pytest
from conftest import TAG

import forked_cli
from autotune.machine._launch import TRIAL_TAG_ENV
from helpers import FIXTURES, cli, cli_env, load_study, mlflow_runs


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="--jobs 2 needs 2 CPUs to split")
def test_jobs_2_pins_each_trial_and_its_dataloader_workers_to_disjoint_cpus(tmp_path: Path) -> None:
    """Real tuner, real workers: their masks are read from outside with psutil while they run."""
    import subprocess

    space = tmp_path / "workers.yaml"
    space.write_text("knobs:\n  num_workers: 2\n  batch_size: [1x, 2x]\n")
    target = f"{FIXTURES / 'tiny_train.py'}:train"
    # Three trials: the baseline alone (the other slot waits for it), then two side by side.
    args = cli(
        "run",
        target,
        "--jobs",
        "2",
        "--trials",
        "3",
        "--space",
        str(space),
        "--warmup",
        "0.5",
        "--window",
        "0.5",
        "--windows",
        "3",
        "--ceiling-windows",
        "0",
        "--confirm",
        "0",
        "--prune",
        "0",
        "--study",
        "jobs",
    )
    tuner = forked_cli.popen(
        args, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
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
    assert [t.number for t in trials] == list(range(3))  # --trials 3: the baseline and 2 sampled, once each
    assert sum(bool(t.user_attrs["baseline"]) for t in trials) == 1  # the other slot waited for it
    shares = {t.number: t.user_attrs["slot"] for t in trials}
    assert {s["slot"] for s in shares.values()} == {0, 1}
    assert all(len(s["cpus"]) == 1 and s["of_cpus"] == 2 for s in shares.values())
    _, runs = mlflow_runs(tmp_path / "mlflow", "jobs")
    children = [r for r in runs if "autotune.trial" in r.data.tags]
    assert sorted(r.data.tags["autotune.share"] for r in children) == sorted(
        shares[int(r.data.tags["autotune.trial"])]["share"] for r in children
    )
    export = (tmp_path / "mlflow" / "exports" / "jobs.yaml").read_text()
    assert re.search(r"^# measured on: .*; each trial on CPUs [01] \(1 of 2\) \(--jobs\)$", export, re.M), export
    assert "2 trials at once: slot 0: CPUs 0 (1 of 2); slot 1: CPUs 1 (1 of 2)" in out
