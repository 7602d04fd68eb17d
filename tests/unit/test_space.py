"""Search spaces: loading real YAML files, their errors, restriction to a machine, sampling."""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path

import pytest

import autotune.tuner._space as space_mod
from autotune import KNOBS, Config, ConfigError
from autotune.machine._probe import Fingerprint, usable_cpus
from autotune.tuner._space import SPACES_DIR, Choice, Fixed, IntRange, Space, load_space, space_from_mapping


def write(tmp_path: Path, text: str, name: str = "space.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


# -- good files ---------------------------------------------------------------------


def test_load_a_space_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        knobs:
          num_workers: {low: 0, high: 8, step: 2}
          pin_memory: [false, true]
          prefetch: thread
          batch_size: [1x, 2x, 64]
          amp: ["off", bf16]
          prefetch_factor: {low: 1, high: 16, log: true}
        """,
    )
    space = load_space(str(path))
    assert space.name == str(path)
    # registry order, whatever the file's order
    assert list(space.domains) == ["batch_size", "num_workers", "pin_memory", "prefetch_factor", "prefetch", "amp"]
    assert space.domains == {
        "batch_size": Choice(("1x", "2x", 64)),
        "num_workers": IntRange(0, 8, False, 2),
        "pin_memory": Choice((False, True)),
        "prefetch_factor": IntRange(1, 16, True, 1),
        "prefetch": Fixed("thread"),
        "amp": Choice(("off", "bf16")),
    }


def test_a_one_element_list_is_a_fixed_value(tmp_path: Path) -> None:
    space = load_space(str(write(tmp_path, "knobs: {num_workers: [3]}")))
    assert space.domains == {"num_workers": Fixed(3)}


@pytest.mark.parametrize("name", sorted(p.stem for p in SPACES_DIR.glob("*.yaml")))
def test_every_shipped_space_loads_by_name(name: str) -> None:
    space = load_space(name)
    assert space.name == str(SPACES_DIR / f"{name}.yaml")
    assert space.domains
    assert set(space.domains) <= set(KNOBS)


def test_the_named_shipped_spaces_exist() -> None:
    assert {"default", "loader", "precision"} <= {p.stem for p in SPACES_DIR.glob("*.yaml")}


def test_unknown_space_name_lists_the_shipped_ones() -> None:
    with pytest.raises(ConfigError, match=r"--space 'nope': no such file .*shipped: .*default"):
        load_space("nope")


# -- ranges relative to the CPU count ------------------------------------------------


@pytest.mark.parametrize(
    ("high", "factor"),
    [("auto", 1.0), ("1x", 1.0), ("4x", 4.0), ("0.5x", 0.5)],
)
def test_num_workers_high_relative_to_usable_cpus(tmp_path: Path, high: str, factor: float) -> None:
    path = write(tmp_path, f"knobs: {{num_workers: {{low: 0, high: {high}}}}}")
    expected = max(1, math.floor(factor * usable_cpus()))
    assert load_space(str(path)).domains["num_workers"] == IntRange(0, expected, auto=high == "auto")


@pytest.mark.parametrize(
    ("cpus", "high", "expected"),
    [
        (6, "auto", 6),
        (6, "4x", 24),  # 4 * 6
        (6, "0.5x", 3),  # floor(0.5 * 6)
        (5, "0.5x", 2),  # floor(2.5)
        (6, "0.1x", 1),  # floor(0.6) = 0, but never below 1
        (1, "auto", 1),
    ],
)
def test_relative_range_arithmetic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpus: int, high: str, expected: int
) -> None:
    monkeypatch.setattr(space_mod, "usable_cpus", lambda: cpus)
    path = write(tmp_path, f"knobs: {{num_workers: {{low: 0, high: {high}}}}}")
    assert load_space(str(path)).domains["num_workers"].high == expected


def test_low_above_auto_is_low_greater_than_high(tmp_path: Path) -> None:
    low = usable_cpus() + 1
    path = write(tmp_path, f"knobs: {{num_workers: {{low: {low}, high: auto}}}}")
    with pytest.raises(ConfigError, match=re.escape(f"(low={low}, high={usable_cpus()})")) as info:
        load_space(str(path))
    assert_names(info.value, path, "knobs.num_workers")


# -- malformed files -----------------------------------------------------------------


def assert_names(exc: BaseException, path: Path, key: str) -> None:
    message = str(exc)
    assert str(path) in message, message
    assert key in message, message


@pytest.mark.parametrize(
    ("text", "key", "what"),
    [
        # unknown knob (a typo): the message lists the known ones
        ("knobs: {num_worker: 4}", "knobs.num_worker", r"unknown knob; known: batch_size, num_workers"),
        # unknown top-level key
        ("knobs: {num_workers: 4}\ntrials: 30\n", "trials", r"trials: unknown key; allowed: knobs"),
        # wrong types
        ("knobs: {num_workers: four}", "knobs.num_workers", r"'four' is not allowed; allowed: an integer >= 0"),
        ("knobs: {num_workers: true}", "knobs.num_workers", r"True is not allowed"),
        ("knobs: {pin_memory: 1}", "knobs.pin_memory", r"1 is not allowed; allowed: true or false"),
        ("knobs: {pin_memory: [false, 1]}", "knobs.pin_memory", r"1 is not allowed"),
        ("knobs: {num_workers: }", "knobs.num_workers", r"None is not allowed"),
        (
            "knobs: {prefetch: [none, stream]}",
            "knobs.prefetch",
            r"'stream' is not allowed; allowed: one of none, thread, cuda_stream",
        ),
        # YAML reads an unquoted off as False
        ("knobs: {amp: [off, bf16]}", "knobs.amp", r"False is not allowed.*quote it"),
        ("knobs: {batch_size: [1x, 0x]}", "knobs.batch_size", r"'0x' is not allowed"),
        # a range on a knob that is not an integer
        ("knobs: {pin_memory: {low: 0, high: 1}}", "knobs.pin_memory", r"a range \{low, high\} needs an integer knob"),
        # low > high: Optuna's wording, with both values
        (
            "knobs: {num_workers: {low: 8, high: 2}}",
            "knobs.num_workers",
            r"low <= high must hold, but got \(low=8, high=2\)",
        ),
        ("knobs: {num_workers: {low: -1, high: 2}}", "knobs.num_workers", r"-1 is not allowed"),
        # empty choice list
        ("knobs: {prefetch: []}", "knobs.prefetch", r"empty choice list"),
        # duplicate choices
        ("knobs: {prefetch: [none, thread, none]}", "knobs.prefetch", r"duplicate choices"),
        ("knobs: {num_workers: [0, 2, 2]}", "knobs.num_workers", r"duplicate choices"),
        # bad range keys
        (
            "knobs: {num_workers: {low: 0, hi: 4}}",
            "knobs.num_workers",
            r"a range takes keys low, high, log, step \(low and high required\)",
        ),
        ("knobs: {num_workers: {low: 0}}", "knobs.num_workers", r"low and high required"),
        ("knobs: {num_workers: {low: 0, high: 4, steps: 2}}", "knobs.num_workers", r"a range takes keys"),
        (
            "knobs: {num_workers: {low: 0, high: 4, step: 0}}",
            "knobs.num_workers.step",
            r"must be an integer >= 1; got 0",
        ),
        ("knobs: {num_workers: {low: 0, high: 4, step: true}}", "knobs.num_workers.step", r"must be an integer >= 1"),
        ("knobs: {num_workers: {low: 0, high: 4, log: yes please}}", "knobs.num_workers.log", r"must be true or false"),
        # log with a step, or from 0 (Optuna's IntDistribution refuses both)
        (
            "knobs: {prefetch_factor: {low: 1, high: 8, log: true, step: 2}}",
            "knobs.prefetch_factor",
            r"log=true needs step=1 and low >= 1; got \(low=1, step=2\)",
        ),
        (
            "knobs: {num_workers: {low: 0, high: 8, log: true}}",
            "knobs.num_workers",
            r"log=true needs step=1 and low >= 1; got \(low=0, step=1\)",
        ),
        # relative range ends are for num_workers (relative to the CPUs) only
        (
            "knobs: {prefetch_factor: {low: 1, high: auto}}",
            "knobs.prefetch_factor",
            r"'auto' is not allowed as a range end; allowed: integers$",
        ),
        (
            "knobs: {prefetch_factor: {low: 1, high: 4x}}",
            "knobs.prefetch_factor",
            r"'4x' is not allowed as a range end",
        ),
        ("knobs: {batch_size: {low: 1x, high: 4x}}", "knobs.batch_size", r"'1x' is not allowed as a range end"),
        (
            "knobs: {num_workers: {low: 0, high: lots}}",
            "knobs.num_workers",
            r"'lots' is not allowed as a range end; allowed: integers, 'auto' or 'Nx'",
        ),
        # no knobs at all
        ("knobs: {}", "knobs", r"must map knob names to values"),
        ("knobs: [num_workers]", "knobs", r"must map knob names to values"),
    ],
)
def test_malformed_space_names_file_and_key(tmp_path: Path, text: str, key: str, what: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=what) as info:
        load_space(str(path))
    assert_names(info.value, path, key)
    assert str(info.value).startswith(f"{path}: ")


@pytest.mark.parametrize("text", ["- num_workers\n- amp\n", "num_workers: 4\n", "42\n", ""])
def test_not_a_mapping_with_knobs(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=r"a space file is a mapping with the key 'knobs'") as info:
        load_space(str(path))
    assert str(path) in str(info.value)


def test_invalid_yaml_and_missing_file(tmp_path: Path) -> None:
    path = write(tmp_path, "knobs: {num_workers: [1, 2\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}: not valid YAML")):
        load_space(str(path))
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ConfigError, match=re.escape(f"{missing}: cannot read")):
        load_space(str(missing))


def test_space_from_mapping_uses_the_given_location() -> None:
    with pytest.raises(ConfigError, match=r"^here\.yaml: knobs\.tf33: unknown knob"):
        space_from_mapping({"knobs": {"tf33": True}}, "here.yaml")


# -- restriction to what this machine can do --------------------------------------------


def cpu_only() -> Fingerprint:
    """A machine without CUDA (what probe() gives on a CPU-only host)."""
    why = "torch.cuda.is_available() is False"
    return Fingerprint(
        host="h",
        platform="Linux x86_64",
        python="3.11",
        torch="2.13.0",
        cpus=4,
        ram_total_gib=16.0,
        ram_available_gib=8.0,
        device="cpu",
        gpu=None,
        gpu_memory_gib=None,
        driver=None,
        nvml=False,
        pinned_limit="unlimited",
        capabilities={
            "cuda": False,
            "cudnn": False,
            "bf16": True,
            "fused_optimizer": True,
            "compile": True,
            "glibc_malloc": True,
        },
        reasons={"cuda": f"needs CUDA; {why}", "cudnn": f"needs cuDNN on a CUDA device; {why}"},
        date="2026-11-22",
    )


def test_restrict_without_cuda() -> None:
    space = Space(
        "s",
        {
            "num_workers": IntRange(0, 4),
            "pin_memory": Choice((False, True)),
            "prefetch": Choice(("none", "thread", "cuda_stream")),
            "amp": Choice(("off", "bf16", "fp16")),
            "cudnn_benchmark": Fixed(True),
            "cuda_alloc_conf": Choice(("default", "expandable_segments:True")),
        },
    )
    restricted, notes = space.restrict(cpu_only())
    assert restricted.domains == {
        "num_workers": IntRange(0, 4),  # needs nothing: untouched
        "pin_memory": Fixed(False),  # two values less one
        "prefetch": Choice(("none", "thread")),
        "amp": Choice(("off", "bf16")),
        # cudnn_benchmark: its only value needs cuDNN, so the knob is gone (baseline kept)
        "cuda_alloc_conf": Fixed("default"),
    }
    assert notes == [
        "pin_memory: dropped true (needs CUDA; torch.cuda.is_available() is False)",
        "prefetch: dropped 'cuda_stream' (needs CUDA; torch.cuda.is_available() is False)",
        "amp: dropped 'fp16' (needs CUDA; torch.cuda.is_available() is False)",
        "cudnn_benchmark: dropped true (needs cuDNN on a CUDA device; torch.cuda.is_available() is False)",
        "cuda_alloc_conf: dropped 'expandable_segments:True' (needs CUDA; torch.cuda.is_available() is False)",
    ]
    assert restricted.name == "s"


def test_restrict_with_every_capability_changes_nothing() -> None:
    fp = cpu_only()
    full = Fingerprint(**{**fp.__dict__, "capabilities": {c: True for c in fp.capabilities}, "reasons": {}})
    space = load_space("default")
    assert space.restrict(full) == (space, [])


def test_restrict_the_default_space_keeps_every_knob_that_runs_on_cpu() -> None:
    restricted, notes = load_space("default").restrict(cpu_only())
    dropped = {line.split(":")[0] for line in notes}
    assert {"pin_memory", "prefetch", "amp", "cudnn_benchmark", "tf32"} <= dropped
    for name, domain in restricted.domains.items():
        for value in domain.values():
            need = KNOBS[name].needs.get(value) if isinstance(value, (bool, str)) else None
            assert need is None or cpu_only().capabilities[need.value], (name, value)


# -- sampling -----------------------------------------------------------------------------


def test_sample_respects_conditional_knobs(tmp_path: Path) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    path = write(
        tmp_path,
        """\
        knobs:
          batch_size: [1x, 2x, 4x]
          lr_scaling: [none, linear, sqrt]
          num_workers: {low: 0, high: 2}
          persistent_workers: [false, true]
          prefetch_factor: {low: 1, high: 4}
          amp: ["off", bf16]
        """,
    )
    space = load_space(str(path))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = {"workers": 0, "no_workers": 0, "scaled": 0, "unscaled": 0}
    for _ in range(120):
        trial = study.ask()
        config = space.sample(trial)
        assert isinstance(config, Config)
        assert set(trial.params) == set(config.set_values())
        if config.num_workers == 0:
            seen["no_workers"] += 1
            assert config.prefetch_factor is None and config.persistent_workers is None
        else:
            seen["workers"] += 1
            assert 1 <= config.prefetch_factor <= 4
            assert config.persistent_workers in (False, True)
        if config.batch_size == "1x":
            seen["unscaled"] += 1
            assert config.lr_scaling is None
        else:
            seen["scaled"] += 1
            assert config.lr_scaling in ("none", "linear", "sqrt")
        assert config.amp in ("off", "bf16")
        study.tell(trial, 1.0)
    # every branch was really taken (P(a branch is never seen in 120 draws) < 1e-20)
    assert all(seen.values()), seen


def test_sample_fixed_values_are_not_suggested() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = Space("s", {"num_workers": Fixed(2), "prefetch_factor": Fixed(3), "amp": Fixed("bf16")})
    trial = optuna.create_study().ask()
    assert space.sample(trial) == Config(num_workers=2, prefetch_factor=3, amp="bf16")
    assert trial.params == {}


def test_sample_keeps_dependants_when_the_users_code_decides_num_workers() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # num_workers is not in the space: the user's code decides it, so its dependants are
    # sampled (Run.dataloader drops them if that code uses no workers) ...
    space = Space("s", {"persistent_workers": Choice((False, True)), "prefetch_factor": IntRange(1, 8)})
    trial = optuna.create_study().ask()
    config = space.sample(trial)
    assert set(trial.params) == {"persistent_workers", "prefetch_factor"}
    assert config.num_workers is None and config.prefetch_factor in range(1, 9)
    # ... but a num_workers fixed at 0 switches them off.
    fixed = Space("s", {"num_workers": Fixed(0), "persistent_workers": Choice((False, True))})
    trial = optuna.create_study().ask()
    assert fixed.sample(trial) == Config(num_workers=0)
    assert trial.params == {}


@pytest.mark.parametrize(
    "held, expected_params",
    [
        # held at a trial's values: not sampled; the conditions follow the held values
        ({"num_workers": 0, "prefetch": "thread"}, {"amp"}),
        ({"num_workers": 3, "prefetch_factor": 5, "prefetch": "none"}, {"amp"}),
        # held at the user's own (None): its dependants are still sampled, as with no num_workers
        ({"num_workers": None, "prefetch": None}, {"prefetch_factor", "amp"}),
    ],
)
def test_sample_holds_knobs_without_suggesting_them(held: dict, expected_params: set) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = Space(
        "s",
        {
            "num_workers": IntRange(0, 4),
            "prefetch_factor": IntRange(1, 8),
            "prefetch": Choice(("none", "thread")),
            "amp": Choice(("off", "bf16")),
        },
    )
    trial = optuna.create_study().ask()
    config = space.sample(trial, held)
    assert set(trial.params) == expected_params
    for name, value in held.items():
        assert getattr(config, name) == value
    if held["num_workers"] == 0:
        assert config.prefetch_factor is None  # inactive without workers, held or not


def test_an_enqueued_trial_keeps_its_fixed_values_over_holds() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = Space(
        "s", {"num_workers": IntRange(0, 4), "prefetch_factor": IntRange(1, 8), "amp": Choice(("off", "bf16"))}
    )
    study = optuna.create_study()
    # whoever enqueued it (a climb, a test's fault study) asked for num_workers=3: a hold of
    # num_workers at the code's own does not run 0 in its place; amp, not enqueued, stays held
    study.enqueue_trial({"num_workers": 3})
    trial = study.ask()
    config = space.sample(trial, {"num_workers": None, "amp": "off"})
    assert config.num_workers == 3 and config.amp == "off"
    assert set(trial.params) == {"num_workers", "prefetch_factor"}
    # a trial asked without fixed values is held as before
    trial = study.ask()
    assert space.sample(trial, {"num_workers": None, "amp": "off"}).num_workers is None
    assert set(trial.params) == {"prefetch_factor"}
