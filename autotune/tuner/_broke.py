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

The knob is then held at the code's own value for the rest of the study, with one line quoting
the line of the script that broke, unless another value of it than the code's ran to a figure:
then the code takes the knob and only the value broke it. An int knob (workers, prefetch) is then
drawn only below the value that broke, where a smaller one ran (more workers, more memory: a
``/dev/shm`` or a descriptor limit breaks at some count and past it); another kind is left to the
sampler, which learns from the failed trial. A warm start carries the lines to the next study of the same target
(``autotune.tuner._warm_start``). Pure functions of the rows, so every tuner on a study agrees.
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
_NOT_USERS = ("site-packages", "/autotune/", "<frozen", "/lib/python", "<string>")
#: Where a DataLoader worker's own traceback starts inside the error it re-raises in the main process.
_WORKERS = "Original Traceback"
#: What the study's user attrs keep the lines of a warm start's source under (knob -> line).
BROKE_ATTR = "broke"


class Broke(NamedTuple):
    """Knob ``knob``'s value ``value`` broke the code in trial ``trial`` at ``where`` (the script's
    ``file:line (code)``, or None), raising ``error``; ``alone``: no value of the knob other than
    the code's own ran to a figure."""

    knob: str
    value: Any
    trial: int
    where: str | None
    error: str
    alone: bool

    def line(self) -> str:
        """What the study says, and keeps as the hold's reason (a batch in a shape: the issue's words)."""
        at = f" at {self.where}" if self.where else ""
        shown = f"{self.knob}={show_value(self.value)}"
        what = (
            "your code shapes a batch with its own batch size"
            if self.knob == "batch_size" and _SHAPE_ERROR.search(self.error)
            else f"your code breaks with {shown}"
        )
        return (
            f"{what}{at}: {self.knob} held at your code's own for the rest of the study (trial {self.trial} "
            f"with {shown} crashed where the baseline ran: {self.error})"
        )


def users_line(reason: str) -> str | None:
    """``file.py:N (the code)`` of the innermost frame of the user's code in a crash's traceback:
    in a DataLoader worker's own traceback where the error carries one (the dataset's line, not the
    loop's ``for``).

    >>> users_line('Traceback:\\n  File "/x/main.py", line 124, in loss\\n    recon.view(args.batch_size, 1)\\n'
    ...            'RuntimeError: shape')
    'main.py:124 (recon.view(args.batch_size, 1))'
    """
    lines = reason.splitlines()
    start = next((i for i, line in enumerate(lines) if _WORKERS in line), 0)
    for first in (start, 0) if start else (0,):
        found = None
        for i in range(first, len(lines)):
            frame = _FRAME.match(lines[i])
            if first and i > first and not lines[i].startswith(" "):
                break  # the worker's traceback ended at its error's line
            if frame and not any(part in frame.group(1) for part in _NOT_USERS):
                code = lines[i + 1].strip() if i + 1 < len(lines) and not _FRAME.match(lines[i + 1]) else ""
                found = f"{frame.group(1).rsplit('/', 1)[-1]}:{frame.group(2)}" + (f" ({code})" if code else "")
        if found:
            return found
    return None


def broken(rows: Sequence[Any], knobs: Iterable[str], base_config: Mapping[str, Any]) -> list[Broke]:
    """The values of ``knobs`` (those the space draws) that broke the code (see the module), in
    trial order; ``base_config``: the values the baseline ran with.

    >>> from types import SimpleNamespace as Row
    >>> crash = Row(number=2, sampled={"batch_size": "2x", "amp": "off"}, config={}, outcome="crashed", kind=None,
    ...             reason='RuntimeError: shape is invalid\\n  File "/x/main.py", line 9, in f\\n    x.view(64, 1)')
    >>> broken([crash], ["batch_size", "amp"], {"amp": "off"})[0].line()
    "your code shapes a batch with its own batch size at main.py:9 (x.view(64, 1)): batch_size held at your code's own for the rest of the study (trial 2 with batch_size=2x crashed where the baseline ran: RuntimeError: shape is invalid)"
    """
    knobs = list(knobs)
    rows = [r for r in rows if not getattr(r.kind, "repeats", False)]

    def drawn(row: Any) -> set[tuple[str, str]]:
        return {(k, show_value(value_of(row, k))) for k in knobs if value_of(row, k) is not None}

    own = {(k, show_value(v)) for k, v in base_config.items()} | {("batch_size", "1x")}
    ran: set[tuple[str, str]] = set()
    for row in rows:
        if row.outcome in _RAN:
            ran |= drawn(row)
    cleared = own | ran
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
            alone = not any(k == knob for k, _ in ran - own)
            out.append(Broke(knob, value_of(row, knob), row.number, users_line(reason), first, alone))
    return out


def broke_caps(found: Sequence[Broke], rows: Sequence[Any], ints: Iterable[str]) -> dict[str, tuple[int, str]]:
    """Knob -> (the highest value to draw, the line that says why) for each of the int knobs ``ints``
    a value of which broke the code where a smaller value than it ran to a figure and no larger one did.

    >>> from types import SimpleNamespace as Row
    >>> ran = Row(number=1, sampled={"num_workers": 1}, config={}, outcome="complete", kind=None)
    >>> broke_caps([Broke("num_workers", 3, 2, "data.py:12 (x)", "RuntimeError: x", False)], [ran], ["num_workers"])
    {'num_workers': (2, 'your code breaks with num_workers=3 at data.py:12 (x): num_workers drawn below 3 for the rest of the study, where 1 ran (trial 2 with num_workers=3 crashed where the baseline ran: RuntimeError: x)')}
    """
    ints = set(ints)
    out: dict[str, tuple[int, str]] = {}
    for b in found:
        if b.alone or b.knob not in ints or not isinstance(b.value, int):
            continue
        ran = [v for r in rows if r.outcome in _RAN and isinstance(v := value_of(r, b.knob), int)]
        below = [v for v in ran if v < b.value]
        if below and max(ran) < b.value and (b.knob not in out or b.value - 1 < out[b.knob][0]):
            held = f"{b.knob} held at your code's own for the rest of the study"
            out[b.knob] = (
                b.value - 1,
                b.line().replace(
                    held, f"{b.knob} drawn below {b.value} for the rest of the study, where {max(below)} ran"
                ),
            )
    return out


def broke_holds(found: Sequence[Broke], learnt: Mapping[str, str] | None = None) -> dict[str, tuple[Any, str]]:
    """Knob -> (None: the code's own value, the line that says why) for each knob a value of which
    broke the code where no other value of it ran (``Broke.alone``), and each in ``learnt`` (knob ->
    line: what an earlier study of the same target learnt, carried by its warm start).

    >>> broke_holds([Broke("batch_size", "2x", 2, None, "RuntimeError: shape", True)])
    {'batch_size': (None, "your code shapes a batch with its own batch size: batch_size held at your code's own for the rest of the study (trial 2 with batch_size=2x crashed where the baseline ran: RuntimeError: shape)")}
    """
    out: dict[str, tuple[Any, str]] = {}
    for b in found:
        if b.alone and b.knob not in out:
            out[b.knob] = (None, b.line())
    for knob, line in (learnt or {}).items():
        out.setdefault(knob, (None, line))
    return out
