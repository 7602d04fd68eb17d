"""Training in child processes, found in a trial within seconds and refused in one line.

autotune measures the training loop of the script's own process (or of each rank torchrun
starts). A script that trains in processes it starts itself (Hogwild: ``mp.Process(target=train)``
over a shared model; DDP through ``torch.multiprocessing.spawn`` rather than torchrun) would
otherwise run whole before its trial found no optimizer step in it. Two signs, each said at once:

- it calls ``torch.multiprocessing.start_processes`` (what ``spawn`` calls) before any
  optimizer has stepped in its own process;
- an optimizer steps in a process it started that is not the script's own: a forked child
  inherits this watch; a child started by ``spawn`` or ``forkserver`` (pytorch/examples'
  mnist_hogwild: ``mp.set_start_method('spawn')``, then ``mp.Process(target=train)``) is a fresh
  interpreter that inherits nothing, so its target is wrapped (``_watched_target``) to install the
  same watch there and tell the script's process over a pipe. DataLoader workers never step one.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

#: Frames of these packages are not the script's line that started the children.
_NOT_THE_SCRIPTS = (
    os.sep + "multiprocessing" + os.sep,
    os.sep + "torch" + os.sep,
    os.sep + "autotune" + os.sep,
    "<frozen ",
)
#: What a user can do instead, said with each refusal.
INSTEAD = (
    "autotune measures the training loop of the script's own process: train in it, or launch one process "
    "per rank with --nproc-per-node (torchrun)"
)


def callers_line() -> str:
    """``file.py:LINE`` of the innermost frame of the caller's own code (not multiprocessing's,
    torch's or autotune's), or ``"its code"``."""
    for frame in reversed(traceback.extract_stack()[:-1]):
        if not any(part in frame.filename for part in _NOT_THE_SCRIPTS):
            return f"{os.path.basename(frame.filename)}:{frame.lineno}"
    return "its code"


def _stepped_in_child(optimizer: Any) -> str:
    """The refusal's line, said at a child's first optimizer step."""
    return (
        f"trains in child processes: {type(optimizer).__name__}.step() at {callers_line()} "
        f"ran in process {os.getpid()}, a child the script started; {INSTEAD}"
    )


class ChildWatch:
    """Watches for training in child processes (see the module).

    Args:
        refuse_in_child: Called in a forked child that steps an optimizer, with the one line to
            say; it must end the trial (its process group) and not return.
        make_error: Builds the exception raised in the script's own process.
    """

    def __init__(self, refuse_in_child: Callable[[str], None], make_error: Callable[[str], Exception]) -> None:
        self.pid = os.getpid()
        self.stepped = False  # an optimizer stepped in the script's own process
        self._refuse_in_child, self._make_error = refuse_in_child, make_error
        self._undo: list[Callable[[], None]] = []

    def install(self) -> ChildWatch:
        import torch.multiprocessing as tmp
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        handle = register_optimizer_step_pre_hook(self._before_step)
        self._undo.append(handle.remove)
        original = tmp.start_processes

        def start_processes(*args: Any, **kwargs: Any) -> Any:
            self.starting("torch.multiprocessing.spawn")
            return original(*args, **kwargs)

        # (spawn() calls its module's own name; the package's name for that module is the function)
        for owner in (tmp, sys.modules["torch.multiprocessing.spawn"]):
            if getattr(owner, "start_processes", None) is original:
                setattr(owner, "start_processes", start_processes)  # noqa: B010 (mypy: a module without it)
                self._undo.append(functools.partial(setattr, owner, "start_processes", original))
        from multiprocessing.process import BaseProcess

        start = BaseProcess.start
        BaseProcess.start = lambda process: self._start(process, start)  # type: ignore[method-assign,assignment]
        self._undo.append(functools.partial(setattr, BaseProcess, "start", start))
        return self

    def _start(self, process: Any, start: Callable[[Any], None]) -> None:
        """``Process.start``: a child that will not inherit this watch (``spawn``, ``forkserver``)
        runs its target under it (``_watched_target``), and its first optimizer step is told here
        over a pipe, then refused as a forked child's is."""
        import multiprocessing

        method = getattr(process, "_start_method", None) or multiprocessing.get_start_method()
        target = getattr(process, "_target", None)
        if (
            method == "fork"
            or os.getpid() != self.pid
            or target is None
            or getattr(target, "__module__", "").startswith("torch.utils.data")  # a DataLoader worker
        ):
            return start(process)
        reader, writer = multiprocessing.Pipe(duplex=False)
        process._target = functools.partial(_watched_target, writer, target)
        try:
            start(process)
        finally:
            process._target = target
            writer.close()  # (the child holds its own copy: the reader ends when the child does)
        threading.Thread(target=self._told, args=(reader,), daemon=True).start()

    def _told(self, reader: Any) -> None:
        try:
            line = reader.recv()
        except (EOFError, OSError):  # the child ended without stepping an optimizer
            return
        self._refuse_in_child(line)

    def remove(self) -> None:
        while self._undo:
            self._undo.pop()()

    def starting(self, how: str) -> None:
        """The script starts processes by ``how``: refused if no optimizer stepped here yet.

        Raises:
            Exception: ``make_error``'s, with the line to say.
        """
        if not self.stepped and os.getpid() == self.pid:
            raise self._make_error(
                f"starts its training in child processes ({how} at {callers_line()}) before "
                f"any optimizer stepped in its own process; {INSTEAD}"
            )

    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if os.getpid() == self.pid:
            self.stepped = True
            return
        self._refuse_in_child(_stepped_in_child(optimizer))


def _watched_target(writer: Any, target: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A started child's target, run in that child (``spawn``, ``forkserver``): its first
    optimizer step sends the refusal's line to the script's process, which ends the trial."""
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    def before_step(optimizer: Any, _args: Any, _kwargs: Any) -> None:
        writer.send(_stepped_in_child(optimizer))
        time.sleep(60)  # (the trial's process group is killed meanwhile; this child trains no further)
        os._exit(1)

    register_optimizer_step_pre_hook(before_step)
    return target(*args, **kwargs)
