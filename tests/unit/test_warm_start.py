"""Warm starts (autotune.tuner._warm_start): which configs of an earlier study run first, and the line."""

from __future__ import annotations

import dataclasses

from autotune.core._kinds import Kind
from autotune.tuner._warm_start import Source, learnt, pick, same_machine, top_configs
from standings import standing_from, trial

NOISY = "noisy: other processes used 48% of its CPUs while it measured (over 20%)"


def test_the_top_configs_are_those_that_beat_the_baseline_best_first_believed_and_distinct() -> None:
    standing = standing_from(
        trial(0, 1000.0),
        trial(1, 1500.0, sampled={"num_workers": 2}),
        trial(2, 2000.0, sampled={"num_workers": 4}),
        trial(3, 900.0, sampled={"num_workers": 1}),  # slower than the baseline
        trial(4, 5000.0, "diverged", sampled={"num_workers": 8}),
        trial(5, 3000.0, sampled={"num_workers": 6}, doubt=NOISY),  # not believed
        trial(6, 1900.0, kind=Kind.CONFIRM, of=2, sampled={"num_workers": 4}),
    )
    configs, speedups = top_configs(standing)
    assert configs == [{"num_workers": 4}, {"num_workers": 2}]
    assert [round(s, 2) for s in speedups] == [1.95, 1.5]  # (trial 2's median of its two runs)
    assert top_configs(standing, top=1)[0] == [{"num_workers": 4}]
    assert top_configs(standing_from(trial(0, 1000.0), trial(1, 900.0, sampled={"num_workers": 2}))) == ([], [])
    assert top_configs(standing_from()) == ([], [])


def test_a_larger_batch_ranks_on_its_time_to_the_baselines_loss_here_too() -> None:
    standing = standing_from(
        trial(0, 1000.0),
        trial(1, 3000.0, sampled={"batch_size": "4x"}, config={"batch_size": 64}, to_loss_ratio=4.0),
        trial(2, 1200.0, sampled={"num_workers": 2}),
    )
    assert top_configs(standing)[0] == [{"num_workers": 2}]  # 3000 / 4 = 750 a second in time to the loss


def test_the_source_on_this_machine_first_then_the_most_recent() -> None:
    here = {"platform": "Linux", "cpus": 2, "device": "cpu", "gpu": None, "torch": "2.13.0", "date": "2026-11-26"}
    assert same_machine(here, {**here, "date": "2026-11-27", "host": "another"})
    assert not same_machine(here, {**here, "cpus": 16}) and not same_machine(here, {})
    order = pick([("old", here, 1.0), ("gpu", {**here, "gpu": "H200"}, 9.0), ("new", here, 5.0)], here)
    assert order == ["new", "old", "gpu"]


def test_the_requests_and_the_line() -> None:
    source = Source("first", [{"num_workers": 4}, {"num_workers": 2}], [1.95, 1.5], same_machine=True)
    assert [(r.kind, dict(r.config), r.enqueue_params) for r in source.requests()] == [
        (Kind.WARM_START, {"num_workers": 4}, True),
        (Kind.WARM_START, {"num_workers": 2}, True),
    ]
    assert source.line() == (
        "warm start: the 2 top config(s) of study first (1.95x, 1.50x there) run first, "
        "measured here (the same target on this machine; --warm-start off skips this)"
    )
    other = Source("first", [{"num_workers": 4}], [1.95], same_machine=False)
    assert "on another machine: they set the order of the first draws only, their figures are not used" in other.line()


def test_what_the_source_learnt_breaks_the_code_is_carried_and_said() -> None:
    crash = "RuntimeError: shape '[128, 1, 28, 28]' is invalid\n  File \"/x/main.py\", line 9, in f\n    x.view(128, 1)"
    rows = [
        trial(0, 1000.0, config={"batch_size": 128}),
        dataclasses.replace(trial(1, None, "crashed", sampled={"batch_size": "2x"}), reason=crash),
        trial(2, 1500.0, sampled={"num_workers": 2}),
    ]
    carried = {"amp": "study first learnt: your code breaks with amp=bf16 ..."}
    broke = learnt(standing_from(*rows), carried)
    assert broke["batch_size"].startswith("your code shapes a batch with its own batch size at main.py:9")
    assert broke["amp"] == carried["amp"]  # what the source's own warm start carried, carried on
    assert learnt(standing_from(*rows[::2]), {}) == {}  # nothing crashed: nothing learnt
    source = Source("vae", [{"num_workers": 2}], [1.5], True, {"batch_size": broke["batch_size"]})
    assert source.line().endswith(
        "; batch_size held at your code's own, as study vae found a value of it breaks your code"
    )
    assert Source("vae", [], [], True, broke).line() == (
        "warm start: batch_size, amp held at your code's own, as study vae found a value of each breaks your code "
        "(--warm-start off skips this)"
    )
