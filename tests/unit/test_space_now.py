"""The space as of now (autotune.tuner._space_now): widening, caps and holds from a hand-built standing."""

from __future__ import annotations

import dataclasses

from autotune.core._kinds import Line
from autotune.tuner._space import Choice, IntRange, Space
from autotune.tuner._space_now import draw_caps, holds, space_now
from standings import ceilings_of, standing_from, trial

LOADER = {"num_workers": 0, "batch_size": 16}
SPACE = Space(
    "s",
    {
        "num_workers": IntRange(0, 2, auto=True),
        "batch_size": Choice(("1x", "2x")),
        "prefetch_factor": IntRange(1, 8),
        "amp": Choice(("off", "bf16")),
    },
)


def test_an_auto_worker_range_widens_as_far_as_a_waiting_loader_asks_and_says_so_once_per_range() -> None:
    # the main process alone reads 800 samples/s using 0.1 of 2 CPUs; the model takes 20,000
    standing = standing_from(
        trial(0, 700.0, config=LOADER), ceilings=ceilings_of((LOADER, 20_000.0, 800.0, None, 1e-4))
    )
    wider, line = space_now(SPACE, standing, cpus=2, ram_budget=None)
    assert wider.domains["num_workers"].high == 25 and line.once == "workers-25"
    assert line.text.startswith("workers wait 92% of their time (trial 0's loader alone: 800 samples/s")
    # an epoch of 96 samples has 6 batches at the smallest batch size: no more workers help
    epoch = standing_from(trial(0, 700.0, config=LOADER, dataset={"epoch_batches": 6}), ceilings=standing.ceilings)
    assert space_now(SPACE, epoch, 2, None)[0].domains["num_workers"].high == 6
    # a range not marked auto, or a loader that keeps its CPUs busy, stays as it is
    fixed = Space("s", {"num_workers": IntRange(0, 2)})
    assert space_now(fixed, standing, 2, None) == (fixed, None)
    busy = standing_from(trial(0, 700.0, config=LOADER), ceilings=ceilings_of((LOADER, 20_000.0, 800.0, None, 1.2e-3)))
    assert space_now(SPACE, busy, 2, None) == (SPACE, None)


def test_int_knobs_are_drawn_up_to_what_an_epoch_can_use_and_each_cap_is_said_once() -> None:
    said: list[Line] = []
    standing = standing_from(trial(0, 700.0, config=LOADER, dataset={"epoch_batches": 6}))  # 96 samples
    cap = draw_caps(standing, Space("s", {**SPACE.domains, "num_workers": IntRange(0, 8)}), said.append)
    assert cap("num_workers", {"batch_size": "2x"}) == 3  # 3 batches of 32
    assert cap("prefetch_factor", {"batch_size": "1x", "num_workers": 2}) == 3  # 6 batches over 2 workers
    assert cap("prefetch_factor", {"batch_size": "1x", "num_workers": 0}) is None
    assert [line.once for line in said] == ["epoch-workers", "epoch-prefetch"]
    assert draw_caps(standing_from(trial(0, 700.0)), SPACE, said.append) is None  # no epoch seen yet


def settled(efficiency: float) -> object:
    """Trial 1 leads, compute-bound at ``efficiency`` of its compute ceiling."""
    config = {"num_workers": 2, "batch_size": 32, "prefetch_factor": 4}
    rows = [
        trial(0, 500.0, config=LOADER),
        trial(
            1,
            1000.0 * efficiency,
            config=config,
            waits=0.01,
            sampled={"num_workers": 2, "prefetch_factor": 4, "batch_size": "2x"},
        ),
    ]
    return standing_from(
        *rows, ceilings=ceilings_of((config, 1000.0, 5000.0, None, None), (LOADER, 600.0, 5000.0, None, None))
    )


def test_loader_knobs_are_held_at_a_settled_best_and_the_hold_is_said_when_it_starts_and_lifts() -> None:
    held = holds(settled(0.95), SPACE, None, max_load=1.0, max_spread=1000.0)
    assert held.values == {"num_workers": 2, "prefetch_factor": 4} and held.settled_by == 1
    assert [line.text for line in held.lines] == [
        "loader knobs held at trial 1's (num_workers=2, prefetch_factor=4): it is compute-bound at 95% of its "
        "data-on-device ceiling"
    ]
    again = holds(settled(0.95), SPACE, 1, 1.0, 1000.0)
    assert again.values == held.values and again.lines == ()  # said once
    lifted = holds(settled(0.8), SPACE, 1, 1.0, 1000.0)  # loading costs it 20% now
    assert lifted.values == {} and lifted.settled_by is None
    assert [line.text for line in lifted.lines] == [
        "loader knobs sampled again: not compute-bound at high efficiency (trial 1's hold is lifted)"
    ]


def test_model_knobs_are_held_when_the_code_never_hands_its_model_to_run_model() -> None:
    space = Space("m", {"channels_last": Choice((False, True)), "compile": Choice(("off", "default"))})
    standing = standing_from(trial(0, 500.0, config={"batch_size": 16}))  # its config names no model knob
    held = holds(standing, space, None, 1.0, 1000.0)
    assert held.values == {"channels_last": None, "compile": None}
    assert held.lines[0].once == "model-knobs" and "no model was found" in held.lines[0].text
    assert "run.model(...)" in held.lines[0].text and "parameters an optimizer trains" in held.lines[0].text
    uses = standing_from(trial(0, 500.0, config={"batch_size": 16, "channels_last": False}))
    assert holds(uses, space, None, 1.0, 1000.0).values == {}


def test_amp_is_held_at_the_one_precision_not_far_slower_and_a_noisy_figure_does_not_count() -> None:
    rows = [trial(0, 1000.0, config={"amp": "off"})]
    rows += [trial(n, 300.0, sampled={"amp": "bf16"}) for n in (1, 2, 3)]
    held = holds(standing_from(*rows), SPACE, None, 1.0, 1000.0)
    assert held.values == {"amp": "off"} and held.why["amp"].startswith("amp held at off: its 3 bf16 trials")
    # one of the three slowed by others (load over --max-load): two are not enough for that rule,
    # but the first, at 30% of the baseline, is one clear loss (autotune.tuner._one_loss)
    loaded = [*rows[:3], trial(3, 300.0, sampled={"amp": "bf16"}, foreign_cpu=0.6)]
    held = holds(standing_from(*loaded), SPACE, None, 0.2, 1000.0)
    assert held.values == {"amp": "off"} and held.why["amp"].startswith(
        "amp held at off for the rest of the study: amp=bf16 lost clearly: trial 1 with it ran at 30%"
    )
    # every bf16 figure slowed by others: none counts
    noisy = [rows[0], *(trial(n, 300.0, sampled={"amp": "bf16"}, foreign_cpu=0.6) for n in (1, 2, 3))]
    assert holds(standing_from(*noisy), SPACE, None, 0.2, 1000.0).values == {}


def test_fused_optimizer_is_held_when_no_optimizer_of_the_code_takes_fused() -> None:
    space = Space("f", {"fused_optimizer": Choice((False, True)), "num_workers": IntRange(0, 2)})
    adadelta = standing_from(trial(0, 500.0, config=LOADER, dataset={"optimizers": {"Adadelta": False}}))
    held = holds(adadelta, space, None, 1.0, 1000.0)
    assert held.values == {"fused_optimizer": None}
    assert held.lines[0].once == "fused" and "(Adadelta) takes no fused= argument" in held.lines[0].text
    # one optimizer that fuses (a GAN's Adam beside an LBFGS) is enough to keep drawing it
    mixed = standing_from(trial(0, 500.0, config=LOADER, dataset={"optimizers": {"LBFGS": False, "Adam": True}}))
    assert holds(mixed, space, None, 1.0, 1000.0).values == {}
    # no optimizer seen yet (or a study from before it was recorded): drawn
    assert holds(standing_from(trial(0, 500.0, config=LOADER)), space, None, 1.0, 1000.0).values == {}


def test_the_loaders_knobs_are_held_for_a_loop_without_a_dataloader() -> None:
    """nanoGPT's get_batch, word_language_model's slices: measured in optimizer steps, and no loader
    or transfer knob reaches the loop; the rest (precision, optimizer, model) is still drawn."""
    space = Space(
        "l",
        {
            "batch_size": Choice(("1x", "2x")),
            "num_workers": IntRange(0, 2),
            "prefetch": Choice(("none", "thread")),
            "amp": Choice(("off", "bf16")),
            "fused_optimizer": Choice((False, True)),
        },
    )
    sliced = standing_from(trial(0, 50.0, config=LOADER, dataset={"loaderless": True}))
    held = holds(sliced, space, None, 1.0, 1000.0)
    assert held.values == {"batch_size": None, "num_workers": None, "prefetch": None}
    assert held.lines[0].once == "no-loader" and held.lines[0].text.startswith(
        "batch_size, num_workers, prefetch not tuned: your loop takes its batches from no DataLoader"
    )
    assert holds(standing_from(trial(0, 50.0, config=LOADER)), space, None, 1.0, 1000.0).values == {}


def test_in_order_is_held_for_a_training_loader_that_does_not_shuffle() -> None:
    space = Space("o", {"num_workers": IntRange(0, 2), "in_order": Choice((True, False))})
    ordered = standing_from(trial(0, 500.0, config=LOADER, dataset={"shuffles": False}))
    held = holds(ordered, space, None, 1.0, 1000.0)
    assert held.values == {"in_order": None}
    assert held.lines[0].text == (
        "in_order not tuned: your training loader does not shuffle, so the order of its batches is kept"
    )
    shuffled = standing_from(trial(0, 500.0, config=LOADER, dataset={"shuffles": True}))
    assert holds(shuffled, space, None, 1.0, 1000.0).values == {}


COMPILE = Space("c", {"num_workers": IntRange(0, 2), "compile": Choice(("off", "default"))})


def test_compile_is_held_once_its_measured_cost_cannot_pay_back_within_the_horizon() -> None:
    base = trial(0, 1000.0, config={**LOADER, "compile": "off"})
    # 30 s of compiling for 1.25x: it saves 20% of each second, so it pays back after 150 s
    quick = trial(1, 1250.0, config={**LOADER, "compile": "default"}, compile_s=30.0)
    assert holds(standing_from(base, quick), COMPILE, None, 1.0, 1000.0, horizon_h=1.0).values == {}
    # 300 s for 1.02x: it saves 2% of each second, so 4.2 h of training before it pays back, past an hour
    slow = trial(1, 1020.0, config={**LOADER, "compile": "default"}, compile_s=300.0)
    held = holds(standing_from(base, slow), COMPILE, None, 1.0, 1000.0, horizon_h=1.0)
    assert held.values == {"compile": "off"}
    assert held.lines[0].text == (
        "compile held at off: trial 1 compiled in 300 s and runs 1.02x the baseline, so "
        "compiling pays back after 4.2 h of training, past the 1 h horizon (--horizon)"
    )
    # a week-long job wins it back: drawn on
    assert holds(standing_from(base, slow), COMPILE, None, 1.0, 1000.0, horizon_h=168.0).values == {}
    # no faster than the baseline: never pays back
    flat = trial(1, 990.0, config={**LOADER, "compile": "default"}, compile_s=20.0)
    assert "never pays back" in holds(standing_from(base, flat), COMPILE, None, 1.0, 1000.0).lines[0].text
    # compiling past --compile-timeout (a CPU compile of 168 s): held after that one trial
    # (read from the figure the trial kept, not from its reason's words)
    stuck = trial(1, None, "timeout", config={**LOADER, "compile": "default"}, compile_unfinished_s=60.0)
    held = holds(standing_from(base, stuck), COMPILE, None, 1.0, 1000.0)
    assert held.values == {"compile": "off"} and "past --compile-timeout in trial 1" in held.lines[0].text
    # a compiled trial that stalled after compiling (its own loop hung) says nothing of compiling
    hung = dataclasses.replace(
        trial(1, None, "timeout", config={**LOADER, "compile": "default"}),
        reason="stalled: no step finished for 60 s while torch.compile compiled the model",
    )
    assert holds(standing_from(base, hung), COMPILE, None, 1.0, 1000.0).values == {}
    # nothing compiled yet: nothing known
    assert holds(standing_from(base), COMPILE, None, 1.0, 1000.0).values == {}


def test_amp_is_held_once_a_trial_saw_the_scripts_own_precision() -> None:
    space = Space("m", {"amp": Choice(("off", "bf16")), "num_workers": Choice((0, 2))})
    row = trial(0, 500.0, config={"batch_size": 16, "amp": "bf16"})
    standing = standing_from(row)
    assert "amp" not in holds(standing, space, None, 1.0, 1000.0).values  # nothing seen yet: drawn
    own = standing_from(trial(0, 500.0, config={"batch_size": 16, "amp": "bf16"}, dataset={"amp_own": "bf16"}))
    held = holds(own, space, None, 1.0, 1000.0)
    assert held.values == {"amp": None}
    assert [line.text for line in held.lines if line.once == "amp-own"] == [
        "amp not tuned: your script sets its own precision (bf16: torch.autocast or a GradScaler), and it is what runs"
    ]


def test_compile_is_not_drawn_once_a_trial_saw_the_script_compile_its_model_itself() -> None:
    found_model = {**LOADER, "compile": "off"}  # (a baseline that found no model holds every model knob)
    # each such trial holds the knob and runs the script's own compile: every drawn value runs the same
    drawn = trial(1, 520.0, config={**LOADER, "compile": "off"}, sampled={"compile": "default"})
    assert (
        "compile"
        not in holds(standing_from(trial(0, 500.0, config=found_model), drawn), COMPILE, None, 1.0, 1000.0).values
    )  # nothing seen yet: drawn
    own = dataclasses.replace(drawn, dataset={"compile_own": True, "model": "Net"})
    held = holds(standing_from(trial(0, 500.0, config=found_model), own), COMPILE, None, 1.0, 1000.0)
    assert held.values == {"compile": None}  # the script's own
    assert [line.text for line in held.lines if line.once == "compile-own"] == [
        "compile not tuned: your script compiles its model itself (torch.compile), and its own compile is what runs"
    ]
    # the baseline tells it as well, and the pay-back rule has nothing left to hold
    base = trial(0, 500.0, config=found_model, dataset={"compile_own": True})
    assert holds(standing_from(base), COMPILE, None, 1.0, 1000.0).values == {"compile": None}
    assert holds(standing_from(base), SPACE, None, 1.0, 1000.0).values.get("compile", "undrawn") == "undrawn"
