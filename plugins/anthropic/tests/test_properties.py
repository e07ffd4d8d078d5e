"""Whatever history governance hands over, the request built from it is legal for the API."""

from __future__ import annotations

import json
from typing import Any, Literal

from hypothesis import given, settings
from hypothesis import strategies as st
from messages_server import API_KEY, check_request
from nanobot_core.config import GovernanceConfig, ProviderConfig
from nanobot_core.governance import Governor, builtin_stages

from nanobot_anthropic.provider import AnthropicProvider

HEADERS = {
    "x-api-key": API_KEY,
    "anthropic-version": "2023-06-01",
    "content-type": "application/json",
}
_TEXT = st.sampled_from(["", " ", "\n", "ok", "a longer text " * 40, "\\ud800", "\ud800", "é"])
_IDS = st.sampled_from(["c1", "c2", "c3", "", "toolu_9"])


@st.composite
def _message(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["user", "assistant", "calls", "tool", "system", "thinking"]))
    if kind == "calls":
        calls = [
            {
                "id": draw(_IDS),
                "type": "function",
                "function": {
                    "name": "get",
                    "arguments": draw(
                        st.sampled_from(['{"a": 1}', "{", '"x"', '{"q": "\\ud800"}'])
                    ),
                },
            }
            for _ in range(draw(st.integers(1, 3)))
        ]
        return {"role": "assistant", "content": draw(_TEXT), "tool_calls": calls}
    if kind == "tool":
        return {"role": "tool", "tool_call_id": draw(_IDS), "content": draw(_TEXT)}
    if kind == "thinking":
        block = {"type": "thinking", "thinking": "hm", "signature": "c2ln"}
        return {"role": "assistant", "content": draw(_TEXT), "thinking_blocks": [block]}
    return {"role": kind, "content": draw(_TEXT)}


@settings(max_examples=400, deadline=None)
@given(st.lists(_message(), min_size=1, max_size=12), st.booleans())
def test_every_governed_history_makes_a_legal_request(
    history: list[Any], long_system: bool
) -> None:
    """Alternation, pairing, block shapes, marks and UTF-8 hold for any governed history."""
    history.append({"role": "user", "content": "go on"})
    governed = Governor(builtin_stages(), config=GovernanceConfig()).govern(history)
    system = [{"role": "system", "content": "sys " * (2000 if long_system else 1)}]
    provider = AnthropicProvider(
        ProviderConfig(model="claude-sonnet-4-5", api_key="sk-test"), environ={}
    )
    body = provider.request_body([*system, *governed.messages], [])
    assert check_request(HEADERS, body) == []
    json.dumps(body, ensure_ascii=False).encode("utf-8")  # raises on a lone surrogate


_MARK = {"type": "ephemeral"}


@st.composite
def _marked_block(draw: st.DrawFn) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": draw(st.sampled_from(["ok", "word " * 600]))}
    if draw(st.booleans()):
        block["cache_control"] = _MARK
    return block


@st.composite
def _anthropic_step(draw: st.DrawFn, number: int) -> list[dict[str, Any]]:
    """A tool_use turn and its results, with marks anywhere a stored history may hold them."""
    ids = [f"t{number}_{k}" for k in range(draw(st.integers(1, 3)))]
    uses = [{"type": "tool_use", "id": i, "name": "get", "input": {}} for i in ids]
    results = [
        {
            "type": "tool_result",
            "tool_use_id": i,
            "content": draw(st.lists(_marked_block(), min_size=1, max_size=3)),
            **({"cache_control": _MARK} if draw(st.booleans()) else {}),
        }
        for i in ids
    ]
    return [
        {"role": "assistant", "content": [*draw(st.lists(_marked_block(), max_size=1)), *uses]},
        {"role": "user", "content": results},
    ]


@settings(max_examples=200, deadline=None)
@given(st.data(), st.integers(0, 8), st.sampled_from(["5m", "1h"]))
def test_marks_stored_anywhere_in_a_history_never_add_up_past_four(
    data: st.DataObject, steps: int, ttl: Literal["5m", "1h"]
) -> None:
    """Whatever marks a stored Anthropic-shape history holds, a request carries at most four."""
    history: list[Any] = [
        {"role": "system", "content": data.draw(st.lists(_marked_block(), min_size=1, max_size=2))},
        {"role": "user", "content": data.draw(st.lists(_marked_block(), min_size=1, max_size=3))},
    ]
    for number in range(steps):
        history += data.draw(_anthropic_step(number))
    provider = AnthropicProvider(
        ProviderConfig(model="claude-sonnet-4-5", api_key="sk-test", cache=ttl),
        environ={},
    )
    body = provider.request_body(history, [])
    assert check_request(HEADERS, body) == []
    assert json.dumps(body).count("cache_control") <= 4


_BLANKISH = st.one_of(
    _TEXT,
    st.lists(
        st.sampled_from(
            [
                {"type": "text", "text": " "},
                {"type": "text"},
                {"type": "image_url", "image_url": {"url": ""}},
                {"type": "file", "file": {}},
                "",
            ]
        ),
        max_size=3,
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["user", "system"]), _BLANKISH), max_size=5))
def test_a_history_of_blank_user_turns_still_makes_a_legal_request(
    entries: list[tuple[str, Any]],
) -> None:
    """However blank the user's messages are, the request holds a user turn the API takes."""
    history = [{"role": role, "content": content} for role, content in entries]
    governed = Governor(builtin_stages(), config=GovernanceConfig()).govern(history)
    provider = AnthropicProvider(
        ProviderConfig(model="claude-sonnet-4-5", api_key="sk-test"), environ={}
    )
    assert check_request(HEADERS, provider.request_body(governed.messages, [])) == []


_STRAY_USE = {"type": "tool_use", "id": "stray", "name": "get", "input": {}}
_ODD_BLOCKS = st.sampled_from(
    [
        {"type": "text", "text": "ok"},
        {"type": "text", "text": " "},
        {"text": "no type"},
        {"type": None},
        {"type": "thinking", "thinking": "unsigned"},
        {"type": "thinking", "thinking": "signed", "signature": "c2ln"},
        {"type": "redacted_thinking"},
        _STRAY_USE,
        {"type": "tool_result", "tool_use_id": "stray", "content": "x"},
        {"type": "server_tool_use", "id": "srv", "name": "web_search", "input": {}},
        {"type": "web_search_tool_result", "tool_use_id": "srv", "content": []},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "document", "source": {"type": "file", "file_id": "file_1"}},
        {"type": "search_result", "source": "s", "title": "t", "content": []},
        "plain text",
        7,
    ]
)


@st.composite
def _odd_message(draw: st.DrawFn) -> dict[str, Any]:
    blocks = st.lists(_ODD_BLOCKS, max_size=3)
    role = draw(st.sampled_from(["user", "assistant", "calls", "tool"]))
    if role == "tool":
        content = draw(st.one_of(_TEXT, blocks))
        return {"role": "tool", "tool_call_id": draw(_IDS), "content": content}
    message: dict[str, Any] = {"role": "assistant" if role == "calls" else role}
    message["content"] = draw(blocks)
    if role != "user":
        message["thinking_blocks"] = draw(blocks)
        message["anthropic_blocks"] = draw(blocks)
    if role == "calls":  # beside any tool_use blocks the content holds
        call = {
            "id": draw(_IDS),
            "type": "function",
            "function": {"name": "get", "arguments": "{}"},
        }
        message["tool_calls"] = [call]
    return message


@settings(max_examples=400, deadline=None)
@given(st.lists(_odd_message(), max_size=8))
def test_blocks_of_any_kind_anywhere_make_a_legal_request(history: list[Any]) -> None:
    """Untyped, unsigned or wrong-role blocks in any message never reach the API."""
    history.append({"role": "user", "content": "go on"})
    governed = Governor(builtin_stages(), config=GovernanceConfig()).govern(history)
    provider = AnthropicProvider(
        ProviderConfig(model="claude-sonnet-4-5", api_key="sk-test"), environ={}
    )
    assert check_request(HEADERS, provider.request_body(governed.messages, [])) == []
