"""The worker's event channel: JSON lines on a dedicated pipe, never stdout (user code prints)."""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

#: Environment variable naming the pipe's write end in the worker.
FD_ENV = "AUTOTUNE_EVENT_FD"


def _finite(value: Any) -> Any:
    """JSON has no nan/inf: send them as strings and read them back as floats."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _restore(value: Any) -> Any:
    """A float sent as a string back to a float. The reader restores the fields read as numbers
    that can be non-finite: an event's ``loss`` and its ``curve`` pieces' mean losses."""
    if value in ("nan", "inf", "-inf"):
        return float(value)
    return value


class EventWriter:
    """Writes ``{"event": kind, ...}`` lines to the pipe (worker side)."""

    def __init__(self, fd: int) -> None:
        self._file = os.fdopen(fd, "w", buffering=1)

    def __call__(self, kind: str, **fields: Any) -> None:
        # ``at``: when it happened, on the monotonic clock the tuner shares (one per machine), so
        # the tuner times the worker's spans from it, not from when its loop read the line.
        self._file.write(json.dumps(_finite({"event": kind, "at": time.monotonic(), **fields})) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class EventReader:
    """Splits bytes read from the pipe into events (parent side)."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """Return the complete events in ``data`` plus what was buffered before."""
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        events = []
        for line in lines:
            if line.strip():
                event = json.loads(line)
                if "loss" in event:
                    event["loss"] = _restore(event["loss"])
                if "curve" in event:  # pieces of (samples from, to, mean loss, steps)
                    event["curve"] = [[*chunk[:2], _restore(chunk[2]), *chunk[3:]] for chunk in event["curve"]]
                events.append(event)
        return events
