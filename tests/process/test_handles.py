"""Run / Recipe on CPU with real tensors: the four calls, autocast and resolved()."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch.utils.data import TensorDataset

from autotune import KNOBS, Config, Recipe, Run

DATA = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))


def make(**values) -> Run:
    return Run(Config(**values), "cpu")


# -- dataloader ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "user", "expected"),
    [
        # the baseline: the user's own kwargs
        ({}, {"batch_size": 8, "num_workers": 2}, {"batch_size": 8, "num_workers": 2}),
        # the config wins where it sets a value
        ({"num_workers": 1}, {"batch_size": 8, "num_workers": 2}, {"num_workers": 1}),
        ({"batch_size": 5}, {"batch_size": 8}, {"batch_size": 5}),
        # None keeps the user's value
        (
            {"num_workers": None, "batch_size": None},
            {"batch_size": 8, "num_workers": 2},
            {"batch_size": 8, "num_workers": 2},
        ),
        # "Nx" is relative to the user's batch size
        ({"batch_size": "2x"}, {"batch_size": 8}, {"batch_size": 16}),  # 2 * 8
        ({"batch_size": "1x"}, {"batch_size": 8}, {"batch_size": 8}),  # 1 * 8
        ({"batch_size": "1.5x"}, {"batch_size": 10}, {"batch_size": 15}),  # 1.5 * 10
        ({"batch_size": "4x"}, {}, {"batch_size": 4}),  # 4 * DataLoader's 1
        ({"batch_size": "0.5x"}, {"batch_size": 1}, {"batch_size": 1}),  # max(1, round(0.5))
        # loader knobs the user never passed
        (
            {"num_workers": 2, "prefetch_factor": 4, "persistent_workers": True},
            {"batch_size": 8},
            {"num_workers": 2, "prefetch_factor": 4, "persistent_workers": True},
        ),
        # without workers DataLoader refuses these, so they are dropped: config's ...
        (
            {"num_workers": 0, "prefetch_factor": 4, "persistent_workers": True},
            {"batch_size": 8},
            {"num_workers": 0, "prefetch_factor": None, "persistent_workers": False},
        ),
        # ... and the user's own, when the config turns the workers off
        (
            {"num_workers": 0},
            {"num_workers": 2, "prefetch_factor": 4, "persistent_workers": True},
            {"num_workers": 0, "prefetch_factor": None, "persistent_workers": False},
        ),
        # and the user's own when the config turns workers on keep theirs
        ({"num_workers": 2}, {"prefetch_factor": 6}, {"num_workers": 2, "prefetch_factor": 6}),
        # nothing to pin for on a CPU device
        ({"pin_memory": True}, {"batch_size": 8}, {"pin_memory": False}),
    ],
)
def test_dataloader_merges_user_kwargs_and_config(config: dict, user: dict, expected: dict) -> None:
    loader = make(**config).dataloader(DATA, **user)
    for attr, value in expected.items():
        assert getattr(loader, attr) == value, attr


def test_dataloader_keeps_other_user_kwargs_and_yields_the_batch_size() -> None:
    loader = make(batch_size="2x").dataloader(DATA, batch_size=8, shuffle=False, drop_last=True)
    assert loader.drop_last is True
    batches = list(loader)
    assert len(batches) == 4  # 64 samples / 16
    assert torch.equal(batches[0][0], DATA.tensors[0][:16])  # not shuffled


def test_dataloader_does_not_mutate_the_user_kwargs() -> None:
    user = {"batch_size": 8, "num_workers": 2, "prefetch_factor": 4}
    make(num_workers=0, batch_size="2x").dataloader(DATA, **user)
    assert user == {"batch_size": 8, "num_workers": 2, "prefetch_factor": 4}


def test_dataloader_with_batch_size_none_keeps_the_users_loader() -> None:
    batches = TensorDataset(torch.randn(4, 8, 3))  # the dataset already yields batches of 8
    run = make(batch_size="2x", lr_scaling="linear")
    loader = run.dataloader(batches, batch_size=None)  # automatic batching off: nothing to resize
    assert loader.batch_size is None
    assert next(iter(loader))[0].shape == (8, 3)
    opt = run.optimizer(torch.optim.SGD, params(), lr=0.1)
    assert opt.param_groups[0]["lr"] == 0.1  # no batch size to scale to


def test_dataloader_with_the_users_batch_sampler_keeps_it_and_lr() -> None:
    from torch.utils.data import BatchSampler, SequentialSampler

    sampler = BatchSampler(SequentialSampler(DATA), batch_size=8, drop_last=False)
    run = make(batch_size="2x", lr_scaling="linear")
    loader = run.dataloader(DATA, batch_sampler=sampler)  # the batch size is the sampler's
    assert next(iter(loader))[0].shape == (8, 4)
    opt = run.optimizer(torch.optim.SGD, params(), lr=0.1)
    assert opt.param_groups[0]["lr"] == 0.1  # nothing resized, nothing scaled


# -- optimizer ----------------------------------------------------------------------


def params() -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.randn(3))]


@pytest.mark.parametrize(
    ("scaling", "batch", "expected_lr"),
    [
        ("linear", "4x", 0.4),  # 0.1 * 32/8
        ("sqrt", "4x", 0.2),  # 0.1 * sqrt(32/8)
        ("none", "4x", 0.1),  # unscaled
        (None, "4x", 0.1),  # unset = none
        ("linear", "0.5x", 0.05),  # 0.1 * 4/8
        ("sqrt", 128, 0.1 * math.sqrt(16)),  # absolute 128 = 16x the user's 8
    ],
)
def test_optimizer_scales_lr_to_the_batch_size(scaling, batch, expected_lr) -> None:
    run = make(batch_size=batch, lr_scaling=scaling)
    run.dataloader(DATA, batch_size=8)
    opt = run.optimizer(torch.optim.SGD, params(), lr=0.1)
    assert opt.param_groups[0]["lr"] == pytest.approx(expected_lr)
    assert run.lr == pytest.approx(expected_lr)


def test_optimizer_before_dataloader_with_scaling_raises() -> None:
    with pytest.raises(RuntimeError, match=r"called before run\.dataloader"):
        make(batch_size="2x", lr_scaling="linear").optimizer(torch.optim.SGD, params(), lr=0.1)


def test_resolved_batch_size_is_an_int_when_the_code_passes_none() -> None:
    run = make(lr_scaling="linear")  # e.g. a hand-edited recipe: optimizer: {lr_scaling: linear}
    run.dataloader(DATA)  # DataLoader's own default batch size, 1
    assert run.resolved()["batch_size"] == 1
    opt = run.optimizer(torch.optim.SGD, params(), lr=0.1)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1)  # 0.1 * 1/1


def test_optimizer_without_lr_keeps_the_class_default() -> None:
    run = make(batch_size="2x", lr_scaling="linear")
    run.dataloader(DATA, batch_size=8)
    opt = run.optimizer(torch.optim.AdamW, params())
    assert opt.param_groups[0]["lr"] == 1e-3  # AdamW's default, not scaled
    assert run.lr is None


def test_fused_passed_where_the_signature_takes_it() -> None:
    run = make(fused_optimizer=True)
    opt = run.optimizer(torch.optim.AdamW, params(), lr=1e-3)
    assert opt.defaults["fused"] is True
    assert run.resolved()["fused_optimizer"] is True


def test_fused_not_passed_when_off() -> None:
    run = make(fused_optimizer=False)
    opt = run.optimizer(torch.optim.AdamW, params(), lr=1e-3)
    assert not opt.defaults["fused"]
    assert run.resolved()["fused_optimizer"] is False


class PlainSGD(torch.optim.Optimizer):
    """A user's optimizer with no fused= argument: passing one would be a TypeError."""

    def __init__(self, params, lr: float = 0.01) -> None:
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])


def test_fused_skipped_with_a_warning_where_the_signature_lacks_it() -> None:
    run = make(fused_optimizer=True)
    with pytest.warns(UserWarning, match=r"PlainSGD takes no fused= argument; running it unfused"):
        opt = run.optimizer(PlainSGD, params(), lr=0.5)
    assert isinstance(opt, PlainSGD)
    assert opt.param_groups[0]["lr"] == 0.5
    assert run.resolved()["fused_optimizer"] is False
    assert run.facts()["optimizers"] == {"PlainSGD": False}  # the study stops drawing fused_optimizer


def test_the_facts_name_each_optimizer_and_whether_it_fuses() -> None:
    run = make()
    run.optimizer(torch.optim.AdamW, params(), lr=1e-3)
    run.optimizer(torch.optim.Adadelta, params(), lr=1.0)
    assert run.facts()["optimizers"] == {"AdamW": True, "Adadelta": False}


def test_no_warning_for_an_optimizer_without_fused_when_fused_is_off() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make().optimizer(PlainSGD, params(), lr=0.5)


# -- autocast and step ------------------------------------------------------------------


def test_autocast_bf16_on_cpu_really_autocasts_a_matmul() -> None:
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with make(amp="bf16").autocast():
        assert (a @ b).dtype == torch.bfloat16
    assert (a @ b).dtype == torch.float32  # only inside the context


@pytest.mark.parametrize("amp", ["off", None])
def test_autocast_off_leaves_float32(amp) -> None:
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with make(amp=amp).autocast():
        assert (a @ b).dtype == torch.float32


@pytest.mark.parametrize("amp", [None, "bf16"])
def test_step_updates_params_and_zeroes_grads(amp) -> None:
    torch.manual_seed(0)
    run = make(amp=amp)
    model = torch.nn.Linear(4, 2)
    before = [p.detach().clone() for p in model.parameters()]
    opt = run.optimizer(torch.optim.SGD, model.parameters(), lr=0.1)
    x, y = DATA.tensors[0][:8], DATA.tensors[1][:8]
    with run.autocast():
        loss = torch.nn.functional.cross_entropy(model(x), y)
    run.step(loss, opt)
    for old, new in zip(before, model.parameters()):
        assert not torch.equal(old, new)
        assert new.grad is None  # zero_grad(set_to_none=True)


def test_step_is_plain_sgd_arithmetic() -> None:
    run = make()
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    opt = run.optimizer(torch.optim.SGD, [w], lr=0.5)
    run.step((w * w).sum(), opt)  # grad = 2w = [2, 4]; w - 0.5 * grad = [0, 0]
    assert torch.equal(w.detach(), torch.tensor([0.0, 0.0]))
    assert w.grad is None


# -- resolved ---------------------------------------------------------------------------


def test_resolved_after_the_calls() -> None:
    run = make(batch_size="2x", num_workers=0, lr_scaling="linear", prefetch="thread")
    run.dataloader(DATA, batch_size=8)
    run.optimizer(torch.optim.SGD, params(), lr=0.1)
    assert run.resolved() == {
        "batch_size": 16,  # 2 * 8, absolute
        "num_workers": 0,
        "pin_memory": False,
        # persistent_workers and prefetch_factor are inactive without workers
        "prefetch": "thread",
        "lr_scaling": "linear",
        "fused_optimizer": False,
        "amp": "off",
        "cudnn_benchmark": False,
        "tf32": False,
        "malloc_retain": False,
        "cuda_alloc_conf": "default",
    }


def test_resolved_counts_the_users_own_values() -> None:
    run = make()
    run.dataloader(DATA, batch_size=8, num_workers=2, prefetch_factor=3)
    resolved = run.resolved()
    assert (resolved["batch_size"], resolved["num_workers"]) == (8, 2)
    assert (resolved["prefetch_factor"], resolved["persistent_workers"]) == (3, False)
    assert set(resolved) <= set(KNOBS)


def test_recipe_applies_backend_flags() -> None:
    saved = (torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision())
    try:
        Recipe(Config(cudnn_benchmark=True, tf32=True), "cpu")
        assert torch.backends.cudnn.benchmark is True
        assert torch.get_float32_matmul_precision() == "high"
        Recipe(Config(), "cpu")
        assert torch.backends.cudnn.benchmark is False
        assert torch.get_float32_matmul_precision() == "highest"
    finally:
        torch.backends.cudnn.benchmark = saved[0]
        torch.set_float32_matmul_precision(saved[1])


def test_batches_yield_on_the_run_device() -> None:
    run = make(prefetch="thread")
    loader = run.dataloader(DATA, batch_size=16)
    got = list(run.batches(loader))
    assert len(got) == 4
    assert torch.equal(torch.cat([x for x, _ in got]), DATA.tensors[0])
    assert all(x.device == run.device for x, _ in got)


# -- on a GPU ---------------------------------------------------------------------------


def _cuda_ops(fn) -> set[str]:
    """Names of the operators and kernels ``fn`` runs, from the profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return {event.name for event in prof.events()}


@pytest.mark.gpu
@pytest.mark.parametrize("fused", [True, False])
def test_fused_adamw_really_runs_the_fused_kernel_on_cuda(fused: bool) -> None:
    run = Run(Config(fused_optimizer=fused), "cuda")
    model = torch.nn.Linear(256, 256).to(run.device)
    opt = run.optimizer(torch.optim.AdamW, model.parameters(), lr=1e-3)
    x = torch.randn(64, 256, device=run.device)

    def one_step() -> None:
        run.step(model(x).square().mean(), opt)

    one_step()  # AdamW builds its state on the first step
    names = _cuda_ops(one_step)
    assert any("_fused_adamw" in n for n in names) is fused, sorted(n for n in names if "adam" in n.lower())


@pytest.mark.gpu
@pytest.mark.parametrize("amp", ["fp16", "bf16"])
def test_amp_on_cuda_trains_with_finite_loss_and_the_scaler_for_fp16_only(amp: str) -> None:
    torch.manual_seed(0)
    run = Run(Config(amp=amp), "cuda")
    data = TensorDataset(torch.randn(2048, 32), torch.randint(0, 4, (2048,)))
    model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4)).to(run.device)
    opt = run.optimizer(torch.optim.AdamW, model.parameters(), lr=3e-3)
    losses = []
    for _ in range(5):
        for x, y in run.batches(run.dataloader(data, batch_size=64, shuffle=True)):
            with run.autocast():
                out = model(x)
                assert out.dtype == (torch.float16 if amp == "fp16" else torch.bfloat16)
                loss = torch.nn.functional.cross_entropy(out, y)
            run.step(loss, opt)
            losses.append(loss.detach())
    losses = torch.stack(losses).float().cpu()
    assert torch.isfinite(losses).all()
    assert losses[-32:].mean() < losses[:32].mean()  # it learns
    assert (run._scaler is not None) is (amp == "fp16")
    if amp == "fp16":
        assert run._scaler.get_scale() > 0


def test_production_loads_no_trial_machinery() -> None:
    """``Recipe`` needs ``Run`` only: the worker's measuring side (autotune.worker._trial) and the
    ceilings stay unloaded in production, and ``autotune.Trial`` still resolves."""
    import subprocess
    import sys

    code = (
        "import sys, autotune; autotune.Recipe; loaded = set(sys.modules); "
        "print('autotune.worker._trial' in loaded, 'autotune.core._ceilings' in loaded, autotune.Trial.__module__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "False", "autotune.worker._trial"], done.stderr


def test_trial_phases_name_their_ceiling() -> None:
    from autotune.core._knobs import Part
    from autotune.worker._trial import Phase

    assert [p.ceiling for p in Phase] == [None, None, Part.COMPUTE, Part.LOADER, None, None]


def _windows_measured(loss_after_warmup: float, **learning) -> list[dict]:
    """The window events of a Trial whose loss is 1.0 in its warmup (4 steps), then constant."""
    from autotune.machine._launch import Budget
    from autotune.worker._trial import BudgetSpent, Trial

    events: list[dict] = []
    trial = Trial(
        Config(),
        torch.device("cpu"),
        lambda kind, **e: events.append({"event": kind, **e}),
        Budget(
            warmup_steps=4, warmup_s=0.0, window_s=0.0, windows=2, min_window_steps=8, ceiling_windows=0, **learning
        ),
    )
    weight = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([weight], lr=0.0)
    loader = torch.utils.data.DataLoader(TensorDataset(torch.zeros(64, 1)), batch_size=4)
    steps = 0
    with pytest.raises(BudgetSpent):
        for _epoch in range(1_000):
            for _ in trial.batches(loader):
                trial.step(weight.sum() + (1.0 if steps < 4 else loss_after_warmup), opt)
                steps += 1
    return [e for e in events if e["event"] == "window"]


def test_the_baseline_measures_on_while_its_loss_has_not_fallen() -> None:
    """A baseline whose loss stays at its warmup's measures its extra windows: against its
    first windows alone a config that learns nothing would pass."""
    assert len(_windows_measured(1.0, learn_windows=3, learn_to=0.5)) == 5
    assert len(_windows_measured(0.6, learn_windows=3, learn_to=0.5)) == 5
    assert len(_windows_measured(0.4, learn_windows=3, learn_to=0.5)) == 2  # learned: as planned
    assert len(_windows_measured(1.0)) == 2  # a sampled trial never adds windows


class _SlowStart(torch.utils.data.Dataset):
    """64 items; the first of each epoch (in order) waits, as a loader's start-up does."""

    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 0:
            import time

            time.sleep(self.wait_s)
        return torch.zeros(1)


def _epoch_windows(window_s: float, wait_s: float) -> list[dict]:
    from autotune.machine._launch import Budget
    from autotune.worker._trial import BudgetSpent, Trial

    events: list[dict] = []
    trial = Trial(
        Config(),
        torch.device("cpu"),
        lambda kind, **e: events.append({"event": kind, **e}),
        Budget(warmup_steps=20, warmup_s=0.0, window_s=window_s, windows=4, ceiling_windows=0),
    )  # past an epoch
    weight = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([weight], lr=0.0)
    loader = torch.utils.data.DataLoader(_SlowStart(wait_s), batch_size=4)  # 16 batches an epoch
    with pytest.raises(BudgetSpent):
        for _epoch in range(10_000):
            for _ in trial.batches(loader):
                trial.step(weight.sum(), opt)
    return [e for e in events if e["event"] in ("warmup", "window")]


def test_windows_hold_whole_epochs_where_an_epoch_is_shorter_than_two_windows() -> None:
    # An epoch of 16 batches costs its first batch's 30 ms, and about that again in steps: in
    # 0.1 s windows, one cut anywhere would hold the wait 2 or 3 times (or 1 or 2 epochs'
    # worth); cut on epochs' ends, each holds whole epochs, each epoch's wait once.
    warmup, *windows = _epoch_windows(window_s=0.1, wait_s=0.03)
    assert warmup["samples_seen"] == 128, warmup  # its 20 steps, then on to its second epoch's end
    assert len(windows) == 4 and all(w["samples"] % 64 == 0 and w["samples"] >= 64 for w in windows), windows
    assert all(0.1 <= w["seconds"] < 0.3 for w in windows), windows
    # an epoch (over 0.03 s) longer than two windows of 5 ms: the windows are cut by time
    _, *cut = _epoch_windows(window_s=0.005, wait_s=0.03)
    assert any(w["samples"] % 64 for w in cut), cut


def test_step_clips_the_gradient_norm_before_the_optimizer_steps() -> None:
    weight = torch.nn.Parameter(torch.zeros(4))
    opt = torch.optim.SGD([weight], lr=1.0)
    make().step((weight * torch.full((4,), 100.0)).sum(), opt, clip_grad_norm=0.5)
    assert weight.detach().norm().item() == pytest.approx(0.5, rel=1e-4)  # 200 unclipped
    assert weight.grad is None  # zero_grad(set_to_none=True)


def test_step_accumulates_gradients_over_calls_and_steps_every_nth() -> None:
    def loss(w: torch.Tensor, x: float) -> torch.Tensor:
        return ((w - x) ** 2).sum()

    accumulated, plain = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    opt, ref = torch.optim.SGD([accumulated], lr=0.1), torch.optim.SGD([plain], lr=0.1)
    run = make()
    run.step(loss(accumulated, 1.0), opt, accumulate=2)
    assert accumulated.detach().abs().sum() == 0  # no step after the first micro-batch
    run.step(loss(accumulated, 3.0), opt, accumulate=2)
    make().step((loss(plain, 1.0) + loss(plain, 3.0)) / 2, ref)  # one step on the mean of both
    assert torch.allclose(accumulated.detach(), plain.detach())
    with pytest.raises(ValueError, match=r"accumulate=0"):
        run.step(loss(accumulated, 1.0), opt, accumulate=0)
