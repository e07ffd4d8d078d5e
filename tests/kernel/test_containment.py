"""Describing what plugin code raised never raises: its message is the plugin's code too."""

from __future__ import annotations

import signal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nanobot_core._containment import _on_sigint, contained, describe, plugin_code
from nanobot_core.errors import PluginEscapeError


class _PluginsOwn(BaseException):
    """A plugin's own exception outside the ``Exception`` tree."""


def _with_message(base: type[BaseException], message: Any) -> BaseException:
    """An instance of a `base` subclass whose ``__str__`` returns `message`, or raises it."""

    def __str__(self: BaseException) -> Any:
        if isinstance(message, BaseException):
            raise message
        return message

    return type("Raised", (base,), {"__str__": __str__})()


class _ReprRaises:
    def __repr__(self) -> str:
        raise SystemExit(5)


@given(text=st.text(), base=st.sampled_from([ValueError, _PluginsOwn, GeneratorExit]))
def test_a_readable_message_is_given_after_the_type(text: str, base: type[BaseException]) -> None:
    """Whatever text an exception's message holds, it follows the type name (alone when empty)."""
    said = describe(_with_message(base, text))
    assert said == (f"Raised: {text}" if text else "Raised")


_UNREADABLE: list[tuple[Any, str]] = [
    (SystemExit(4), "SystemExit"),
    (KeyboardInterrupt(), "KeyboardInterrupt"),  # raised by the plugin, not by a Ctrl-C
    (GeneratorExit(), "GeneratorExit"),
    (_PluginsOwn(), "_PluginsOwn"),
    (RuntimeError("no text"), "RuntimeError"),
    (42, "TypeError"),  # a __str__ returning no str
]


@pytest.mark.parametrize(("raised", "unreadable"), _UNREADABLE)
@pytest.mark.parametrize("base", [ValueError, _PluginsOwn])
def test_a_message_that_cannot_be_read_gives_the_type_name(
    raised: Any, unreadable: str, base: type[BaseException]
) -> None:
    """A __str__ that raises (SystemExit too) or returns no str is named, never raised on."""
    said = describe(_with_message(base, raised))
    assert said == f"Raised (its message could not be read: {unreadable})"
    assert contained(_with_message(ValueError, raised)) == said


def test_a_system_exit_code_whose_repr_raises_is_named() -> None:
    """SystemExit's code is shown by its repr, the plugin's code: one that raises is contained."""
    said = describe(SystemExit(_ReprRaises()))
    assert said == "SystemExit (its message could not be read: SystemExit)"


@pytest.mark.parametrize(
    ("raised", "said"),
    [
        (SystemExit(4), "SystemExit"),
        (_PluginsOwn(), "_PluginsOwn"),
    ],
)
def test_plugin_code_contains_an_escape_whose_message_raises(raised: Any, said: str) -> None:
    """An escaping exception whose __str__ raises becomes a PluginEscapeError naming its type."""
    with pytest.raises(PluginEscapeError) as caught, plugin_code("plugin 'p' from p 1.0"):
        raise _with_message(_PluginsOwn, raised)
    assert str(caught.value) == f"raised Raised (its message could not be read: {said})"


def test_a_real_ctrl_c_while_the_message_is_read_goes_on() -> None:
    """A Ctrl-C arriving while a message's __str__ runs (one that hangs) stops the caller."""

    class _Hangs(ValueError):
        def __str__(self) -> str:
            _on_sigint(signal.SIGINT, None)
            return "never"

    with pytest.raises(KeyboardInterrupt):
        describe(_Hangs())


def test_a_real_ctrl_c_raised_on_without_its_traceback_goes_on() -> None:
    """A Ctrl-C a driver raises on stripped of its traceback (psycopg does) is not contained."""
    with pytest.raises(KeyboardInterrupt), plugin_code("plugin 'p' from p 1.0"):
        try:
            _on_sigint(signal.SIGINT, None)
        except KeyboardInterrupt as exc:
            raise exc.with_traceback(None) from None


def test_a_plugins_own_keyboard_interrupt_without_a_traceback_is_contained() -> None:
    """A KeyboardInterrupt the plugin made itself is its failure, however it is raised."""
    with pytest.raises(PluginEscapeError), plugin_code("plugin 'p' from p 1.0"):
        raise KeyboardInterrupt().with_traceback(None)
