"""The provider only reads what it is handed: the messages, their blocks, the tool definitions.

It declares ``leaves_input_unchanged``, so the runner hands it the session's own
objects rather than copies; changing any of them would change the session and
every later request.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

from conftest import config_for
from hypothesis import given, settings
from hypothesis import strategies as st
from messages_server import MessagesServer, Reply, error_reply, text_reply
from nanobot_core import ProviderError
from nanobot_core.config import GovernanceConfig
from nanobot_core.governance import Governor, builtin_stages

from nanobot_anthropic.provider import AnthropicProvider

_LONG = "word " * 600  # past the minimum cacheable length, so marks are placed
_TEXT = st.sampled_from(["", " ", "ok", "é", "\ud800", "\\ud800", _LONG])
_IDS = st.sampled_from(["c1", "c2", "call.3/x", "toolu_01", "c" * 60, ""])
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
_DATA_URLS = st.sampled_from(
    ["data:image/png;base64,iVBORw0KGgo=", "https://example.com/a.png", "data:,x", ""]
)


def _mark(draw: st.DrawFn) -> dict[str, Any]:
    """Nothing, or a ``cache_control`` mark such as a stored history may hold."""
    if not draw(st.booleans()):
        return {}
    control = {"type": "ephemeral", **({"ttl": "1h"} if draw(st.booleans()) else {})}
    return {"cache_control": control}


@st.composite
def _text_block(draw: st.DrawFn) -> dict[str, Any]:
    extra: dict[str, Any] = {"citations": []} if draw(st.booleans()) else {}
    return {"type": "text", "text": draw(_TEXT), **extra, **_mark(draw)}


@st.composite
def _thinking_block(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        return {"type": "redacted_thinking", "data": draw(st.sampled_from(["ZGF0YQ==", ""]))}
    signature = draw(st.sampled_from(["c2ln", ""]))
    return {"type": "thinking", "thinking": draw(_TEXT), "signature": signature}


@st.composite
def _media_block(draw: st.DrawFn) -> Any:
    """An image, file, document or audio part, in either API's shape, or plain text."""
    kind = draw(st.sampled_from(["image_url", "image", "file", "document", "audio", "str"]))
    if kind == "image_url":
        return {"type": "image_url", "image_url": {"url": draw(_DATA_URLS), "detail": "low"}}
    if kind == "image":
        source = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
        return {"type": "image", "source": source, **_mark(draw)}
    if kind == "file":
        file = {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"}
        return {"type": "file", "file": draw(st.sampled_from([file, {"file_id": "file_1"}]))}
    if kind == "document":
        return {"type": "document", "source": {"type": "file", "file_id": "file_1"}}
    if kind == "audio":
        return {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    return draw(_TEXT)


def _arguments() -> st.SearchStrategy[Any]:
    texts = st.sampled_from(['{"a": 1}', "", "{", '"x"', '{"q": "\\ud800"}', '{"n": [1, 2]}'])
    return st.one_of(texts, st.none(), st.dictionaries(st.text(max_size=3), _JSON, max_size=3))


@st.composite
def _message(draw: st.DrawFn) -> dict[str, Any]:
    """A message of either shape: OpenAI's (tool calls, tool results) or Anthropic's blocks."""
    kind = draw(
        st.sampled_from(["system", "user", "calls", "tool", "uses", "results", "assistant"])
    )
    if kind == "system":
        content = draw(st.one_of(_TEXT, st.lists(_text_block(), max_size=2)))
        return {"role": "system", "content": content}
    if kind == "user":
        parts = st.lists(st.one_of(_text_block(), _media_block()), max_size=3)
        return {"role": "user", "content": draw(st.one_of(_TEXT, parts))}
    if kind == "tool":
        content = draw(st.one_of(_TEXT, st.lists(st.one_of(_text_block(), _media_block()))))
        return {"role": "tool", "tool_call_id": draw(_IDS), "content": content}
    if kind == "results":
        results = [
            {
                "type": "tool_result",
                "tool_use_id": draw(_IDS),
                "content": draw(st.one_of(_TEXT, st.lists(_text_block(), max_size=2))),
                **({"is_error": True} if draw(st.booleans()) else {}),
                **_mark(draw),
            }
            for _ in range(draw(st.integers(1, 2)))
        ]
        return {"role": "user", "content": [*results, *draw(st.lists(_text_block(), max_size=1))]}
    message: dict[str, Any] = {"role": "assistant"}
    if kind == "uses":
        uses = [
            {
                "type": "tool_use",
                "id": draw(_IDS),
                "name": "get",
                "input": draw(st.dictionaries(st.text(max_size=3), _JSON, max_size=3)),
                **_mark(draw),
            }
            for _ in range(draw(st.integers(1, 2)))
        ]
        blocks = st.lists(st.one_of(_text_block(), _thinking_block()), max_size=2)
        message["content"] = [*draw(blocks), *uses]
        return message
    message["content"] = draw(st.one_of(st.none(), _TEXT, st.lists(_text_block(), max_size=2)))
    if kind == "calls":
        message["tool_calls"] = [
            {
                "id": draw(_IDS),
                "type": "function",
                "function": {"name": "get", "arguments": draw(_arguments())},
            }
            for _ in range(draw(st.integers(1, 2)))
        ]
    if draw(st.booleans()):
        message["thinking_blocks"] = draw(st.lists(_thinking_block(), max_size=2))
    if draw(st.booleans()):
        server_use = {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {}}
        message["anthropic_blocks"] = [server_use]
    return message


@st.composite
def _tool(draw: st.DrawFn) -> dict[str, Any]:
    """A tool definition, nested schema and all, OpenAI's shape or the bare function."""
    schema = {
        "type": "object",
        "properties": {"q": {"type": "string", "default": draw(_JSON)}},
        "required": ["q"],
    }
    function: dict[str, Any] = {"name": draw(st.sampled_from(["get", "put", "find"]))}
    if draw(st.booleans()):
        function["description"] = draw(_TEXT)
    if draw(st.booleans()):
        function["parameters"] = schema
    if draw(st.booleans()):
        return function
    return {"type": "function", "function": function, **_mark(draw)}


def _fail(status: int) -> Reply:
    return error_reply(status, "overloaded_error" if status == 529 else "invalid", "no")


# What the server answers, and how many requests that makes (when the request is legal).
_OUTCOMES: dict[str, tuple[Callable[[], list[Reply]], int]] = {
    "answered": (lambda: [text_reply("ok")], 1),
    "retried": (lambda: [_fail(529), text_reply("ok")], 2),
    "refused": (lambda: [_fail(400)], 1),
    "gave up": (lambda: [_fail(529)] * 3, 3),
    "error body": (lambda: [Reply(200, {"type": "error", "error": {"message": "no"}})], 1),
}


def _containers(*values: Any) -> list[tuple[int, int]]:
    """The identity and size of every dict and list inside `values`, in walk order."""
    found: list[tuple[int, int]] = []
    stack = list(values)
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            found.append((id(value), len(value)))
            stack.extend(value.values())
        elif isinstance(value, list):
            found.append((id(value), len(value)))
            stack.extend(value)
    return found


@settings(max_examples=80, deadline=None)
@given(
    history=st.lists(_message(), max_size=8),
    tools=st.lists(_tool(), max_size=3),
    governed=st.booleans(),
    outcome=st.sampled_from(sorted(_OUTCOMES)),
    cache=st.sampled_from(["5m", "1h", "off"]),
    prefix=st.none() | st.integers(0, 10),
)
def test_the_provider_leaves_what_it_is_handed_unchanged(
    history: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    governed: bool,
    outcome: str,
    cache: str,
    prefix: int | None,
) -> None:
    """Messages, blocks, marks and tools stay as they were (the same objects) on every outcome."""
    assert AnthropicProvider.leaves_input_unchanged is True
    messages: list[Any] = history
    if governed:  # as the runner hands it: a governed history after a system prompt
        history.append({"role": "user", "content": "go on"})
        result = Governor(builtin_stages(), config=GovernanceConfig()).govern(history)
        messages = [{"role": "system", "content": _LONG}, *result.messages]
    expected = copy.deepcopy((messages, tools))
    identities = _containers(messages, tools)
    script, requests = _OUTCOMES[outcome]
    with MessagesServer(script()) as server:
        provider = AnthropicProvider(config_for(server, cache=cache), environ={})
        reply = error = None
        try:
            reply = asyncio.run(provider.complete(messages, tools, prefix=prefix))
        except ProviderError as exc:
            error = exc
    assert (messages, tools) == expected
    assert _containers(messages, tools) == identities
    if governed:  # a legal request: the server's script decides what happens
        assert [r.problems for r in server.requests] == [[]] * requests
        answered = outcome in ("answered", "retried")
        assert (reply is not None and reply.content == "ok") if answered else error is not None
