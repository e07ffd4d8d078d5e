"""run's waiting display: elapsed time while the model thinks, live on a TTY, lines otherwise."""

from __future__ import annotations

import io
import threading

import pytest

from nanobot_core._commands import _waiting
from nanobot_core._commands._waiting import WaitDisplay
from nanobot_core.runner import ModelReplied, ModelWaiting, ToolStarted


def _wait_for(stream: io.StringIO, text: str, ticks: int = 1) -> None:
    """Block until `text` appears `ticks` times in `stream` (the ticker runs in a thread)."""
    done = threading.Event()
    for _ in range(2000):
        if stream.getvalue().count(text) >= ticks:
            return
        done.wait(0.005)
    raise AssertionError(f"{text!r} never appeared {ticks} time(s): {stream.getvalue()!r}")


def test_a_log_line_is_written_while_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not on a TTY, each tick is a whole line naming the round; the reply stops the ticks."""
    monkeypatch.setattr(_waiting, "LOG_INTERVAL", 0.01)
    stream = io.StringIO()
    display = WaitDisplay(stream, live=False)
    display(ModelWaiting(3))
    _wait_for(stream, "waiting for the model (round 3):", ticks=2)
    display(ModelReplied(3, 0.5))
    after = stream.getvalue()
    threading.Event().wait(0.05)
    assert stream.getvalue() == after
    assert "\r" not in after
    assert all(line.startswith("nanobot: waiting") for line in after.splitlines())


def test_the_live_line_is_rewritten_and_cleared(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a TTY the line is redrawn in place and erased before other output and at the end."""
    monkeypatch.setattr(_waiting, "TTY_INTERVAL", 0.01)
    stream = io.StringIO()
    display = WaitDisplay(stream, live=True)
    display(ModelWaiting(1))
    _wait_for(stream, "\r\x1b[2Knanobot: waiting for the model (round 1):")
    display(ToolStarted("grep", "c1"))
    display.stop()
    text = stream.getvalue()
    assert "\n" not in text.split("nanobot: tool grep: running\n")[0].replace("\r\x1b[2K", "")
    assert "nanobot: tool grep: running\n" in text
    assert text.endswith("\r\x1b[2K") or text.endswith("running\n")


def test_other_events_are_printed_as_lines() -> None:
    """Events other than the model wait are printed as one line each, prefixed."""
    stream = io.StringIO()
    display = WaitDisplay(stream, live=False)
    display(ToolStarted("read_file", "c1"))
    assert stream.getvalue() == "nanobot: tool read_file: running\n"


def test_on_a_terminal_stream_only_the_displays_own_sequence_is_raw(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the CLI's escaping stand-in, the erase-line sequence is written as it is and
    an event naming a hostile tool is shown escaped."""
    from nanobot_core._terminal import TerminalStream

    monkeypatch.setattr(_waiting, "TTY_INTERVAL", 0.01)
    real = io.StringIO()
    display = WaitDisplay(TerminalStream(real), live=True)
    display(ModelWaiting(1))
    _wait_for(real, "\r\x1b[2Knanobot: waiting for the model (round 1):")
    display(ToolStarted("x\x1b]0;owned\x07", "c1"))
    display.stop()
    text = real.getvalue()
    assert "nanobot: tool x\\x{1b}]0;owned\\x{07}: running\n" in text
    assert "\x07" not in text and text.replace("\r\x1b[2K", "").count("\x1b") == 0
