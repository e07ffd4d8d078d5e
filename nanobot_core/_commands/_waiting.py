"""What ``run`` shows on stderr while the model thinks: elapsed time, live or every few seconds.

On a terminal one line is rewritten in place every `TTY_INTERVAL` seconds; otherwise
(a pipe, a log file) a line is written every `LOG_INTERVAL` seconds, so a log shows
the run is alive without filling up. Every other progress line is printed through
`WaitDisplay.show`, which clears the live line first. Progress is only shown: a
stderr that is closed or cannot be written (its reader went away) ends the display,
never the turn.
"""

from __future__ import annotations

import threading
import time
from typing import Any, TextIO

from nanobot_core._terminal import verbatim
from nanobot_core.runner import ModelReplied, ModelWaiting

__all__ = ["LOG_INTERVAL", "TTY_INTERVAL", "WaitDisplay"]

TTY_INTERVAL = 0.5
LOG_INTERVAL = 2.0
# Back to the start of the line, and erase it.
_ERASE_LINE = "\r\x1b[2K"


class WaitDisplay:
    """A progress callback that prints events and ticks while a model request is out."""

    def __init__(self, stream: TextIO | None, *, live: bool | None = None) -> None:
        self._stream = stream
        self._broken = stream is None  # no stderr at all (started with it closed)
        self._live = (stream is not None and stream.isatty()) if live is None else live
        self._lock = threading.Lock()
        self._stop: threading.Event | None = None
        self._ticker: threading.Thread | None = None
        self._shown = False  # whether a live line is on screen

    def __call__(self, event: Any) -> None:
        """Handle one progress event from the runner."""
        if isinstance(event, ModelWaiting):
            self._start(event.round)
        elif isinstance(event, ModelReplied):
            self.stop()
        else:
            self.show(f"nanobot: {event.describe()}")

    def show(self, line: str) -> None:
        """Print one line, clearing the live line first (it comes back on the next tick)."""
        with self._lock:
            self._clear()
            self._write(line + "\n")

    def stop(self) -> None:
        """Stop ticking and clear the live line."""
        if self._stop is not None and self._ticker is not None:
            self._stop.set()
            self._ticker.join()
        self._stop = self._ticker = None
        with self._lock:
            self._clear()

    def _start(self, round_number: int) -> None:
        self.stop()
        stop = threading.Event()
        interval = TTY_INTERVAL if self._live else LOG_INTERVAL
        ticker = threading.Thread(
            target=self._tick, args=(round_number, stop, interval), daemon=True
        )
        self._stop, self._ticker = stop, ticker
        ticker.start()

    def _tick(self, round_number: int, stop: threading.Event, interval: float) -> None:
        started = time.monotonic()
        while not stop.wait(interval):
            elapsed = time.monotonic() - started
            text = f"nanobot: waiting for the model (round {round_number}): {elapsed:.0f}s"
            with self._lock:
                if stop.is_set():
                    return
                if self._live:
                    self._write(text, clear=True)
                    self._shown = True
                else:
                    self._write(text + "\n")

    def _clear(self) -> None:
        if self._shown:
            self._write("", clear=True)
            self._shown = False

    def _write(self, text: str, *, clear: bool = False) -> None:
        """Write (after erasing the live line, with `clear`) and flush; once the stream
        fails, nothing more is written to it."""
        if self._broken or self._stream is None:
            return
        try:
            if clear:
                # The display's own control sequence: written as it is where a terminal's
                # stream escapes every other (see nanobot_core._terminal).
                with verbatim():
                    self._stream.write(_ERASE_LINE)
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):  # a reader gone (EPIPE), a full disk, a closed file
            self._broken = True
