"""The loop's knobs from outside change nothing but themselves (autotune.training._outside and its parts):
an optimizer of a script's own class under fp16, a script that scales its own loss, evaluation passes
that must stay in the script's precision, tensors the script keeps on the host, a model the script
compiles itself, and the DataLoader iterator's own API. Each is read from a real run of a plain loop in
this process, with real torch on the CPU (the CPU's GradScaler stands in for CUDA's)."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from autotune import Config, Recipe
from autotune.training._hooks import Hooks
from autotune.training._script import SCRIPT_STAGES

torch.manual_seed(0)
X = torch.randn(512, 8)
DATA = TensorDataset(X, (X[:, 0] + X[:, 1] > 0).long())  # learnable: the loss falls


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 32), nn.Linear(32, 2)
        self.dtypes: list[torch.dtype] = []  # of its hidden activations, call by call

    def forward(self, x):
        h = F.relu(self.fc1(x))
        self.dtypes.append(h.dtype)
        return self.fc2(h)


class Lion(torch.optim.Optimizer):
    """An optimizer of the script's own (as timm's Lion, bitsandbytes', apex's are: an ``Optimizer``
    subclass outside ``torch.optim``): plain SGD that records the gradient norm each step saw."""

    def __init__(self, params, lr: float = 0.5) -> None:
        super().__init__(params, {"lr": lr})
        self.norms: list[float] = []

    @torch.no_grad()
    def step(self, closure=None):
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        self.norms.append(float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))))
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])


def recipe(**values) -> Recipe:
    run = Recipe(Config(**values), "cpu", quiet=True)
    run.stages = SCRIPT_STAGES
    return run


def falls(losses: list[float]) -> bool:
    return all(map(math.isfinite, losses)) and sum(losses[-4:]) < 0.8 * sum(losses[:4])


def loop(model, opts, epochs: int = 3, inf_at: int = -1) -> list[float]:
    """A plain loop over DATA in batches of 64: every optimizer in ``opts`` steps on every batch."""
    losses = []
    loader = DataLoader(DATA, batch_size=64)
    for _ in range(epochs):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            (loss * (math.inf if len(losses) == inf_at else 1.0)).backward()
            for opt in opts:
                opt.step()
                opt.zero_grad()
            losses.append(loss.item())
    return losses


# -- fp16: every optimizer that steps is under the scaler, else fp16 is held -------------------------


def test_fp16_routes_an_optimizer_of_the_scripts_own_class_through_the_scaler() -> None:
    hooks = Hooks(recipe(amp="fp16")).install()
    try:
        model = Net()
        opt = Lion(model.parameters())
        losses = loop(model, [opt], inf_at=5)
    finally:
        hooks.remove()
    amp = hooks.loop.amp
    # 24 batches, each step through the scaler; the one on inf gradients skipped (its step never ran)
    assert (amp.held, amp.steps, amp.skipped) == (None, 24, 1) and len(opt.norms) == 23
    assert max(opt.norms) < 100, opt.norms  # true gradients: scaled by 65536 they read 1e4 and more
    assert set(model.dtypes[1:]) == {torch.float16}
    assert all(torch.isfinite(p).all() for p in model.parameters()) and falls(losses)


def test_fp16_is_held_where_an_optimizer_steps_outside_the_scaler(capsys) -> None:
    model = Net()
    opt = Lion(model.parameters())  # built before autotune's hooks: its step cannot be routed
    hooks = Hooks(recipe(amp="fp16")).install()
    try:
        losses = loop(model, [opt])
    finally:
        hooks.remove()
    amp = hooks.loop.amp
    assert "amp=fp16 not applied: Lion steps outside autotune's GradScaler" in capsys.readouterr().err
    assert amp.held and hooks.loop.observed()["amp"] == "off"
    assert max(opt.norms) < 100, opt.norms  # the first step, on the scaled backward, saw its true gradients
    assert set(model.dtypes[2:]) == {torch.float32} and falls(losses)


def test_fp16_routes_both_optimizers_of_a_step_where_one_is_the_scripts_own() -> None:
    hooks = Hooks(recipe(amp="fp16")).install()
    try:
        model = Net()
        lion = Lion(model.fc1.parameters())
        sgd = torch.optim.SGD(model.fc2.parameters(), lr=0.5)
        losses = loop(model, [lion, sgd])
    finally:
        hooks.remove()
    assert hooks.loop.amp.held is None and hooks.loop.amp.steps == 48
    assert max(lion.norms) < 100 and falls(losses)


# -- autocast: around the found model's training forward only ----------------------------------------


class Generator(Net):
    pass


def gan(amp: str, eval_autocast: bool = False) -> tuple[Hooks, Net, list[torch.dtype], list[torch.dtype]]:
    """A GAN-like loop: a critic stepped every batch, the generator every 4th (WGAN's schedule), and a
    validation pass mid-epoch after a critic step (eval mode, no_grad), whose metric multiplies the
    generator's output (``eval_autocast``: under an autocast the script enters for evaluation only)."""
    metric_dtypes, eval_dtypes = [], []
    hooks = Hooks(recipe(amp=amp)).install()
    try:
        g, critic = Generator(), nn.Linear(2, 1)
        opt_g = torch.optim.SGD(g.parameters(), lr=0.05)
        opt_c = torch.optim.SGD(critic.parameters(), lr=0.05)
        loader = DataLoader(DATA, batch_size=32)
        for _epoch in range(2):
            for i, (x, _) in enumerate(loader):
                fake = g(x)
                (critic(fake.detach()).mean() - critic(torch.randn(32, 2)).mean()).backward()
                opt_c.step()
                opt_c.zero_grad()
                if i % 4 == 3:
                    (-critic(g(x)).mean()).backward()
                    opt_g.step()
                    opt_g.zero_grad()
                if i % 8 == 2:
                    g.eval()
                    own = torch.autocast("cpu", dtype=torch.bfloat16) if eval_autocast else contextlib.nullcontext()
                    with torch.no_grad(), own:
                        out = g(X[:16])
                        eval_dtypes.append(g.dtypes[-1])
                        metric_dtypes.append((out @ torch.ones(2, 2)).dtype)
                    g.train()
    finally:
        hooks.remove()
    return hooks, g, eval_dtypes, metric_dtypes


def test_a_gans_validation_mid_epoch_runs_as_written_while_its_training_forwards_take_bf16() -> None:
    hooks, g, eval_dtypes, metric_dtypes = gan("bf16")
    assert set(eval_dtypes) == set(metric_dtypes) == {torch.float32}  # on main: bf16, autocast left on after the critic
    trained = [d for d in g.dtypes[1:] if d not in eval_dtypes or d == torch.bfloat16]
    assert torch.bfloat16 in trained and hooks.loop.amp.own is None
    assert not torch.is_autocast_enabled("cpu")


def test_an_autocast_the_script_enters_for_evaluation_only_is_not_its_training_precision(capsys) -> None:
    hooks, g, eval_dtypes, metric_dtypes = gan("fp16", eval_autocast=True)
    assert set(eval_dtypes) == set(metric_dtypes) == {torch.bfloat16}  # its evaluation as it wrote it
    assert hooks.loop.amp.own is None and hooks.loop.amp.held is None
    assert hooks.loop.observed()["amp"] == "fp16" and torch.float16 in g.dtypes
    assert "not applied" not in capsys.readouterr().err


def test_the_models_outputs_come_back_in_fp32_and_a_pickled_model_carries_nothing_of_autotune() -> None:
    import pickle

    outs = []
    hooks = Hooks(recipe(amp="bf16")).install()
    try:
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        for x, y in DataLoader(DATA, batch_size=64):
            out = model(x)
            outs.append(out.dtype)
            F.cross_entropy(out, y).backward()
            opt.step()
            opt.zero_grad()
            restored = pickle.loads(pickle.dumps(model))  # torch.save(model) pickles it so, mid-epoch too
    finally:
        hooks.remove()
    assert set(model.dtypes[1:]) == {torch.bfloat16} and set(outs) == {torch.float32}  # as the loss expects
    assert "_compiled_call_impl" not in vars(restored) and "_compiled_call_impl" not in vars(model)


def test_amp_wraps_a_model_compiled_by_the_compile_knob_outside_its_compiled_code(monkeypatch) -> None:
    import torch._dynamo

    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real(fn, backend="eager"))
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    hooks = Hooks(recipe(amp="bf16", compile="default")).install()
    try:
        model = Net()
        losses = loop(model, [torch.optim.SGD(model.parameters(), lr=0.5)])
    finally:
        hooks.remove()
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1 and hooks.loop.amp.held is None
    assert model._compiled_call_impl is not None and falls(losses)  # compiled it stays; our wrapper is gone
    assert model.dtypes[-1] == torch.bfloat16  # (its compiled forward appends once, as it traces)
    torch._dynamo.reset()


# -- the DataLoader's iterator keeps its API ----------------------------------------------------------


def test_the_loaders_iterator_keeps_its_api_and_its_workers_end_when_the_script_drops_it() -> None:
    import gc

    from torch.utils.data.dataloader import _BaseDataLoaderIter

    hooks = Hooks(recipe(prefetch="thread")).install()
    try:
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        loader = DataLoader(DATA, batch_size=64, num_workers=1)
        for epoch in range(2):  # the first epoch finds the training loader; the second is prefetched
            it = iter(loader)
            assert len(it) == 8 and isinstance(it, _BaseDataLoaderIter) and iter(it) is it
            workers = list(it._workers)
            for step, (x, y) in enumerate(it):
                F.cross_entropy(model(x), y).backward()
                opt.step()
                opt.zero_grad()
                if step == 2:
                    break  # a script that leaves the epoch early, and drops its iterator
            x, y = next(it)  # (still an iterator: the epoch goes on where the script left it)
            assert x.shape == (64, 8)
            del it
            gc.collect()
            for w in workers:
                w.join(timeout=10)
            assert not any(w.is_alive() for w in workers), epoch
    finally:
        hooks.remove()
    assert hooks.training is loader and hooks.loop.observed()["prefetch"] == "thread"


# -- the loss a trial reads is the script's true one -----------------------------------------------------


def test_a_trial_reads_the_unscaled_loss_of_a_script_that_scales_its_own() -> None:
    from autotune.machine._launch import Budget
    from autotune.worker._script_trial import ScriptTrial
    from autotune.worker._trial import BudgetSpent

    events: list[tuple[str, dict]] = []
    run = ScriptTrial(
        Config(),
        "cpu",
        lambda kind, **e: events.append((kind, e)),
        Budget(warmup_steps=2, warmup_s=0.0, window_s=0.05, windows=2, min_window_steps=2, ceiling_windows=0),
    )
    run.hooks.install()
    try:
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        scaler = torch.amp.GradScaler("cpu")  # timm's and torchvision's references under --amp
        loader = DataLoader(DATA, batch_size=64)
        with pytest.raises(BudgetSpent):
            for _ in range(1000):
                for x, y in loader:
                    scaler.scale(F.cross_entropy(model(x), y)).backward()
                    scaler.step(opt)
                    scaler.update()
                    opt.zero_grad()
    finally:
        run.hooks.remove()
    losses = [e["loss"] for kind, e in events if kind == "window"]
    assert losses and all(0 < loss < 1 for loss in losses), losses  # cross entropy of 2 classes: x 65536 on main


# -- prefetch moves what the script moved, never a tensor that took a freed one's id -----------------------


def test_prefetch_leaves_on_the_host_a_tensor_that_took_the_id_of_a_temporary_the_script_moved() -> None:
    hooks = Hooks(recipe(prefetch="thread")).install()
    try:
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        temporary = torch.zeros(2)
        temporary.to("meta")  # a set-up move of a temporary ("meta" stands in for the GPU)
        freed, kept = id(temporary), []
        del temporary
        while len(kept) < 10_000 and (not kept or id(kept[-1]) != freed):
            kept.append(torch.ones(64))  # CPython hands the freed address to a later tensor
        lengths = kept[-1]
        assert id(lengths) == freed  # (the alias this test is about)
        loader = DataLoader(
            DATA,
            batch_size=64,
            collate_fn=lambda items: (torch.stack([i[0] for i in items]), torch.stack([i[1] for i in items]), lengths),
        )
        for x, y, _n in loader:
            x.to("meta")  # it moves its inputs, and keeps the lengths on the host
            F.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    finally:
        hooks.remove()
    assert hooks.loop.moved_paths == {(0,)}  # on main {(0,), (2,)}: the lengths would have been moved


# -- a model the script compiles itself is its own ------------------------------------------------------------


@pytest.mark.parametrize("how", ["torch.compile", "model.compile"])
def test_a_model_the_script_compiles_itself_is_held_as_its_own(how, monkeypatch, capsys) -> None:
    import torch._dynamo

    real, modes = torch.compile, []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: modes.append(kw.get("mode")) or real(fn, backend="eager"))
    torch._dynamo.reset()
    hooks = Hooks(recipe(compile="max-autotune")).install()
    try:
        net = Net()
        opt = torch.optim.SGD(net.parameters(), lr=0.5)
        if how == "torch.compile":
            model = torch.compile(net)
        else:
            model = net
            model.compile()
        own = model.__dict__.get("_compiled_call_impl")
        losses = loop(model, [opt])
    finally:
        hooks.remove()
    assert modes == [None] and model.__dict__.get("_compiled_call_impl") is own  # its own compile, once
    assert "compile not applied: your script compiles its model itself" in capsys.readouterr().err
    assert hooks.loop.observed()["compile"] == "off" and falls(losses)
    assert hooks.loop.facts()["compile_own"] is True  # the study stops drawing compile
    torch._dynamo.reset()


def test_a_trial_tells_a_model_the_script_compiles_itself_with_the_knob_off() -> None:
    # (a trial always looks for the model: its baseline tells it too, before any compile is drawn)
    import torch._dynamo

    from autotune.training._outside_model import ModelFinder

    torch._dynamo.reset()
    plain, compiled = Net(), Net()
    found = []
    for net, model in ((plain, plain), (compiled, torch.compile(compiled, backend="eager"))):
        finder = ModelFinder(False, "off", found.append, print)
        finder.install()
        try:
            finder.optimizer_built(torch.optim.SGD(net.parameters(), lr=0.5))
            model(torch.randn(4, 8))
        finally:
            finder.remove()
        assert finder.model is not None and finder.own_compile is (net is compiled) and not finder.held
    torch._dynamo.reset()
