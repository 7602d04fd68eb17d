"""A real study on a machine that runs bf16 far slower: it stops drawing it, and says why."""

from __future__ import annotations

from helpers import ROOT, autotune, load_study, mlflow_runs

from autotune.core._kinds import Kind
from autotune.tuner._standing import standing


def test_a_study_stops_drawing_a_precision_its_machine_runs_far_slower(tmp_path) -> None:
    """A real study on a function whose bf16 steps sleep 20 ms (a CPU without native bf16, on
    any host): once three bf16 trials have run at under half of fp32's best, every later
    trial runs fp32, and its MLflow run says why."""
    space = tmp_path / "space.yaml"
    space.write_text('knobs:\n  amp: ["off", bf16]\n  prefetch: [none, thread]\n  fused_optimizer: [false, true]\n')
    store = tmp_path / "st"
    done = autotune("run", "tests/fixtures/slow_bf16_train.py:train", "--trials", "7", "--store", str(store),
                    "--space", str(space), "--warmup", "0.2", "--window", "0.3", "--windows", "3", "--confirm", "0",
                    "--seed", "0", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    rows = sorted(standing(load_study(store, "slow_bf16_train")).rows, key=lambda r: r.number)
    bf16 = [r.number for r in rows if r.sampled.get("amp") == "bf16"]
    assert len(bf16) >= 3, rows  # (seed 0 draws bf16 in trials 1, 3 and 4)
    assert "amp held at off: its 3 bf16 trials ran at most" in done.stderr
    later = [r for r in rows if r.number > bf16[2]]
    assert later and all(r.config.get("amp") == "off" and r.sampled.get("amp") == "off" for r in later), later
    _, runs = mlflow_runs(store, "slow_bf16_train")
    held = {int(r.data.tags["autotune.trial"]): r.data.tags.get("autotune.held.amp")
            for r in runs if "autotune.trial" in r.data.tags}
    # each later draw says why (a repeat runs the config it repeats, drawn before: under load a
    # CI run closed a trial as stale and ran its config again, untagged)
    drawn = [r for r in later if r.kind is Kind.SAMPLED]
    assert drawn and all((held[r.number] or "").startswith("amp held at off: its 3 bf16 trials") for r in drawn), \
        [(r.number, r.kind, r.reason, held[r.number]) for r in later]
    assert not any(held[n] for n in range(bf16[2] + 1))
