"""A turn the API paused (``stop_reason: "pause_turn"``) is sent back as it was, and continued."""

from __future__ import annotations

import asyncio
from importlib import metadata
from typing import Any

import pytest
from conftest import config_for
from hypothesis import given, settings
from hypothesis import strategies as st
from messages_server import MessagesServer, Reply, message_reply, text_reply
from nanobot_core import ProviderError
from nanobot_core.governance import OTHER_BLOCKS_KEY
from nanobot_core.providers import ProviderReply, Usage

from nanobot_anthropic.provider import MAX_CONTINUATIONS, AnthropicProvider

PLUGIN = f"nanobot-anthropic {metadata.version('nanobot-anthropic')}"
QUESTION = [{"role": "user", "content": "When did order 7 ship?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_order",
            "description": "Look an order up.",
            "parameters": {"type": "object", "properties": {"order": {"type": "integer"}}},
        },
    }
]
SEARCH_USE: dict[str, Any] = {
    "type": "server_tool_use",
    "id": "srvtoolu_01",
    "name": "web_search",
    "input": {"query": "order 7 shipping"},
}
SEARCH_RESULT: dict[str, Any] = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_01",
    "content": [
        {
            "type": "web_search_result",
            "url": "https://shop.example/orders/7",
            "title": "Order 7",
            "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1",
            "page_age": None,
        }
    ],
}


def _complete(server: MessagesServer) -> ProviderReply:
    provider = AnthropicProvider(config_for(server), environ={})
    return asyncio.run(provider.complete(QUESTION, TOOLS))


def _paused(blocks: list[dict[str, Any]], **kwargs: Any) -> Reply:
    return message_reply(blocks, "pause_turn", **kwargs)


def test_a_paused_turn_is_sent_back_as_it_was_and_the_continuation_completes_the_reply(
    server: MessagesServer,
) -> None:
    """The second request is the first plus the paused content as the assistant's turn; the
    reply holds the whole turn, its stop reason the last one, its usage both requests'."""
    paused: list[dict[str, Any]] = [
        {"type": "text", "text": "Let me look that up."},
        SEARCH_USE,
        SEARCH_RESULT,
    ]
    server.add(
        _paused(paused, usage={"input_tokens": 100, "output_tokens": 20}),
        text_reply(" It shipped on Monday.", usage={"input_tokens": 150, "output_tokens": 8}),
    )
    reply = _complete(server)
    first, second = server.requests
    assert first.problems == [] and second.problems == []
    continued = [*first.body["messages"], {"role": "assistant", "content": paused}]
    assert second.body == {**first.body, "messages": continued}
    assert reply.content == "Let me look that up. It shipped on Monday."
    assert reply.message[OTHER_BLOCKS_KEY] == [SEARCH_USE, SEARCH_RESULT]
    assert reply.finish_reason == "end_turn"
    assert reply.usage == Usage(250, 28, 278, 0, 0)


def test_a_turn_paused_again_sends_back_everything_paused_so_far_in_one_turn(
    server: MessagesServer,
) -> None:
    """Each continuation carries the content of every pause so far, in order, as one turn."""
    one, two = [{"type": "text", "text": "Searching."}, SEARCH_USE], [SEARCH_RESULT]
    server.add(_paused(one), _paused(two), text_reply("Monday."))
    reply = _complete(server)
    assert [r.problems for r in server.requests] == [[], [], []]
    sent = [r.body["messages"][1:] for r in server.requests]
    assert sent == [
        [],
        [{"role": "assistant", "content": one}],
        [{"role": "assistant", "content": one + two}],
    ]
    assert reply.content == "Searching.Monday."
    assert reply.message[OTHER_BLOCKS_KEY] == [SEARCH_USE, SEARCH_RESULT]


def test_a_turn_still_paused_after_the_last_continuation_is_an_error_saying_so(
    server: MessagesServer,
) -> None:
    """No partial answer: after MAX_CONTINUATIONS continuations the error names the pause."""
    server.add(
        *[_paused([{"type": "text", "text": f"Step {n}."}]) for n in range(MAX_CONTINUATIONS + 1)]
    )
    with pytest.raises(ProviderError) as raised:
        _complete(server)
    assert len(server.requests) == MAX_CONTINUATIONS + 1
    assert all(r.problems == [] for r in server.requests)
    assert str(raised.value) == (
        f"{server.base_url}/v1/messages paused the model's turn {MAX_CONTINUATIONS + 1} times "
        f"in a row (stop_reason 'pause_turn': a server tool's long turn); {PLUGIN} "
        f"sends a paused turn back to be continued {MAX_CONTINUATIONS} times at most, so this "
        "turn ends without its answer"
    )


def test_a_paused_reply_with_a_call_to_run_is_returned_for_the_call_to_run(
    server: MessagesServer,
) -> None:
    """A paused reply holding a client tool_use is not sent back unanswered: the runner runs it."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_order", "input": {"order": 7}}
    server.add(_paused([call]))
    reply = _complete(server)
    assert len(server.requests) == 1
    assert [c["function"]["name"] for c in reply.tool_calls] == ["get_order"]
    assert reply.finish_reason == "pause_turn"


def test_an_unpaused_reply_is_one_request(server: MessagesServer) -> None:
    """Any other stop reason ends the call at its one request, as before."""
    server.add(text_reply("Monday."))
    assert _complete(server).content == "Monday."
    assert len(server.requests) == 1


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
_SERVER_BLOCK = st.fixed_dictionaries(
    {"type": st.just("server_tool_use"), "id": st.just("srvtoolu_9"), "name": st.just("web_fetch")},
    optional={"input": st.dictionaries(st.text(max_size=5), _JSON, max_size=3), "extra": _JSON},
)
_TEXT_BLOCK = st.fixed_dictionaries(
    {"type": st.just("text"), "text": st.text(min_size=1).filter(str.strip)},
    optional={"citations": st.lists(st.dictionaries(st.text(max_size=4), _JSON), max_size=2)},
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(_SERVER_BLOCK, _TEXT_BLOCK), min_size=1, max_size=4))
def test_whatever_a_paused_reply_holds_goes_back_unchanged(blocks: list[dict[str, Any]]) -> None:
    """Any content a server pauses with (unknown keys, odd text, nested input) is sent back equal
    to what came, and kept whole in the reply."""
    with MessagesServer([_paused(blocks), text_reply("done")]) as server:
        reply = _complete(server)
        assert [r.problems for r in server.requests] == [[], []]
        assert server.requests[1].body["messages"][-1] == {"role": "assistant", "content": blocks}
    servers = [b for b in blocks if b["type"] == "server_tool_use"]
    assert reply.message.get(OTHER_BLOCKS_KEY, []) == servers
    texts = "".join(b["text"] for b in blocks if b["type"] == "text")
    assert reply.content == texts + "done"
