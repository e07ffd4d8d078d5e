"""The offline token estimate and request sizes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core.governance import EstimateCounter, count_request
from nanobot_core.governance.survey import FactsCache
from nanobot_core.governance.tokens import (
    MESSAGE_OVERHEAD,
    count_message,
    count_tools,
    estimate_tokens,
    scan_text,
    utf8_length,
)
from tests.governance.strategies import garbage_histories


class _WordCounter:
    def count_text(self, text: str) -> int:
        return len(text.split())


def test_estimate_is_utf8_bytes_over_four_rounded_up() -> None:
    """ASCII counts its length, other text its UTF-8 bytes, divided by four, rounded up."""
    counter = EstimateCounter()
    assert counter.count_text("") == 0
    assert counter.count_text("abcd") == 1
    assert counter.count_text("abcde") == 2
    assert counter.count_text("数据") == 2  # six bytes
    assert counter.count_text("\ud83d") == 1  # a lone surrogate counts its three bytes


def test_message_counts_every_string_inside_it() -> None:
    """Content, call names, arguments, ids and unknown keys all count, plus a fixed overhead."""
    message = {
        "role": "assistant",  # 9 characters: 3 tokens
        "content": None,
        "tool_calls": [
            {"id": "abcd", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
        "reasoning_content": "x" * 40,  # 10 tokens
    }
    # id 1 + "function" 2 + "f" 1 + "{}" 1
    assert count_message(message) == MESSAGE_OVERHEAD + 3 + 1 + 2 + 1 + 1 + 10


def test_request_adds_system_prompt_tools_and_messages() -> None:
    """A request is the system prompt (with overhead), the tools' JSON and every message."""
    tools = [{"type": "function", "function": {"name": "t"}}]
    messages = [{"role": "user", "content": "hello world"}]
    expected = (MESSAGE_OVERHEAD + 2) + count_tools(tools) + (MESSAGE_OVERHEAD + 1 + 3)
    assert count_request("12345678", messages, tools) == expected
    assert count_request(None, [], ()) == 0


def test_a_plugin_counter_is_used_for_every_string() -> None:
    """A counter from a plugin counts each string of a message with its own rule."""
    message = {"role": "user", "content": "three small words"}
    assert count_message(message, _WordCounter()) == MESSAGE_OVERHEAD + 1 + 3


def test_facts_cache_agrees_with_count_message() -> None:
    """The survey's memoised counts are the counts of `count_message`, with either counter."""
    message = {"role": "user", "content": "héllo wörld " * 10, "extra": ["a", {"b": "c"}]}
    assert FactsCache().tokens(message) == count_message(message)
    assert FactsCache(_WordCounter()).tokens(message) == count_message(message, _WordCounter())


def test_scan_finds_lone_surrogates_in_keys_and_nested_values() -> None:
    """The text scan flags unencodable strings wherever they are."""
    assert scan_text({"a": [{"b": "ok \ud83d"}]})[1]
    assert scan_text({"k\udfff": "v"})[1]
    assert not scan_text({"a": ["fine \U0001f600"]})[1]


@settings(max_examples=500, derandomize=True, deadline=None, database=None)
@given(history=garbage_histories())
def test_facts_count_any_entry_as_count_message_does(history: list[Any]) -> None:
    """The survey's shortcuts for common shapes never change a count, whatever the entry."""
    facts = FactsCache()
    assert [facts.tokens(entry) for entry in history] == [count_message(e) for e in history]


@settings(max_examples=500, derandomize=True, deadline=None, database=None)
@given(history=garbage_histories(), text=st.text(max_size=40))
def test_facts_of_a_replaced_content_are_those_learnt_afresh(history: list[Any], text: str) -> None:
    """Working out a new message's facts from the old one's agrees with reading it anew."""
    facts = FactsCache()
    for entry in history:
        if isinstance(entry, dict):
            replaced = facts.replace_content(entry, text)
            assert replaced[0] == {**entry, "content": text}
            assert replaced == FactsCache().of(replaced[0])
            assert replaced[1] == count_message(replaced[0])


@pytest.mark.parametrize("text", ["", "short", "é" * 9, "x" * 5_000])
@pytest.mark.parametrize(
    "message",
    [
        {"role": "tool", "tool_call_id": "c1", "content": "old output " * 50},
        {"role": "tool", "tool_call_id": "c1", "name": "grep", "content": "", "_meta": {}},
        {"role": "tool", "tool_call_id": 7, "content": "naïve"},
    ],
)
def test_replacing_a_result_text_gives_the_facts_of_the_new_message(
    message: dict[str, Any], text: str
) -> None:
    """A result whose text is replaced has the facts a fresh reading of it would give."""
    replaced = FactsCache().replace_content(message, text)
    assert replaced == FactsCache().of({**message, "content": text})


@given(text=st.text())
def test_the_one_estimate_is_what_the_default_counter_and_the_inlined_form_give(text: str) -> None:
    """`estimate_tokens` is the default counter's count, and ``(len + 3) >> 2`` for ASCII."""
    assert estimate_tokens(text) == EstimateCounter().count_text(text)
    assert estimate_tokens(text) == -(-utf8_length(text) // 4)
    if text.isascii():
        assert estimate_tokens(text) == (len(text) + 3) >> 2
