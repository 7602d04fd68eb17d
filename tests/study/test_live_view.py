"""The terminal at a glance (issue 59): ``autotune run`` under a real pseudo-terminal of 80 columns
draws a row per config and a short summary, no line past the width; ``-v`` gives every full line;
a pipe gets plain lines without control codes."""

from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import termios
import time
from pathlib import Path

from helpers import FIXTURES, autotune, cli, cli_env

WIDTH, HEIGHT = 80, 24
#: A loader that waits on reads: the study draws workers, a leader runs again with more of them.
TARGET = f"{FIXTURES / 'io_train.py'}:train"
FAST = ("--warmup", "0.3", "--window", "0.4", "--windows", "2", "--ceiling-windows", "1", "--seed", "0")
_CONTROL = re.compile(r"\x1b(\[[?\d;]*[A-Za-z]|\][^\x07]*\x07)")


def in_terminal(
    *args: str, cwd: Path, timeout: float = 300, interrupt_on: bytes | None = None, env: dict | None = None
) -> tuple[int, str]:
    """The real CLI under a pseudo-terminal of ``WIDTH`` x ``HEIGHT``: its exit status and all it
    wrote; ``interrupt_on``: Ctrl-C (SIGINT) once it wrote that."""
    import pty

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", HEIGHT, WIDTH, 0, 0))
    env = cli_env({"TERM": "xterm-256color", "COLUMNS": str(WIDTH), "LINES": str(HEIGHT), **(env or {})})
    for name in ("NO_COLOR", "FORCE_COLOR", "TERM_PROGRAM"):
        env.pop(name, None)
    proc = subprocess.Popen(cli(*args), stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env)
    os.close(slave)
    said, deadline = bytearray(), time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # (Linux: EIO once the last writer closed the terminal)
                    break
                if not chunk:
                    break
                said += chunk
                if interrupt_on is not None and interrupt_on in said:
                    proc.send_signal(signal.SIGINT)
                    interrupt_on = None
            elif proc.poll() is not None:
                break
        else:
            proc.kill()
        return proc.wait(timeout=30), said.decode(errors="replace")
    finally:
        os.close(master)


def screen(raw: str, width: int = WIDTH) -> list[str]:
    """What a terminal of ``width`` columns holds after ``raw`` (its scrollback included): the
    cursor moves rich's live view makes (up, erase line, carriage return) applied, colours dropped."""
    lines, row, col, at = [""], 0, 0, 0
    while at < len(raw):
        found = _CONTROL.match(raw, at)
        if found:
            code = found[0]
            if code.endswith("A"):
                row = max(row - int(code[2:-1] or 1), 0)
            elif code.endswith("K"):
                lines[row] = "" if code[2:-1] == "2" else lines[row][:col]
            at = found.end()
            continue
        char = raw[at]
        at += 1
        if char == "\r":
            col = 0
            continue
        if char == "\n" or col >= width:  # a line end, or a character past the last column: it wraps
            row, col = row + 1, 0
            lines += [""] * (row + 1 - len(lines))
        if char != "\n":
            line = lines[row].ljust(col)
            lines[row] = line[:col] + char + line[col + 1 :]
            col += 1
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def test_the_live_view_fits_80_columns_a_row_per_config_and_a_short_summary(tmp_path: Path) -> None:
    status, raw = in_terminal("run", TARGET, "--trials", "5", "--confirm", "1", *FAST, cwd=tmp_path)
    shown = screen(raw)
    assert status == 0, "\n".join(shown)
    # no line wraps: every stretch written between line ends fits the width (rich cut it, not the terminal)
    written = re.split(r"\r\n|\n|\r", _CONTROL.sub("", raw))
    assert max(len(part) for part in written) <= WIDTH, [part for part in written if len(part) > WIDTH]
    head = max(i for i, line in enumerate(shown) if line.startswith("trial ") and "knobs (vs baseline)" in line)
    rows = []
    for line in shown[head + 1 :]:
        if not line[:1].isdigit():
            break
        rows.append(line)
    # one row per config: 5 trials and their confirmation re-runs (a re-run is its trial's row, "x2"),
    # and the winner without its riders, where it had some (autotune.tuner._trim)
    numbers = [int(line.split()[0]) for line in rows]
    trims = sum("(trim of " in line for line in rows)
    assert trims <= 1 and 2 <= len(rows) - trims <= 5 and numbers == sorted(set(numbers)), "\n".join(shown)
    assert any(line.split()[1] == "x2" for line in rows), "\n".join(shown)  # confirmed: run twice
    assert rows[0].split()[0] == "0" and "(baseline)" in rows[0]
    assert not any("batch_size=1x" in line or "pin_memory=false" in line for line in rows[1:]), rows  # only changes
    # nothing of the full view: no trial blocks, each kind of note once
    assert not any(line.startswith(("[1/5]", "    complete")) for line in shown), "\n".join(shown)
    notes = shown[:head]
    assert len(notes) == len(set(notes)), "\n".join(notes)
    summary = shown[next(i for i, line in enumerate(shown) if line.startswith("best:")) :]
    assert len(summary) <= 14, "\n".join(summary)  # about 12 lines, a long one wrapped
    assert any(line.startswith("exported: ") for line in summary) and summary[-2].startswith("next: autotune export")


def test_verbose_gives_every_full_line_in_a_terminal(tmp_path: Path) -> None:
    status, raw = in_terminal("run", TARGET, "--trials", "1", "--confirm", "0", "-v", *FAST, cwd=tmp_path)
    said = " ".join(screen(raw))
    assert status == 0, said
    assert "[1/1] trial 0: baseline" in said and " complete " in said and "window 1:" in said, said
    assert "trials: autotune show" in said, said  # the whole summary


def test_a_pipe_gets_plain_full_lines(tmp_path: Path) -> None:
    done = autotune("run", TARGET, "--trials", "1", "--confirm", "0", *FAST, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout + done.stderr
    assert "[1/1] trial 0: baseline" in done.stderr and "    complete " in done.stderr, done.stderr
    assert done.stdout.startswith("\nbest: ") and "trials: autotune show" in done.stdout, done.stdout


def test_ctrl_c_in_the_live_view_leaves_the_table_the_cursor_and_a_whole_last_line(tmp_path: Path) -> None:
    status, raw = in_terminal("run", TARGET, "--trials", "5", *FAST, cwd=tmp_path, interrupt_on=b"window 1")
    shown = screen(raw)
    assert status == 130, "\n".join(shown)  # the shell's convention, as documented
    assert raw.endswith("\n") and "\x1b[?25h" in raw  # (rich's live view hides the cursor while it draws)
    assert shown[-1].startswith("autotune: stopped by SIGINT; run the same command to resume"), shown
    assert any(line.startswith("0 ") for line in shown), shown  # the table stays, with the baseline's row


def test_a_failing_baseline_in_the_live_view_says_why_and_ends_its_line(tmp_path: Path) -> None:
    target = f"{FIXTURES / 'cli_train.py'}:train"
    status, raw = in_terminal("run", target, "--trials", "3", *FAST, cwd=tmp_path, env={"FAIL_BASELINE": "1"})
    shown = screen(raw)
    assert status == 1, "\n".join(shown)  # the code as written failed: its traceback follows
    assert raw.endswith("\n") and "\x1b[?25h" in raw
    assert any(line.startswith("0 ") and "crashed" in line for line in shown), shown
    assert "ValueError: the user's own bug" in " ".join(shown)
