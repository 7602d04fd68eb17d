"""Export: render the best config as YAML, load it back as a Recipe."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import autotune
from autotune import KNOBS, Config, ConfigError, Recipe
from autotune._export import BASE_BATCH_KEY, load, recipe_from_mapping, render

#: What Run.resolved() gives for a tuned run (batch size already absolute).
RESOLVED = {
    "batch_size": 256,
    "num_workers": 6,
    "pin_memory": False,
    "persistent_workers": True,
    "prefetch_factor": 4,
    "prefetch": "thread",
    "lr_scaling": "linear",
    "fused_optimizer": True,
    "amp": "off",  # a YAML boolean if written unquoted
    "cudnn_benchmark": False,
    "tf32": False,
    "cuda_alloc_conf": "expandable_segments:True",  # a colon inside a flow mapping
}


def test_render_layout() -> None:
    text = render(RESOLVED, 64, ["autotune: study s, trial 17", "measured on: CPU"])
    lines = text.splitlines()
    assert lines[:2] == ["# autotune: study s, trial 17", "# measured on: CPU"]
    # one line per stage, in Stage order
    assert [line.split(":")[0] for line in lines[2:]] == [
        "dataloader", "transfer", "optimizer", "precision", "backends", "environment"]
    assert text.endswith("\n")
    data = yaml.safe_load(text)
    assert data["optimizer"] == {"lr_scaling": "linear", "fused_optimizer": True,
                                 BASE_BATCH_KEY: 64}
    assert data["precision"] == {"amp": "off"}
    assert data["environment"] == {"cuda_alloc_conf": "expandable_segments:True"}


def test_render_then_load_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "best.yaml"
    path.write_text(render(RESOLVED, 64, ["header"]))
    recipe = load(path, device="cpu", check=False)  # (CUDA knobs: checked below)
    assert isinstance(recipe, Recipe)
    assert recipe.config == Config(**RESOLVED)
    assert recipe.base_batch_size == 64


@pytest.mark.parametrize(
    ("resolved", "base"),
    [
        ({"batch_size": "2x", "lr_scaling": "sqrt"}, None),
        ({"num_workers": 0, "amp": "bf16"}, 32),
        ({"prefetch": "none"}, None),
    ],
)
def test_round_trip_of_partial_configs(tmp_path: Path, resolved: dict, base: int | None) -> None:
    path = tmp_path / "best.yaml"
    path.write_text(render(resolved, base, []))
    recipe = load(str(path), device="cpu")
    assert recipe.config == Config(**resolved)
    assert recipe.base_batch_size == base


def test_a_run_resolved_config_round_trips(tmp_path: Path) -> None:
    """What a real Run reports is what an export holds and a load restores."""
    import torch
    from torch.utils.data import TensorDataset

    run = Recipe(Config(batch_size="2x", num_workers=0, lr_scaling="linear", prefetch="thread"), "cpu")
    run.dataloader(TensorDataset(torch.zeros(8, 2)), batch_size=4)
    run.optimizer(torch.optim.SGD, [torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    path = tmp_path / "best.yaml"
    path.write_text(render(run.resolved(), 4, []))
    again = load(path, device="cpu")
    assert again.config.batch_size == 8  # 2x the code's 4
    again.dataloader(TensorDataset(torch.zeros(8, 2)), batch_size=4)
    assert again.resolved() == run.resolved()


def test_load_without_a_path_gives_the_defaults() -> None:
    recipe = load(device="cpu")
    assert recipe.config == Config()
    assert recipe.base_batch_size is None
    assert str(recipe.device) == "cpu"
    assert autotune.load is load


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"loader": {"num_workers": 2}},
         r"^best\.yaml: loader: unknown section; allowed: dataloader, transfer, optimizer"),
        ({"dataloader": {"amp": "bf16"}},
         r"^best\.yaml: dataloader\.amp: amp belongs in section precision$"),
        ({"transfer": {"num_workers": 2}},
         r"^best\.yaml: transfer\.num_workers: num_workers belongs in section dataloader$"),
        ({"dataloader": {"num_worker": 2}},
         r"^best\.yaml: dataloader\.num_worker: unknown knob; known: batch_size, num_workers"),
        ({"dataloader": {"num_workers": -1}},
         r"^best\.yaml: dataloader\.num_workers: -1 is not allowed; allowed: an integer >= 0$"),
        ({"dataloader": {"pin_memory": "yes"}},
         r"^best\.yaml: dataloader\.pin_memory: 'yes' is not allowed; allowed: true or false$"),
        ({"precision": {"amp": False}}, r"precision\.amp: False is not allowed.*quote it"),
        ({"optimizer": {BASE_BATCH_KEY: 0}},
         r"^best\.yaml: optimizer\.base_batch_size: must be an integer >= 1; got 0$"),
        ({"optimizer": {BASE_BATCH_KEY: True}}, r"optimizer\.base_batch_size: .* got True$"),
        ({"optimizer": {BASE_BATCH_KEY: "64"}}, r"optimizer\.base_batch_size: .* got '64'$"),
        ({"optimizer": {BASE_BATCH_KEY: 6.4}}, r"optimizer\.base_batch_size: .* got 6\.4$"),
        # base_batch_size belongs to the optimizer section only
        ({"dataloader": {BASE_BATCH_KEY: 64}}, r"dataloader\.base_batch_size: unknown knob"),
        ({"dataloader": [2, 4]}, r"^best\.yaml: dataloader: must be a mapping of knob: value"),
        ({"dataloader": None}, r"^best\.yaml: dataloader: must be a mapping"),
        ([{"dataloader": {}}], r"^best\.yaml: an autotune export is a mapping of sections"),
        ("dataloader", r"^best\.yaml: an autotune export is a mapping of sections"),
        (None, r"^best\.yaml: an autotune export is a mapping"),
    ],
)
def test_recipe_from_mapping_errors(data: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        recipe_from_mapping(data, "best.yaml", device="cpu")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("backends: {cudnn_benchmark: true}\nextra: {x: 1}\n", r"extra: unknown section"),
        ("precision: {amp: off}\n", r"precision\.amp: False is not allowed"),  # unquoted off
        ("dataloader: {batch_size: 0x}\n", r"dataloader\.batch_size: '0x' is not allowed"),
        ("- dataloader\n", r"an autotune export is a mapping of sections"),
        ("", r"an autotune export is a mapping of sections"),
        ("dataloader: {num_workers: [1, 2\n", r"not valid YAML"),
    ],
)
def test_load_errors_name_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "best.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        load(path, device="cpu")
    assert str(info.value).startswith(f"{path}: ")


def test_load_missing_file() -> None:
    with pytest.raises(ConfigError, match=re.escape("nowhere/best.yaml: cannot read")):
        load("nowhere/best.yaml", device="cpu")


def test_every_knob_can_be_exported_in_its_own_section(tmp_path: Path) -> None:
    values = {name: knob.default for name, knob in KNOBS.items()}
    path = tmp_path / "defaults.yaml"
    path.write_text(render(values, None, []))
    assert load(path, device="cpu").config == Config(**values)


def test_recipe_warns_when_the_code_batch_size_changed(tmp_path: Path) -> None:
    import torch
    from torch.utils.data import TensorDataset

    path = tmp_path / "best.yaml"
    path.write_text(render({"batch_size": 128, "lr_scaling": "linear"}, 64, []))
    recipe = load(path, device="cpu")
    with pytest.warns(UserWarning, match=r"tuned with batch_size=64 .* now passes 32"):
        loader = recipe.dataloader(TensorDataset(torch.zeros(256, 2)), batch_size=32)
    assert loader.batch_size == 128


def test_load_drops_what_this_machine_cannot_honour_and_names_it(tmp_path: Path, capsys) -> None:
    """An H100's export on this CPU machine: the CUDA-only values dropped with one warning
    naming each, another warning for the other machine; the rest kept."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks a CPU machine's view of a GPU export")
    path = tmp_path / "best.yaml"
    path.write_text(render({"batch_size": 64, "num_workers": 8, "pin_memory": True, "prefetch": "cuda_stream",
                            "amp": "fp16", "cuda_alloc_conf": "expandable_segments:True"}, 32, ["header"],
                           {"device": "cuda:0", "gpu": "NVIDIA H100 80GB HBM3", "cpus": 16, "torch": "2.13.0"},
                           "study s: trial 7, 3.10x the baseline"))
    with pytest.warns(UserWarning) as caught:
        recipe = load(path)
    said = [str(w.message) for w in caught]
    assert any("cannot honour pin_memory=true (needs CUDA" in m and "prefetch=cuda_stream" in m
               and "amp=fp16" in m and "cuda_alloc_conf=expandable_segments:True" in m for m in said), said
    assert any("was measured on another machine (device cuda:0 there, cpu here; gpu NVIDIA H100 80GB HBM3 "
               "there, none here" in m for m in said), said
    assert recipe.config == Config(batch_size=64, num_workers=8)
    assert recipe.origin == f"{path} (study s: trial 7, 3.10x the baseline)"
    # it says once, on its first batch, what it trains with
    from torch.utils.data import TensorDataset

    loader = recipe.dataloader(TensorDataset(torch.zeros(256, 2)), batch_size=32, num_workers=0)
    for _ in range(2):
        list(recipe.batches(loader))
    err = capsys.readouterr().err
    assert err.count("autotune: training with ") == 1 and "study s: trial 7" in err and "batch_size=64" in err


def test_a_recipe_reports_samples_per_s_when_asked(capsys) -> None:
    import torch
    from torch.utils.data import TensorDataset

    recipe = load(device="cpu", report_every=0.01, quiet=True)
    loader = recipe.dataloader(TensorDataset(torch.zeros(4096, 2)), batch_size=1)
    for _ in recipe.batches(loader):
        pass
    err = capsys.readouterr().err
    assert "autotune: training with" not in err
    assert "samples/s over the last" in err


def test_a_recipe_reports_across_epochs_shorter_than_its_period(capsys) -> None:
    import time

    import torch
    from torch.utils.data import TensorDataset

    recipe = load(device="cpu", report_every=0.2, quiet=True)
    loader = recipe.dataloader(TensorDataset(torch.zeros(8, 2)), batch_size=4)
    started = time.perf_counter()
    epochs = 0
    while time.perf_counter() - started < 0.5:  # epochs of 2 batches, each far under 0.2 s
        for _ in recipe.batches(loader):
            time.sleep(0.01)
        epochs += 1
    lines = [line for line in capsys.readouterr().err.splitlines() if "samples/s over the last" in line]
    assert epochs > 10 and len(lines) >= 2  # about one a 0.2 s, the count carried from epoch to epoch
    # 4 samples per 10 ms at most: under 400 samples/s, never more than the loop made
    assert all(float(line.split()[1].replace(",", "")) <= 400 for line in lines), lines


def test_the_same_machine_loads_its_export_silently(tmp_path: Path, recwarn) -> None:
    from autotune._probe import probe

    here = probe("cpu")
    path = tmp_path / "best.yaml"
    path.write_text(render({"num_workers": 2}, None, [], {"device": "cpu", "gpu": None, "cpus": here.cpus,
                                                          "torch": here.torch}))
    assert load(path, device="cpu", quiet=True).config == Config(num_workers=2)
    assert not [w for w in recwarn if issubclass(w.category, UserWarning)]
