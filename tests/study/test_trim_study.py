"""A real study trims its winner: after the confirmation, the winner runs once more without the knobs
that rode along in its draw, and that run is confirmed or said to lose as the rule says
(autotune.tuner._trim; the rule's cases are tests/unit/test_trim.py's)."""

from __future__ import annotations

from pathlib import Path

from autotune.core._kinds import Kind
from autotune.core._outcome import Outcome
from autotune.tuner._confirm import TRIM_WITHIN, group_runs
from autotune.tuner._standing import read_standing
from helpers import ALL_BELIEVED, FIXTURES, LOADER_TRIALS, autotune, load_study


def test_after_the_confirmation_the_winner_runs_without_its_riders(tmp_path: Path) -> None:
    # Two workers kept across epochs lead the baseline (reads of 4 ms in the main process) by about
    # 2x; the seed draws malloc_retain=true, which does nothing for a loader that sleeps: a rider.
    space = tmp_path / "riders.yaml"
    space.write_text("knobs: {num_workers: [2], persistent_workers: [true], malloc_retain: [false, true]}\n")
    done = autotune(
        "run",
        f"{FIXTURES / 'io_train.py'}:train_slower",
        "--study",
        "trim",
        "--trials",
        "2",
        "--space",
        str(space),
        *LOADER_TRIALS,
        "--confirm",
        "1",
        "--seed",
        "1",
        *ALL_BELIEVED,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    study = load_study(tmp_path / "mlflow", "trim")
    trials = study.get_trials()
    assert trials[1].params["malloc_retain"] is True, trials[1].params  # (else the seed tests nothing)
    kinds = [t.user_attrs["kind"] for t in trials]
    assert kinds[:4] == ["baseline", "sampled", "confirm", "confirm"], kinds
    trimmed = trials[4]
    assert (trimmed.user_attrs["kind"], trimmed.user_attrs["of"]) == (Kind.TRIM.value, 1)
    assert trimmed.params == {**trials[1].params, "malloc_retain": False}
    assert trimmed.user_attrs["config"]["malloc_retain"] is False  # it ran so
    assert "the winner, trial 1, runs again without malloc_retain=true (as your code has them)" in said
    standing = read_standing(study)
    assert all(r.outcome == Outcome.COMPLETE.value for r in standing.rows), [r.reason for r in standing.rows]
    winner = next(g for g in group_runs(standing.rows) if g.first.number == 1)
    first = next(r for r in standing.rows if r.number == 4)
    if first.ranked_rate >= (1 - TRIM_WITHIN) * winner.ranked_median:  # confirmed, and the answer where not beaten
        assert kinds[5:] == ["confirm"] and trials[5].user_attrs["of"] == 4, kinds
        assert "confirming it with 1 re-run" in said
        decision = standing.decision
        if decision.winner.first.number == 4:
            assert decision.untrimmed.first.number == 1
            assert "trial 4 is trial 1's config without malloc_retain=true (as your code has them)" in said
            assert "malloc_retain: false" in (tmp_path / "mlflow" / "exports" / "trim.yaml").read_text()
    else:
        assert kinds[5:] == [], kinds
        assert "they pay, and the winner keeps them" in said
