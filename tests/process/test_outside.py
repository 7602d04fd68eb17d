"""The loop's knobs applied to an unmodified script from outside its code (autotune.training._outside): AMP
with its scaler, the prefetchers, channels_last and compile, in this process with real torch. The
scripts below are plain loops that know nothing of autotune; what they saw is read from the run
(the activations' dtype inside their forward, the autocast state inside their backward, the thread
their batches were made on), not assumed."""

from __future__ import annotations

import dataclasses
import math
import threading

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from autotune import Config, Recipe
from autotune.machine._launch import Budget
from autotune.training._hooks import Hooks
from autotune.training._script import SCRIPT_STAGES
from autotune.worker._script_trial import ScriptTrial
from autotune.worker._trial import BudgetSpent

torch.manual_seed(0)
X = torch.randn(512, 8)
DATA = TensorDataset(X, (X[:, 0] + X[:, 1] > 0).long())  # learnable: the loss falls


class Seen(torch.autograd.Function):
    """Identity whose backward records whether autocast was on when it ran."""

    log: list[bool] = []

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        Seen.log.append(torch.is_autocast_enabled("cpu"))
        return grad


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 32), nn.Linear(32, 2)
        self.dtypes: list[torch.dtype] = []  # of its hidden activations, call by call

    def forward(self, x):
        h = F.relu(self.fc1(Seen.apply(x.requires_grad_())))
        self.dtypes.append(h.dtype)
        return self.fc2(h)


def recipe(**values) -> Recipe:
    run = Recipe(Config(**values), "cpu", quiet=True)
    run.stages = SCRIPT_STAGES
    return run


def script(
    epochs: int = 3,
    clip: float | None = None,
    accumulate: int = 1,
    inf_at: int = -1,
    own_autocast: torch.dtype | None = None,
) -> tuple[Net, list[float], list[float]]:
    """A plain loop (8 steps an epoch): its model, its losses, and the norms its clip returned."""
    model = Net()
    loader = DataLoader(DATA, batch_size=64, shuffle=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses, norms = [], []
    step = 0
    for _ in range(epochs):
        for x, y in loader:
            x, y = x.to("cpu"), y.to("cpu")
            if own_autocast is not None:
                with torch.autocast("cpu", dtype=own_autocast):
                    loss = F.cross_entropy(model(x), y)
            else:
                loss = F.cross_entropy(model(x), y)
            (loss * (math.inf if step == inf_at else 1.0) / accumulate).backward()
            step += 1
            if step % accumulate == 0:
                if clip is not None:
                    norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip)))
                opt.step()
                opt.zero_grad()
            losses.append(loss.item())
    return model, losses, norms


def run_with(run, **kw):
    hooks = Hooks(run).install()
    try:
        return (hooks, *script(**kw))
    finally:
        hooks.remove()


def falls(losses: list[float]) -> bool:
    return all(map(math.isfinite, losses)) and sum(losses[-4:]) < 0.8 * sum(losses[:4])


def test_bf16_autocast_is_in_force_in_the_scripts_forward_and_not_in_its_backward() -> None:
    Seen.log.clear()
    hooks, model, losses, _ = run_with(recipe(amp="bf16"))
    # Its first step finds the training loader (the batch an optimizer step follows); from the
    # second on its forward runs under autocast: the activations are bf16, read from the run.
    assert model.dtypes[0] == torch.float32 and set(model.dtypes[1:]) == {torch.bfloat16}
    assert Seen.log and not any(Seen.log)  # every backward outside autocast
    assert falls(losses), losses
    assert not torch.is_autocast_enabled("cpu")  # left when the epochs ended
    assert hooks.loop.observed()["amp"] == "bf16"
    _, plain, _, _ = run_with(recipe())
    assert set(plain.dtypes) == {torch.float32}  # off: nothing of ours runs


def test_fp16_scales_the_loss_unscales_before_the_scripts_clip_and_counts_a_skipped_step() -> None:
    hooks, model, losses, norms = run_with(recipe(amp="fp16"), clip=1e3, accumulate=2, inf_at=5)
    amp = hooks.loop.amp
    assert set(model.dtypes[2:]) == {torch.float16}  # (the first step, 2 batches, found the loader)
    # 24 batches, a step every 2 (accumulated), each through the scaler (it scales from the first
    # backward on); the step whose gradients the inf loss made infinite is skipped, and counted
    assert (amp.steps, amp.skipped) == (12, 1)
    assert hooks.loop.facts() == {"fp16_steps": 12, "fp16_skipped_steps": 1, "model": "Net"}
    finite = [n for n in norms if math.isfinite(n)]
    assert len(finite) == 11 and max(finite) < 100  # the true gradients' norm: scaled by 65536 they are far past it
    assert all(math.isfinite(p.detach().sum().item()) for p in model.parameters())  # the inf step changed nothing
    assert falls(losses)


def test_a_scripts_own_autocast_wins_and_the_run_says_so(capsys) -> None:
    hooks, model, losses, _ = run_with(recipe(amp="fp16"), own_autocast=torch.bfloat16)
    assert set(model.dtypes) == {torch.bfloat16}  # its own, never our fp16
    assert hooks.loop.observed()["amp"] == "bf16" and hooks.loop.facts()["amp_own"] == "bf16"
    assert hooks.loop.amp.steps == 0  # no scaler of ours
    assert "amp=fp16 not applied: your script uses torch.autocast (bf16) itself" in capsys.readouterr().err
    assert falls(losses)


def test_activation_checkpointing_re_entering_our_autocast_in_backward_is_not_the_scripts_own() -> None:
    class Checkpointed(Net):
        def forward(self, x):
            h = torch.utils.checkpoint.checkpoint(lambda t: F.relu(self.fc1(t)), x, use_reentrant=False)
            self.dtypes.append(h.dtype)
            return self.fc2(h)

    hooks = Hooks(recipe(amp="bf16")).install()
    try:
        model = Checkpointed()
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        loader = DataLoader(DATA, batch_size=128)
        for _ in range(2):
            for x, y in loader:
                F.cross_entropy(model(x), y).backward()  # its recompute enters autocast in backward
                opt.step()
                opt.zero_grad()
    finally:
        hooks.remove()
    assert hooks.loop.amp.own is None and hooks.loop.amp.held is None
    assert set(model.dtypes[1:]) == {torch.bfloat16}, model.dtypes


class Tagged(Dataset):
    """Items that record the thread that made them."""

    def __init__(self, wrap=None) -> None:
        self.threads: set[str] = set()
        self.wrap = wrap or (lambda x, y: (x, y))

    def __len__(self) -> int:
        return 256

    def __getitem__(self, i: int):
        self.threads.add(threading.current_thread().name)
        x, y = DATA[i]
        return self.wrap(x, y)


@dataclasses.dataclass
class Pair:
    x: torch.Tensor
    y: torch.Tensor


def test_the_thread_prefetcher_makes_the_batches_ahead_and_the_scripts_to_finds_them_in_place() -> None:
    data = Tagged(lambda x, y: {"pair": Pair(x, y)})
    same, kinds = [], set()
    hooks = Hooks(recipe(prefetch="thread")).install()
    try:
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for batch in DataLoader(
            data,
            batch_size=32,
            collate_fn=lambda items: {
                "pair": Pair(torch.stack([i["pair"].x for i in items]), torch.stack([i["pair"].y for i in items]))
            },
        ):
            x = batch["pair"].x
            kinds.add(type(batch["pair"]))  # a dict of a dataclass, moved as the structure it is
            same.append(x.to("cpu") is x)
            F.cross_entropy(model(x), batch["pair"].y).backward()
            opt.step()
            opt.zero_grad()
    finally:
        hooks.remove()
    assert "autotune-prefetch" in data.threads  # the epoch's rest was made on the prefetch thread
    assert all(same) and kinds == {Pair} and hooks.loop.observed()["prefetch"] == "thread"


def test_a_batch_the_prefetcher_cannot_move_holds_it_with_its_reason(capsys) -> None:
    class Opaque:
        def __init__(self, items):
            self.x = torch.stack([i[0] for i in items])
            self.y = torch.stack([i[1] for i in items])

    hooks = Hooks(recipe(prefetch="thread")).install()
    try:
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(DATA, batch_size=64, collate_fn=Opaque)
        for _ in range(2):
            for b in loader:
                F.cross_entropy(model(b.x), b.y).backward()
                opt.step()
    finally:
        hooks.remove()
    assert hooks.loop.observed()["prefetch"] == "none"
    assert (
        "prefetch=thread not applied: the loader's batches are Opaque, which holds no tensor" in capsys.readouterr().err
    )


class Conv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(8, 2)
        self.formats: list[bool] = []

    def forward(self, x):
        self.formats.append(x.is_contiguous(memory_format=torch.channels_last))
        return self.fc(self.conv(x).mean((2, 3)))


def conv_script(epochs: int = 2) -> tuple[Conv, list[nn.Parameter], torch.optim.Optimizer]:
    images = TensorDataset(torch.randn(128, 3, 8, 8), torch.randint(0, 2, (128,)))
    model = Conv()
    params = list(model.parameters())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()  # a module of no parameters, called outermost too
    for _ in range(epochs):
        for x, y in DataLoader(images, batch_size=32):
            loss_fn(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    return model, params, opt


def test_channels_last_puts_the_scripts_model_and_its_inputs_in_nhwc_in_place() -> None:
    hooks = Hooks(recipe(channels_last=True)).install()
    try:
        model, params, opt = conv_script()
    finally:
        hooks.remove()
    assert model.conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert all(model.formats)  # from its first call on: found before its forward ran
    assert list(model.parameters()) == params and opt.param_groups[0]["params"][0] is params[0]  # the same objects
    assert hooks.loop.facts()["model"] == "Conv" and hooks.run._model_seen


def test_compile_compiles_the_scripts_model_in_place_and_its_steps_call_the_compiled_forward(monkeypatch) -> None:
    import torch._dynamo

    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real(fn, backend="eager"))  # dynamo, not inductor's build
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    hooks = Hooks(recipe(compile="default")).install()
    try:
        model, _, _ = conv_script(epochs=1)
    finally:
        hooks.remove()
    assert model._compiled_call_impl is not None  # nn.Module.compile: the module itself, not a wrapper
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1  # its later steps ran the compiled forward
    torch._dynamo.reset()


def test_a_model_that_fails_to_compile_runs_as_written_and_compile_is_held_with_the_error(monkeypatch, capsys) -> None:
    import torch._dynamo

    def broken(*args, **kwargs):
        raise RuntimeError("backend exploded\nmore detail")

    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real(fn, backend=broken))
    torch._dynamo.reset()
    hooks = Hooks(recipe(compile="default")).install()
    try:
        model, _, _ = conv_script(epochs=1)
    finally:
        hooks.remove()
    assert model._compiled_call_impl is None and len(model.formats) == 4  # every call ran, uncompiled
    assert hooks.loop.observed() == {"amp": "off", "prefetch": "none", "compile": "off"}
    assert "compile not applied: torch.compile failed on Conv: " in capsys.readouterr().err
    torch._dynamo.reset()


def test_a_trial_of_a_script_reports_the_loop_knobs_in_force_and_its_model() -> None:
    events: list[tuple[str, dict]] = []
    run = ScriptTrial(
        Config(amp="bf16", prefetch="thread"),
        "cpu",
        lambda kind, **e: events.append((kind, e)),
        Budget(warmup_steps=2, warmup_s=0.0, window_s=0.05, windows=2, min_window_steps=2, ceiling_windows=0),
    )
    run.hooks.install()
    try:
        with pytest.raises(BudgetSpent):
            script(epochs=1000)
    finally:
        run.hooks.remove()
    resolved = next(e for kind, e in events if kind == "resolved")
    assert resolved["config"]["amp"] == "bf16" and resolved["config"]["prefetch"] == "thread"
    assert resolved["config"]["compile"] == "off" and resolved["config"]["channels_last"] is False  # a model found
    assert resolved["dataset"]["model"] == "Net"
    windows = [e for kind, e in events if kind == "window"]
    assert windows and all(math.isfinite(w["loss"]) for w in windows)


def cuda_script(epochs: int = 3) -> tuple[Net, list[float], list[bool]]:
    """The plain loop on CUDA, as scripts write it: batches made on the host, moved by the script
    (``same``: its ``.to`` found a batch there already)."""
    device = torch.device("cuda", 0)
    model = Net().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses, same = [], []
    for _ in range(epochs):
        for x, y in DataLoader(DATA, batch_size=64, shuffle=True, pin_memory=True):
            moved = x.to(device, non_blocking=True)
            same.append(moved is x)
            loss = F.cross_entropy(model(moved), y.to(device))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
    return model, losses, same


@pytest.mark.gpu
@pytest.mark.parametrize(
    "values, dtype",
    [
        ({"amp": "fp16"}, torch.float16),
        ({"amp": "bf16"}, torch.bfloat16),
        ({"prefetch": "cuda_stream"}, torch.float32),
        ({"prefetch": "thread", "amp": "bf16"}, torch.bfloat16),
    ],
)
def test_an_unmodified_cuda_script_trains_with_the_loop_knobs_from_outside(values, dtype) -> None:
    run = Recipe(Config(**values), "cuda", quiet=True)
    run.stages = SCRIPT_STAGES
    hooks = Hooks(run).install()
    try:
        model, losses, same = cuda_script()
    finally:
        hooks.remove()
    assert set(model.dtypes[1:]) == {dtype}
    assert falls(losses), losses
    if values.get("prefetch"):  # from the second step on, the batch was on the device before the script's .to
        assert all(same[2:]) and not same[0]
    if values.get("amp") == "fp16":
        assert hooks.loop.amp.steps >= len(losses) - 1


@pytest.mark.gpu
def test_an_unmodified_cuda_script_is_compiled_in_place() -> None:
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    run = Recipe(Config(compile="default"), "cuda", quiet=True)
    run.stages = SCRIPT_STAGES
    hooks = Hooks(run).install()
    try:
        model, losses, _ = cuda_script(epochs=2)
    finally:
        hooks.remove()
    assert model._compiled_call_impl is not None and torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1
    assert falls(losses)
    torch._dynamo.reset()


# Found in review (2026-11-29): each a script that crashed, trained on scaled gradients, or ran another
# precision than the one reported.


def fp16_loop(model, opt, steps: int, each=None) -> list[float]:
    """A plain loop over DATA in batches of 64 (``each(step)`` after each backward)."""
    losses = []
    loader = DataLoader(DATA, batch_size=64)
    while len(losses) < steps:
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            if each is not None:
                each(len(losses))
            opt.step(None)  # accelerate steps so: closure=None is no closure
            opt.zero_grad()
            losses.append(loss.item())
            if len(losses) == steps:
                break
    return losses


def test_fp16_steps_take_an_lr_scheduler_and_a_closure_of_none() -> None:
    hooks = Hooks(recipe(amp="fp16")).install()
    try:
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4)  # it wraps opt.step: a bound method
        losses = fp16_loop(model, opt, 16, each=lambda _: None)
        sched.step()
    finally:
        hooks.remove()
    assert hooks.loop.amp.held is None and hooks.loop.amp.steps == 16 and falls(losses), losses


def test_the_scripts_clip_by_get_total_norm_sees_unscaled_gradients() -> None:
    norms = []

    def clip(_):
        grads = [p.grad for p in model.parameters()]
        total = torch.nn.utils.get_total_norm(grads)
        norms.append(float(total))
        torch.nn.utils.clip_grads_with_norm_(model.parameters(), 1e3, total)

    hooks = Hooks(recipe(amp="fp16")).install()
    try:
        model = Net()
        fp16_loop(model, torch.optim.SGD(model.parameters(), lr=0.5), 12, each=clip)
    finally:
        hooks.remove()
    assert max(norms[2:]) < 100  # (scaled by 65536 they read 1e4 and more)


def test_fp16_counts_the_steps_a_fused_optimizer_skips() -> None:
    hooks = Hooks(recipe(amp="fp16")).install()
    try:
        model = Net()
        opt = torch.optim.Adam(model.parameters(), lr=1e-2, fused=True)  # its kernel skips, not the scaler
        fp16_loop(
            model, opt, 12, each=lambda i: [p.grad.fill_(math.inf) for p in model.parameters()] if i == 6 else None
        )
    finally:
        hooks.remove()
    assert hooks.loop.amp.counts() == {"fp16_steps": 12, "fp16_skipped_steps": 1}
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_a_script_that_turns_autocast_off_around_its_model_keeps_fp32_and_says_so(capsys) -> None:
    hooks = Hooks(recipe(amp="bf16")).install()
    try:
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        loader = DataLoader(DATA, batch_size=64)
        for _ in range(2):
            for x, y in loader:
                with torch.autocast("cpu", enabled=False):  # torchvision's references, run without --amp
                    loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad()
    finally:
        hooks.remove()
    assert set(model.dtypes) == {torch.float32}
    assert hooks.loop.observed()["amp"] == "off" and hooks.loop.facts()["amp_own"] == "off"
    assert "your script turns autocast off around its model" in capsys.readouterr().err


def test_our_autocast_is_left_in_order_and_after_a_loop_that_ends_on_a_step() -> None:
    hooks = Hooks(recipe(amp="fp16")).install()
    try:
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        it = iter(DataLoader(DATA, batch_size=64))  # a loop by steps: the epoch is never closed
        for step in range(5):
            x, y = next(it)
            with torch.autocast("cpu", enabled=False):
                if step == 3:  # the script's own autocast first seen inside one of its own
                    with torch.autocast("cpu", dtype=torch.bfloat16):
                        pass
            F.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
        after_training = torch.is_autocast_enabled("cpu")
    finally:
        hooks.remove()
    assert not after_training and not torch.is_autocast_enabled("cpu")
    # (its bf16 autocast is around no training forward: not its training precision, and ours applies)
    assert hooks.loop.amp.own is None and set(model.dtypes[1:]) == {torch.float16}


def test_a_step_based_bf16_loop_leaves_autocast_off_for_what_follows() -> None:
    hooks = Hooks(recipe(amp="bf16")).install()
    try:
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        it = iter(DataLoader(DATA, batch_size=64))
        for _ in range(5):
            x, y = next(it)
            F.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
        with torch.no_grad():
            evaluated = model.fc1(X[:4]).dtype  # an evaluation after training, as written: fp32
    finally:
        hooks.remove()
    assert set(model.dtypes[1:]) == {torch.bfloat16} and evaluated == torch.float32


def test_prefetch_moves_what_the_scripts_first_step_moved_and_leaves_the_rest_on_the_host() -> None:
    """A script that moves its inputs but keeps a tensor on the host (a packed sequence's lengths must
    be there): its first training step shows which, and prefetch moves those only. The move is read
    from the run ("meta" stands in for the GPU this machine lacks)."""
    from autotune.training._prefetch import to_device

    lengths_data = TensorDataset(X, (X[:, 0] + X[:, 1] > 0).long(), torch.randint(1, 8, (512,)))
    hooks = Hooks(recipe(prefetch="thread")).install()
    try:
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        for x, y, _lengths in DataLoader(lengths_data, batch_size=64):
            x.to("meta")  # (what a CUDA script does with its inputs: x.to(device))
            F.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    finally:
        hooks.remove()
    assert hooks.loop.moved_paths == {(0,)}  # x moved; y and lengths left where they were
    batch = (torch.zeros(2), torch.ones(2), [torch.ones(1)])
    moved = to_device(batch, "meta", False, only={(0,), (2, 0)})
    assert [t.device.type for t in (moved[0], moved[1], moved[2][0])] == ["meta", "cpu", "meta"]
