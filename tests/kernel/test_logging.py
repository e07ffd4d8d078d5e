"""The core's logging: records go to the standard error stream of the moment."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator

import pytest
import structlog

from nanobot_core import _logging


@pytest.fixture
def fresh_logging() -> Iterator[None]:
    """Logging as a process starts it; the configuration before the test is put back after."""
    saved, ours = structlog.get_config(), _logging._configured_by_us
    settings = dict(_logging._settings)
    structlog.reset_defaults()
    _logging._configured_by_us = False
    try:
        yield
    finally:
        structlog.configure(**saved)
        _logging._configured_by_us = ours
        _logging._settings.update(settings)


def test_records_follow_stderr_after_a_redirection_ends(fresh_logging: None) -> None:
    """Set up under a redirection that is then closed, later records reach the new stderr."""
    during, after = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(during):
        _logging.configure_logging(level="warning")
        _logging.get_logger("test").warning("while redirected")
    during.close()
    with contextlib.redirect_stderr(after):
        _logging.get_logger("test").warning("after the redirection", key="value")
    assert "after the redirection" in after.getvalue()
    assert "key=value" in after.getvalue()


def test_records_below_the_level_are_dropped(fresh_logging: None) -> None:
    """A record under the configured level writes nothing."""
    stream = io.StringIO()
    with contextlib.redirect_stderr(stream):
        _logging.configure_logging(level="error")
        _logging.get_logger("test").warning("quiet")
        _logging.get_logger("test").error("loud")
    assert "quiet" not in stream.getvalue() and "loud" in stream.getvalue()


def test_a_plugin_print_under_an_application_logging_to_stdout_is_logged_once(
    fresh_logging: None,
) -> None:
    """With structlog set up by the application to print to stdout, a plugin's print is one
    record on the real stdout; logging it does not print into the stand-in again (a deadlock)."""
    import sys
    import threading

    from nanobot_core._containment import plugin_code

    real = io.StringIO()
    done = threading.Event()

    def chatty_plugin() -> None:
        with contextlib.redirect_stdout(real):
            structlog.configure(
                processors=[structlog.processors.JSONRenderer()],
                logger_factory=lambda *_: structlog.PrintLogger(sys.stdout),
            )
            with plugin_code("plugin 'chatty' 1.0"):
                print("hello from a plugin")
        done.set()

    worker = threading.Thread(target=chatty_plugin, daemon=True)
    worker.start()
    worker.join(10)
    assert done.is_set(), "printing from plugin code under stdout logging never returned"
    lines = real.getvalue().splitlines()
    assert len(lines) == 1
    assert '"plugin wrote to stdout"' in lines[0] and "hello from a plugin" in lines[0]
