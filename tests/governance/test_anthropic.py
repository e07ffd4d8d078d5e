"""Anthropic-style content blocks go through the same stages behind the adapter."""

from __future__ import annotations

from typing import Any

from nanobot_core.config import GovernanceConfig
from nanobot_core.governance import Governor, builtin_stages
from nanobot_core.governance.anthropic import from_openai_shape, is_anthropic_shape, to_openai_shape
from nanobot_core.governance.stages.backfill import INTERRUPTED

THINKING = {"type": "thinking", "thinking": "check the order", "signature": "EqQBCgIYAhIM1gbcDa"}


def _use(identifier: str, name: str | None = "get_order", **extra: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": identifier, "name": name, "input": {"order": 7}, **extra}


def _result(identifier: str, content: Any = "shipped", **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": identifier, "content": content, **extra}


def _governor() -> Governor:
    return Governor(builtin_stages(), config=GovernanceConfig())


def test_clean_anthropic_history_is_returned_as_is() -> None:
    """A legal Anthropic history is the same list after governance."""
    history = [
        {"role": "user", "content": "Where is order 7?"},
        {
            "role": "assistant",
            "content": [THINKING, {"type": "text", "text": "Checking."}, _use("toolu_1")],
        },
        {"role": "user", "content": [_result("toolu_1"), {"type": "text", "text": "and?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "It shipped."}]},
    ]
    result = _governor().govern(history)
    assert result.messages is history
    assert not result.report.changed


def test_missing_result_is_backfilled_as_a_tool_result_block() -> None:
    """A tool_use without a tool_result gets one, in the user message that follows."""
    history = [
        {"role": "user", "content": "Where is order 7?"},
        {
            "role": "assistant",
            "content": [THINKING, _use("toolu_1", cache_control={"type": "ephemeral"})],
        },
        {"role": "user", "content": "hello?"},
    ]
    messages = _governor().govern(history).messages
    assert messages[1] == history[1]
    assert messages[2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": INTERRUPTED},
            {"type": "text", "text": "hello?"},
        ],
    }


def test_orphan_and_duplicate_results_are_dropped() -> None:
    """tool_result blocks that answer nothing, or answer twice, are left out."""
    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [_use("toolu_A")]},
        {
            "role": "user",
            "content": [_result("toolu_A"), _result("toolu_A", "again"), _result("toolu_ghost")],
        },
    ]
    messages = _governor().govern(history).messages
    assert messages[2] == {"role": "user", "content": [_result("toolu_A")]}


def test_nameless_tool_use_is_dropped_with_its_result() -> None:
    """A tool_use without a name (a wedged session) is removed together with its result, and
    a text block after the reply's text says why."""
    history = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Let me see."}, _use("toolu_x", name=None)],
        },
        {
            "role": "user",
            "content": [_result("toolu_x", is_error=True), {"type": "text", "text": "well?"}],
        },
    ]
    messages = _governor().govern(history).messages
    notice = (
        "[None of the 1 tool call(s) of this reply could run. "
        "A tool call needs the name of the tool to run: call tools by their names.]"
    )
    assert messages == [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Let me see."}, {"type": "text", "text": notice}],
        },
        {"role": "user", "content": [{"type": "text", "text": "well?"}]},
    ]


def test_a_newest_reply_that_lost_its_nameless_tool_use_is_not_sent_last() -> None:
    """A newest reply whose one tool_use had no name, answered by a user message of its
    tool_result alone: the request does not end with the reply's notice (Anthropic refuses
    an assistant message last, or takes it as a reply to go on with), a user message does."""
    history = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Let me see."}, _use("toolu_x", name=None)],
        },
        {"role": "user", "content": [_result("toolu_x", "Error: no name", is_error=True)]},
    ]
    messages = _governor().govern(history).messages
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"][-1]["text"].startswith("[None of the 1 tool call(s)")
    assert messages[2] == {"role": "user", "content": "(continue)"}


def test_a_nameless_tool_use_beside_a_named_one_is_told_as_in_the_openai_shape() -> None:
    """The reply keeps its named call and gets the notice the OpenAI shape of the same history
    gets, as a text block before its tool_use blocks; governing that again changes nothing."""
    error = "Error: the tool call has no tool name. Available tools: get_order."
    anthropic = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [_use("a"), _use("b", name="")]},
        {"role": "user", "content": [_result("a"), _result("b", error)]},
    ]
    call_a = {"id": "a", "type": "function", "function": {"name": "get_order", "arguments": "{}"}}
    call_b = {"id": "b", "type": "function", "function": {"name": "", "arguments": "{}"}}
    openai = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call_a, call_b]},
        {"role": "tool", "tool_call_id": "a", "content": "shipped"},
        {"role": "tool", "tool_call_id": "b", "content": error},
    ]
    notice = _governor().govern(openai).messages[1]["content"]
    assert notice == (
        f"[1 of the 2 tool call(s) of this reply could not run: it was left out. {error}]"
    )
    governed = _governor().govern(anthropic)
    assert governed.messages == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "text", "text": notice}, _use("a")]},
        {"role": "user", "content": [_result("a")]},
    ]
    again = _governor().govern(governed.messages)
    assert again.messages is governed.messages


def test_block_keys_survive_the_round_trip() -> None:
    """Keys the adapter does not map (is_error, cache_control) come back on their blocks."""
    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [_use("a", cache_control={"type": "ephemeral"})]},
        {"role": "user", "content": [_result("a", "boom", is_error=True)]},
    ]
    converted = to_openai_shape(history)
    assert [m["role"] for m in converted] == ["user", "assistant", "tool"]
    assert from_openai_shape(converted) == history


def test_openai_history_is_not_taken_for_anthropic() -> None:
    """Text parts alone do not switch the adapter on."""
    assert not is_anthropic_shape([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    assert is_anthropic_shape([{"role": "assistant", "content": [_use("a")]}])
