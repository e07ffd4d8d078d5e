"""`drop_non_messages` on its own."""

from __future__ import annotations

from typing import Any

import pytest

from nanobot_core.governance.stages import drop_non_messages
from tests.governance.builders import run_pure, say, user


@pytest.mark.parametrize(
    "entry",
    [
        None,
        42,
        "hello",
        [],
        {"content": "no role"},
        {"role": None},
        {"role": "critic", "content": "fine"},
        {"role": "", "content": "?"},
    ],
)
def test_entries_that_are_not_messages_are_dropped(entry: Any) -> None:
    """Non-dicts and dicts without a known role are left out, and the report names them."""
    outcome = run_pure(drop_non_messages, [user(), entry, say()])
    assert outcome.changed
    assert outcome.messages == [user(), say()]
    assert outcome.details[0].startswith("messages[1]: dropped")


def test_every_known_role_is_kept() -> None:
    """system, developer, user, assistant and tool messages all stay (pairing is not its job)."""
    history = [
        {"role": "system", "content": "s"},
        {"role": "developer", "content": "d"},
        user(),
        say(),
        {"role": "tool", "tool_call_id": "x", "content": "r"},
    ]
    outcome = run_pure(drop_non_messages, history)
    assert not outcome.changed
    assert outcome.messages is history


def test_session_bookkeeping_is_stripped_in_the_copy_only() -> None:
    """`_meta` never reaches the model; the caller's message keeps it."""
    original = {"role": "user", "content": "hi", "_meta": {"time": "2025-01-01T00:00:00Z"}}
    outcome = run_pure(drop_non_messages, [original])
    assert outcome.messages == [{"role": "user", "content": "hi"}]
    assert "_meta" in original
    assert "_meta" in outcome.details[0]


def test_unknown_keys_pass_through() -> None:
    """Keys the pipeline does not know (reasoning, signatures) stay on kept messages."""
    message = {"role": "assistant", "content": "x", "reasoning_content": "why", "signature": "abc"}
    outcome = run_pure(drop_non_messages, [user(), message, 7])
    assert outcome.messages[1] is message


def test_a_legacy_function_message_becomes_a_tool_result_without_an_id() -> None:
    """The answer to a legacy function_call is kept as a tool result, its name and text whole."""
    answer = {"role": "function", "name": "get_weather", "content": "sunny", "_meta": {"t": 1}}
    outcome = run_pure(drop_non_messages, [user(), answer])
    assert outcome.messages == [
        user(),
        {"role": "tool", "tool_call_id": "", "name": "get_weather", "content": "sunny"},
    ]
    assert answer["role"] == "function" and "_meta" in answer
    assert outcome.details[0].startswith("messages[1]: a legacy function message became")
