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
