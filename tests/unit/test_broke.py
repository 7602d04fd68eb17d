"""A knob that breaks the code is learnt from one crash (autotune.tuner._broke), and held."""

from __future__ import annotations

import dataclasses

from standings import standing, trial

from autotune.tuner._broke import broken, users_line
from autotune.tuner._space import Choice, Space
from autotune.tuner._space_now import holds

#: pytorch/examples' vae at another batch: its test pass shapes the batch with its own size.
VAE_CRASH = """RuntimeError: shape '[128, 1, 28, 28]' is invalid for input of size 200704
Traceback (most recent call last):
  File "/work/main/autotune/training/_script.py", line 134, in run_script
    call()
  File "/tmp/vae/main.py", line 124, in test
    comparison = torch.cat([data[:n], recon_batch.view(args.batch_size, 1, 28, 28)[:n]])
  File "/venv/lib/python3.11/site-packages/torch/_tensor.py", line 10, in view
RuntimeError: shape '[128, 1, 28, 28]' is invalid for input of size 200704"""
SPACE = Space("b", {"batch_size": Choice(("1x", "2x", "4x")), "amp": Choice(("off", "bf16")),
                    "fused_optimizer": Choice((False, True))})
BASE = {"batch_size": 128, "amp": "off", "fused_optimizer": False}


def crashed(number: int, reason: str, **sampled) -> object:
    return dataclasses.replace(trial(number, None, "crashed", sampled=sampled), reason=reason)


def test_the_users_line_is_the_innermost_frame_of_its_own_code() -> None:
    assert users_line(VAE_CRASH) == ("main.py:124: comparison = torch.cat([data[:n], "
                                     "recon_batch.view(args.batch_size, 1, 28, 28)[:n]])")
    assert users_line("RuntimeError: boom") is None


def test_a_batch_that_breaks_the_scripts_reshape_is_held_after_one_crash() -> None:
    rows = [trial(0, 100.0, config=BASE), crashed(1, VAE_CRASH, batch_size="2x", amp="bf16", fused_optimizer=True)]
    held = holds(standing(*rows), SPACE, None, 1.0, 1000.0)
    # two values changed, one error of shapes: the batch is to blame, and held at the script's own
    assert held.values == {"batch_size": None}
    assert held.why["batch_size"] == (
        "batch_size held at your code's own for the rest of the study: trial 1 with batch_size=2x crashed where the "
        "baseline ran, at main.py:124: comparison = torch.cat([data[:n], recon_batch.view(args.batch_size, 1, 28, "
        "28)[:n]]): RuntimeError: shape '[128, 1, 28, 28]' is invalid for input of size 200704")
    assert held.lines[-1].once == "broke-batch_size"


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
