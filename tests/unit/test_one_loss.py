"""A knob value held after one clear loss (autotune.tuner._one_loss, held by autotune.tuner._space_now):
its trial ran at under half the baseline's speed, and no other knob of it explains that; on hand-built
standings."""

from __future__ import annotations

import optuna

from autotune.core._kinds import Kind
from autotune.tuner._one_loss import Among, clear_losses
from autotune.tuner._space import Choice, IntRange, Space
from autotune.tuner._space_now import holds
from standings import standing_from, trial

BASE = {"num_workers": 0, "batch_size": 16, "amp": "off", "prefetch": "none", "channels_last": False, "compile": "off"}
#: This CPU's space: fp16 and cuda_stream dropped (no CUDA).
CPU = Space(
    "cpu",
    {
        "num_workers": IntRange(0, 2, auto=True),
        "batch_size": Choice(("1x", "2x", "4x")),
        "prefetch": Choice(("none", "thread")),
        "amp": Choice(("off", "bf16")),
        "channels_last": Choice((False, True)),
        "compile": Choice(("off", "default")),
    },
)


def drew(number: int, rate: float, outcome: str = "complete", **sampled) -> object:
    return trial(number, rate, outcome, sampled=sampled, config={**BASE, **sampled})


def base(rate: float = 1000.0) -> object:
    return trial(0, rate, config=BASE)


def test_a_precision_that_ran_at_a_sixth_of_the_baseline_is_held_after_its_first_trial() -> None:
    # pytorch/examples' MNIST on this CPU: bf16 at 0.14-0.17x. Its first trial also drew 2 workers and a
    # 2x batch, neither seen before; of the three only amp changes what every step computes.
    standing = standing_from(base(), drew(1, 150.0, "pruned", amp="bf16", num_workers=2, batch_size="2x"))
    held = holds(standing, CPU, None, max_load=1.0, max_spread=1000.0)
    assert held.values == {"amp": "off"}
    line = (
        "amp held at off for the rest of the study: amp=bf16 lost clearly: trial 1 with it ran at 15% of the "
        "baseline's 1,000 samples/s"
    )
    assert [x.text for x in held.lines] == [line] and held.why == {"amp": line}
    assert held.lines[0].once == "lost-amp-off"


def test_a_trial_that_also_compiled_blames_nothing() -> None:
    # its loop may have been compiling still: compile's own hold judges that
    standing = standing_from(base(), drew(1, 150.0, amp="bf16", compile="default"))
    assert holds(standing, CPU, None, 1.0, 1000.0).values == {}


def test_a_value_that_ran_fast_elsewhere_is_not_blamed_and_the_other_suspect_is() -> None:
    # trial 1 drew bf16 and channels_last, both change every step: ambiguous, nothing is held...
    slow = drew(1, 200.0, amp="bf16", channels_last=True)
    assert holds(standing_from(base(), slow), CPU, None, 1.0, 1000.0).values == {}
    # ...until channels_last ran at 0.9x in trial 2: then bf16 alone is left to blame for trial 1
    standing = standing_from(base(), slow, drew(2, 900.0, channels_last=True, prefetch="thread"))
    assert holds(standing, CPU, None, 1.0, 1000.0).values == {"amp": "off"}
    # and a bf16 trial at 0.6x shows bf16 is no clear loss here: it stays drawn
    fine = standing_from(base(), slow, drew(2, 900.0, channels_last=True), drew(3, 600.0, amp="bf16"))
    assert holds(fine, CPU, None, 1.0, 1000.0).values == {}


def test_loader_values_are_blamed_only_alone_and_a_worker_count_can_explain_a_loss() -> None:
    # prefetch=thread with 2 workers: either may explain 0.3x (workers are an int: never held)
    assert (
        holds(standing_from(base(), drew(1, 300.0, prefetch="thread", num_workers=2)), CPU, None, 1.0, 1000.0).values
        == {}
    )
    # prefetch=thread alone at 0.3x: held at none
    held = holds(standing_from(base(), drew(1, 300.0, prefetch="thread")), CPU, None, 1.0, 1000.0)
    assert held.values == {"prefetch": "none"}
    # a batch size with two values left is drawn from them (the sampler keeps a categorical's choices)
    assert holds(standing_from(base(), drew(1, 300.0, batch_size="4x")), CPU, None, 1.0, 1000.0).values == {
        "batch_size": Among(("1x", "2x"))
    }
    assert [
        x.value
        for x in clear_losses(standing_from(base(), drew(1, 300.0, batch_size="4x")).rows, 1000.0, CPU.domains, BASE)
    ] == ["4x"]


def test_only_believed_first_measures_count_not_repeats_or_noisy_figures() -> None:
    noisy = trial(1, 150.0, sampled={"amp": "bf16"}, config={**BASE, "amp": "bf16"}, doubt="noisy: 48% load")
    assert holds(standing_from(base(), noisy), CPU, None, 1.0, 1000.0).values == {}
    again = trial(2, 150.0, kind=Kind.CONFIRM, of=0, sampled={}, config={**BASE, "amp": "bf16"})
    assert clear_losses([base(), again], 1000.0, CPU.domains, BASE) == []
    assert clear_losses([drew(1, 150.0, amp="bf16")], None, CPU.domains, BASE) == []  # no baseline figure


def test_a_lost_value_of_three_is_never_drawn_again_and_the_other_two_are() -> None:
    """On a GPU amp has three values: bf16 lost clearly in trial 1 (a GPU without native bf16), so
    every later trial draws amp from off and fp16, neither asked of the sampler (which would record
    bf16 as drawn where a trial ran another) nor held at one."""
    gpu = Space("gpu", {"amp": Choice(("off", "bf16", "fp16")), "prefetch": Choice(("none", "thread"))})
    held = holds(standing_from(base(), drew(1, 150.0, amp="bf16")), gpu, None, 1.0, 1000.0)
    assert held.values == {"amp": Among(("off", "fp16"))}
    assert held.why["amp"].startswith("amp drawn from off, fp16 for the rest of the study: amp=bf16 lost clearly")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    drawn = []
    for _ in range(24):
        trial = study.ask()
        drawn.append(gpu.sample(trial, held.values).amp)
        assert "amp" not in trial.params and "prefetch" in trial.params
        study.tell(trial, 1.0)
    assert set(drawn) == {"off", "fp16"}  # (24 even draws of two: both, and never bf16)


def test_two_knobs_drawn_among_their_values_are_drawn_apart() -> None:
    """amp and cuda_stream prefetch both lost one value: each is drawn evenly from the two left,
    and not the same way in every trial (seeded by the trial alone, they were: amp=off came with
    prefetch=none every time, so neither knob's effect could be told from the other's)."""
    gpu = Space(
        "gpu",
        {"amp": Choice(("off", "bf16", "fp16")), "prefetch": Choice(("none", "thread", "cuda_stream"))},
    )
    held = {"amp": Among(("off", "fp16")), "prefetch": Among(("none", "thread"))}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    pairs = set()
    for _ in range(24):
        trial = study.ask()
        config = gpu.sample(trial, held)
        pairs.add((config.amp, config.prefetch))
        study.tell(trial, 1.0)
    assert pairs == {("off", "none"), ("off", "thread"), ("fp16", "none"), ("fp16", "thread")}
