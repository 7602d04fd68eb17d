"""A trial's worker command and environment (autotune.machine._launch): pure."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest

import autotune
from autotune import Config
from autotune.core._events import FD_ENV
from autotune.machine._launch import TRIAL_TAG_ENV, Budget, TrialSpec, build_command

PACKAGE_ROOT = str(Path(autotune.__file__).resolve().parent.parent)
#: Short enough for ~4 s per trial (2.5 s of it importing torch in the worker); the
#: ceilings have their own tests.
FAST = Budget(warmup_s=0.2, window_s=0.3, windows=2, ceiling_windows=0)


def build(
    config: Config = Config(),
    device: str = "cpu",
    environ: dict | None = None,  # noqa: B008
    fd: int = 7,
    tag: str = "123-abc",
):
    spec = TrialSpec(target="train.py:train", config=config, device=device, budget=FAST, seed=3)
    argv, env = build_command(spec, fd, environ if environ is not None else {}, python="/py", tag=tag)
    assert argv[:3] == ["/py", "-m", "autotune.worker._trial_main"] and len(argv) == 4
    return json.loads(argv[3]), env


def test_build_command_argv_and_payload() -> None:
    payload, env = build(Config(num_workers=2, batch_size="2x", amp=None))
    assert payload == {
        "target": "train.py:train",
        "config": {"batch_size": "2x", "num_workers": 2},  # only the values set
        "device": "cpu",
        "budget": {
            "warmup_steps": 5,
            "warmup_s": 0.2,
            "window_s": 0.3,
            "windows": 2,
            "min_window_steps": 2,
            "ceiling_windows": 0,
            "learn_windows": 0,
            "learn_to": 0.0,
            "whole_s": 0.0,
            "whole": False,
            "marks": [],
            "step_samples": 0.0,
        },  # the deadline is the parent's
        "seed": 3,
        "known_ceilings": {},
    }


def test_build_command_baseline_config_is_empty() -> None:
    payload, _ = build(Config())
    assert payload["config"] == {}


def test_build_command_environment() -> None:
    parent = {"HOME": "/home/u", "PYTHONPATH": "/site/extra"}
    _, env = build(environ=parent, fd=11)
    assert env[FD_ENV] == "11"
    assert env["PYTHONUNBUFFERED"] == "1"
    # the package first (the worker runs `-m autotune.worker._trial_main`), then the parent's path
    assert env["PYTHONPATH"] == os.pathsep.join([PACKAGE_ROOT, "/site/extra"])
    assert env["HOME"] == "/home/u"
    assert "CUDA_VISIBLE_DEVICES" not in env  # a CPU trial changes nothing about GPUs


def test_build_command_without_a_parent_pythonpath() -> None:
    _, env = build(environ={})
    assert env["PYTHONPATH"] == PACKAGE_ROOT


def test_build_command_is_pure() -> None:
    parent = {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "3,5"}
    snapshot = dict(parent)
    config = Config(cuda_alloc_conf="expandable_segments:True", num_workers=1)
    first = build(config, "cuda:1", parent)
    second = build(config, "cuda:1", parent)
    assert parent == snapshot  # the caller's environment is not touched
    assert first == second
    assert FD_ENV not in os.environ and TRIAL_TAG_ENV not in os.environ  # nor ours


def test_build_command_tags_the_worker() -> None:
    _, env = build(tag="4242-0123456789ab")
    assert env[TRIAL_TAG_ENV] == "4242-0123456789ab"
    # a tuner started inside another's trial tags its own workers with its own tag
    _, env = build(environ={TRIAL_TAG_ENV: "outer"}, tag="inner")
    assert env[TRIAL_TAG_ENV] == "inner"


@pytest.mark.parametrize(
    ("device", "parent", "visible"),
    [
        ("cuda:1", None, "1"),  # no mask: physical index 1
        ("cuda", None, "0"),
        ("cuda:0", "3,5", "3"),  # the parent's mask renumbers: cuda:0 is GPU 3
        ("cuda:1", "3,5", "5"),  # cuda:1 is GPU 5
        ("cuda", "3,5", "3"),  # bare "cuda" is cuda:0
        ("cuda:1", "GPU-8f1e0b2a-aaaa,GPU-0c3d9e7f-bbbb", "GPU-0c3d9e7f-bbbb"),  # by UUID
        ("cuda:1", "MIG-1111,MIG-2222", "MIG-2222"),
    ],
)
def test_build_command_maps_the_cuda_device(device: str, parent: str | None, visible: str) -> None:
    environ = {} if parent is None else {"CUDA_VISIBLE_DEVICES": parent}
    payload, env = build(device=device, environ=environ)
    assert env["CUDA_VISIBLE_DEVICES"] == visible
    assert payload["device"] == "cuda:0"  # the worker sees only its own GPU


def test_build_command_keeps_the_parents_mask_for_cpu_trials() -> None:
    payload, env = build(device="cpu", environ={"CUDA_VISIBLE_DEVICES": "3,5"})
    assert env["CUDA_VISIBLE_DEVICES"] == "3,5"
    assert payload["device"] == "cpu"


@pytest.mark.parametrize(
    ("value", "parent", "expected"),
    [
        ("expandable_segments:True", {}, "expandable_segments:True"),
        # the knob's value replaces whatever the parent had
        ("expandable_segments:True", {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"}, "expandable_segments:True"),
        # "default" and unset leave the variable as it is
        ("default", {}, None),
        (None, {}, None),
        ("default", {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"}, "max_split_size_mb:64"),
    ],
)
def test_build_command_cuda_alloc_conf(value, parent: dict, expected) -> None:
    payload, env = build(Config(cuda_alloc_conf=value), environ=parent)
    assert env.get("PYTORCH_CUDA_ALLOC_CONF") == expected
    if value is None:
        assert "cuda_alloc_conf" not in payload["config"]


def test_python_is_this_interpreter() -> None:
    spec = TrialSpec(target="x.py:f", config=Config())
    argv, _ = build_command(spec, 3, {}, tag="t")
    assert argv[0] == sys.executable


def test_each_study_compiles_into_its_own_inductor_cache_unless_the_user_names_one() -> None:
    spec = TrialSpec(target="train.py", config=Config(), budget=FAST, compile_cache="/st/inductor/train")
    _, env = build_command(spec, 7, {}, python="/py", tag="t")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/st/inductor/train"
    _, env = build_command(spec, 7, {"TORCHINDUCTOR_CACHE_DIR": "/mine"}, python="/py", tag="t")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/mine"
    _, env = build_command(dataclasses.replace(spec, compile_cache=None), 7, {}, python="/py", tag="t")
    assert "TORCHINDUCTOR_CACHE_DIR" not in env
