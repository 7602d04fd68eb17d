"""Production: a Recipe loaded from an export trains with it, warns about what this machine cannot honour, and reports its speed."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune import Adaptation, Config, Recipe
from autotune.production._export import load, render


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


def test_recipe_warns_when_the_code_batch_size_changed(tmp_path: Path) -> None:
    import torch
    from torch.utils.data import TensorDataset

    path = tmp_path / "best.yaml"
    path.write_text(render({"batch_size": 128, "lr_scaling": "linear"}, 64, []))
    recipe = load(path, device="cpu")
    with pytest.warns(UserWarning, match=r"tuned with batch_size=64 .* now passes 32: it runs at 64"):
        loader = recipe.dataloader(TensorDataset(torch.zeros(256, 2)), batch_size=32)
    assert loader.batch_size == 64  # 2x the code's, as tuned (128 from 64)


def test_a_recipe_gives_each_loader_its_batch_size_as_the_study_did(tmp_path: Path, recwarn) -> None:
    """The study applies ``batch_size: 2x`` to every loader, each from its own; the export writes
    the training loader's in samples. A test loader of 500 runs at 1,000 in both, not at the
    training's 128 (which made ``autotune exec`` of a script with a test pass 1.4x the study's speed)."""
    import torch
    from torch.utils.data import TensorDataset

    path = tmp_path / "best.yaml"
    path.write_text(render({"batch_size": 128, "num_workers": 0}, 64, []))
    recipe = load(path, device="cpu")
    data = TensorDataset(torch.zeros(2048, 2))
    assert recipe.dataloader(data, batch_size=64).batch_size == 128
    assert recipe.dataloader(data, batch_size=500).batch_size == 1000
    assert not [w for w in recwarn if "tuned with" in str(w.message)]  # the evaluation loader is no change


def test_load_drops_what_this_machine_cannot_honour_and_names_it(tmp_path: Path, capsys) -> None:
    """An H100's export on this CPU machine: the CUDA-only values dropped with one warning
    naming each, another warning for the other machine; the rest kept."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks a CPU machine's view of a GPU export")
    path = tmp_path / "best.yaml"
    path.write_text(
        render(
            {
                "batch_size": 64,
                "num_workers": 8,
                "pin_memory": True,
                "prefetch": "cuda_stream",
                "amp": "fp16",
                "cuda_alloc_conf": "expandable_segments:True",
            },
            32,
            ["header"],
            {"device": "cuda:0", "gpu": "NVIDIA H100 80GB HBM3", "cpus": 16, "torch": "2.13.0"},
            "study s: trial 7, 3.10x the baseline",
        )
    )
    with pytest.warns(UserWarning) as caught:
        recipe = load(path)
    said = [str(w.message) for w in caught]
    assert any(
        "cannot honour pin_memory=true (needs CUDA" in m
        and "prefetch=cuda_stream" in m
        and "amp=fp16" in m
        and "cuda_alloc_conf=expandable_segments:True" in m
        for m in said
    ), said
    assert any(
        "was measured on another machine (device cuda:0 there, cpu here; gpu NVIDIA H100 80GB HBM3 "
        "there, none here" in m
        for m in said
    ), said
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
    from autotune.machine._probe import probe

    here = probe("cpu")
    path = tmp_path / "best.yaml"
    path.write_text(
        render({"num_workers": 2}, None, [], {"device": "cpu", "gpu": None, "cpus": here.cpus, "torch": here.torch})
    )
    assert load(path, device="cpu", quiet=True).config == Config(num_workers=2)
    assert not [w for w in recwarn if issubclass(w.category, UserWarning)]


def test_exec_times_its_process_as_a_stopwatch_would() -> None:
    """autotune exec's last line: the process's age to the clock's tick, not to psutil's boot time in
    whole seconds (it read 3.7 s for a run a stopwatch timed at 3.56 s)."""
    import subprocess
    import sys
    import time

    started = time.perf_counter()
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import time; time.sleep(0.3); from autotune.production._exec import process_age; print(process_age())",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    watch = time.perf_counter() - started
    assert 0.3 < float(out) <= watch + 0.011 and watch - float(out) < 0.25  # (after it: the interpreter's exit)


def test_a_recipe_adapts_by_an_adaptation_and_its_old_keywords_still_work_with_a_warning(recwarn) -> None:
    """Issue 60: Recipe's four adaptation keywords went into ``Adaptation``; ``adapt=True`` with them
    builds the same recipe for one release, with a warning that names the new place."""
    grouped = Recipe(Config(), "cpu", quiet=True, adapt=Adaptation(ram_budget=2.0, ram_peak=0.5))
    assert not recwarn.list
    with pytest.warns(DeprecationWarning, match=r"removed in 0\.2\.0: pass adapt=autotune\.Adaptation\(ram_budget="):
        flat = Recipe(Config(), "cpu", quiet=True, adapt=True, ram_budget=2.0, ram_peak=0.5)
    for recipe in (grouped, flat):
        assert recipe.adaptive is not None and recipe.adaptive.budget == 2 * 2**30 and recipe.adaptive.ram_peak == 0.5
    assert Recipe(Config(), "cpu", quiet=True).adaptive is None
    with pytest.raises(TypeError, match="unexpected keyword argument 'ram_budjet'"):
        Recipe(Config(), "cpu", adapt=True, ram_budjet=2.0)
