"""The core's logging: records go to the standard error stream of the moment."""

from __future__ import annotations

import collections
import contextlib
import io
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from nanobot_core import _logging
from tests.helpers import run_python


@pytest.fixture
def fresh_logging() -> Iterator[None]:
    """Logging as a process starts it; the configuration before the test is put back after."""
    saved, was_configured = structlog.get_config(), structlog.is_configured()
    ours, saved_settings = _logging._configured_by_us, dict(_logging._settings)
    structlog.reset_defaults()
    _logging._configured_by_us = False
    try:
        yield
    finally:
        structlog.reset_defaults()
        if was_configured:
            structlog.configure(**saved)
        _logging._configured_by_us = ours
        _logging._settings.update(saved_settings)


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


# An application that set structlog up with its default output, stdout, then runs plugin
# code that logs. Run in a process of its own: a deadlock there fails the test at its
# timeout instead of hanging the suite.
_STDOUT_APP = """
import contextvars, sys, threading, time, structlog
from nanobot_core._containment import plugin_code
from nanobot_core._logging import get_logger
structlog.configure(processors=[structlog.processors.KeyValueRenderer(sort_keys=True)])
case = sys.argv[1]
with plugin_code("plugin 'chatty' from chatty 1.0"):
    if case == "core":
        get_logger("nanobot_core.test").warning("a record of the core")
    elif case == "plugin":
        structlog.get_logger("chatty").info("a record of the plugin")
    else:
        # Started with a copy of the context, as asyncio.to_thread starts its work.
        work = contextvars.copy_context()
        chatter = lambda: (time.sleep(0.3), print("printed late"))
        late = threading.Thread(target=work.run, args=(chatter,))
        late.start()
late.join() if case == "late" else None
time.sleep(0.5)  # the late print is logged from a thread of its own
print("the end", file=sys.stderr)
"""


def _stdout_app(case: str) -> list[str]:
    """The stdout lines of `_STDOUT_APP` run for `case`; it must end on its own."""
    done = run_python(_STDOUT_APP, case)
    assert done.returncode == 0 and "the end" in done.stderr, done.stderr
    return done.stdout.splitlines()


def test_a_core_record_inside_plugin_code_goes_where_the_application_sends_it() -> None:
    """The core's own record, written to stdout by the application's set-up, passes as is."""
    assert _stdout_app("core") == ["event='a record of the core'"]


def test_a_plugins_own_structlog_record_to_stdout_is_logged_without_a_deadlock() -> None:
    """A plugin's structlog print to stdout, under its logger's lock, is logged once its code
    returns (logged at once, it waited for that lock forever)."""
    (line,) = _stdout_app("plugin")
    assert "event='plugin wrote to stdout'" in line
    assert "plugin=\"plugin 'chatty' from chatty 1.0\"" in line
    assert "a record of the plugin" in line


def test_a_print_after_the_plugin_code_returned_is_logged_too() -> None:
    """A thread of the plugin's (with its context) that prints after its code returned is
    still logged."""
    (line,) = _stdout_app("late")
    assert "event='plugin wrote to stdout'" in line and "printed late" in line


def test_a_plugins_prints_are_logged_with_the_spaces_and_line_ends_between_them() -> None:
    """Several prints of plugin code make one warning that reads as they were printed."""
    from structlog.testing import capture_logs

    from nanobot_core._containment import plugin_code

    with capture_logs() as logs, plugin_code("plugin 'chatty' from chatty 1.0"):
        print("PLUGIN PRINT", "hi")
        print("second line")
    (record,) = [entry for entry in logs if entry["event"] == "plugin wrote to stdout"]
    assert record["text"] == "PLUGIN PRINT hi\nsecond line"


# A process whose first use of structlog is a test's capture_logs (a plugin author's test
# module, or ours run first): the block ends with structlog's defaults put back, yet
# `structlog.is_configured()` stays true.
_CAPTURE_FIRST = """
import structlog
from structlog.testing import capture_logs
from nanobot_core._logging import get_logger
with capture_logs() as logs:
    structlog.get_logger("a plugin").info("captured")
assert [e["event"] for e in logs] == ["captured"], logs
assert structlog.is_configured()
get_logger("nanobot_core.test").debug("a debug record of the core")
get_logger("nanobot_core.test").warning("a warning of the core")
"""


def test_after_capture_logs_ends_the_cores_records_go_to_stderr_at_its_level() -> None:
    """What capture_logs leaves behind is not the application's set-up: the core's warning
    goes to stderr, its debug record is dropped, and nothing is written to stdout."""
    done = run_python(_CAPTURE_FIRST, check=True)
    assert done.stdout == ""
    assert "a warning of the core" in done.stderr
    assert "a debug record of the core" not in done.stderr


def _fresh_default_processors() -> list[Any]:
    """New processors built as structlog builds its defaults (equal, not the same objects)."""
    return [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.StackInfoRenderer(),
        structlog.dev.set_exc_info,
        structlog.processors.TimeStamper(fmt="%Y-%m-%d %H:%M:%S", utc=False),
        structlog.dev.ConsoleRenderer(colors=False),
    ]


# Each setting an application may give structlog.configure, as something of its own.
_OWN_SETTINGS: dict[str, Callable[[], Any]] = {
    "processors": _fresh_default_processors,
    "wrapper_class": lambda: structlog.make_filtering_bound_logger(logging.DEBUG),
    "context_class": lambda: collections.OrderedDict,
    "logger_factory": structlog.PrintLoggerFactory,
    "cache_logger_on_first_use": lambda: True,
}


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    own=st.sets(st.sampled_from(sorted(_OWN_SETTINGS))),
    captured_before=st.booleans(),
    handed_back=st.booleans(),
)
def test_the_application_keeps_control_with_any_setting_of_its_own(
    fresh_logging: None, own: set[str], captured_before: bool, handed_back: bool
) -> None:
    """structlog configured with any setting of the application's own (processors even built
    like the defaults) gets the core's debug records on its stdout; configured with
    structlog's defaults only (nothing, or the defaults handed back, or what capture_logs
    leaves) it does not, and the core's warning goes to stderr."""
    structlog.reset_defaults()
    _logging._configured_by_us = False
    if captured_before:
        with capture_logs():
            pass
    given_settings = {name: _OWN_SETTINGS[name]() for name in own}
    if handed_back:
        given_settings.setdefault("processors", structlog.get_config()["processors"])
    structlog.configure(**given_settings)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        _logging.get_logger("nanobot_core.test").debug("a debug record")
        _logging.get_logger("nanobot_core.test").warning("a warning")
    if own:
        assert "a debug record" in out.getvalue() and "a warning" in out.getvalue()
        assert err.getvalue() == ""
    else:
        assert out.getvalue() == ""
        assert "a debug record" not in err.getvalue() and "a warning" in err.getvalue()


def test_a_capture_inside_the_applications_set_up_leaves_it_in_control(
    fresh_logging: None,
) -> None:
    """capture_logs used after the application configured structlog puts the application's
    processors back, and the core's records keep following them."""
    structlog.configure(processors=[structlog.processors.KeyValueRenderer()])
    with capture_logs():
        pass
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        _logging.get_logger("nanobot_core.test").debug("a debug record")
    assert out.getvalue() == "event='a debug record'\n" and err.getvalue() == ""
