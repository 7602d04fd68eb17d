"""Losses that are not a curve to compare (autotune.core._loss_signal, autotune.tuner._confirm.speed_only):
a GAN-like loss whose re-runs of the code disagree, a loss summed over the batch; on hand-written lists."""

from __future__ import annotations

import dataclasses
import math

from autotune.core._guard import DIVERGENCE_TOLERANCE, divergence, same_steps
from autotune.core._kinds import Kind
from autotune.core._loss_signal import (
    noise_line,
    per_sample,
    per_sample_factor,
    self_disagreement,
)
from autotune.core._outcome import Outcome, WorkerExit, classify
from autotune.tuner._confirm import decide, group_runs, plan, speed_only
from autotune.tuner._planner import loss_unit
from standings import trial

NAN = math.nan


def _curve(losses: list[float], per_step: float = 10.0, steps: int = 10) -> list[tuple[float, float, float, int]]:
    """Pieces of ``steps`` steps at ``per_step`` samples a step, one per loss."""
    size = per_step * steps
    return [(i * size, (i + 1) * size, loss, steps) for i, loss in enumerate(losses)]


# A GAN's generator loss: it swings between the two players' turns, and two runs of the same
# code (threads' order, nondeterministic kernels) swing out of phase. dcgan's runs: 0.226 and 0.714.
GAN_FIRST = _curve([0.9, 0.5, 0.3, 0.6, 0.7, 0.2, 0.22, 0.24, 0.21, 0.26, 0.75, 0.72, 0.2, 0.23, 0.21, 0.22])
GAN_AGAIN = _curve([0.9, 0.6, 0.7, 0.3, 0.2, 0.7, 0.72, 0.7, 0.71, 0.74, 0.22, 0.2, 0.7, 0.71, 0.72, 0.7])
# A falling curve; its re-run wobbles by a few percent.
FALLING = _curve([2.0 / (1 + i) for i in range(16)])
FALLING_AGAIN = _curve([2.06 / (1 + i) for i in range(16)])


def test_a_gan_like_re_run_disagrees_past_the_tolerance() -> None:
    # span 512-1,024 samples (pieces 5-9 by their middles): first run 0.226, again 0.714: +216%
    found = self_disagreement([(50.0, 1.0)], [(50.0, 1.0)], GAN_FIRST, GAN_AGAIN, DIVERGENCE_TOLERANCE)
    assert found is not None and abs(found.excess) > DIVERGENCE_TOLERANCE
    line = noise_line(found, DIVERGENCE_TOLERANCE)
    assert "no signal" in line and "nan or inf" in line and "50% tolerance" in line


def test_a_falling_curve_whose_re_run_agrees_is_a_signal() -> None:
    # 2.06 / 2.0 - 1 = 3% apart: inside the tolerance, the loss judges configs as before
    assert self_disagreement([(50.0, 2.0)], [(50.0, 2.06)], FALLING, FALLING_AGAIN, DIVERGENCE_TOLERANCE) is None
    # and a config 3x worse is still diverged against it
    worse = _curve([6.0 / (1 + i) for i in range(16)])
    assert divergence([(50.0, 2.0)], [(50.0, 6.0)], DIVERGENCE_TOLERANCE, FALLING, worse) is not None


def test_a_re_run_of_the_code_is_never_diverged_from_itself_but_nan_is_caught() -> None:
    # how run_trial classifies a re-run of the code as written: against no reference, nan/inf only
    window = [{"samples": 100}]
    assert classify(WorkerExit(0), window, history=[(50.0, 1.0)], curve=GAN_AGAIN) == (Outcome.COMPLETE, "")
    nan = GAN_AGAIN[:3] + [(300.0, 400.0, NAN, 10)]
    outcome, reason = classify(WorkerExit(0), window, history=[(50.0, 1.0)], curve=nan)
    assert outcome is Outcome.DIVERGED and reason.startswith("loss is nan")
    assert self_disagreement([], [], GAN_FIRST, nan, DIVERGENCE_TOLERANCE) is None  # (the guard says it)


def test_a_summed_loss_at_4x_the_batch_is_compared_per_sample() -> None:
    # vae's reduction='sum': the loss of a batch of 4x the samples is 4x (550 a sample at the start).
    base = _curve([550.0 * 2 / (2 + i) for i in range(16)])
    big = _curve([4 * 550.0 * 2 / (2 + i) for i in range(8)], per_step=40.0)
    reference, history = [(50.0, 600.0)], [(200.0, 2400.0)]
    found = divergence(reference, history, DIVERGENCE_TOLERANCE, base, big)
    assert found is not None and "300% worse" in found  # the raw comparison: 4x = +300%
    factor = per_sample_factor(reference, history, base, big)
    assert factor == 4.0
    history, big = per_sample(history, big, factor)
    assert divergence(reference, history, DIVERGENCE_TOLERANCE, base, big) is None
    assert abs(same_steps(reference, history, base, big).excess) < 1e-9  # per sample, as the baseline's per step


def test_a_mean_loss_is_not_divided_by_the_batch() -> None:
    base = _curve([2.0 / (1 + i) for i in range(16)])
    big = _curve([2.0 / (1 + i) for i in range(8)], per_step=40.0)  # 4x: as good at the same steps
    assert per_sample_factor([(50.0, 2.0)], [(200.0, 2.0)], base, big) == 1.0
    # a mean loss gone bad later (started as the baseline's, 4x worse at the same steps): still diverged
    bad = _curve([2.0, 2.0, 3.0, 4.0, 4.0, 4.0, 4.0, 4.0], per_step=40.0)
    assert per_sample_factor([(50.0, 2.0)], [(200.0, 2.0)], base, bad) == 1.0
    # batches too close to tell (1.2x) and a curve without steps are left alone
    assert per_sample_factor([(50.0, 2.0)], [(60.0, 2.4)], base, _curve([2.4] * 8, per_step=12.0)) == 1.0
    assert per_sample_factor([(50.0, 2.0)], [(50.0, 2.0)], base, []) == 1.0


def _gan_study(*more):
    """A baseline, a config judged diverged on a GAN-like loss, one on a nan, and the rest."""
    return [
        trial(0, 1000.0, losses=[(50.0, 1.0)], curve=GAN_FIRST),
        trial(1, 1500.0, "diverged", sampled={"amp": "bf16"}, losses=[(50.0, 1.0)], curve=GAN_AGAIN),
        trial(2, 3000.0, "diverged", sampled={"amp": "fp16"}, losses=[(50.0, NAN)], curve=GAN_AGAIN),
        *more,
    ]


def test_until_the_baseline_is_re_run_the_loss_judges_and_the_re_run_is_planned() -> None:
    rows = _gan_study()
    groups = group_runs(rows)
    assert [g.first.number for g in groups if g.feasible] == [0]
    # nothing feasible to confirm, but trial 1 diverged on a finite loss: the baseline runs again
    assert plan(groups, 2) == [0]


def test_a_noisy_loss_ranks_configs_on_speed_and_keeps_the_nan_guard() -> None:
    rerun = trial(3, 1010.0, kind=Kind.CONFIRM, of=0, baseline=True, loss_noise=2.1, to_loss_ratio=1.0)
    rerun = dataclasses.replace(rerun, reason="the code as written, run again, ...: its loss is no signal ...")
    rows = _gan_study(rerun, trial(4, 1480.0, kind=Kind.CONFIRM, of=1, sampled={"amp": "bf16"}, to_loss_ratio=3.0))
    ranked = speed_only(rows)
    assert [r.outcome for r in ranked] == ["complete", "complete", "diverged", "complete", "complete"]
    assert all("to_loss_ratio" not in r.metrics for r in ranked)  # (time to a noisy loss means nothing)
    decision = decide(group_runs(rows))
    assert decision.fastest.first.number == 1 and decision.fastest.feasible  # trial 2's nan stays out
    assert loss_unit(rerun).text.startswith("trial 3: the code as written") and loss_unit(rows[1]) is None


def test_without_a_re_run_that_disagrees_nothing_changes() -> None:
    rerun = trial(3, 1010.0, kind=Kind.CONFIRM, of=0, baseline=True, to_loss_ratio=1.0)
    rows = _gan_study(rerun)
    assert speed_only(rows) == rows


def test_a_summed_loss_is_said_once() -> None:
    row = dataclasses.replace(
        trial(5, 900.0, sampled={"batch_size": "4x"}, loss_per_sample=4.0),
        reason="its loss scales with the batch (...): compared with the baseline's per sample",
    )
    line = loss_unit(row)
    assert line.text.startswith("trial 5: its loss scales") and line.once == "loss-per sample"
