"""A Lightning script and a Hugging Face Trainer script get the precision knob through their own
framework's settings (autotune.training._framework_knobs), run in this process as ``autotune exec`` runs
them: the dtype their layers computed in is read from the run."""

from __future__ import annotations

import pytest
import torch
from torch.nn.modules.module import register_module_forward_hook

from autotune import Config, Recipe
from autotune.training._hooks import Hooks
from autotune.training._script import SCRIPT_STAGES, run_script
from helpers import FIXTURES

SCRIPTS = FIXTURES / "scripts"


def run(script: str, argv: list[str], **values) -> tuple[Hooks, set[torch.dtype]]:
    """The script run with ``values`` applied; the dtypes its Linear layers returned."""
    recipe = Recipe(Config(**values), "cpu", quiet=True)
    recipe.stages = SCRIPT_STAGES
    dtypes: set[torch.dtype] = set()

    def seen(module, args, output):
        if isinstance(module, torch.nn.Linear) and torch.is_grad_enabled():
            dtypes.add(output.dtype)

    watch = register_module_forward_hook(seen)
    hooks = Hooks(recipe).install()
    try:
        run_script(str(SCRIPTS / script), argv)
    finally:
        hooks.remove()
        watch.remove()
    return hooks, dtypes


def test_lightning_trains_in_bf16_through_its_trainers_precision(capsys) -> None:
    pytest.importorskip("lightning")
    hooks, dtypes = run("lightning_style.py", ["--epochs", "1", "--read-ms", "0"], amp="bf16")
    said = capsys.readouterr()
    assert "amp=bf16 set through your framework: Trainer(precision='bf16-mixed')" in said.out + said.err
    assert torch.bfloat16 in dtypes
    amp = hooks.loop.amp
    assert amp.own is None and amp.applied == "bf16"  # Lightning's autocast is ours, not the script's own


def test_the_trainer_trains_in_bf16_through_its_training_arguments(tmp_path, capsys) -> None:
    pytest.importorskip("transformers")
    hooks, dtypes = run(
        "hf_trainer_style.py", ["--epochs", "0.25", "--read-ms", "0", "--output-dir", str(tmp_path / "out")], amp="bf16"
    )
    said = capsys.readouterr()
    assert "amp=bf16 set through your framework: TrainingArguments(bf16=True)" in said.out + said.err
    assert torch.bfloat16 in dtypes and hooks.loop.amp.own is None


def test_a_precision_the_lightning_script_passes_itself_wins_even_32() -> None:
    L = pytest.importorskip("lightning")
    recipe = Recipe(Config(amp="bf16"), "cpu", quiet=True)
    recipe.stages = SCRIPT_STAGES
    hooks = Hooks(recipe).install()
    try:
        trainer = L.Trainer(precision=32, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
    finally:
        hooks.remove()
    assert trainer.precision == "32-true" and hooks.loop.amp.own == "off" and hooks.loop.amp.applied == "off"
