"""The event channel: JSON lines over a real pipe."""

from __future__ import annotations

import json
import math
import os
import time

import pytest

from autotune.core._events import EventReader, EventWriter


@pytest.fixture
def pipe():
    read_fd, write_fd = os.pipe()
    writer = EventWriter(write_fd)
    yield writer, read_fd
    try:
        writer.close()
    except OSError:
        pass
    os.close(read_fd)


def drain(read_fd: int, reader: EventReader, chunk: int = 1 << 16) -> list[dict]:
    """Read until EOF (the writer closed), in chunks of ``chunk`` bytes."""
    events = []
    while data := os.read(read_fd, chunk):
        events += reader.feed(data)
    return events


def test_round_trip_over_a_pipe(pipe) -> None:
    writer, read_fd = pipe
    writer("started", pid=123)
    writer("window", index=0, steps=10, samples=320, seconds=0.5, loss=0.69, step_times=[0.01, 0.02], wall=1.7e9)
    writer("end", steps=40, windows=2, config={"batch_size": 64, "amp": "off"}, lr=None)
    writer.close()
    events = drain(read_fd, EventReader())
    stamps = [event.pop("at") for event in events]  # each stamped when written (``EventWriter``)
    assert stamps == sorted(stamps) and stamps[-1] <= time.monotonic()
    assert events == [
        {"event": "started", "pid": 123},
        {
            "event": "window",
            "index": 0,
            "steps": 10,
            "samples": 320,
            "seconds": 0.5,
            "loss": 0.69,
            "step_times": [0.01, 0.02],
            "wall": 1.7e9,
        },
        {"event": "end", "steps": 40, "windows": 2, "config": {"batch_size": 64, "amp": "off"}, "lr": None},
    ]


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64])
def test_partial_lines_split_across_reads(pipe, chunk: int) -> None:
    writer, read_fd = pipe
    sent = [{"event": "window", "index": i, "loss": 1.0 / (i + 1), "note": "naïve ✓ " * i} for i in range(20)]
    for event in sent:
        writer("window", **{k: v for k, v in event.items() if k != "event"})
    writer.close()
    reader = EventReader()
    got = drain(read_fd, reader, chunk)  # lines (and UTF-8 characters) cut at every position
    assert all(isinstance(event.pop("at"), float) for event in got)
    assert got == sent


def test_feed_buffers_until_the_newline() -> None:
    reader = EventReader()
    line = json.dumps({"event": "warmup", "steps": 5}).encode() + b"\n"
    assert reader.feed(line[:10]) == []
    assert reader.feed(line[10:-1]) == []
    assert reader.feed(line[-1:]) == [{"event": "warmup", "steps": 5}]
    # two events and the start of a third in one read
    two = line + line + line[:4]
    assert reader.feed(two) == [{"event": "warmup", "steps": 5}] * 2
    assert reader.feed(line[4:]) == [{"event": "warmup", "steps": 5}]
    assert reader.feed(b"\n\n") == []  # blank lines are nothing


@pytest.mark.parametrize("loss", [math.nan, math.inf, -math.inf])
def test_non_finite_loss_survives_the_round_trip(pipe, loss: float) -> None:
    writer, read_fd = pipe
    writer("window", index=1, loss=loss)
    writer.close()
    (event,) = drain(read_fd, EventReader())
    assert isinstance(event["loss"], float)
    if math.isnan(loss):
        assert math.isnan(event["loss"])
    else:
        assert event["loss"] == loss


def test_a_non_finite_loss_in_a_loss_curve_survives_the_round_trip(pipe) -> None:
    # The divergence verdict reads the curve's pieces as numbers: a piece whose steps went nan
    # once arrived as the string "nan", and judging its loss raised a TypeError in the tuner.
    writer, read_fd = pipe
    writer("window", index=0, loss=math.inf, curve=[[0, 64, 2.5, 4], [64, 128, math.inf, 4], [128, 192, math.nan, 4]])
    writer.close()
    (event,) = drain(read_fd, EventReader())
    assert event["curve"][:2] == [[0, 64, 2.5, 4], [64, 128, math.inf, 4]]
    assert event["curve"][2][:2] == [128, 192] and math.isnan(event["curve"][2][2]) and event["curve"][2][3] == 4


def test_the_wire_format_is_strict_json(pipe) -> None:
    """NaN/Infinity are not JSON: a non-Python reader (or a log tool) must parse every line."""
    writer, read_fd = pipe
    writer("window", index=0, loss=math.nan)
    writer("window", index=1, loss=-math.inf)
    writer.close()
    raw = b""
    while data := os.read(read_fd, 1 << 16):
        raw += data

    def refuse(token: str):
        raise ValueError(f"non-standard JSON token {token}")

    for line in raw.decode().splitlines():
        json.loads(line, parse_constant=refuse)
