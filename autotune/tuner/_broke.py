"""A knob that breaks the code: learnt from one crash, never drawn again in the study.

pytorch/examples' vae shapes its test batch with its own batch size
(``recon_batch.view(args.batch_size, 1, 28, 28)``): every trial on another batch crashed the same
way, and after the first crash the study drew a larger batch again (2 of 6 trials lost). A trial
that crashes where the baseline ran blames the value it changed that nothing else explains:

- a value some trial ran with to a figure is cleared (it does not break the code), and the
  baseline's own values always are;
- one uncleared value left is to blame; of several, ``batch_size`` is, where the error is a
  shape's or a size's (the code's own batch size in a reshape, a loss over a fixed size);
- a crash that is not the code's (killed from outside, out of memory, a refusal) blames nothing.

The knob is then held at the code's own value with one line quoting the line of the script
that broke. Pure functions of the rows, so every tuner on a study agrees.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from autotune.core._knobs import show_value
from autotune.core._outcome import Outcome
from autotune.tuner._one_loss import value_of

_RAN = (Outcome.COMPLETE.value, Outcome.DIVERGED.value, Outcome.PRUNED.value)
#: Crashes that are not the code's answer to a knob: killed from outside, a refusal of the script.
_NOT_THE_CODES = ("killed by ", "NotTunable", "ScriptExited", "interrupted")
#: An error of shapes or sizes: what code that assumes its own batch size raises on another.
_SHAPE_ERROR = re.compile(r"shape|size|dimension|mat1 and mat2|Expected input batch_size", re.IGNORECASE)
#: A traceback's frame line: its file and line number.
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+)')
#: Files that are not the user's code.
_NOT_USERS = ("site-packages", "/autotune/", "<frozen", "/lib/python")


class Broke(NamedTuple):
    """Knob ``knob``'s value ``value`` broke the code in trial ``trial``, as ``why`` says."""

    knob: str
    value: Any
    trial: int
    why: str


def users_line(reason: str) -> str | None:
    """``file.py:N: the code`` of the innermost frame of the user's code in a crash's traceback.

    >>> users_line('Traceback:\\n  File "/x/main.py", line 124, in loss\\n    recon.view(args.batch_size, 1)\\n'
    ...            'RuntimeError: shape')
    'main.py:124: recon.view(args.batch_size, 1)'
    """
    lines = reason.splitlines()
    found = None
    for i, line in enumerate(lines):
        frame = _FRAME.match(line)
        if frame and not any(part in frame.group(1) for part in _NOT_USERS):
            code = lines[i + 1].strip() if i + 1 < len(lines) and not _FRAME.match(lines[i + 1]) else ""
            found = f"{frame.group(1).rsplit('/', 1)[-1]}:{frame.group(2)}" + (f": {code}" if code else "")
    return found


def broken(rows: Sequence[Any], knobs: Iterable[str], base_config: Mapping[str, Any]) -> list[Broke]:
    """The values of ``knobs`` (those the space draws) that broke the code (see the module), in
    trial order; ``base_config``: the values the baseline ran with.

    >>> from types import SimpleNamespace as Row
    >>> crash = Row(number=2, sampled={"batch_size": "2x", "amp": "off"}, config={}, outcome="crashed", kind=None,
    ...             reason='RuntimeError: shape is invalid\\n  File "/x/main.py", line 9, in f\\n    x.view(64, 1)')
    >>> broken([crash], ["batch_size", "amp"], {"amp": "off"})[0].why
    'trial 2 with batch_size=2x crashed where the baseline ran, at main.py:9: x.view(64, 1): RuntimeError: shape is invalid'
    """
    knobs = list(knobs)
    rows = [r for r in rows if not getattr(r.kind, "repeats", False)]

    def drawn(row: Any) -> set[tuple[str, str]]:
        return {(k, show_value(value_of(row, k))) for k in knobs if value_of(row, k) is not None}

    cleared = {(k, show_value(v)) for k, v in base_config.items()} | {("batch_size", "1x")}
    for row in rows:
        if row.outcome in _RAN:
            cleared |= drawn(row)
    out: list[Broke] = []
    for row in rows:
        reason = row.reason or ""
        if row.outcome != Outcome.CRASHED.value or any(marker in reason for marker in _NOT_THE_CODES):
            continue
        suspects = sorted(drawn(row) - cleared)
        if set(suspects) & {(b.knob, show_value(b.value)) for b in out}:
            continue  # a value already known to break the code explains it
        first = reason.strip().splitlines()[0] if reason.strip() else "a crash"
        if len(suspects) != 1:
            suspects = [s for s in suspects if s[0] == "batch_size"] if _SHAPE_ERROR.search(first) else []
        for knob, _ in suspects[:1]:
            value = value_of(row, knob)
            where = users_line(reason)
            out.append(Broke(knob, value, row.number, f"trial {row.number} with {knob}={show_value(value)} crashed "
                             f"where the baseline ran, at {where + ': ' if where else ''}{first}"))
    return out


def broke_holds(found: Sequence[Broke]) -> dict[str, tuple[Any, str]]:
    """Knob -> (None: the code's own value, the line that says why) for each knob a value of which
    broke the code: another value of it is not drawn again in this study.

    >>> broke_holds([Broke("batch_size", "2x", 2, "trial 2 with batch_size=2x crashed ...")])
    {'batch_size': (None, "batch_size held at your code's own for the rest of the study: trial 2 with batch_size=2x crashed ...")}
    """
    out: dict[str, tuple[Any, str]] = {}
    for b in found:
        if b.knob not in out:
            out[b.knob] = (None, f"{b.knob} held at your code's own for the rest of the study: {b.why}")
    return out
