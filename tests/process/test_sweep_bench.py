"""``benchmarks/sweep.py``: the plain loop trains what ``io_train.py`` trains, an export reads in the
plain loop's terms, and the quick mode's sweep runs the real plain loop (a process, DataLoader
workers that wait on their reads) to a figure the reads allow."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench_modules import BENCH, load_module

ROOT = Path(__file__).resolve().parents[2]


sweep = load_module("sweep_bench", BENCH / "sweep.py")
plain = load_module("plain_sweep_bench", BENCH / "_plain_sweep.py")
io_loop = load_module("io_loop_bench", BENCH / "_io_loop.py")
io_train = load_module("io_train_fixture", ROOT / "tests" / "fixtures" / "io_train.py")


class _Built(Exception):
    """Raised where the fixture would start training: everything it builds is built."""


class _Recording:
    """What ``io_train._train`` asks of its run handle, recorded instead of acted on."""

    def __init__(self) -> None:
        import torch

        self.device = torch.device("cpu")
        self.built: dict = {}

    def dataloader(self, dataset, **kwargs):
        self.built.update(dataset=dataset, loader=kwargs)

    def optimizer(self, cls, params, lr):
        self.built.update(optimizer=cls, lr=lr, shapes=[tuple(p.shape) for p in params])

    def batches(self, loader):
        raise _Built


def test_the_plain_loop_trains_what_the_fixture_trains() -> None:
    run = _Recording()
    with pytest.raises(_Built):
        io_train.train(run)
    built = run.built
    # the dataset as the plain loop makes it (SlowReads(): 4,096 items, 1 ms a read)
    default = io_train.SlowReads()
    assert type(built["dataset"]).__name__ == "SlowReads"
    assert (len(built["dataset"]), built["dataset"].wait_s) == (len(default), default.wait_s) == (4096, 0.001)
    assert built["loader"] == {"batch_size": io_loop.CODE_BATCH, **io_loop.LOADER_FIXED}
    assert built["optimizer"] is io_loop.OPTIMIZER and built["lr"] == io_loop.CODE_LR
    assert built["shapes"] == [io_loop.MODEL_SHAPE[::-1], (io_loop.MODEL_SHAPE[1],)]  # Linear's weight, bias
    assert (plain.CODE_BATCH, plain.CODE_LR) == (io_loop.CODE_BATCH, io_loop.CODE_LR)


def test_an_export_in_the_plain_loops_terms() -> None:
    export = {
        "dataloader": {
            "batch_size": 64,
            "num_workers": 40,
            "pin_memory": False,
            "persistent_workers": True,
            "prefetch_factor": 3,
            "in_order": False,
        },
        "transfer": {"prefetch": "thread"},
        "optimizer": {"lr_scaling": "linear", "fused_optimizer": False, "base_batch_size": 16},
        "precision": {"amp": "off"},
        "backends": {"malloc_retain": True},
        "model": {"compile": "default"},
        "measured_on": {"device": "cpu", "cpus": 2},
    }
    terms = plain.plain_terms(export)
    assert terms["loader"] == export["dataloader"]
    assert terms["lr"] == pytest.approx(0.4)  # 0.1 x 64 / 16
    assert terms["extras"] == {"prefetch": "thread", "malloc_retain": True}  # (defaults left out)
    assert terms["untranslated"] == ["compile=default"]
    export["optimizer"]["lr_scaling"] = "sqrt"
    assert plain.plain_terms(export)["lr"] == pytest.approx(0.2)  # 0.1 x sqrt(4)
    del export["dataloader"]["batch_size"]  # the code's own batch: no scaling
    assert plain.plain_terms(export)["lr"] == pytest.approx(0.1)


def test_a_study_without_an_export_leaves_the_code_as_written() -> None:
    assert plain.winner_of(None) == {
        "loader": {"batch_size": 16},
        "lr": 0.1,
        "extras": {},
        "untranslated": [],
        "no_export": True,
    }
    text = "# autotune: a header\ndataloader: {batch_size: 64, num_workers: 1}\noptimizer: {lr_scaling: none}\n"
    assert plain.winner_of(text)["loader"] == {"batch_size": 64, "num_workers": 1}


def test_the_loop_argv_carries_every_setting() -> None:
    settings = {
        "loader": {"batch_size": 32},
        "lr": 0.2,
        "extras": {"amp": "bf16", "fused_optimizer": True, "prefetch": "thread", "malloc_retain": True},
    }
    argv = plain.loop_argv(settings, 1024, 256)
    assert argv[argv.index("--lr") + 1] == "0.2" and argv[argv.index("--samples") + 1] == "1024"
    assert argv[argv.index("--amp") + 1] == "bf16" and argv[argv.index("--prefetch") + 1] == "thread"
    assert {"--fused", "--malloc-retain"} <= set(argv)
    assert not {"--amp", "--fused", "--prefetch", "--malloc-retain"} & set(plain.loop_argv(plain.point(64, 4, 2), 1, 1))


def _runs(*rates: float) -> list[dict]:
    return [{"samples_per_s": r, "load_before": 0.5} for r in rates]


def test_the_best_point_is_the_best_median_and_the_share_is_of_medians() -> None:
    swept = [
        {**plain.point(64, 32, 2), "runs": _runs(100, 100, 300)},  # one lucky run: median 100
        {**plain.point(128, 32, 2), "runs": _runs(150, 160, 170)},
    ]
    assert plain.best_point(swept)["loader"]["batch_size"] == 128
    turns = {sweep.BEST: _runs(200, 100, 200), sweep.WINNER: _runs(190, 100, 180)}
    got = sweep.share(turns)
    assert got["share"] == pytest.approx(180 / 200)
    assert got["per_turn_geomean"] == pytest.approx((0.95 * 1.0 * 0.9) ** (1 / 3))


def test_the_quick_sweep_measures_the_plain_loop_within_what_its_reads_allow() -> None:
    q = sweep.QUICK
    points = plain.grid(q["batches"], q["workers"], q["prefetch_factors"])
    swept = plain.sweep(points, q["repeats"], q["samples"], q["warmup_samples"])
    assert len(swept) == len(points) == 1
    (run,) = swept[0]["runs"]
    batch, workers = q["batches"][0], q["workers"][0]
    assert run["samples"] == q["samples"] and run["batches"] == q["samples"] // batch
    # each worker reads its items one after another, 1 ms each: no faster than workers x 1,000 a second
    assert 0 < run["samples_per_s"] <= workers * 1000
    assert run["load_before"] >= 0


def _raw(load: float) -> dict:
    """A run's raw figures, by hand: a two-point sweep, a study, the turns."""
    swept = [
        {**plain.point(64, 32, 2), "runs": _runs(100, 110, 120)},
        {**plain.point(128, 32, 2), "runs": _runs(200, 210, 220)},
    ]
    winner = plain.plain_terms(
        {
            "dataloader": {"batch_size": 128, "num_workers": 24, "persistent_workers": False, "prefetch_factor": 4},
            "optimizer": {"lr_scaling": "none"},
        }
    )
    return {
        "date": "2026-11-29",
        "machine": "a 2-CPU host",
        "commit": "abc1234",
        "autotune_changed": [],
        "cpus": 2,
        "args": {
            "batches": [64, 128],
            "workers": [32],
            "prefetch_factors": [2],
            "repeats": 3,
            "turns": 3,
            "trials": 16,
            "samples": 4096,
            "warmup_samples": 1024,
        },
        "load": {"sweep": [0.5, load], "study": [0.4, 0.6], "turns": [0.5, 0.5]},
        "sweep": swept,
        "sweep_wall_s": 60,
        "study": {
            "name": "sweep-io-x",
            "wall_s": 300,
            "winner": 7,
            "samples_per_s": 190.0,
            "speedup": 3.1,
            "findings": ["trial 7, 3.10x the baseline"],
            "trials": [{"number": 0, "kind": "baseline", "config": {}, "samples_per_s": 61.0, "outcome": "complete"}],
        },
        "contenders": {sweep.BEST: {k: swept[1][k] for k in ("loader", "lr")}, sweep.WINNER: winner},
        "turns": {sweep.BEST: _runs(200, 220, 210), sweep.WINNER: _runs(180, 200, 190)},
        "share": 190 / 210,
        "per_turn_geomean": 0.9,
        "wall_s": 600,
    }


def test_the_page_says_the_share_and_whether_the_host_was_loaded() -> None:
    quiet = sweep.render(_raw(load=1.5))
    assert "| 128 | 32 | 2 | **210 (200..220)** (best) |" in quiet
    assert "batch 128, 24 workers, not persistent, prefetch_factor 4" in quiet
    assert "**Share: 90%**" in quiet and "goal 95%: NOT met." in quiet
    assert "The host was quiet." in quiet and "Provisional" not in quiet
    loaded = sweep.render(_raw(load=7.0))  # above the 2 CPUs
    assert "**Provisional: the host was loaded**" in loaded and "sweep 0.5 -> 7.0" in loaded
    assert "NOT met (provisional: loaded host)." in loaded


def test_the_command_renders_a_page_from_a_runs_raw_figures(tmp_path) -> None:
    import json
    import os
    import subprocess

    (tmp_path / "raw.json").write_text(json.dumps(_raw(load=7.0)))
    page = tmp_path / "page.md"
    env = {**os.environ, "AUTOTUNE_BENCH_RESULTS": str(page), "MLFLOW_DISABLE_TELEMETRY": "true"}
    subprocess.run(
        [sys.executable, str(BENCH / "sweep.py"), "--from-json", str(tmp_path / "raw.json")],
        env=env,
        check=True,
        cwd=ROOT,
    )
    text = page.read_text()
    assert "## Sweep (2026-11-29)" in text and "**Share: 90%**" in text
    (tmp_path / "raw.json").write_text(json.dumps({**_raw(load=7.0), "started": "2026-11-30 09:15"}))
    subprocess.run(
        [sys.executable, str(BENCH / "sweep.py"), "--from-json", str(tmp_path / "raw.json")],
        env=env,
        check=True,
        cwd=ROOT,
    )
    text = page.read_text()  # a run of its own: a section of its own, after the earlier one
    assert text.index("## Sweep (2026-11-29)") < text.index("## Sweep (2026-11-30 09:15)")


def test_the_thread_prefetch_stops_and_joins_when_the_loop_stops() -> None:
    import threading

    before = threading.active_count()
    batches = io_loop.in_thread(range(100), depth=2)
    assert [next(batches) for _ in range(3)] == [0, 1, 2]
    assert threading.active_count() == before + 1  # its thread, blocked on the full queue
    batches.close()  # (one left blocked aborted the plain loop's process at its exit)
    assert threading.active_count() == before
