"""Trial slots on one host (autotune.machine._slots): disjoint CPUs, a GPU each, and what people write."""

from __future__ import annotations

import pytest

from autotune import Config, ConfigError
from autotune.machine._launch import TrialSpec, build_command
from autotune.machine._slots import CPUS_ENV, Slot, cpu_list, devices_of, plan_slots


@pytest.mark.parametrize(
    "jobs, cpus, expected",
    [
        (1, [0, 1, 2, 3], [()]),  # one slot: not pinned, as before --jobs
        (2, [0, 1, 2, 3], [(0, 1), (2, 3)]),
        (3, [0, 1, 2, 3, 4, 5, 6], [(0, 1, 2), (3, 4), (5, 6)]),  # 7 = 3 + 2 + 2: the first gets the extra
        (2, [8, 2, 3, 9], [(2, 3), (8, 9)]),  # an affinity mask, sorted
    ],
)
def test_slots_split_the_cpus_disjointly(jobs, cpus, expected) -> None:
    slots = plan_slots(jobs, cpus, ["cpu"])
    assert [s.cpus for s in slots] == expected
    assert all(s.of_cpus == len(cpus) and s.device == "cpu" for s in slots)


def test_one_gpu_per_slot() -> None:
    slots = plan_slots(2, range(16), ["cuda:0", "cuda:3"])
    assert [(s.cpus, s.device) for s in slots] == [(tuple(range(8)), "cuda:0"), (tuple(range(8, 16)), "cuda:3")]
    assert slots[1].share() == "CPUs 8-15 (8 of 16), cuda:3"
    with pytest.raises(ConfigError, match=r"--jobs 3: one trial per GPU, and --device gives 2 \(cuda:0, cuda:3\)"):
        plan_slots(3, range(16), ["cuda:0", "cuda:3"])


def test_more_slots_than_cpus_is_refused_with_what_is_allowed() -> None:
    with pytest.raises(ConfigError, match=r"--jobs 3: more trial slots than the 2 CPUs .* \(0-1\); allowed: 1 to 2"):
        plan_slots(3, [0, 1], ["cpu"])


def test_devices_and_cpu_lists_read_as_people_write_them() -> None:
    assert devices_of("cuda", 3) == ["cuda:0", "cuda:1", "cuda:2"]
    assert devices_of("cuda:0,cuda:2", 3) == ["cuda:0", "cuda:2"]
    with pytest.raises(ConfigError, match=r"cuda:4 is not visible; this host shows 2 CUDA device"):
        devices_of("cuda:0,cuda:4", 2)
    assert cpu_list([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert Slot(0, (), 4, "cpu").share() == "all 4 CPUs"


def test_a_pinned_slot_reaches_the_workers_environment() -> None:
    spec = TrialSpec("x.py:train", Config(), cpus=(2, 3))
    _, env = build_command(spec, 5, {}, tag="t")
    assert env[CPUS_ENV] == "2,3"
    _, env = build_command(TrialSpec("x.py:train", Config()), 5, {}, tag="t")
    assert CPUS_ENV not in env
