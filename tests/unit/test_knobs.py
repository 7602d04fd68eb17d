"""The knob registry: defaults, validation, conditions, "Nx" parsing."""

from __future__ import annotations

import re

import pytest

from autotune.core._knobs import KNOBS, Capability, Stage, parse_relative, unknown_knob_message

REQUIRED = [
    "num_workers",
    "pin_memory",
    "persistent_workers",
    "prefetch_factor",
    "prefetch",
    "batch_size",
    "lr_scaling",
    "amp",
    "fused_optimizer",
    "cudnn_benchmark",
]


def test_registry_has_the_required_knobs_and_names_match_keys() -> None:
    assert set(REQUIRED) <= set(KNOBS)
    for name, knob in KNOBS.items():
        assert knob.name == name
        assert isinstance(knob.stage, Stage)


@pytest.mark.parametrize("name", list(KNOBS))
def test_every_knob_validates_its_default(name: str) -> None:
    knob = KNOBS[name]
    assert knob.validate(knob.default) == knob.default


@pytest.mark.parametrize("name", list(KNOBS))
def test_every_capability_value_is_itself_valid(name: str) -> None:
    """A ``needs`` entry for a value the knob cannot take could never be dropped."""
    knob = KNOBS[name]
    for value, cap in knob.needs.items():
        assert knob.validate(value) == value
        assert isinstance(cap, Capability)


@pytest.mark.parametrize("name", list(KNOBS))
def test_conditions_refer_only_to_earlier_knobs(name: str) -> None:
    """Sampling goes in registry order, so a condition's knob must already be drawn."""
    knob = KNOBS[name]
    if knob.active_when is not None:
        order = list(KNOBS)
        assert order.index(knob.active_when[0]) < order.index(name)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("num_workers", 0),
        ("num_workers", 16),
        ("prefetch_factor", 1),
        ("pin_memory", True),
        ("pin_memory", False),
        ("batch_size", 1),
        ("batch_size", 256),
        ("batch_size", "1x"),
        ("batch_size", "8x"),
        ("batch_size", "0.5x"),
        ("batch_size", " 2 x "),  # whitespace around N and x is tolerated
        ("prefetch", "cuda_stream"),
        ("amp", "bf16"),
        ("amp", "off"),
        ("lr_scaling", "sqrt"),
        ("cuda_alloc_conf", "expandable_segments:True"),
    ],
)
def test_validate_accepts(name: str, value: object) -> None:
    assert KNOBS[name].validate(value) == value


@pytest.mark.parametrize(
    ("name", "value", "allowed"),
    [
        # bool is a subclass of int in Python; an int knob must still refuse it
        ("num_workers", True, "an integer >= 0"),
        ("num_workers", False, "an integer >= 0"),
        ("num_workers", -1, "an integer >= 0"),
        ("num_workers", 2.0, "an integer >= 0"),
        ("num_workers", "4", "an integer >= 0"),
        ("num_workers", "2x", "an integer >= 0"),  # "Nx" is for batch knobs only
        ("prefetch_factor", 0, "an integer >= 1"),
        # and a bool knob must refuse the ints YAML would give for 0/1
        ("pin_memory", 1, "true or false"),
        ("pin_memory", 0, "true or false"),
        ("pin_memory", "true", "true or false"),
        ("batch_size", 0, "an integer >= 1 or 'Nx'"),
        ("batch_size", True, "an integer >= 1 or 'Nx'"),
        ("batch_size", "0x", "an integer >= 1 or 'Nx'"),  # 0 times the user's batch is empty
        ("batch_size", "-2x", "an integer >= 1 or 'Nx'"),
        ("batch_size", "4X", "an integer >= 1 or 'Nx'"),
        ("batch_size", "x", "an integer >= 1 or 'Nx'"),
        ("batch_size", 64.0, "an integer >= 1 or 'Nx'"),
        ("prefetch", "cuda", "one of none, thread, cuda_stream"),
        ("amp", "fp8", "one of off, bf16, fp16"),
        ("amp", None, "one of off, bf16, fp16"),
        ("lr_scaling", ["linear"], "one of none, linear, sqrt"),
    ],
)
def test_validate_rejects_and_says_what_is_allowed(name: str, value: object, allowed: str) -> None:
    with pytest.raises(ValueError, match="is not allowed; allowed: " + re.escape(allowed)) as info:
        KNOBS[name].validate(value)
    assert repr(value) in str(info.value)  # the message echoes the value
    assert "YAML reads" not in str(info.value)


@pytest.mark.parametrize(
    ("name", "value"), [("amp", False), ("amp", True), ("prefetch", False), ("cuda_alloc_conf", True)]
)
def test_str_knob_given_a_bool_hints_at_yaml_booleans(name: str, value: bool) -> None:
    # YAML 1.1 (PyYAML) reads `amp: off` as False: the user meant the string.
    with pytest.raises(ValueError, match=r"YAML reads off/on/no/yes as booleans: quote it"):
        KNOBS[name].validate(value)


@pytest.mark.parametrize(
    ("name", "values", "active"),
    [
        # unset: the user's code decides num_workers, so the dependant may apply
        ("persistent_workers", {}, True),
        ("persistent_workers", {"num_workers": None}, True),
        ("persistent_workers", {"num_workers": 0}, False),
        ("persistent_workers", {"num_workers": 1}, True),
        ("prefetch_factor", {"num_workers": 0}, False),
        ("prefetch_factor", {"num_workers": 8}, True),
        ("lr_scaling", {}, True),  # unset batch_size: may differ
        ("lr_scaling", {"batch_size": "1x"}, False),
        ("lr_scaling", {"batch_size": "1.0x"}, False),  # 1.0 == 1
        ("lr_scaling", {"batch_size": "2x"}, True),
        ("lr_scaling", {"batch_size": "0.5x"}, True),
        ("lr_scaling", {"batch_size": 128}, True),  # an absolute size may differ
        ("num_workers", {}, True),  # unconditional knobs
        ("amp", {"num_workers": 0, "batch_size": "1x"}, True),
    ],
)
def test_is_active(name: str, values: dict, active: bool) -> None:
    assert KNOBS[name].is_active(values) is active


@pytest.mark.parametrize(
    ("value", "factor"),
    [
        ("4x", 4.0),
        ("1x", 1.0),
        ("0.5x", 0.5),
        ("16x", 16.0),
        (" 2 x ", 2.0),
        ("2.25x", 2.25),
        ("x", None),
        ("2", None),
        ("-1x", None),
        ("2X", None),
        ("2xx", None),
        ("1e2x", None),
        ("auto", None),
        (4, None),
        (2.0, None),
        (None, None),
        (True, None),
    ],
)
def test_parse_relative(value: object, factor: float | None) -> None:
    assert parse_relative(value) == factor


def test_unknown_knob_message_lists_every_knob() -> None:
    message = unknown_knob_message("num_worker")
    assert message.startswith("num_worker: unknown knob; known: ")
    assert message.endswith(", ".join(KNOBS))
