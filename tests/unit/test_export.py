"""The best config as YAML, and loading it back (autotune.production._export)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import autotune
from autotune import KNOBS, Config, ConfigError, Recipe
from autotune.production._export import BASE_BATCH_KEY, load, recipe_from_mapping, render

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
        "dataloader",
        "transfer",
        "optimizer",
        "precision",
        "backends",
        "environment",
    ]
    assert text.endswith("\n")
    data = yaml.safe_load(text)
    assert data["optimizer"] == {"lr_scaling": "linear", "fused_optimizer": True, BASE_BATCH_KEY: 64}
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


def test_load_without_a_path_gives_the_defaults() -> None:
    recipe = load(device="cpu")
    assert recipe.config == Config()
    assert recipe.base_batch_size is None
    assert str(recipe.device) == "cpu"
    assert autotune.load is load


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"loader": {"num_workers": 2}},
            r"^best\.yaml: loader: unknown section; allowed: dataloader, transfer, optimizer",
        ),
        ({"dataloader": {"amp": "bf16"}}, r"^best\.yaml: dataloader\.amp: amp belongs in section precision$"),
        (
            {"transfer": {"num_workers": 2}},
            r"^best\.yaml: transfer\.num_workers: num_workers belongs in section dataloader$",
        ),
        (
            {"dataloader": {"num_worker": 2}},
            r"^best\.yaml: dataloader\.num_worker: unknown knob; known: batch_size, num_workers",
        ),
        (
            {"dataloader": {"num_workers": -1}},
            r"^best\.yaml: dataloader\.num_workers: -1 is not allowed; allowed: an integer >= 0$",
        ),
        (
            {"dataloader": {"pin_memory": "yes"}},
            r"^best\.yaml: dataloader\.pin_memory: 'yes' is not allowed; allowed: true or false$",
        ),
        ({"precision": {"amp": False}}, r"precision\.amp: False is not allowed.*quote it"),
        (
            {"optimizer": {BASE_BATCH_KEY: 0}},
            r"^best\.yaml: optimizer\.base_batch_size: must be an integer >= 1; got 0$",
        ),
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


@pytest.mark.parametrize("budget", [0, -1, 0.001, True, "1", float("nan"), float("inf")])
def test_an_adaptive_load_takes_the_ram_budget_a_study_takes(budget: object) -> None:
    # (the study's bound: tune(ram_budget=) and --ram-budget refuse what load refuses)
    with pytest.raises(
        ConfigError, match=re.escape(f"load(ram_budget={budget!r}): must be a finite number of GiB >= 0.01")
    ):
        load(None, "cpu", adapt=True, ram_budget=budget)
    with pytest.raises(ConfigError, match=r"ram_budget=.*must be a (finite )?number >= 0\.01"):
        autotune.tune(lambda run: None, ram_budget=budget if isinstance(budget, (int, float)) else -1.0)


def test_every_knob_can_be_exported_in_its_own_section(tmp_path: Path) -> None:
    values = {name: knob.default for name, knob in KNOBS.items()}
    path = tmp_path / "defaults.yaml"
    path.write_text(render(values, None, []))
    assert load(path, device="cpu").config == Config(**values)
