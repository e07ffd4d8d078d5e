"""The anthropic provider against a Messages API server on 127.0.0.1 that checks each request."""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import re
import time
import tracemalloc
from collections.abc import Sequence
from importlib import metadata
from typing import Any

import attrs
import httpx
import pytest
from conftest import config_for, retry_sink
from hypothesis import given, settings
from hypothesis import strategies as st
from messages_server import (
    API_KEY,
    MessagesServer,
    Reply,
    error_reply,
    message_reply,
    text_reply,
)
from nanobot_core import ProviderError
from nanobot_core.config import ProviderConfig
from nanobot_core.governance import to_messages_api
from nanobot_core.providers import ProviderReply, RetryNotice, request_fault
from nanobot_core.testing_http import RawLoopbackServer
from structlog.testing import capture_logs

from nanobot_anthropic.provider import AnthropicProvider, resolve_key

THINKING = {
    "type": "thinking",
    "thinking": "The user wants order 7.",
    "signature": "EqQBCgIYAhIM1gbcDa/x+==",
}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}
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
LONG_SYSTEM = "You are a careful assistant. " * 400  # well over the 1024-token minimum


def _provider(
    server: MessagesServer, notices: list[RetryNotice] | None = None, **changes: Any
) -> AnthropicProvider:
    return AnthropicProvider(
        config_for(server, **changes), progress=retry_sink(notices), environ={}
    )


def _complete(
    provider: AnthropicProvider, messages: list[dict[str, Any]], **kwargs: Any
) -> ProviderReply:
    return asyncio.run(provider.complete(messages, TOOLS, **kwargs))


def _marked(body: dict[str, Any]) -> list[str]:
    """Where the cache marks are: 'tools.N', 'system.N', 'messages.N.M'."""
    found = [f"tools.{n}" for n, t in enumerate(body.get("tools", [])) if "cache_control" in t]
    found += [f"system.{n}" for n, b in enumerate(body.get("system", [])) if "cache_control" in b]
    for n, message in enumerate(body["messages"]):
        found += [
            f"messages.{n}.{m}" for m, b in enumerate(message["content"]) if "cache_control" in b
        ]
    return found


def test_request_is_a_legal_messages_call_with_system_tools_and_headers(
    server: MessagesServer,
) -> None:
    """System at the top level, tools as input_schema, x-api-key and anthropic-version sent."""
    server.add(text_reply("hello"))
    reply = _complete(
        _provider(server),
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
    )
    assert reply.content == "hello" and reply.finish_reason == "end_turn"
    (request,) = server.requests
    assert request.problems == []
    assert request.headers["x-api-key"] == API_KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.body["system"] == [{"type": "text", "text": "be brief"}]
    assert request.body["tools"] == [
        {
            "name": "get_order",
            "description": "Look an order up.",
            "input_schema": {"type": "object", "properties": {"order": {"type": "integer"}}},
        }
    ]
    assert request.body["model"] == "claude-sonnet-4-5" and request.body["max_tokens"] == 8192
    assert _marked(request.body) == []  # all under the minimum cacheable length


def test_reply_with_thinking_and_tool_calls_keeps_everything(server: MessagesServer) -> None:
    """Thinking, text, tool calls, stop reason and cache usage all come back in the core shape."""
    usage = {
        "input_tokens": 12,
        "output_tokens": 30,
        "cache_read_input_tokens": 2000,
        "cache_creation_input_tokens": 300,
    }
    server.add(
        message_reply(
            [
                THINKING,
                REDACTED,
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_01", "name": "get_order", "input": {"order": 7}},
            ],
            "tool_use",
            usage=usage,
        )
    )
    reply = _complete(_provider(server), [{"role": "user", "content": "where is 7?"}])
    assert reply.finish_reason == "tool_use" and reply.model == "claude-test"
    assert reply.message["thinking_blocks"] == [THINKING, REDACTED]
    assert reply.content == "Let me look."
    assert reply.tool_calls == [
        {
            "id": "toolu_01",
            "type": "function",
            "function": {"name": "get_order", "arguments": '{"order": 7}'},
        }
    ]
    assert reply.usage.to_json() == {
        "prompt_tokens": 2312,
        "completion_tokens": 30,
        "total_tokens": 2342,
        "cache_read_input_tokens": 2000,
        "cache_creation_input_tokens": 300,
    }


def test_thinking_blocks_are_sent_back_byte_identical(server: MessagesServer) -> None:
    """The next request carries the thinking blocks first, with the very bytes received."""
    server.add(
        message_reply(
            [
                THINKING,
                {"type": "tool_use", "id": "toolu_01", "name": "get_order", "input": {"order": 7}},
            ],
            "tool_use",
        ),
        text_reply("It shipped."),
    )
    provider = _provider(server)
    history: list[dict[str, Any]] = [{"role": "user", "content": "where is 7?"}]
    first = _complete(provider, history)
    history += [first.message, {"role": "tool", "tool_call_id": "toolu_01", "content": "shipped"}]
    assert _complete(provider, history).content == "It shipped."
    second = server.requests[1]
    assert second.problems == []
    assistant = second.body["messages"][1]
    assert assistant["content"][0] == THINKING
    assert json.dumps(THINKING, ensure_ascii=False, separators=(",", ":")).encode() in second.raw
    assert second.body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "shipped"}
    ]


def test_429_with_retry_after_is_waited_for_then_retried(server: MessagesServer) -> None:
    """A 429 with retry-after: the wait is the server's (within the cap), then the answer."""
    server.add(
        error_reply(
            429,
            "rate_limit_error",
            "Number of requests has exceeded your rate limit",
            {"retry-after": "1"},
        ),
        text_reply("ok"),
    )
    notices: list[RetryNotice] = []
    reply = _complete(_provider(server, notices), [{"role": "user", "content": "hi"}])
    assert reply.content == "ok"
    (notice,) = notices
    assert notice.delay == pytest.approx(0.05)  # the server's second, cut to the cap
    assert (
        "HTTP 429: Number of requests has exceeded your rate limit (rate_limit_error)"
        in notice.reason
    )


def test_a_negative_retry_after_gets_the_normal_backoff(server: MessagesServer) -> None:
    """A retry-after of -5 is no valid wait (RFC 9110): the backoff's wait applies, not 0."""
    server.add(
        error_reply(529, "overloaded_error", "Overloaded", {"retry-after": "-5"}),
        text_reply("ok"),
    )
    notices: list[RetryNotice] = []
    provider = _provider(server, notices, backoff_base=0.2, retry_after_cap=5.0)
    reply = _complete(provider, [{"role": "user", "content": "hi"}])
    assert reply.content == "ok"
    (notice,) = notices
    assert 0.1 <= notice.delay <= 0.2  # the first backoff, jittered into its upper half


@pytest.mark.parametrize("value", ["+5", "5.5", "1e3", "0x10"])
def test_a_retry_after_that_is_not_whole_seconds_gets_the_normal_backoff(
    server: MessagesServer, value: str
) -> None:
    """A retry-after RFC 9110 does not allow (a sign, a fraction, an exponent, hex) asks for
    no wait: the backoff's wait applies, not the cap, as in the core."""
    server.add(
        error_reply(529, "overloaded_error", "Overloaded", {"retry-after": value}),
        text_reply("ok"),
    )
    notices: list[RetryNotice] = []
    provider = _provider(server, notices, backoff_base=0.2, retry_after_cap=0.5)
    assert _complete(provider, [{"role": "user", "content": "hi"}]).content == "ok"
    (notice,) = notices
    assert 0.1 <= notice.delay <= 0.2  # the first backoff, jittered into its upper half


def _raw_reply(body: dict[str, Any]) -> bytes:
    """A whole HTTP answer of 200 with `body`, as a raw server sends it."""
    data = json.dumps(body).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%b" % (len(data), data)


_OK_MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-test",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


@pytest.mark.parametrize(
    "answer",
    [
        b"SSH-2.0-OpenSSH_9.6\r\nInvalid SSH identification string.\r\n",
        b"\x15\x03\x01\x00\x02\x02\x32",  # a TLS server's alert, asked in plain HTTP
        b"HTTP/1.1 999 Odd\r\nContent-Length: 2\r\n\r\n{}",  # a status HTTP has not
    ],
)
def test_an_answer_that_is_not_http_is_not_retried_and_names_the_base_url_and_its_source(
    answer: bytes,
) -> None:
    """A server at ANTHROPIC_BASE_URL that does not speak HTTP is said at once, naming the
    variable that set the address; no retry, no notice."""
    notices: list[RetryNotice] = []
    with RawLoopbackServer(lambda number: answer) as raw:
        config = ProviderConfig(name="anthropic", api_key=API_KEY, max_retries=3)
        provider = AnthropicProvider(
            config, progress=retry_sink(notices), environ={"ANTHROPIC_BASE_URL": raw.url}
        )
        with pytest.raises(ProviderError) as raised:
            _complete(provider, [{"role": "user", "content": "hi"}])
        assert raw.connections == 1
    message = str(raised.value)
    assert notices == []
    assert message.startswith(f"{raw.url}/v1/messages")
    assert "the answer is not HTTP" in message and "not retried" in message
    assert message.endswith(
        f"[environment variable ANTHROPIC_BASE_URL: provider.base_url = '{raw.url}' "
        "(--base-url, NANOBOT_BASE_URL or ANTHROPIC_BASE_URL sets it)]"
    )


def test_a_reply_cut_off_in_its_body_is_retried() -> None:
    """A connection closed in the middle of the body is a transfer cut short: retried."""
    cut = b'HTTP/1.1 200 OK\r\nContent-Length: 400\r\n\r\n{"id": "msg'
    notices: list[RetryNotice] = []
    with RawLoopbackServer(lambda n: cut if n == 0 else _raw_reply(_OK_MESSAGE)) as raw:
        config = ProviderConfig(name="anthropic", api_key=API_KEY, backoff_base=0.001)
        provider = AnthropicProvider(
            config, progress=retry_sink(notices), environ={"ANTHROPIC_BASE_URL": raw.url}
        )
        reply = _complete(provider, [{"role": "user", "content": "hi"}])
        assert raw.connections == 2
    assert reply.content == "ok"
    (notice,) = notices
    assert "peer closed connection without sending complete message body" in notice.reason


def test_a_redirect_to_an_address_httpx_cannot_read_is_refused_as_a_redirect(
    server: MessagesServer,
) -> None:
    """A Location with a control character gives the refusal every redirect gets, once,
    not a connection error retried."""
    server.add(Reply(302, "", {"Location": "https://elsewhere.example/v1\x01"}))
    notices: list[RetryNotice] = []
    with pytest.raises(ProviderError) as raised:
        _complete(_provider(server, notices), [{"role": "user", "content": "hi"}])
    assert len(server.requests) == 1 and notices == []
    assert f"{server.base_url}/v1/messages refused the request: HTTP 302" in str(raised.value)


@pytest.mark.parametrize(
    ("location", "shown"),
    [
        (
            "https://user:pw@elsewhere.example/v1?key=" + API_KEY,
            "'https://***@elsewhere.example/v1?key=***'",
        ),
        ("/v1\x1b[31m" + "x" * 5_000, "'/v1\\x1b[31mxxx"),
    ],
)
def test_a_redirect_says_where_it_points_as_the_cores_redirect_error_does(
    server: MessagesServer, location: str, shown: str
) -> None:
    """A redirect's error quotes its Location (escaped, its password and the key masked, cut)
    and says why it was not followed and which setting to change, in the core's words."""
    server.add(Reply(307, "", {"Location": location}))
    notices: list[RetryNotice] = []
    with pytest.raises(ProviderError) as raised:
        _complete(_provider(server, notices), [{"role": "user", "content": "hi"}])
    assert len(server.requests) == 1 and notices == []
    message = str(raised.value)
    assert message.startswith(f"{server.base_url}/v1/messages refused the request: HTTP 307: ")
    assert f" [the server redirects to {shown}" in message
    assert message.endswith(
        "; redirects are not followed, so that the key never goes to another server: set "
        f"provider.base_url to the new address: provider.base_url = '{server.base_url}', set "
        "in code (--base-url, NANOBOT_BASE_URL or ANTHROPIC_BASE_URL sets it)]"
    )
    assert API_KEY not in message and "pw" not in message and "\x1b" not in message
    assert len(message) < 1_000


class _Redirecting(httpx.AsyncBaseTransport):
    """Answers every request with a redirect, reading none of it: no network is used."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        location = {"Location": "https://moved.example/v1"}
        return httpx.Response(307, headers=location, stream=httpx.ByteStream(b""))


@pytest.mark.parametrize(
    ("base_url", "said"),
    [
        (None, "provider.base_url = 'https://api.anthropic.com', the default"),
        (
            "https://gateway.example/v1",
            "provider.base_url = 'https://gateway.example/v1', set in code",
        ),
        (
            "https://api.anthropic.com",
            "provider.base_url = 'https://api.anthropic.com', set in code",
        ),
    ],
)
def test_a_base_url_no_source_set_is_said_to_be_the_default_only_when_it_is(
    base_url: str | None, said: str
) -> None:
    """A base URL no file, variable or option set is Anthropic's default only when the core's
    was left for it; one the program put in the config, even Anthropic's own, is set in code."""

    config = ProviderConfig(api_key=API_KEY, max_retries=0)
    if base_url is not None:
        config = attrs.evolve(config, base_url=base_url)
    provider = AnthropicProvider(config, transport=_Redirecting(), environ={})
    with pytest.raises(ProviderError) as raised:
        _complete(provider, [{"role": "user", "content": "hi"}])
    assert str(raised.value).endswith(
        f"{said} (--base-url, NANOBOT_BASE_URL or ANTHROPIC_BASE_URL sets it)]"
    )


def test_blocks_no_server_takes_back_are_dropped_with_a_warning_and_never_sent_back(
    server: MessagesServer,
) -> None:
    """Junk in a reply's content (not an object, no type, a text block without its text) is
    dropped, each named by index, so the next request is one the API takes."""
    junk = [5, {"text": "no type"}, {"type": "text", "text": "Order 7 shipped."}]
    junk.append({"type": "text", "text": ["not", "text"]})
    server.add(message_reply(junk), text_reply("done"))
    provider = _provider(server)
    history: list[dict[str, Any]] = [{"role": "user", "content": "where is order 7?"}]
    with capture_logs() as logs:
        reply = _complete(provider, history)
    assert reply.message == {"role": "assistant", "content": "Order 7 shipped."}
    (warning,) = [line for line in logs if line["log_level"] == "warning"]
    assert warning["parts"] == [
        "content[0] is an int, not an object",
        "content[1] has no 'type'",
        "content[3] is a text part whose 'text' is not a string",
    ]
    history += [reply.message, {"role": "user", "content": "thanks"}]
    assert _complete(provider, history).content == "done"
    assert [r.problems for r in server.requests] == [[], []]


def test_529_overloaded_is_retried_and_then_given_up(server: MessagesServer) -> None:
    """529 is retried; when every attempt is overloaded the error names it and the attempts."""
    server.add(*[error_reply(529, "overloaded_error", "Overloaded") for _ in range(3)])
    with pytest.raises(ProviderError) as raised:
        _complete(_provider(server), [{"role": "user", "content": "hi"}])
    assert "gave up after 3 attempt(s)" in str(raised.value)
    assert "HTTP 529: Overloaded (overloaded_error)" in str(raised.value)
    assert len(server.requests) == 3


def test_a_body_that_cannot_be_decompressed_is_retried_then_reported(
    server: MessagesServer,
) -> None:
    """A reply sent as gzip that is not gzip is retried, then a ProviderError (no httpx error)."""
    broken = Reply(body="not gzip", headers={"Content-Encoding": "gzip"})
    server.add(broken, broken, broken)
    notices: list[RetryNotice] = []
    with pytest.raises(ProviderError) as raised:
        _complete(_provider(server, notices), [{"role": "user", "content": "hi"}])
    assert "gave up after 3 attempt(s)" in str(raised.value)
    assert "could not be decompressed" in str(raised.value)
    assert [n.attempt for n in notices] == [1, 2]


@pytest.mark.parametrize("status", [200, 529])
def test_an_endless_reply_stops_at_the_limit_with_bounded_memory(
    server: MessagesServer, status: int
) -> None:
    """An endless body is a ProviderError at `max_reply_bytes`, not retried, memory bounded."""
    limit = 1024 * 1024
    server.add(text_reply("warm"), Reply(status, chunks=itertools.repeat(b" " * 65_536)))
    provider = _provider(server, max_reply_bytes=limit)
    assert _complete(provider, [{"role": "user", "content": "hi"}]).content == "warm"
    tracemalloc.start()
    try:
        with pytest.raises(ProviderError) as raised:
            _complete(provider, [{"role": "user", "content": "hi"}])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f"was larger than {limit} bytes (HTTP {status}; reading stopped" in str(raised.value)
    assert len(server.requests) == 2
    assert peak < 8 * limit


def test_a_huge_content_length_is_refused_before_the_body_is_read(server: MessagesServer) -> None:
    """A Content-Length over the limit (64 MiB by default) fails at once, naming it."""
    server.add(Reply(body=text_reply("x").body, headers={"Content-Length": str(10**12)}))
    with pytest.raises(ProviderError) as raised:
        _complete(_provider(server), [{"role": "user", "content": "hi"}])
    assert (
        "was larger than 67108864 bytes (HTTP 200 with Content-Length 1000000000000; "
        "none of it read)"
    ) in str(raised.value)
    assert len(server.requests) == 1


def test_a_gzip_reply_within_the_limit_is_decoded(server: MessagesServer) -> None:
    """A gzip-encoded reply is decoded as before; its decoded size is what the limit counts."""
    plain = json.dumps(text_reply("packed").body).encode()
    server.add(Reply(body=gzip.compress(plain), headers={"Content-Encoding": "gzip"}))
    provider = _provider(server, max_reply_bytes=len(plain))
    assert _complete(provider, [{"role": "user", "content": "hi"}]).content == "packed"


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (
            {"object": "chat.completion", "choices": [{"message": {"content": "hi"}}]},
            "top-level keys: choices, object; object: 'chat.completion'",
        ),
        ({"type": "message", "content": "hi"}, "top-level keys: content, type"),
        ({}, "top-level keys: (none)"),
    ],
)
def test_a_200_without_a_content_list_is_a_provider_error_naming_what_came_back(
    server: MessagesServer, body: dict[str, Any], named: str
) -> None:
    """A 200 body that is not a Messages API response fails at once instead of an empty answer."""
    server.add(Reply(body=body))
    with pytest.raises(ProviderError) as raised:
        _complete(_provider(server), [{"role": "user", "content": "hi"}])
    assert "not a Messages API response (no 'content' list)" in str(raised.value)
    assert named in str(raised.value)
    assert len(server.requests) == 1


def test_an_empty_content_list_is_an_empty_reply(server: MessagesServer) -> None:
    """A Messages API response with no blocks is an empty reply, not an error."""
    server.add(message_reply([]))
    reply = _complete(_provider(server), [{"role": "user", "content": "hi"}])
    assert reply.message == {"role": "assistant", "content": ""}


def test_a_reply_trickled_past_the_timeout_is_cut_off_and_retried(
    server: MessagesServer,
) -> None:
    """`provider.timeout` bounds the whole attempt: a byte every 20 ms does not keep it alive."""
    trickled = text_reply("late")
    trickled.pace = 0.02
    server.add(trickled, text_reply("ok"))
    notices: list[RetryNotice] = []
    started = time.monotonic()
    reply = _complete(_provider(server, notices, timeout=0.5), [{"role": "user", "content": "hi"}])
    assert reply.content == "ok"
    assert time.monotonic() - started < 3.0  # the trickle alone would take over 3 s
    (notice,) = notices
    assert "timed out after 0.5s" in notice.reason


def test_400_shows_anthropics_message_and_is_not_retried(server: MessagesServer) -> None:
    """A 400 is a ProviderError quoting the server's own message, after one attempt."""
    server.add(
        error_reply(
            400, "invalid_request_error", "messages.1.content.0.thinking.signature: Field required"
        )
    )
    with pytest.raises(ProviderError) as raised:
        _complete(_provider(server), [{"role": "user", "content": "hi"}])
    assert (
        "refused the request: HTTP 400: messages.1.content.0.thinking.signature: Field required"
        in str(raised.value)
    )
    assert "(invalid_request_error)" in str(raised.value)
    assert len(server.requests) == 1


def test_the_key_never_shows_in_errors_or_the_repr(server: MessagesServer) -> None:
    """A server that echoes the key gets it masked; the repr has no key."""
    server.add(error_reply(401, "authentication_error", f"invalid x-api-key {API_KEY}"))
    provider = _provider(server)
    with pytest.raises(ProviderError) as raised:
        _complete(provider, [{"role": "user", "content": "hi"}])
    assert API_KEY not in str(raised.value) and "***" in str(raised.value)
    assert API_KEY not in repr(provider) and API_KEY not in str(vars(provider).get("policy"))


def test_cache_marks_on_tools_system_and_newest_message(server: MessagesServer) -> None:
    """With a long system prompt: marks on the system prompt and the newest message."""
    server.add(text_reply("ok"))
    history = [{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": "hi"}]
    _complete(_provider(server), history)
    (request,) = server.requests
    assert request.problems == []
    # The tools alone are under the minimum, so they get no mark of their own.
    assert _marked(request.body) == ["system.0", "messages.0.0"]
    assert request.body["system"][0]["cache_control"] == {"type": "ephemeral"}


def test_cache_off_sends_no_marks_and_1h_sends_the_ttl(server: MessagesServer) -> None:
    """cache = "off": no marks; cache = "1h": marks with ttl 1h and the beta header."""
    server.add(text_reply("a"), text_reply("b"))
    history = [{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": "hi"}]
    _complete(_provider(server, cache="off"), history)
    _complete(_provider(server, cache="1h"), history)
    off, hour = server.requests
    assert _marked(off.body) == [] and "anthropic-beta" not in off.headers
    assert hour.body["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert "extended-cache-ttl" in hour.headers["anthropic-beta"]


def _step(n: int, calls: int) -> list[dict[str, Any]]:
    ids = [f"call_{n}_{k}" for k in range(calls)]
    assistant = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "get_order", "arguments": "{}"}}
            for i in ids
        ],
    }
    return [assistant, *({"role": "tool", "tool_call_id": i, "content": "x" * 400} for i in ids)]


def test_a_step_of_more_than_20_blocks_gets_a_mark_at_the_previous_call_end(
    server: MessagesServer,
) -> None:
    """When the newest step adds over 20 blocks, the previous request's end is marked too."""
    server.add(text_reply("ok"))
    history = [
        {"role": "system", "content": LONG_SYSTEM},
        {"role": "user", "content": "task"},
        *_step(1, 2),
        *_step(2, 12),
    ]
    _complete(_provider(server), history)
    (request,) = server.requests
    assert request.problems == []
    # messages: 0 user, 1 assistant (2 uses), 2 user (2 results), 3 assistant (12 uses),
    # 4 user (12 results): 4.11 is 24 blocks after 2.1, past the lookback
    assert _marked(request.body) == ["system.0", "messages.2.1", "messages.4.11"]


def test_the_end_of_the_unchanged_prefix_is_marked_when_governance_changed_it(
    server: MessagesServer,
) -> None:
    """prefix=N (from GovernanceResult.prefix) marks the last block before message N."""
    server.add(text_reply("ok"))
    history = [
        {"role": "system", "content": LONG_SYSTEM},
        {"role": "user", "content": "task"},
        *_step(1, 1),
        *_step(2, 1),
        {"role": "user", "content": "more"},
    ]
    _complete(_provider(server), history, prefix=4)  # the step-2 assistant message changed
    (request,) = server.requests
    assert request.problems == []
    # request messages: 0 user task, 1 assistant, 2 user result, 3 assistant, 4 user result + "more"
    assert _marked(request.body) == ["system.0", "messages.2.0", "messages.4.1"]


def _converting_the_cut_again(messages: Sequence[Any], *, prefix: int | None = None) -> Any:
    """The request as the provider made it before: the history cut at `prefix` converted anew."""
    whole = to_messages_api(messages)
    cut = None if prefix is None else to_messages_api(list(messages[:prefix])).messages
    return attrs.evolve(whole, prefix_messages=cut)


def _histories_to_cut() -> list[list[dict[str, Any]]]:
    """Histories whose cuts fall in every kind of place: runs of results, merged turns, ..."""
    opening_with_the_assistant: list[dict[str, Any]] = [
        {"role": "system", "content": LONG_SYSTEM},
        {"role": "assistant", "content": "where were we", "thinking_blocks": [THINKING]},
        {"role": "user", "content": "task " * 300},
        *_step(1, 3),
        {"role": "user", "content": "more"},
    ]
    anthropic_blocks: list[dict[str, Any]] = [
        {"role": "user", "content": "task " * 300},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_order", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x" * 2000},
                {"type": "text", "text": "and then", "cache_control": {"type": "ephemeral"}},
            ],
        },
        *_step(2, 2),
        {"role": "user", "content": "go"},
    ]
    steps: list[dict[str, Any]] = [
        {"role": "system", "content": LONG_SYSTEM},
        {"role": "user", "content": "task"},
        *_step(1, 2),
        {"role": "user", "content": " "},
        *_step(2, 12),
        {"role": "user", "content": "more"},
    ]
    return [opening_with_the_assistant, anthropic_blocks, steps]


@pytest.mark.parametrize("cache", ["5m", "1h"])
def test_the_request_is_byte_identical_to_the_one_made_converting_the_cut_again(
    server: MessagesServer, monkeypatch: pytest.MonkeyPatch, cache: str
) -> None:
    """With every prefix, the body sent is byte for byte the one made converting the cut anew."""
    import nanobot_anthropic.provider as module

    provider = _provider(server, cache=cache)
    marks: set[str] = set()
    for history in _histories_to_cut():
        for prefix in [None, *range(len(history) + 2)]:
            server.requests.clear()
            server.add(text_reply("ok"), text_reply("ok"))
            _complete(provider, history, prefix=prefix)
            marks.update(provider.last_marks)
            with monkeypatch.context() as patched:
                patched.setattr(module, "to_messages_api", _converting_the_cut_again)
                _complete(provider, history, prefix=prefix)
            now, before = server.requests
            assert now.problems == []
            assert now.raw == before.raw, (history, prefix)
    assert "unchanged prefix" in marks  # the cut was compared with the request, and marked


def test_with_a_prefix_the_history_is_converted_once(
    server: MessagesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cut history comes from the pass that converts the request: no second conversion."""
    import nanobot_anthropic.caching as caching
    import nanobot_anthropic.provider as module

    converted: list[int] = []

    def counting(messages: Sequence[Any], **options: Any) -> Any:
        converted.append(len(messages))
        return to_messages_api(messages, **options)

    monkeypatch.setattr(module, "to_messages_api", counting)
    monkeypatch.setattr(caching, "to_messages_api", counting, raising=False)
    history = [
        {"role": "system", "content": LONG_SYSTEM},
        {"role": "user", "content": "task"},
        *_step(1, 1),
        *_step(2, 1),
        {"role": "user", "content": "more"},
    ]
    server.add(text_reply("ok"))
    provider = _provider(server)
    _complete(provider, history, prefix=4)
    assert "unchanged prefix" in provider.last_marks
    assert converted == [len(history)]


def test_marks_already_in_the_history_are_replaced(server: MessagesServer) -> None:
    """cache_control blocks stored in the history do not add up past four."""
    server.add(text_reply("ok"))
    marked = {"type": "text", "text": "old", "cache_control": {"type": "ephemeral"}}
    history = [{"role": "user", "content": [marked] * 6}]
    _complete(_provider(server), history)
    (request,) = server.requests
    assert request.problems == []
    assert _marked(request.body) == []  # six short blocks: nothing long enough to cache


def test_marks_inside_stored_tool_results_are_removed_too(server: MessagesServer) -> None:
    """Marks on the blocks a stored tool_result holds are removed, so four is never exceeded."""
    server.add(text_reply("ok"))
    mark = {"type": "ephemeral"}
    history: list[dict[str, Any]] = [
        {"role": "system", "content": LONG_SYSTEM},
        {"role": "user", "content": "task"},
    ]
    for n in range(4):
        history += [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"t{n}", "name": "get_order", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"t{n}",
                        "content": [{"type": "text", "text": f"order {n}", "cache_control": mark}],
                    }
                ],
            },
        ]
    _complete(_provider(server), history)
    (request,) = server.requests
    assert request.problems == []
    assert request.raw.count(b"cache_control") == len(_marked(request.body)) <= 4
    results = [
        b for m in request.body["messages"] for b in m["content"] if b["type"] == "tool_result"
    ]
    assert [r["content"] for r in results] == [
        [{"type": "text", "text": f"order {n}"}] for n in range(4)
    ]


def test_an_openai_key_is_never_sent_to_anthropic() -> None:
    """A key the core took from OPENAI_API_KEY is not used; ANTHROPIC_API_KEY wins."""
    from nanobot_core.config import ProviderConfig

    config = ProviderConfig(api_key="sk-openai")
    assert resolve_key(config, {"OPENAI_API_KEY": "sk-openai"}) is None
    assert (
        resolve_key(config, {"OPENAI_API_KEY": "sk-openai", "ANTHROPIC_API_KEY": "sk-ant"})
        == "sk-ant"
    )
    assert (
        resolve_key(ProviderConfig(api_key="sk-ant-x"), {"NANOBOT_API_KEY": "sk-ant-x"})
        == "sk-ant-x"
    )


def test_default_base_url_and_model_are_anthropics() -> None:
    """With the core's defaults untouched, the provider aims at api.anthropic.com and Claude."""
    from nanobot_core.config import ProviderConfig

    provider = AnthropicProvider(ProviderConfig(), environ={"ANTHROPIC_API_KEY": API_KEY})
    assert provider.endpoint == "https://api.anthropic.com/v1/messages"
    assert provider.model.startswith("claude-")
    assert AnthropicProvider(
        ProviderConfig(base_url="http://127.0.0.1:9/v1"), environ={}
    ).endpoint == ("http://127.0.0.1:9/v1/messages")


def test_a_history_whose_only_user_text_is_blank_is_sent_legally(server: MessagesServer) -> None:
    """A blank user message is left out, yet the request still opens with a user turn."""
    server.add(text_reply("hello"))
    reply = _complete(_provider(server), [{"role": "user", "content": "  "}])
    assert reply.content == "hello"
    assert server.requests[0].problems == []
    assert server.requests[0].body["messages"][0]["role"] == "user"


def test_a_stored_history_with_blocks_of_the_wrong_turn_is_sent_legally(
    server: MessagesServer,
) -> None:
    """Unsigned thinking, stray calls and user-only blocks in an assistant turn are not sent."""
    server.add(text_reply("done"))
    history: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "look"}, THINKING]},
        {
            "role": "assistant",
            "content": [{"type": "image", "source": {"type": "url", "url": "https://a.test/x"}}],
            "thinking_blocks": [{"type": "thinking", "thinking": "no signature"}],
            "anthropic_blocks": [{"type": "tool_use", "id": "t9", "name": "x", "input": {}}],
        },
        {"role": "user", "content": "and now?"},
    ]
    reply = _complete(_provider(server), history)
    assert reply.content == "done"
    assert server.requests[0].problems == []


def test_a_reply_of_millions_of_empty_objects_is_refused_with_bounded_memory(
    server: MessagesServer,
) -> None:
    """A 9 MB reply of empty objects is a ProviderError naming the value limit, not retried."""
    text = json.dumps(text_reply("x").body)
    server.add(Reply(body=(text[:-1] + ', "extra": [' + "{}," * 3_000_000 + "{}]}").encode()))
    tracemalloc.start()
    try:
        with pytest.raises(ProviderError) as raised:
            _complete(_provider(server), [{"role": "user", "content": "hi"}])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "sent a reply that cannot be used: more than 1,000,000 values" in str(raised.value)
    assert len(server.requests) == 1
    assert peak < 150 * 1024 * 1024, peak  # decoded, it took about 430 MB


def _nested(levels: int) -> Any:
    """A value whose lists nest `levels` deep around one string (built without recursion)."""
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


def _with_deep_value(place: str, deep: Any) -> dict[str, Any]:
    """A message holding `deep` where a stored or hand-built history may hold a value."""
    if place == "text block key":
        return {"role": "user", "content": [{"type": "text", "text": "a", "meta": deep}]}
    if place == "tool_use input":
        use = {"type": "tool_use", "id": "u1", "name": "get_order", "input": {"order": deep}}
        return {"role": "assistant", "content": [use]}
    if place == "tool_result content":
        inner = [{"type": "text", "text": "r", "meta": deep}]
        return {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "u1", "content": inner}],
        }
    if place == "call arguments":
        function = {"name": "get_order", "arguments": {"order": deep}}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": function}],
        }
    if place == "tool message content":
        inner = [{"type": "text", "text": "r", "meta": deep}]
        return {"role": "tool", "tool_call_id": "c1", "content": inner}
    return {"role": "user", "content": "hi", "extra": deep}


def _legal_around(place: str, message: dict[str, Any]) -> list[dict[str, Any]]:
    """A history the Messages API takes with `message` (from `_with_deep_value`) in it."""
    use = {"type": "tool_use", "id": "u1", "name": "get_order", "input": {}}
    call = {"id": "c1", "type": "function", "function": {"name": "get_order", "arguments": "{}"}}
    if place == "tool_use input":
        result = {"type": "tool_result", "tool_use_id": "u1", "content": "done"}
        return [{"role": "user", "content": "q"}, message, {"role": "user", "content": [result]}]
    if place == "tool_result content":
        return [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [use]},
            message,
        ]
    if place == "tool message content":
        return [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            message,
        ]
    if place == "call arguments":
        return [
            {"role": "user", "content": "q"},
            message,
            {"role": "tool", "tool_call_id": "c1", "content": "done"},
        ]
    return [message]


# Where a message's value reaches the request body as it is (a key of the message itself
# does not: the Messages API turn holds only the role and the blocks).
_PLACES = st.sampled_from(
    [
        "text block key",
        "tool_use input",
        "tool_result content",
        "tool message content",
        "call arguments",
    ]
)


def test_a_message_nested_too_deep_to_encode_is_refused_naming_it_before_anything_is_sent(
    server: MessagesServer,
) -> None:
    """Nesting JSON cannot encode is a ProviderError naming the message; none is sent."""
    plugin = f"nanobot-anthropic {metadata.version('nanobot-anthropic')}"

    @settings(max_examples=40, deadline=None)
    @given(
        _PLACES,
        st.integers(0, 3),
        st.one_of(st.integers(3000, 20_000), st.just(100_000)),
        st.sampled_from(["5m", "off"]),  # with marks the build recurses; without, the encoding
    )
    def check(place: str, index: int, levels: int, cache: str) -> None:
        provider = _provider(server, cache=cache)
        history: list[dict[str, Any]] = [{"role": "user", "content": f"q{n}"} for n in range(4)]
        history[index] = _with_deep_value(place, _nested(levels))
        with pytest.raises(ProviderError) as raised:
            _complete(provider, history)
        assert str(raised.value).startswith(f"{plugin} sends no request: messages[{index}] nests ")
        assert "levels deep" in str(raised.value)
        assert not server.requests

    check()


def test_a_message_deeper_than_a_session_line_but_encodable_is_sent_as_it_is(
    server: MessagesServer,
) -> None:
    """Past 100 levels but encodable, a message goes out as it is: the API decides on it."""
    provider = _provider(server)

    @settings(max_examples=15, deadline=None)
    @given(_PLACES, st.integers(99, 400))
    def check(place: str, levels: int) -> None:
        server.requests.clear()
        server.add(text_reply("ok"))
        deep = _nested(levels)
        reply = _complete(provider, _legal_around(place, _with_deep_value(place, deep)))
        assert reply.content == "ok" and len(server.requests) == 1
        assert json.dumps(deep) in json.dumps(server.requests[0].body["messages"])

    check()


def test_a_request_that_builds_walks_no_message_for_faults(
    server: MessagesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The faults are looked for only when building fails: a clean request pays no walk."""
    import nanobot_anthropic.provider as module

    walked: list[Any] = []
    monkeypatch.setattr(module, "request_fault", lambda *parts: walked.append(parts))
    server.add(text_reply("ok"))
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"}] * 20
    history.append({"role": "user", "content": "go"})
    assert _complete(_provider(server), history).content == "ok"
    assert walked == []


@pytest.mark.parametrize("cache", ["5m", "off"])
def test_a_message_that_holds_itself_is_refused_naming_it(
    server: MessagesServer, cache: str
) -> None:
    """A block holding its own message is named, not a ValueError from the JSON encoder."""
    looped: dict[str, Any] = {"role": "user", "content": [{"type": "text", "text": "a"}]}
    looped["content"][0]["meta"] = looped
    with pytest.raises(ProviderError) as raised:
        _complete(_provider(server, cache=cache), [{"role": "user", "content": "hi"}, looped])
    assert "sends no request: messages[1] holds a dict or list that contains itself" in str(
        raised.value
    )
    assert not server.requests


@pytest.mark.parametrize("key", ["parameters", "description", "name"])
def test_a_tool_definition_json_cannot_encode_is_refused_naming_it(
    server: MessagesServer, key: str
) -> None:
    """A tool definition nested 100,000 deep is a ProviderError naming tools[1] and its depth."""
    deep: Any = _nested(100_000)
    levels = {"parameters": 100_004, "description": 100_002, "name": 100_002}[key]
    if key == "parameters":  # a schema that is not an object is replaced, not sent
        deep = {"type": "object", "properties": {"a": deep}}
    deep_tool = {"type": "function", "function": {"name": "deep", key: deep}}
    provider = _provider(server)
    with pytest.raises(ProviderError) as raised:
        asyncio.run(provider.complete([{"role": "user", "content": "hi"}], [*TOOLS, deep_tool]))
    assert str(raised.value).endswith(
        f"sends no request: tools[1] nests {levels} levels deep (a session line may nest 100)"
    )
    assert not server.requests


def _complete_with(provider: AnthropicProvider, tools: list[dict[str, Any]]) -> ProviderReply:
    return asyncio.run(provider.complete([{"role": "user", "content": "hi"}], tools))


def test_a_tool_definition_json_cannot_encode_is_refused_with_the_encoders_reason(
    server: MessagesServer,
) -> None:
    """A schema holding a 5,000-digit integer is named with that reason, not as a cycle."""
    looped: dict[str, Any] = {"type": "object"}
    looped["properties"] = {"a": looped}
    huge = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 10**5000}}}
    expected = {
        "huge": "tools[1] cannot be encoded as JSON: an integer of more than 4300 digits",
        "looped": "tools[1] holds a dict or list that contains itself (no JSON can)",
    }
    for name, schema in (("huge", huge), ("looped", looped)):
        tool = {"type": "function", "function": {"name": name, "parameters": schema}}
        with pytest.raises(ProviderError) as raised:
            _complete_with(_provider(server), [*TOOLS, tool])
        assert f"sends no request: {expected[name]}" in str(raised.value), name
    assert not server.requests


def test_a_refused_request_says_what_the_cores_rule_says_as_the_openai_provider_does(
    server: MessagesServer,
) -> None:
    """Every refusal is the core's `request_fault` text for the same messages and tools."""
    plugin = f"nanobot-anthropic {metadata.version('nanobot-anthropic')}"
    looped: dict[str, Any] = {"role": "user", "content": [{"type": "text", "text": "a"}]}
    looped["content"][0]["meta"] = looped
    huge_tool = {"type": "function", "function": {"name": "n", "description": 10**5000}}
    deep_tool = {"type": "function", "function": {"name": "d", "description": _nested(5_000)}}
    hi = {"role": "user", "content": "hi"}
    deep = {"role": "user", "content": [{"type": "text", "text": "a", "meta": _nested(3_000)}]}
    cases: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = [
        ([hi, looped], TOOLS),
        ([hi, deep], TOOLS),
        ([hi, {"role": "user", "content": [{"type": "text", "text": "a", "n": 10**5000}]}], TOOLS),
        ([hi], [*TOOLS, huge_tool]),
        ([hi], [*TOOLS, deep_tool]),
    ]
    for messages, tools in cases:
        expected = request_fault(messages, tools)
        assert expected is not None
        with pytest.raises(ProviderError) as raised:
            asyncio.run(_provider(server).complete(messages, tools))
        assert str(raised.value) == f"{plugin} sends no request: {expected}"
    assert not server.requests


def test_a_tool_schema_deeper_than_a_message_may_be_is_still_sent(server: MessagesServer) -> None:
    """A schema past 100 levels that the core compiles and JSON encodes is sent as it is."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(60):  # 121 levels, and 124 inside its definition
        schema = {"type": "object", "properties": {"a": schema}}
    tool = {"type": "function", "function": {"name": "tall", "parameters": schema}}
    server.add(text_reply("ok"))
    provider = _provider(server)
    reply = asyncio.run(provider.complete([{"role": "user", "content": "hi"}], [tool]))
    assert reply.content == "ok"
    assert server.requests[0].body["tools"][0]["input_schema"] == schema


def test_call_arguments_given_as_a_dict_are_sent_as_the_input(server: MessagesServer) -> None:
    """Arguments handed over as a dict (not as JSON text) are the call's input, not {}."""
    arguments = {"order": 7, "notes": ["rush", {"gift": True}]}
    function = {"name": "get_order", "arguments": arguments}
    call = {"id": "c1", "type": "function", "function": function}
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "where is 7?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "shipped"},
    ]
    server.add(text_reply("ok"))
    assert _complete(_provider(server), history).content == "ok"
    use = server.requests[0].body["messages"][1]["content"][0]
    assert use == {"type": "tool_use", "id": "c1", "name": "get_order", "input": arguments}


def test_call_arguments_that_cannot_be_the_input_are_refused_naming_the_call(
    server: MessagesServer,
) -> None:
    """Arguments that are no JSON object are a ProviderError naming message and call; none sent."""
    provider = _provider(server)
    plugin = f"nanobot-anthropic {metadata.version('nanobot-anthropic')}"

    @settings(max_examples=60, deadline=None)
    @given(
        st.one_of(
            st.text(min_size=1).filter(lambda text: text.strip() and not _is_object_text(text)),
            st.sampled_from(["[" * 50_000, "[" * 200_000, '{"order": [7]', "[7]", "null"]),
        ),
        st.integers(1, 3),
    )
    def check(arguments: str, index: int) -> None:
        call = {
            "id": "call_9",
            "type": "function",
            "function": {"name": "get_order", "arguments": arguments},
        }
        history: list[dict[str, Any]] = [{"role": "user", "content": "q"}] * index
        history += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_9", "content": "shipped"},
        ]
        with pytest.raises(ProviderError) as raised:
            _complete(provider, history)
        assert str(raised.value).startswith(
            f"{plugin} sends no request: messages[{index}]: the arguments of call 'call_9' "
        )
        assert not server.requests

    check()


def _is_object_text(text: str) -> bool:
    """Whether `text` is the JSON of an object."""
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False


def test_the_tool_use_a_max_tokens_reply_ends_with_is_marked_cut(server: MessagesServer) -> None:
    """The last tool_use of a max_tokens reply gets unclosed arguments; a call before it not."""
    whole = {"type": "tool_use", "id": "toolu_1", "name": "get_order", "input": {"order": 7}}
    cut = {"type": "tool_use", "id": "toolu_2", "name": "get_order", "input": {"order": 12}}
    server.add(message_reply([whole, cut], "max_tokens"), message_reply([whole], "tool_use"))
    provider = _provider(server)
    limited = _complete(provider, [{"role": "user", "content": "orders"}])
    finished = _complete(provider, [{"role": "user", "content": "orders"}])
    assert [c["function"]["arguments"] for c in limited.tool_calls] == [
        '{"order": 7}',
        '{"order": 12',
    ]
    assert limited.finish_reason == "max_tokens"
    assert [c["function"]["arguments"] for c in finished.tool_calls] == ['{"order": 7}']


def test_the_tool_use_a_full_context_window_ends_with_is_marked_cut(
    server: MessagesServer,
) -> None:
    """model_context_window_exceeded cuts a reply's last tool_use as max_tokens does."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_order", "input": {"order": 12}}
    server.add(message_reply([call], "model_context_window_exceeded"))
    reply = _complete(_provider(server), [{"role": "user", "content": "orders"}])
    assert [c["function"]["arguments"] for c in reply.tool_calls] == ['{"order": 12']
    assert reply.finish_reason == "model_context_window_exceeded"


def test_a_max_tokens_reply_ending_in_text_leaves_its_calls_whole(server: MessagesServer) -> None:
    """The limit cut the text after the call, not the call: its arguments stay complete."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_order", "input": {}}
    server.add(message_reply([call, {"type": "text", "text": "and then"}], "max_tokens"))
    reply = _complete(_provider(server), [{"role": "user", "content": "orders"}])
    assert [c["function"]["arguments"] for c in reply.tool_calls] == ["{}"]


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=10,
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.text(max_size=10), _JSON_VALUES, max_size=4))
def test_a_cut_tool_use_never_reads_as_whole_arguments(given_input: dict[str, Any]) -> None:
    """Whatever input the cut block holds, its arguments are not JSON and close to that input."""
    from nanobot_anthropic.reply import parse_reply

    block = {"type": "tool_use", "id": "toolu_1", "name": "get_order", "input": given_input}
    reply = parse_reply({"content": [block], "stop_reason": "max_tokens"})
    arguments = reply.tool_calls[0]["function"]["arguments"]
    with pytest.raises(ValueError):
        json.loads(arguments)
    assert json.loads(arguments + "}") == given_input


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/", "/v1/messages", "/v1/messages/"])
def test_a_base_url_with_or_without_the_messages_path_reaches_the_endpoint(
    server: MessagesServer, suffix: str
) -> None:
    """The endpoint pasted whole from Anthropic's examples is not given /v1/messages again."""
    server.add(text_reply("hello"))
    reply = _complete(
        _provider(server, base_url=server.base_url + suffix), [{"role": "user", "content": "hi"}]
    )
    assert reply.content == "hello"
    assert [r.problems for r in server.requests] == [[]]


def _tool_named(name: object) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


@pytest.mark.parametrize("name", ["fs.read", "read file", "get:order", "", "é", None])
def test_a_tool_name_the_api_refuses_is_named_before_anything_is_sent(
    server: MessagesServer, name: object
) -> None:
    """A tool name outside [a-zA-Z0-9_-] is a provider error naming it and its index; no request."""
    provider = _provider(server)
    tools = [TOOLS[0], _tool_named(name)]
    with pytest.raises(ProviderError) as caught:
        asyncio.run(provider.complete([{"role": "user", "content": "hi"}], tools))
    message = str(caught.value)
    assert message.startswith(f"nanobot-anthropic {metadata.version('nanobot-anthropic')} ")
    assert f"tools[1] is named {name!r}, which Anthropic's Messages API refuses" in message
    assert "tools.disabled" in message
    assert server.requests == []


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(codec="ascii"), min_size=1, max_size=70))
def test_a_tool_name_is_refused_exactly_when_the_api_pattern_refuses_it(name: str) -> None:
    """Refused here is refused by the API's pattern, and a legal name builds a request."""
    from nanobot_core.config import ProviderConfig

    provider = AnthropicProvider(ProviderConfig(api_key=API_KEY), environ={})
    legal = re.fullmatch(r"[a-zA-Z0-9_-]+", name) is not None
    try:
        body = provider.request_body([{"role": "user", "content": "hi"}], [_tool_named(name)])
    except ProviderError:
        assert not legal
    else:
        assert legal and body["tools"][0]["name"] == name


def _spend_limit_reply() -> Reply:
    body = {
        "type": "error",
        "error": {
            "type": "rate_limit_error",
            "message": "You have reached your specified API usage limits.",
            "details": {"error_code": "enforced_spend_limit_reached"},
        },
        "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
    }
    return Reply(429, body, {"retry-after": "0"})


def test_a_429_of_a_reached_spend_limit_is_not_retried(server: MessagesServer) -> None:
    """The spend-limit 429 fails at once, saying no retry lifts it; a rate limit's 429 retries."""
    server.add(_spend_limit_reply())
    with pytest.raises(ProviderError) as caught:
        _complete(_provider(server), [{"role": "user", "content": "hi"}])
    assert len(server.requests) == 1
    assert str(caught.value).endswith(
        "refused the request: HTTP 429: You have reached your specified API usage limits. "
        "(rate_limit_error) [enforced_spend_limit_reached: the spend limit is reached, no "
        "retry lifts it]"
    )
    server.add(error_reply(429, "rate_limit_error", "slow down"), text_reply("ok"))
    assert _complete(_provider(server), [{"role": "user", "content": "hi"}]).content == "ok"


@settings(max_examples=60, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=40),
        st.recursive(
            st.none() | st.text(max_size=30) | st.integers(),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.sampled_from(["error", "details", "error_code", "x"]), inner)
            ),
            max_leaves=8,
        ).map(lambda value: json.dumps(value).encode()),
    )
)
def test_any_other_429_body_is_retried(body: bytes) -> None:
    """A 429 whose body is not the spend limit's, whatever it holds, is retried as before."""
    with MessagesServer([Reply(429, body), text_reply("ok")]) as server:
        provider = _provider(server, max_retries=1)
        assert _complete(provider, [{"role": "user", "content": "hi"}]).content == "ok"


def test_an_error_object_of_a_200_is_said_cut_short_with_the_key_masked(
    server: MessagesServer,
) -> None:
    """A 200 carrying a megabytes-long error object gives an error of 1,000-odd characters."""
    message = "a" * 995 + API_KEY + "b" * 3_000_000
    server.add(Reply(200, {"type": "error", "error": {"type": "api_error", "message": message}}))
    with pytest.raises(ProviderError) as caught:
        _complete(_provider(server), [{"role": "user", "content": "hi"}])
    said = str(caught.value)
    assert "answered with an error: " + "a" * 995 + "***" in said
    assert API_KEY[:5] not in said.split("answered with an error: ", 1)[1]
    assert said.endswith(" characters)") and len(said) < 1_200
