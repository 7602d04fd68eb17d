"""Frameworks that own knobs (autotune.training._frameworks): which one a script trained through, and the
winner in its own settings."""

from __future__ import annotations

from autotune.training._frameworks import LIGHTNING, TRANSFORMERS, detect, own_settings


def test_the_framework_is_read_from_what_the_script_imported() -> None:
    assert detect({"torch": 1, "transformers": 1, "transformers.trainer": 1}) == TRANSFORMERS
    assert detect({"transformers": 1}) is None  # a tokenizer alone is no Trainer
    assert detect({"lightning": 1}) == detect({"pytorch_lightning": 1}) == LIGHTNING
    assert detect({"torch": 1}) is None


def test_only_what_the_winner_changed_is_said_in_the_frameworks_own_words() -> None:
    base = {"batch_size": 16, "num_workers": 0, "fused_optimizer": True, "lr_scaling": "none"}
    win = {**base, "num_workers": 4, "batch_size": 32, "lr_scaling": "sqrt", "fused_optimizer": False}
    assert own_settings(TRANSFORMERS, win, base) == (
        'in TrainingArguments: per_device_train_batch_size=32, dataloader_num_workers=4, optim="adamw_torch" '
        "(and the learning rate scaled sqrt with the batch size)"
    )
    assert own_settings(LIGHTNING, {**base, "tf32": True}, base) == (
        'in your Lightning script: torch.set_float32_matmul_precision("high") before Trainer.fit'
    )
    assert own_settings(LIGHTNING, base, base) is None  # the baseline won: nothing to write
    assert own_settings(None, win, base) is None
