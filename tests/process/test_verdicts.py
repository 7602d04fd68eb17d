"""The divergence verdict on real trials: the same for a config however fast the machine runs it."""

from __future__ import annotations

from helpers import FIXTURES


def test_a_config_gets_the_same_verdict_fast_or_slow(tmp_path, warm) -> None:
    """The same config measured in short and in long windows (so its windows cover different
    samples, as a fast and a slow run of it do) is judged on the baseline's span both times:
    the same loss there, the same verdict."""

    from autotune.core._config import Config
    from autotune.core._guard import LossReference
    from autotune.machine._launch import Budget, TrialSpec
    from autotune.tuner._watch import run_trial

    tiny = f"{FIXTURES / 'tiny_train.py'}:train"
    budget = Budget(warmup_steps=2, warmup_s=0.2, window_s=0.25, windows=4, ceiling_windows=0)
    base = run_trial(TrialSpec(tiny, Config(), "cpu", budget), tmp_path / "base.log", warm=warm)
    assert len(base.curve) > 8 and base.curve[0][0] == base.windows[0]["samples_seen"] - base.windows[0]["samples"]
    verdicts = []
    for window_s in (0.15, 0.5):
        spec = TrialSpec(
            tiny,
            Config(batch_size="4x", lr_scaling="none"),
            "cpu",
            Budget(warmup_steps=2, warmup_s=0.2, window_s=window_s, windows=4, ceiling_windows=0),
        )
        result = run_trial(spec, tmp_path / "t.log", against=LossReference(base.losses, base.curve), warm=warm)
        verdicts.append(result.outcome)
        assert "over the same samples" in result.reason or result.reason == ""
    assert verdicts[0] == verdicts[1]
