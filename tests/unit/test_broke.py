"""A knob that breaks the code is learnt from one crash (autotune.tuner._broke), and held."""

from __future__ import annotations

import dataclasses

from autotune.tuner._broke import broke_holds, broken, users_line
from autotune.tuner._space import Choice, IntRange, Space
from autotune.tuner._space_now import holds
from standings import standing_from, trial

#: pytorch/examples' vae at another batch: its test pass shapes the batch with its own size.
VAE_CRASH = """RuntimeError: shape '[128, 1, 28, 28]' is invalid for input of size 200704
Traceback (most recent call last):
  File "/work/main/autotune/training/_script.py", line 134, in run_script
    call()
  File "/tmp/vae/main.py", line 124, in test
    comparison = torch.cat([data[:n], recon_batch.view(args.batch_size, 1, 28, 28)[:n]])
  File "/venv/lib/python3.11/site-packages/torch/_tensor.py", line 10, in view
RuntimeError: shape '[128, 1, 28, 28]' is invalid for input of size 200704"""
#: An error a dataset raises in a DataLoader worker only, as torch re-raises it in the main process.
WORKER_CRASH = """RuntimeError: Caught RuntimeError in DataLoader worker process 0.
Original Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py", line 349, in _worker_loop
    data = fetcher.fetch(index)
  File "/tmp/s/data.py", line 12, in __getitem__
    raise RuntimeError("the handle is not shared with worker processes")
RuntimeError: the handle is not shared with worker processes

Traceback (most recent call last):
  File "/tmp/s/main.py", line 40, in train
    for x, y in loader:
  File "/venv/lib/python3.11/site-packages/torch/_utils.py", line 733, in reraise
RuntimeError: Caught RuntimeError in DataLoader worker process 0."""
SPACE = Space(
    "b",
    {
        "batch_size": Choice(("1x", "2x", "4x")),
        "amp": Choice(("off", "bf16")),
        "fused_optimizer": Choice((False, True)),
        "num_workers": IntRange(0, 4),
    },
)
BASE = {"batch_size": 128, "amp": "off", "fused_optimizer": False}


def crashed(number: int, reason: str, **sampled) -> object:
    return dataclasses.replace(trial(number, None, "crashed", sampled=sampled), reason=reason)


def test_the_users_line_is_the_innermost_frame_of_its_own_code() -> None:
    assert users_line(VAE_CRASH) == (
        "main.py:124 (comparison = torch.cat([data[:n], recon_batch.view(args.batch_size, 1, 28, 28)[:n]]))"
    )
    # a DataLoader worker's error: the dataset's line, not the loop's `for`
    assert (
        users_line(WORKER_CRASH) == 'data.py:12 (raise RuntimeError("the handle is not shared with worker processes"))'
    )
    # a worker's traceback with no frame of the user's: the main process's
    assert (
        users_line(WORKER_CRASH.replace("/tmp/s/data.py", "/venv/lib/python3.11/site-packages/x.py"))
        == "main.py:40 (for x, y in loader:)"
    )
    assert users_line("RuntimeError: boom") is None


def test_a_batch_that_breaks_the_scripts_reshape_is_held_after_one_crash() -> None:
    rows = [trial(0, 100.0, config=BASE), crashed(1, VAE_CRASH, batch_size="2x", amp="bf16", fused_optimizer=True)]
    held = holds(standing_from(*rows), SPACE, None, 1.0, 1000.0)
    # three values changed, one error of shapes: the batch is to blame, and held at the script's own
    assert held.values == {"batch_size": None}
    assert held.why["batch_size"] == (
        "your code shapes a batch with its own batch size at main.py:124 (comparison = torch.cat([data[:n], "
        "recon_batch.view(args.batch_size, 1, 28, 28)[:n]])): batch_size held at your code's own for the rest of "
        "the study (trial 1 with batch_size=2x crashed where the baseline ran: RuntimeError: shape "
        "'[128, 1, 28, 28]' is invalid for input of size 200704)"
    )
    assert held.lines[-1].once == "broke-batch_size"


def test_a_value_that_breaks_the_code_in_a_loader_worker_holds_its_knob() -> None:
    rows = [trial(0, 100.0, config=BASE), crashed(1, WORKER_CRASH, num_workers=2)]
    held = holds(standing_from(*rows), SPACE, None, 1.0, 1000.0)
    assert held.values == {"num_workers": None}
    assert held.why["num_workers"].startswith(
        'your code breaks with num_workers=2 at data.py:12 (raise RuntimeError("the handle is not shared with '
        "worker processes\")): num_workers held at your code's own for the rest of the study (trial 1 with "
        "num_workers=2 crashed where the baseline ran: RuntimeError: Caught RuntimeError in DataLoader worker"
    )


def test_a_knob_another_value_of_which_ran_is_not_held() -> None:
    # num_workers=1 ran to a figure, then 2 crashed: the code takes workers, only 2 broke it
    rows = [
        trial(0, 100.0, config=BASE),
        trial(1, 120.0, sampled={"num_workers": 1}),
        crashed(2, WORKER_CRASH, num_workers=2),
    ]
    [found] = broken(rows, SPACE.domains, BASE)
    assert (found.knob, found.value, found.alone) == ("num_workers", 2, False)
    assert "num_workers" not in holds(standing_from(*rows), SPACE, None, 1.0, 1000.0).values


def test_a_value_that_ran_elsewhere_is_not_blamed_and_a_crash_not_the_codes_blames_nothing() -> None:
    ran = trial(2, 120.0, sampled={"batch_size": "2x", "amp": "off"})
    rows = [trial(0, 100.0, config=BASE), crashed(1, "ValueError: bad value", batch_size="2x", amp="bf16"), ran]
    # 2x ran to a figure: bf16 is the one suspect left
    assert [(b.knob, b.value) for b in broken(rows, SPACE.domains, BASE)] == [("amp", "bf16")]
    # two suspects and an error that is not of shapes: neither is blamed
    two = [trial(0, 100.0, config=BASE), crashed(1, "ValueError: bad value", batch_size="4x", amp="bf16")]
    assert broken(two, SPACE.domains, BASE) == []
    for reason in ("killed by SIGKILL from outside autotune", "NotTunable: train.py ended early"):
        one = [trial(0, 100.0, config=BASE), crashed(1, reason, batch_size="4x")]
        assert broken(one, SPACE.domains, BASE) == [], reason
    # a crash with the baseline's own values blames nothing either
    assert broken([trial(0, 100.0, config=BASE), crashed(1, VAE_CRASH, batch_size="1x")], SPACE.domains, BASE) == []


def test_what_an_earlier_study_learnt_is_held_from_the_start() -> None:
    learnt = {"batch_size": "study vae learnt: your code shapes a batch ...", "compile": "not in this space"}
    held = holds(standing_from(trial(0, 100.0, config=BASE)), SPACE, None, 1.0, 1000.0, learnt=learnt)
    # a knob this space does not draw is not held (nor said)
    assert held.values == {"batch_size": None}
    assert [line.once for line in held.lines] == ["broke-batch_size"]
    # this study's own crash says its own line over the carried one
    own = broken([trial(0, 100.0, config=BASE), crashed(1, VAE_CRASH, batch_size="2x")], SPACE.domains, BASE)
    assert broke_holds(own, learnt)["batch_size"][1].startswith("your code shapes a batch")


def test_an_int_knob_is_drawn_below_a_value_that_broke_where_a_smaller_one_ran() -> None:
    from autotune.tuner._space_now import draw_caps

    said = []
    # 1 worker ran, then 3 broke the dataset: workers are still drawn, below 3 (the fault study's case)
    rows = [
        trial(0, 100.0, config=BASE),
        trial(1, 120.0, sampled={"num_workers": 1}),
        crashed(2, WORKER_CRASH, num_workers=3),
    ]
    cap = draw_caps(standing_from(*rows), SPACE, said.append)
    assert cap("num_workers", {}) == 2
    assert said[-1].once == "broke-num_workers-2"
    assert (
        said[-1].text.startswith("your code breaks with num_workers=3 at data.py:12 (")
        and "num_workers drawn below 3 for the rest of the study, where 1 ran (trial 2 with num_workers=3"
        in said[-1].text
    )
    # a larger value that ran says the count is not what breaks it: no cap
    ran_above = [*rows, trial(3, 110.0, sampled={"num_workers": 4})]
    assert draw_caps(standing_from(*ran_above), SPACE, said.append) is None
