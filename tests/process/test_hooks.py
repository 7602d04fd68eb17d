"""The hooks that apply a config to an unmodified script (autotune.training._hooks), in this process with
real torch: the loaders and optimizers a script builds, the loader it trains from, and a
script's evaluation pass kept out of the windows (autotune.worker._script_trial)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from autotune import Config, Recipe
from autotune.machine._launch import Budget
from autotune.training._hooks import Hooks
from autotune.training._script import SCRIPT_STAGES
from autotune.worker._script_trial import ScriptTrial
from autotune.worker._trial import BudgetSpent

DATA = TensorDataset(torch.randn(256, 4), torch.randint(0, 2, (256,)))


def recipe(**values) -> Recipe:
    run = Recipe(Config(**values), "cpu", quiet=True)
    run.stages = SCRIPT_STAGES
    return run


def test_a_loader_the_script_builds_gets_the_config_over_its_own_arguments_and_nothing_after_remove() -> None:
    hooks = Hooks(recipe(num_workers=1, batch_size="2x", prefetch_factor=3)).install()
    try:
        loader = DataLoader(DATA, 16, shuffle=True)  # batch_size given positionally, as scripts do
        assert (loader.batch_size, loader.num_workers, loader.prefetch_factor) == (32, 1, 3)  # 2 * 16
        assert isinstance(loader.sampler, torch.utils.data.RandomSampler)  # its own arguments kept
    finally:
        hooks.remove()
    assert DataLoader(DATA, 16).num_workers == 0
    assert DataLoader.__init__.__name__ == "__init__" and not hasattr(DataLoader.__init__, "__wrapped__")


def test_an_optimizer_the_script_builds_gets_its_lr_scaled_once_and_fused_where_it_takes_it() -> None:
    model = torch.nn.Linear(4, 2)
    hooks = Hooks(recipe(batch_size="4x", lr_scaling="linear", fused_optimizer=True)).install()
    try:
        DataLoader(DATA, batch_size=16)
        adamw = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)  # AdamW calls Adam's __init__
        sgd = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9)  # lr positionally
        with pytest.warns(UserWarning, match="Adadelta takes no fused= argument"):
            adadelta = torch.optim.Adadelta(model.parameters())  # its default lr 1.0, scaled too
    finally:
        hooks.remove()
    assert adamw.param_groups[0]["lr"] == pytest.approx(4e-3)  # 4 * 1e-3, not 16 * 1e-3
    assert adamw.defaults["fused"] and not adamw.defaults["foreach"]  # torch refuses both
    assert sgd.param_groups[0]["lr"] == pytest.approx(0.4) and sgd.param_groups[0]["momentum"] == 0.9
    assert adadelta.param_groups[0]["lr"] == pytest.approx(4.0)
    assert hooks.optimizers == ["AdamW", "SGD", "Adadelta"]
    assert torch.optim.SGD(model.parameters(), 0.1).param_groups[0]["lr"] == 0.1  # removed


def script(epochs: int, test_pause: float) -> None:
    """A script's loop: a training loader (4 batches an epoch), a test loader (2 batches) iterated
    after each epoch, .item() per log."""
    model = torch.nn.Linear(4, 2)
    train = DataLoader(DATA, batch_size=64, shuffle=True)
    test = DataLoader(DATA, batch_size=128)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(epochs):
        for i, (x, y) in enumerate(train):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            if i % 2 == 0:
                loss.item()
        with torch.no_grad():
            for x, _ in test:
                model(x)
                time.sleep(test_pause / 2)  # 2 batches: the pass takes test_pause


def trial_of(
    loop: Callable[[], None], config: Config, window_s: float, windows: int, trace: str | None = None
) -> tuple[ScriptTrial, list[tuple[str, dict]]]:
    """``loop`` run as a trial of ``config`` measures it (windows of ``window_s`` after 2 warmup
    steps, no ceilings) until its budget ends it; the trial and its events."""
    events: list[tuple[str, dict]] = []
    run = ScriptTrial(
        config,
        "cpu",
        lambda kind, **e: events.append((kind, e)),
        Budget(warmup_steps=2, warmup_s=0.0, window_s=window_s, min_window_steps=2, windows=windows, ceiling_windows=0),
        trace=trace,
    )
    run.hooks.install()
    try:
        with pytest.raises(BudgetSpent):
            loop()
    finally:
        run.hooks.remove()
    return run, events


def measured(test_pause: float, windows: int, trace: str | None = None) -> tuple[ScriptTrial, list[tuple[str, dict]]]:
    """``script`` as a trial (no loader workers, windows of 0.3 s): the trial and its events."""
    return trial_of(lambda: script(epochs=1000, test_pause=test_pause), Config(num_workers=0), 0.3, windows, trace)


def test_the_loader_that_trains_is_measured_and_the_test_pass_is_outside_the_windows() -> None:
    run, events = measured(0.1, windows=3)
    windows = [e for kind, e in events if kind == "window"]
    assert len(windows) == 3
    assert run.hooks.training is not None and run.hooks.training.batch_size == 64  # not the test loader (128)
    assert all(w["samples"] % 64 == 0 for w in windows)  # its batches only
    assert all(w["loss"] is not None for w in windows)  # from the tensor backward() ran on
    # An epoch (4 steps) lasts well under two windows even on a loaded machine, so each window ends
    # on an epoch's last batch and the next begins after a 0.1 s test pass; their clocks skip it: the wall
    # time between two windows' ends is the later one's seconds plus its time outside the loop.
    assert max(w["outside_s"] for w in windows[1:]) >= 0.1
    for before, w in zip(windows, windows[1:]):
        assert w["wall"] - before["wall"] == pytest.approx(w["seconds"] + w["outside_s"], abs=0.02)


def test_a_profile_run_of_a_script_times_its_steps_by_part_and_traces_them(tmp_path) -> None:
    """An unmodified script's step, cut at the hooked loader, backward and optimizer step: the
    parts add up to the window's step time (its test pass outside both), then a trace with them."""
    from autotune.worker._profile import PARTS, trace_events

    trace = tmp_path / "script.pt.trace.json.gz"
    _, events = measured(0.05, windows=1, trace=str(trace))
    (window,) = [e for kind, e in events if kind == "window"]
    (profile,) = [e for kind, e in events if kind == "profile"]
    parts = profile["parts"]
    assert parts["samples"] == 64  # a step of the training loader's batches
    # the parts pause and resume on the window's clock (between epochs, here every 4 steps), so a
    # descheduling there on a loaded host moves both alike (it moved the parts 15% once, in CI)
    assert parts["step"] == pytest.approx(window["seconds"] / window["steps"], rel=0.02)
    assert all(parts[p] > 0 for p in ("data_wait", "forward", "backward", "optimizer"))
    assert parts["copy"] == 0  # the script copies its own batches (inside forward)
    names = {e.get("name") for e in trace_events(trace)}
    assert {f"autotune.{p}" for p in PARTS if p != "copy"} <= names


def sliced(update: str) -> None:
    """A loop without a DataLoader (nanoGPT's get_batch), its parameters updated by an optimizer or by
    hand (pytorch/examples' word_language_model and regression have none), an evaluation each 5 steps."""
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1) if update == "optimizer" else None
    x, y = DATA.tensors
    for step in range(100_000):
        i = (step * 32) % 224
        loss = F.cross_entropy(model(x[i : i + 32]), y[i : i + 32])
        model.zero_grad()
        loss.backward()
        if opt is not None:
            opt.step()
        else:
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.1 * p.grad
        if step % 5 == 0:
            with torch.no_grad():
                model(x[:64])


@pytest.mark.parametrize("update", ["optimizer", "by hand"])
def test_a_loop_without_a_dataloader_is_measured_in_steps(update: str) -> None:
    run, events = trial_of(lambda: sliced(update), Config(), 0.05, 3)
    windows = [e for kind, e in events if kind == "window"]
    assert run.loaderless and len(windows) == 3
    assert all(w["samples"] == w["steps"] >= 2 and w["data_wait"] == 0.0 for w in windows)  # a step a sample
    assert all(w["loss"] is not None and 0 < w["loss"] < 10 for w in windows)
    resolved = next(e for kind, e in events if kind == "resolved")
    assert resolved["dataset"]["loaderless"] is True


def gan(pause: float) -> None:
    """A GAN's loop (pytorch/examples' dcgan): two models, two optimizers stepped in turn on each
    batch, and work before, between and after the two steps that takes ``pause`` each."""
    netG, netD = torch.nn.Linear(2, 4), torch.nn.Linear(4, 1)
    optD = torch.optim.SGD(netD.parameters(), lr=0.01)
    optG = torch.optim.SGD(netG.parameters(), lr=0.01)
    train = DataLoader(DATA, batch_size=64, shuffle=True)
    for _ in range(100_000):
        for x, _ in train:
            time.sleep(pause)  # the discriminator's forward
            netD.zero_grad()
            netD(x).mean().backward()
            optD.step()
            time.sleep(pause)  # the generator's forward
            netG.zero_grad()
            netD(netG(torch.randn(x.size(0), 2))).mean().backward()
            optG.step()
            time.sleep(pause)  # the loop's own logging


def test_a_gans_two_steps_a_batch_are_one_step_and_all_of_its_time_is_in_the_windows() -> None:
    """Each batch of a GAN steps two optimizers: it counts once, and the time before, between and
    after its two steps is all in the windows, so no window reads faster than its sleeps allow (a
    window that left out the time between the steps would read up to 3x that)."""
    pause = 0.005
    run, events = trial_of(lambda: gan(pause), Config(num_workers=0), 0.3, 3)
    windows = [e for kind, e in events if kind == "window"]
    assert len(windows) == 3 and run.hooks.training is not None
    assert all(w["samples"] == 64 * w["steps"] for w in windows)  # a batch a step, not two
    ceiling = 64 / (3 * pause)  # (the sleeps alone; load only makes a step longer)
    assert all(w["samples"] / w["seconds"] <= ceiling * 1.02 for w in windows), (ceiling, windows)
