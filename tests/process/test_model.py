"""run.model and the model-side knobs in real trials: channels_last, compile."""

from __future__ import annotations

from pathlib import Path

import torch

from autotune import Config, Outcome, Recipe
from autotune.machine._launch import Budget, TrialSpec
from autotune.tuner._watch import run_trial
from helpers import FIXTURES

FIXTURE = FIXTURES / "model_train.py"
FAST = Budget(warmup_s=0.2, window_s=0.3, windows=2, ceiling_windows=0)


def trial(tmp_path: Path, config: Config, func: str = "train", budget: Budget = FAST, warm=None):
    events: list[dict] = []
    result = run_trial(
        TrialSpec(f"{FIXTURE}:{func}", config, "cpu", budget),
        tmp_path / f"{func}.log",
        on_event=events.append,
        warm=warm,
    )
    return result, events


def formats(result) -> str:
    return next(line for line in result.log_path.read_text().splitlines() if line.startswith("formats: "))


def test_channels_last_puts_the_weights_and_the_images_in_nhwc(tmp_path: Path, warm) -> None:
    result, _ = trial(tmp_path, Config(channels_last=True), warm=warm)
    assert result.outcome is Outcome.COMPLETE, result.reason
    assert formats(result) == "formats: weights channels_last=True input channels_last=True compiled=False"
    assert result.resolved["channels_last"] is True and result.resolved["compile"] == "off"
    plain, _ = trial(tmp_path, Config(), warm=warm)
    assert formats(plain) == "formats: weights channels_last=False input channels_last=False compiled=False"


def test_a_compiled_model_keeps_compiling_out_of_the_windows_and_reports_its_cost(tmp_path: Path, warm) -> None:
    # A stall limit of 1 s: compiling a forward and a backward takes longer than that anywhere,
    # and the trial must not count it as a hang (the runner allows --compile-timeout for it).
    budget = Budget(warmup_s=0.2, window_s=0.3, windows=2, ceiling_windows=0, stall_s=1)
    result, events = trial(tmp_path, Config(compile="default"), budget=budget, warm=warm)
    assert result.outcome is Outcome.COMPLETE, result.reason
    assert formats(result).endswith("compiled=True")
    kinds = [e["event"] for e in events]
    assert kinds.index("resolved") < kinds.index("compiling") < kinds.index("warmup")
    warmup = events[kinds.index("warmup")]
    # its cost: the warmup's steps past as many median ones, all of it before the windows
    assert 1 < result.metrics["compile_s"] <= warmup["seconds"]
    assert len(result.windows) == 2 and all(w["seconds"] < 5 for w in result.windows)
    assert "s of it compiling" in result.log_path.read_text()


def test_a_compile_says_whether_it_found_the_studys_inductor_cache(tmp_path: Path) -> None:
    # The study's own cache (TrialSpec.compile_cache): the first run builds the graphs (cold, as
    # production's first run on a machine), the second finds them (warm) and compiles faster.
    budget = Budget(warmup_s=0.2, window_s=0.3, windows=2, ceiling_windows=0, stall_s=1)
    spec = TrialSpec(
        f"{FIXTURE}:train", Config(compile="default"), "cpu", budget, compile_cache=str(tmp_path / "inductor")
    )
    cold, warm = (run_trial(spec, tmp_path / f"{i}.log") for i in range(2))
    assert cold.outcome is warm.outcome is Outcome.COMPLETE, (cold.reason, warm.reason)
    assert (cold.metrics["compile_warm"], warm.metrics["compile_warm"]) == (0.0, 1.0)
    assert warm.metrics["compile_s"] < cold.metrics["compile_s"]


def test_a_compile_past_its_timeout_is_killed_and_says_which_limit(tmp_path: Path, warm) -> None:
    # The compile above takes over 1 s (it asserts so); here 1 s is all it may take. The
    # start-up's 60 s, which a compile used to get, would have let it finish.
    budget = Budget(warmup_s=0.2, window_s=0.3, windows=2, ceiling_windows=0, stall_s=1, compile_s=1)
    result, events = trial(tmp_path, Config(compile="default"), budget=budget, warm=warm)
    assert result.outcome is Outcome.TIMEOUT, result.reason
    assert result.reason.startswith(
        "stalled: no step finished for 1 s while torch.compile compiled the model (--compile-timeout)"
    ), result.reason
    assert "compiling" in [e["event"] for e in events] and not result.windows
    assert result.metrics["compile_unfinished_s"] >= 1  # what the study holds compile on


def test_a_function_without_run_model_leaves_the_model_knobs_inactive(tmp_path: Path, warm) -> None:
    result, _ = trial(tmp_path, Config(channels_last=True, compile="default"), func="train_without_model", warm=warm)
    assert result.outcome is Outcome.COMPLETE, result.reason
    assert "channels_last" not in result.resolved and "compile" not in result.resolved
    assert "compiling" not in result.log_path.read_text()


def test_a_recipe_applies_the_model_knobs_in_production() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("model_train", FIXTURE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    recipe = Recipe(Config(channels_last=True), "cpu", quiet=True)
    model = recipe.model(module.Net())
    assert model.conv.weight.is_contiguous(memory_format=torch.channels_last)
    loader = recipe.dataloader(module._data(), batch_size=4)
    x, y = next(iter(recipe.batches(loader)))
    assert x.is_contiguous(memory_format=torch.channels_last) and y.dim() == 1  # labels as they were
    assert recipe.resolved()["channels_last"] is True
