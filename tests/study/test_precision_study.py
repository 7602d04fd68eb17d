"""A real study on a machine that runs bf16 far slower: it stops drawing it, and says why."""

from __future__ import annotations

from autotune.core._kinds import Kind
from autotune.tuner._standing import read_standing
from helpers import ROOT, autotune, load_study, mlflow_runs


def test_a_study_stops_drawing_a_precision_its_machine_runs_far_slower(tmp_path) -> None:
    """A real study on a function whose bf16 steps sleep 20 ms (a CPU without native bf16, on
    any host): once a bf16 trial has run at under half the baseline's speed (one clear loss,
    autotune.tuner._one_loss), every later trial runs fp32, and its MLflow run says why."""
    space = tmp_path / "space.yaml"
    space.write_text('knobs:\n  amp: ["off", bf16]\n  prefetch: [none, thread]\n  fused_optimizer: [false, true]\n')
    store = tmp_path / "st"
    done = autotune(
        "run",
        "tests/fixtures/slow_bf16_train.py:train",
        "--trials",
        "7",
        "--store",
        str(store),
        "--space",
        str(space),
        "--warmup",
        "0.2",
        "--window",
        "0.3",
        "--windows",
        "3",
        "--confirm",
        "0",
        "--seed",
        "0",
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    rows = sorted(read_standing(load_study(store, "slow_bf16_train")).rows, key=lambda r: r.number)
    bf16 = [r.number for r in rows if r.sampled.get("amp") == "bf16"]
    assert len(bf16) == 1, rows  # (seed 0 draws bf16 in trial 1, and would again in 3 and 4)
    why = f"amp held at off for the rest of the study: amp=bf16 lost clearly: trial {bf16[0]} with it ran at"
    assert why in done.stderr
    later = [r for r in rows if r.number > bf16[0]]
    assert later and all(r.config.get("amp") == "off" and r.sampled.get("amp") == "off" for r in later), later
    _, runs = mlflow_runs(store, "slow_bf16_train")
    held = {
        int(r.data.tags["autotune.trial"]): r.data.tags.get("autotune.held.amp")
        for r in runs
        if "autotune.trial" in r.data.tags
    }
    # each later draw says why (a repeat runs the config it repeats, drawn before: under load a
    # CI run closed a trial as stale and ran its config again, untagged)
    drawn = [r for r in later if r.kind is Kind.SAMPLED]
    assert drawn and all((held[r.number] or "").startswith(why) for r in drawn), [
        (r.number, r.kind, r.reason, held[r.number]) for r in later
    ]
    assert not any(held[n] for n in range(bf16[0] + 1))
