"""The OpenAI-compatible provider against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from nanobot_core._json_boundary import MAX_ENCODED_DEPTH
from nanobot_core.config import load_config
from nanobot_core.errors import ProviderError
from nanobot_core.kernel.records import core_version
from nanobot_core.providers import (
    OpenAIProvider,
    ProviderReply,
    Retryable,
    RetryNotice,
    Usage,
    post_request,
    request_content,
    request_fault,
)
from nanobot_core.providers.base import MAX_CALL_ID_LENGTH
from nanobot_core.testing_http import (
    LoopbackRequest,
    LoopbackResponse,
    LoopbackServer,
    RawLoopbackServer,
)
from tests.headless.conftest import API_KEY, provider_config
from tests.headless.fake_server import (
    FakeChatServer,
    Reply,
    error_reply,
    text_reply,
    tool_call_reply,
)

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
TOOLS = [
    {
        "type": "function",
        "function": {"name": "echo", "description": "Echo.", "parameters": {"type": "object"}},
    }
]


def _complete(provider: OpenAIProvider, tools: list[dict[str, Any]] = TOOLS) -> ProviderReply:
    return asyncio.run(provider.complete(MESSAGES, tools))


def _provider(
    server: FakeChatServer, notices: list[RetryNotice] | None = None, **changes: Any
) -> OpenAIProvider:
    sink = notices.append if notices is not None else None
    return OpenAIProvider(provider_config(server.base_url, **changes), progress=sink)  # type: ignore[arg-type]


def test_request_carries_model_messages_tools_and_bearer_key(server: FakeChatServer) -> None:
    """One POST to {base_url}/chat/completions with model, messages, tools and the Bearer key."""
    server.add(text_reply("hello"))
    reply = _complete(_provider(server))
    assert reply.content == "hello"
    (request,) = server.requests
    assert request.method == "POST" and request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.body["model"] == "fake-model"
    assert request.body["messages"] == MESSAGES
    assert request.body["tools"] == TOOLS
    assert request.body["stream"] is False


def test_no_key_sends_no_authorization_and_no_empty_tools(server: FakeChatServer) -> None:
    """Without a key (Ollama) no Authorization header is sent; an empty tool list is left out."""
    server.add(text_reply("ok"))
    _complete(_provider(server, api_key=None), tools=[])
    (request,) = server.requests
    assert "authorization" not in request.headers
    assert "tools" not in request.body


def test_usage_is_recorded(server: FakeChatServer) -> None:
    """The server's token usage comes back on the reply."""
    server.add(
        text_reply("ok", usage={"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15})
    )
    assert _complete(_provider(server)).usage == Usage(11, 4, 15)


def test_reply_normalised_missing_id_object_arguments_missing_content(
    server: FakeChatServer,
) -> None:
    """Empty ids get derived ids, object arguments become JSON text, null content becomes ""."""
    server.add(tool_call_reply([("", "echo", {"text": "hi"}), (None, "echo", '{"text": "yo"}')]))
    server.add(tool_call_reply([("", "echo", {"text": "hi"}), (None, "echo", '{"text": "yo"}')]))
    provider = _provider(server)
    first, second = _complete(provider), _complete(provider)
    assert first.message["content"] == ""
    calls = first.tool_calls
    assert [c["function"]["arguments"] for c in calls] == ['{"text": "hi"}', '{"text": "yo"}']
    ids = [c["id"] for c in calls]
    assert all(isinstance(i, str) and i for i in ids) and len(set(ids)) == 2
    assert [c["id"] for c in second.tool_calls] == ids  # the same reply gets the same ids


def test_server_errors_are_retried_then_succeed(server: FakeChatServer) -> None:
    """A 503 and a 500 are retried (with progress notices) and the third answer is returned."""
    server.add(error_reply(503, "overloaded"), error_reply(500, "oops"), text_reply("finally"))
    notices: list[RetryNotice] = []
    reply = _complete(_provider(server, notices, max_retries=3))
    assert reply.content == "finally"
    assert len(server.requests) == 3
    assert [n.attempt for n in notices] == [1, 2]
    assert "HTTP 503" in notices[0].reason and "overloaded" in notices[0].reason
    assert all(n.max_retries == 3 for n in notices)


def test_retries_exhausted_is_a_provider_error_with_the_server_message(
    server: FakeChatServer,
) -> None:
    """After max_retries+1 failures the error names the attempts and the last server message."""
    server.add(*(error_reply(502, f"bad gateway {n}") for n in range(5)))
    with pytest.raises(ProviderError) as caught:
        _complete(_provider(server, max_retries=2))
    assert len(server.requests) == 3
    assert "3 attempt(s)" in str(caught.value) and "bad gateway 2" in str(caught.value)


def test_retry_after_seconds_is_honoured_up_to_the_cap(server: FakeChatServer) -> None:
    """429 with Retry-After waits what the server asked, but never longer than the cap."""
    server.add(
        error_reply(429, "slow down", headers={"Retry-After": "0"}),
        error_reply(429, "slow down", headers={"Retry-After": "3600"}),
        text_reply("ok"),
    )
    notices: list[RetryNotice] = []
    _complete(_provider(server, notices, retry_after_cap=0.02))
    assert [n.delay for n in notices] == [0.0, 0.02]


@pytest.mark.parametrize(
    ("retry_after", "said"),
    [
        ("3600", "3600s"),
        ("172800", "172800s (2.0 days)"),
        ("1" + "0" * 300, "more than a year"),
        ("Fri, 31 Dec 9999 23:59:59 GMT", "more than a year"),
    ],
)
def test_a_wait_asked_past_the_cap_is_said_and_so_is_the_last_one_asked(
    server: FakeChatServer, retry_after: str, said: str
) -> None:
    """The notice says what the server asked for beside the cap waited; the error, when to
    come back."""
    asked = error_reply(429, "slow down", headers={"Retry-After": retry_after})
    server.add(asked, asked)
    notices: list[RetryNotice] = []
    with pytest.raises(ProviderError) as caught:
        _complete(_provider(server, notices, max_retries=1, retry_after_cap=0.02))
    (notice,) = notices
    assert notice.delay == 0.02
    assert notice.reason == (
        f"HTTP 429: slow down (invalid_request_error) (the server asked for a wait of {said}; "
        "provider.retry_after_cap is 0.02s)"
    )
    assert str(caught.value).endswith(
        "gave up after 2 attempt(s); last error: HTTP 429: slow down (invalid_request_error) "
        f"(the server asked for a wait of {said})"
    )


def test_a_wait_within_the_cap_is_said_only_as_the_delay(server: FakeChatServer) -> None:
    """A Retry-After the cap allows is waited as asked, the notice as it always was."""
    server.add(error_reply(503, "busy", headers={"retry-after-ms": "10"}), text_reply("ok"))
    notices: list[RetryNotice] = []
    _complete(_provider(server, notices, retry_after_cap=0.02))
    assert [(n.delay, n.reason) for n in notices] == [
        (0.01, "HTTP 503: busy (invalid_request_error)")
    ]


@pytest.mark.parametrize("header", ["Retry-After", "retry-after-ms"])
def test_a_negative_retry_after_gets_the_normal_backoff_not_a_retry_at_once(
    server: FakeChatServer, header: str
) -> None:
    """A server asking for a wait of -5 asks for nothing valid: the backoff's wait applies."""
    server.add(error_reply(503, "busy", headers={header: "-5"}), text_reply("ok"))
    notices: list[RetryNotice] = []
    reply = _complete(_provider(server, notices, backoff_base=0.2, retry_after_cap=5.0))
    assert reply.content == "ok" and len(server.requests) == 2
    (notice,) = notices
    assert 0.1 <= notice.delay <= 0.2  # the first backoff, jittered into its upper half
    assert "asked for a wait" not in notice.reason


@pytest.mark.parametrize("value", ["+5", "1e3", "5.5", "0x10", "1_0"])
def test_a_retry_after_that_is_not_delay_seconds_gets_the_normal_backoff(
    server: FakeChatServer, value: str
) -> None:
    """A Retry-After a number parser reads but RFC 9110's digits-only delay does not (a sign,
    a fraction, an exponent) asks for no wait: the backoff's wait applies, not the cap."""
    server.add(error_reply(503, "busy", headers={"Retry-After": value}), text_reply("ok"))
    notices: list[RetryNotice] = []
    reply = _complete(_provider(server, notices, backoff_base=0.2, retry_after_cap=0.5))
    assert reply.content == "ok" and len(server.requests) == 2
    (notice,) = notices
    assert 0.1 <= notice.delay <= 0.2  # the first backoff, jittered into its upper half
    assert notice.reason == "HTTP 503: busy (invalid_request_error)"


def test_retry_after_http_date_in_the_past_means_now(server: FakeChatServer) -> None:
    """A Retry-After HTTP date in the past gives a wait of zero."""
    server.add(
        error_reply(503, "maintenance", headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}),
        text_reply("ok"),
    )
    notices: list[RetryNotice] = []
    _complete(_provider(server, notices, retry_after_cap=5.0))
    assert [n.delay for n in notices] == [0.0]


def test_client_error_is_not_retried_and_shows_the_server_message(
    server: FakeChatServer, data_folder: Any
) -> None:
    """A real 400 body (Groq's tool_use_failed) fails at once with the server's own message."""
    body = _real_interaction(data_folder, "test_tool_use_failed_error.yaml", 0)["response_body"]
    server.add(Reply(status=400, body=body))
    with pytest.raises(ProviderError) as caught:
        _complete(_provider(server))
    assert len(server.requests) == 1
    message = str(caught.value)
    assert "HTTP 400" in message
    assert "parameters for tool get_something_by_name did not match schema" in message


@pytest.mark.parametrize(
    ("headers", "said"),
    [
        ({"x-request-id": "req_7f3a"}, " (request id req_7f3a)"),
        ({"request-id": " req_011CZ "}, " (request id req_011CZ)"),
        ({"x-request-id": f"id-{API_KEY}"}, " (request id id-"),
        ({"x-request-id": "a" * 500}, " characters omitted ...]"),
        ({}, None),
    ],
)
def test_a_refusal_names_the_servers_id_of_the_request(
    server: FakeChatServer, headers: dict[str, str], said: str | None
) -> None:
    """The request id a server gives with a refusal is quoted (bounded, the key masked)."""
    server.add(Reply(status=400, body={"error": {"message": "bad model"}}, headers=headers))
    with pytest.raises(ProviderError) as caught:
        _complete(_provider(server))
    message = str(caught.value)
    assert "HTTP 400: bad model" in message
    assert API_KEY not in message
    if said is None:
        assert "request id" not in message
    else:
        assert said in message and len(message) < 400


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (
            401,
            "the server did not take the key: "
            "environment variable NANOBOT_API_KEY: provider.api_key is set (not shown); "
            "NANOBOT_API_KEY or OPENAI_API_KEY sets it]",
        ),
        (
            403,
            "the key may not use this model or "
            "endpoint: environment variable NANOBOT_MODEL: provider.model = 'gpt-9' (--model or "
            "NANOBOT_MODEL sets it); environment variable NANOBOT_API_KEY: provider.api_key is "
            "set (not shown); NANOBOT_API_KEY or OPENAI_API_KEY sets it]",
        ),
        (
            404,
            "no such endpoint or model here: "
            "environment variable NANOBOT_BASE_URL: provider.base_url = '{base_url}' "
            "(--base-url or NANOBOT_BASE_URL sets it), the endpoint being it and "
            "/chat/completions; environment variable NANOBOT_MODEL: provider.model = 'gpt-9' "
            "(--model or NANOBOT_MODEL sets it)]",
        ),
    ],
)
def test_a_refused_key_model_or_url_names_the_settings_to_fix_and_where_they_were_set(
    server: FakeChatServer, status: int, said: str
) -> None:
    """401, 403 and 404 end with the settings that sent what was refused, never the key."""
    message = f"Incorrect API key provided: {API_KEY}"  # as OpenAI echoes a wrong key
    server.add(error_reply(status, message))
    environ = {
        "NANOBOT_BASE_URL": server.base_url,
        "NANOBOT_API_KEY": API_KEY,
        "NANOBOT_MODEL": "gpt-9",
        "NANOBOT_PROVIDER__MAX_RETRIES": "2",
    }
    config = load_config(cwd=Path("/nonexistent-nanobot-dir"), environ=environ).provider
    with pytest.raises(ProviderError) as caught:
        asyncio.run(OpenAIProvider(config).complete(MESSAGES, []))
    assert len(server.requests) == 1  # not retried
    expected = (
        f"{server.base_url}/chat/completions refused the request: HTTP {status}: Incorrect "
        f"API key provided: *** (invalid_request_error) [{said.format(base_url=server.base_url)}"
    )
    assert str(caught.value) == expected


def test_a_401_without_a_key_says_none_was_sent(server: FakeChatServer) -> None:
    """A server that wants a key, asked without one, is told apart from one refusing a key."""
    server.add(error_reply(401, "You didn't provide an API key."))
    with pytest.raises(ProviderError) as caught:
        _complete(_provider(server, api_key=None))
    (request,) = server.requests
    assert "authorization" not in request.headers
    assert str(caught.value).endswith(
        "HTTP 401: You didn't provide an API key. (invalid_request_error) [the server wants a "
        "key: provider.api_key is not set: no key was sent; NANOBOT_API_KEY or OPENAI_API_KEY "
        "sets it]"
    )


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_not_followed_the_key_stays_with_the_server_set_and_the_error_says_so(
    server: FakeChatServer, status: int
) -> None:
    """A redirect to another server sends it nothing; the error names the address and the fix."""
    elsewhere: list[LoopbackRequest] = []

    def record(request: LoopbackRequest) -> LoopbackResponse:
        elsewhere.append(request)
        return LoopbackResponse(200, {"choices": [{"message": {"content": "stolen"}}]})

    with LoopbackServer(record) as other:
        target = f"{other.url}/v1/chat/completions?key={API_KEY}"
        server.add(Reply(status=status, body="", headers={"Location": target}))
        with pytest.raises(ProviderError) as caught:
            _complete(_provider(server))
    assert elsewhere == [] and len(server.requests) == 1
    assert server.requests[0].headers["authorization"] == f"Bearer {API_KEY}"
    message = str(caught.value)
    assert API_KEY not in message
    assert f"HTTP {status}: " in message
    assert message.endswith(
        f"[the server redirects to '{other.url}/v1/chat/completions?key=***'; redirects are "
        "not followed, so that the key never goes to another server: set provider.base_url "
        f"to the new address: provider.base_url = '{server.base_url}' (--base-url or "
        "NANOBOT_BASE_URL sets it)]"
    )


def test_timeout_is_retried_then_reported(server: FakeChatServer) -> None:
    """A server slower than the timeout is retried and then reported as a timeout."""
    server.add(Reply(body={}, delay=2.0), Reply(body={}, delay=2.0))
    notices: list[RetryNotice] = []
    with pytest.raises(ProviderError) as caught:
        _complete(_provider(server, notices, timeout=0.2, max_retries=1))
    assert len(server.requests) == 2
    assert "timed out" in str(caught.value)
    assert "timed out" in notices[0].reason


def test_a_reply_trickled_past_the_timeout_is_cut_off_and_retried() -> None:
    """`provider.timeout` bounds the whole attempt: a byte every 20 ms does not keep it alive."""
    body = " " * 300 + json.dumps({"choices": [{"message": {"content": "late"}}]})
    answers = iter(
        [
            LoopbackResponse(200, body, pace=0.02),
            LoopbackResponse(200, {"choices": [{"message": {"content": "ok"}}]}),
        ]
    )
    notices: list[RetryNotice] = []
    with LoopbackServer(lambda request: next(answers)) as server:
        config = provider_config(server.url + "/v1", timeout=0.5, max_retries=1)
        started = time.monotonic()
        reply = asyncio.run(
            OpenAIProvider(config, progress=notices.append).complete(MESSAGES, [])  # type: ignore[arg-type]
        )
    assert reply.content == "ok"
    assert time.monotonic() - started < 3.0  # the trickle alone would take over 6 s
    (notice,) = notices
    assert "timed out after 0.5s" in notice.reason


def test_connection_refused_is_retried_then_reported() -> None:
    """A closed port gives connection errors, retried and then reported."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = provider_config(f"http://127.0.0.1:{port}/v1", max_retries=1)
    notices: list[RetryNotice] = []
    with pytest.raises(ProviderError) as caught:
        asyncio.run(OpenAIProvider(config, progress=notices.append).complete(MESSAGES, []))  # type: ignore[arg-type]
    assert "connection failed" in str(caught.value)
    assert len(notices) == 1


def test_a_reply_that_is_not_http_is_said_cut_short_with_the_key_masked() -> None:
    """A header block HTTP cannot read is echoed by the HTTP library whole: the error is cut,
    and given at once (it would come back the same)."""
    not_http = "fine\r\n" + API_KEY + " " + "Z" * 12_000  # a line with no colon, 12 KB long
    answer = LoopbackResponse(200, {}, headers={"X-Note": not_http})
    notices: list[RetryNotice] = []
    with LoopbackServer(lambda request: answer) as server:
        config = provider_config(server.url + "/v1", max_retries=1)
        with pytest.raises(ProviderError) as caught:
            asyncio.run(OpenAIProvider(config, progress=notices.append).complete(MESSAGES, []))  # type: ignore[arg-type]
        assert server.connections == 1  # not retried
    message = str(caught.value)
    assert notices == []
    assert "the answer is not HTTP (RemoteProtocolError: illegal header line" in message
    assert API_KEY not in message and "***" in message
    assert " characters)): no HTTP server answers" in message  # the library's text, cut
    assert len(message) < 1_500


_OK_REPLY = json.dumps({"choices": [{"message": {"content": "ok"}}]}).encode()
_OK_HTTP = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%b" % (len(_OK_REPLY), _OK_REPLY)


@pytest.mark.parametrize(
    "answer",
    [
        b"SSH-2.0-OpenSSH_9.6\r\nInvalid SSH identification string.\r\n",  # then it closes
        b"\x15\x03\x01\x00\x02\x02\x32",  # a TLS server's alert, asked in plain HTTP
        b"+OK POP3 server ready\r\n\r\n",  # a line that is no status line
        b"HTTP/1.1 1000 Weird\r\nContent-Length: 0\r\n\r\n",  # four digits
        bytes(range(256)) * 4,
    ],
)
def test_an_answer_that_is_not_http_is_not_retried_and_names_the_base_url_and_its_source(
    answer: bytes,
) -> None:
    """A server that does not speak HTTP is said at once, with the setting to fix and where it
    was set, as a 404 is; no retry, no notice."""
    notices: list[RetryNotice] = []
    with RawLoopbackServer(lambda number: answer) as server:
        environ = {
            "NANOBOT_BASE_URL": server.url + "/v1",
            "NANOBOT_API_KEY": API_KEY,
            "NANOBOT_PROVIDER__MAX_RETRIES": "3",
        }
        config = load_config(cwd=Path("/nonexistent-nanobot-dir"), environ=environ).provider
        with pytest.raises(ProviderError) as caught:
            asyncio.run(OpenAIProvider(config, progress=notices.append).complete(MESSAGES, []))  # type: ignore[arg-type]
        assert server.connections == 1
    message = str(caught.value)
    assert notices == []
    assert message.startswith(f"{server.url}/v1/chat/completions: the answer is not HTTP (")
    assert "RemoteProtocolError" in message and "not retried" in message
    assert message.endswith(
        f"[environment variable NANOBOT_BASE_URL: provider.base_url = '{server.url}/v1' "
        "(--base-url or NANOBOT_BASE_URL sets it)]"
    )


@pytest.mark.parametrize(
    "cut",
    [
        b"",  # closed before any of the answer (a keep-alive connection the server dropped)
        b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"choi',
        b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"cho',
    ],
)
def test_a_connection_closed_before_or_in_the_middle_of_the_body_is_retried(cut: bytes) -> None:
    """A transfer cut short is a transient fault: retried, and the next answer taken."""
    notices: list[RetryNotice] = []
    with RawLoopbackServer(lambda number: cut if number == 0 else _OK_HTTP) as server:
        config = provider_config(server.url + "/v1", max_retries=2)
        reply = asyncio.run(
            OpenAIProvider(config, progress=notices.append).complete(MESSAGES, [])  # type: ignore[arg-type]
        )
        assert server.connections == 2
    assert reply.content == "ok"
    (notice,) = notices
    assert notice.reason.startswith("connection failed: RemoteProtocolError: ")


@pytest.mark.parametrize("status", [99, 600, 999, 1000])
def test_a_status_outside_100_to_599_is_not_http_and_not_retried(
    server: FakeChatServer, status: int
) -> None:
    """A status HTTP does not define is no 5xx to wait out: one request, an error naming it."""
    server.add(Reply(status=status, body={"error": "odd"}))
    notices: list[RetryNotice] = []
    with pytest.raises(ProviderError) as caught:
        _complete(_provider(server, notices, max_retries=3))
    assert len(server.requests) == 1 and notices == []
    message = str(caught.value)
    assert "the answer is not HTTP" in message and "not retried" in message
    if 100 <= status <= 999:  # read as a status, then refused; others h11 cannot read at all
        assert f"answered with status {status}, which is no HTTP status" in message
    assert message.endswith(
        f"[provider.base_url = '{server.base_url}' (--base-url or NANOBOT_BASE_URL sets it)]"
    )


@pytest.mark.parametrize(
    ("location", "shown"),
    [
        ("http://elsewhere.example/v1\x01x", "'http://elsewhere.example/v1\\x01x'"),
        ("http://elsewhere.example/\tv1\x7f", "'http://elsewhere.example/\\tv1\\x7f'"),
        ("http://user:pw@[::1/v1", "'http://***@[::1/v1'"),  # a broken IPv6 address
        ("/v1\x1b[31m" + "x" * 5_000, "'/v1\\x1b[31mxxx"),
    ],
)
def test_a_redirect_to_an_address_httpx_cannot_read_gets_the_redirect_error(
    server: FakeChatServer, location: str, shown: str
) -> None:
    """A Location with a control character is quoted escaped and cut in the redirect's own
    error, not lost in a connection error that is retried."""
    server.add(Reply(status=302, body="", headers={"Location": location}))
    notices: list[RetryNotice] = []
    with pytest.raises(ProviderError) as caught:
        _complete(_provider(server, notices, max_retries=2))
    assert len(server.requests) == 1 and notices == []
    message = str(caught.value)
    assert "HTTP 302: " in message
    assert f"[the server redirects to {shown}" in message
    assert "redirects are not followed" in message and "set provider.base_url" in message
    assert not any(char in message for char in "\x01\x1b\x7f\t")
    assert len(message) < 1_000 and "pw" not in message


def test_a_redirect_httpx_cannot_read_on_a_client_of_ones_own_is_said_to_be_a_redirect(
    server: FakeChatServer,
) -> None:
    """`post_request` on a client without `KeptClients`' hook still says redirect, once,
    not a connection failure to retry."""
    server.add(Reply(status=307, body="", headers={"Location": "http://elsewhere/\x01"}))

    async def post() -> None:
        async with httpx.AsyncClient() as client:
            await post_request(
                client,
                server.base_url + "/chat/completions",
                content=b"{}",
                headers={},
                max_bytes=1_000,
                timeout=5.0,
                secret=API_KEY,
            )

    with pytest.raises(ProviderError) as caught:
        asyncio.run(post())
    assert not isinstance(caught.value, Retryable)
    assert str(caught.value).startswith(
        f"{server.base_url}/chat/completions: the server redirects to an address that is "
        "not a URL (RemoteProtocolError: Invalid URL in location header: "
    )


@pytest.mark.parametrize("status", [200, 503])
def test_a_body_that_cannot_be_decompressed_is_retried_then_reported(
    server: FakeChatServer, status: int
) -> None:
    """A body sent as gzip that is not gzip is retried, then a ProviderError (no httpx error)."""
    broken = Reply(status=status, body="not gzip", headers={"Content-Encoding": "gzip"})
    server.add(broken, broken, text_reply("ok"))
    notices: list[RetryNotice] = []
    with pytest.raises(ProviderError) as caught:
        _complete(_provider(server, notices, max_retries=1))
    assert len(server.requests) == 2
    assert "could not be decompressed" in notices[0].reason
    assert "gave up after 2 attempt(s)" in str(caught.value)
    assert "could not be decompressed" in str(caught.value)
    assert _complete(_provider(server)).content == "ok"


def test_malformed_success_bodies_are_provider_errors(server: FakeChatServer) -> None:
    """A 200 that is not JSON, or that carries only an error object, is a ProviderError."""
    server.add(Reply(body="<html>gateway</html>"), Reply(body={"error": {"message": "quota gone"}}))
    provider = _provider(server)
    with pytest.raises(ProviderError, match="not JSON"):
        _complete(provider)
    with pytest.raises(ProviderError, match="quota gone"):
        _complete(provider)


@pytest.mark.parametrize(
    "error",
    [
        {"message": f"quota gone for {API_KEY}: " + "E" * 3_000_000},
        f"quota gone for {API_KEY}: " + "E" * 3_000_000,
        {"message": f"quota gone for {API_KEY}", "code": "C" * 100_000},
        [f"quota gone for {API_KEY}"] * 100_000,
    ],
)
def test_an_error_object_of_a_200_is_said_cut_short_with_the_key_masked(
    server: FakeChatServer, error: Any
) -> None:
    """A 200 carrying a megabytes-long error object gives an error of 1,000-odd characters."""
    server.add(Reply(body={"error": error}))
    with pytest.raises(ProviderError) as caught:
        _complete(_provider(server))
    message = str(caught.value)
    assert len(server.requests) == 1
    assert message.startswith(f"{server.base_url}/chat/completions answered with an error: ")
    assert "quota gone for ***" in message and API_KEY not in message
    assert message.endswith(" characters)") and len(message) < 1_200


def _cohere_bodies() -> list[dict[str, Any]]:
    """The recorded 200 replies of Cohere's v2 chat API (a body with no `choices`)."""
    path = Path(__file__).parents[1] / "data" / "pydantic-ai-cassettes" / "interactions.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [
        row["response_body"]
        for row in rows
        if row["response_status"] == 200 and "cohere.com" in row["uri"]
    ]


def test_a_200_without_choices_is_a_provider_error_naming_what_came_back(
    server: FakeChatServer,
) -> None:
    """Real Cohere replies (no `choices`) raise at once, naming their keys; nothing is retried."""
    bodies = _cohere_bodies()
    assert len(bodies) == 2
    for body in bodies:
        server.add(Reply(body=body))
    provider = _provider(server)
    for _ in bodies:
        with pytest.raises(ProviderError) as caught:
            _complete(provider)
        message = str(caught.value)
        assert "not a chat completion" in message and "'choices'" in message
        assert "finish_reason, id, message, usage" in message
    assert len(server.requests) == len(bodies)


def test_a_responses_api_body_is_named_by_its_object_kind(server: FakeChatServer) -> None:
    """A Responses API body is reported with its `object` kind, and the key never shows."""
    server.add(
        Reply(body={"id": "resp_1", "object": "response", "output": [], "note": API_KEY}),
        Reply(body={"choices": "not a list"}),
    )
    provider = _provider(server)
    with pytest.raises(ProviderError, match="object: 'response'") as caught:
        _complete(provider)
    assert API_KEY not in str(caught.value)
    with pytest.raises(ProviderError, match="no 'choices' list"):
        _complete(provider)


@pytest.mark.parametrize(
    ("choice", "named"),
    [
        ({"text": "The answer is 42.", "index": 0, "finish_reason": "stop"}, "keys: finish_reason"),
        (None, "choices[0] is null"),
        ("hello", "choices[0] is a string"),
        ({"message": "hello"}, "choices[0] keys: message"),
        ({"index": 0}, "choices[0] keys: index"),
    ],
)
def test_a_choice_without_a_message_is_a_provider_error(
    server: FakeChatServer, choice: Any, named: str
) -> None:
    """A legacy completion or a choice of another shape fails at once instead of an empty answer."""
    server.add(Reply(body={"object": "text_completion", "choices": [choice]}))
    with pytest.raises(ProviderError, match="no 'message' object in choices") as caught:
        _complete(_provider(server))
    assert named in str(caught.value)
    assert len(server.requests) == 1


def test_a_filtered_choice_without_a_message_is_an_empty_reply(server: FakeChatServer) -> None:
    """A choice that says why it holds nothing (content filtered) is an empty reply, no error."""
    server.add(Reply(body={"choices": [{"index": 0, "finish_reason": "content_filter"}]}))
    reply = _complete(_provider(server))
    assert reply.message == {"role": "assistant", "content": ""}
    assert reply.finish_reason == "content_filter"


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None)
@given(
    choice=_JSON | st.fixed_dictionaries({"text": st.text(max_size=8)}, optional={"message": _JSON})
)
def test_any_first_choice_is_a_reply_or_a_provider_error(choice: Any) -> None:
    """Whatever `choices[0]` holds, the provider returns a reply or raises ProviderError."""
    with FakeChatServer([Reply(body={"choices": [choice]})]) as server:
        try:
            reply = _complete(_provider(server, max_retries=0))
        except ProviderError as exc:
            assert "not a chat completion" in str(exc)
        else:
            assert isinstance(choice, dict)
            message = choice.get("message")
            filtered = message is None and isinstance(choice.get("finish_reason"), str)
            assert isinstance(message, dict) or (filtered and "text" not in choice)
            assert reply.message["role"] == "assistant"


_CALL = st.fixed_dictionaries(
    {},
    optional={
        "id": st.sampled_from(["call_1", "call_1", "", "x" * 41]) | _JSON,
        "type": _JSON,
        "function": st.fixed_dictionaries({}, optional={"name": _JSON, "arguments": _JSON}) | _JSON,
    },
)
_MESSAGE = st.fixed_dictionaries(
    {},
    optional={
        "role": _JSON,
        "content": _JSON,
        "tool_calls": st.lists(_CALL, max_size=4) | _JSON,
        "function_call": _JSON,
        "_meta": _JSON,
    },
)
_CHOICE = st.fixed_dictionaries(
    {},
    optional={
        "message": _MESSAGE | _JSON,
        "finish_reason": st.sampled_from(["stop", "length", "tool_calls"]) | _JSON,
        "text": _JSON,
    },
)
# The edges first: the largest count taken, one past it, the most digits JSON decodes.
_COUNT = (
    st.sampled_from([10**12, 10**12 + 1, int("9" * 4_300), -1])
    | st.integers(min_value=-(10**20), max_value=int("9" * 4_300))
    | st.floats()
    | _JSON
)
_COMPLETION = st.fixed_dictionaries(
    {
        "choices": st.lists(_CHOICE, max_size=2) | _JSON,
        "usage": st.dictionaries(
            st.sampled_from(["prompt_tokens", "completion_tokens", "total_tokens"]), _COUNT
        )
        | _JSON,
    },
    optional={"model": _JSON, "error": _JSON},
)
#: Counts a server may send that the session file cannot hold the sum of.
_HUGE_USAGE = json.dumps(
    {"choices": [], "usage": {"prompt_tokens": int("9" * 4_300), "completion_tokens": 9}}
).encode()


class _ScriptedBody:
    """What the loopback server answers next, set by each example of the property below."""

    def __init__(self) -> None:
        self.response = LoopbackResponse(200, b"")

    def __call__(self, request: LoopbackRequest) -> LoopbackResponse:
        return self.response


_BODY = _ScriptedBody()


@pytest.fixture(scope="module")
def scripted_server() -> Iterator[LoopbackServer]:
    """One loopback server for every example, answering what `_BODY` holds."""
    with LoopbackServer(_BODY) as running:
        yield running


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    status=st.just(200)
    | st.sampled_from([201, 400, 401, 404, 429, 503])
    | st.integers(0, 99)  # h11 cannot read it as a status
    | st.integers(600, 999),  # read as one, though HTTP defines none
    body=st.one_of(
        _COMPLETION.map(lambda body: json.dumps(body).encode()),
        _COMPLETION.map(lambda body: json.dumps(body).encode()),
        _JSON.map(lambda body: json.dumps(body).encode()),
        st.binary(max_size=64),
    ),
)
@example(status=200, body=_HUGE_USAGE)
def test_any_reply_body_is_a_sendable_reply_or_a_provider_error_naming_the_endpoint(
    scripted_server: LoopbackServer, status: int, body: bytes
) -> None:
    """Whatever status and body come back, the caller gets a reply it can store and send
    back, or a ProviderError naming the endpoint, bounded, without the key; nothing else."""
    _BODY.response = LoopbackResponse(status, body)
    config = provider_config(scripted_server.url + "/v1", max_retries=0)
    try:
        reply = asyncio.run(OpenAIProvider(config).complete(MESSAGES, []))
    except ProviderError as exc:
        said = str(exc)
        assert scripted_server.url in said
        assert API_KEY not in said and len(said) < 2_000
        return
    assert 200 <= status < 300
    message = reply.message
    assert message["role"] == "assistant" and "_meta" not in message
    assert isinstance(message["content"], str | list)
    ids = [call["id"] for call in reply.tool_calls]
    assert all(isinstance(i, str) and 0 < len(i) <= MAX_CALL_ID_LENGTH for i in ids)
    assert len(set(ids)) == len(ids)
    assert all(isinstance(call["function"]["arguments"], str) for call in reply.tool_calls)
    assert all(0 <= count <= 2 * 10**12 for count in reply.usage.to_json().values())
    assert reply.finish_reason is None or isinstance(reply.finish_reason, str)
    request_content(message)  # the session can store it and the next request carry it


_JUNK_CONTENT = [
    "stray text",
    {"text": "a part without a type"},
    {"type": "text", "text": "Sunny."},
    5,
    {"type": "text", "text": 7},
    {"type": "refusal", "refusal": "Not that."},
    {"type": ""},
]


def test_content_parts_no_server_takes_back_are_dropped_with_a_warning_naming_each(
    server: FakeChatServer,
) -> None:
    """A content list with junk in it is stored and sent back without the junk, each part
    dropped named by its index; the parts a server takes keep their order."""
    server.add(
        Reply(body={"choices": [{"message": {"role": "assistant", "content": _JUNK_CONTENT}}]}),
        text_reply("done"),
    )
    provider = _provider(server)
    with capture_logs() as logs:
        reply = _complete(provider, tools=[])
    kept = [_JUNK_CONTENT[2], _JUNK_CONTENT[5]]
    assert reply.message["content"] == kept and reply.content == "Sunny."
    (warning,) = [line for line in logs if line["log_level"] == "warning"]
    assert warning["dropped"] == 5
    assert warning["parts"] == [
        "content[0] is a str, not an object",
        "content[1] has no 'type'",
        "content[3] is an int, not an object",
        "content[4] is a text part whose 'text' is not a string",
        "content[6] has an empty 'type'",
    ]
    history = [*MESSAGES, reply.message, {"role": "user", "content": "and tomorrow?"}]
    asyncio.run(provider.complete(history, []))
    assert server.requests[1].body["messages"][2]["content"] == kept


def test_a_content_list_of_junk_only_is_no_content(server: FakeChatServer) -> None:
    """Nothing a server takes back is left: the content is empty text, as a missing one."""
    server.add(Reply(body={"choices": [{"message": {"content": [None, [], {"type": 3}]}}]}))
    with capture_logs() as logs:
        reply = _complete(_provider(server), tools=[])
    assert reply.message == {"role": "assistant", "content": ""}
    (warning,) = [line for line in logs if line["log_level"] == "warning"]
    assert warning["parts"] == [
        "content[0] is None, not an object",
        "content[1] is a list, not an object",
        "content[2] has a 'type' that is an int",
    ]


def test_empty_choices_is_an_empty_reply_not_an_error(server: FakeChatServer) -> None:
    """A 200 without choices becomes an empty assistant message (the runner decides what to do)."""
    server.add(Reply(body={"choices": []}))
    reply = _complete(_provider(server))
    assert reply.message == {"role": "assistant", "content": ""}
    assert reply.tool_calls == []


def test_api_key_never_in_errors_notices_logs_or_repr(
    server: FakeChatServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server echoing the Authorization header cannot make the key appear anywhere we write."""

    echo = "your header was Bearer " + API_KEY
    server.add(error_reply(503, echo), error_reply(401, echo))
    notices: list[RetryNotice] = []
    provider = _provider(server, notices)
    with pytest.raises(ProviderError) as caught:
        _complete(provider)
    captured = capsys.readouterr()
    written = [str(caught.value), repr(caught.value), repr(provider), captured.out, captured.err]
    written += [n.describe() for n in notices]
    assert notices and "***" in notices[0].reason
    for text in written:
        assert API_KEY not in text
    assert "your header was Bearer ***" in str(caught.value)


def test_credentials_in_the_base_url_are_masked() -> None:
    """user:password in the base URL is never shown in the provider's repr."""
    config = provider_config("http://me:s3cret@127.0.0.1:9/v1")
    assert "s3cret" not in repr(OpenAIProvider(config))


def _real_interaction(data_folder: Any, cassette: str, index: int) -> dict[str, Any]:
    path = data_folder / "pydantic-ai-cassettes" / "interactions.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["source_path"].endswith(cassette) and row["interaction_index"] == index:
            return row  # type: ignore[no-any-return]
    raise LookupError(f"{cassette} #{index} not in {path}")


def _nested(levels: int) -> Any:
    """Lists nested `levels` deep around one string (built without recursion)."""
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


@settings(max_examples=30, deadline=None)
# The message nests `levels` + 3 deep: from one level past MAX_ENCODED_DEPTH, on every Python.
@given(
    index=st.integers(0, 3),
    levels=st.integers(MAX_ENCODED_DEPTH - 2, 20_000) | st.just(100_000),
)
def test_a_message_too_deep_to_encode_is_a_provider_error_naming_it_and_nothing_is_sent(
    index: int, levels: int
) -> None:
    """A message JSON cannot encode is a ProviderError naming its index, not a JSONLimitError."""
    history: list[dict[str, Any]] = [{"role": "user", "content": f"q{n}"} for n in range(4)]
    history[index] = {
        "role": "user",
        "content": [{"type": "text", "text": "a", "meta": _nested(levels)}],
    }
    with FakeChatServer() as server:
        with pytest.raises(ProviderError) as raised:
            asyncio.run(_provider(server).complete(history, TOOLS))
        assert not server.requests
    assert str(raised.value) == (
        f"nanobot-core {core_version()} sends no request: messages[{index}] nests "
        f"{levels + 3} levels deep (a session line may nest 100)"
    )


def test_a_message_holding_itself_is_a_provider_error_naming_it(server: FakeChatServer) -> None:
    """A message that contains itself is named, and nothing is sent."""
    looped: dict[str, Any] = {"role": "user", "content": [{"type": "text", "text": "a"}]}
    looped["content"][0]["meta"] = looped
    with pytest.raises(ProviderError) as raised:
        asyncio.run(_provider(server).complete([*MESSAGES, looped], TOOLS))
    assert str(raised.value).endswith(
        "sends no request: messages[2] holds a dict or list that contains itself (no JSON can)"
    )
    assert not server.requests


def test_a_tool_definition_too_deep_to_encode_is_named(server: FakeChatServer) -> None:
    """A tool definition JSON cannot encode is named as tools[i], and nothing is sent."""
    deep = {"type": "function", "function": {"name": "deep", "parameters": _nested(50_000)}}
    with pytest.raises(ProviderError, match=r"sends no request: tools\[1\] nests 50002 levels"):
        asyncio.run(_provider(server).complete(MESSAGES, [*TOOLS, deep]))
    assert not server.requests


def test_a_message_deeper_than_a_session_line_but_encodable_is_sent_as_it_is(
    server: FakeChatServer,
) -> None:
    """Past 100 levels but encodable, a message goes out unchanged: the server decides."""
    message = {"role": "user", "content": [{"type": "text", "text": "a", "meta": _nested(300)}]}
    server.add(text_reply("ok"))
    assert asyncio.run(_provider(server).complete([message], TOOLS)).content == "ok"
    assert server.requests[0].body["messages"] == [message]


def test_a_message_holding_an_integer_too_long_to_write_is_named(server: FakeChatServer) -> None:
    """An integer of more than 4,300 digits in a message is named with the encoder's reason."""
    message = {"role": "user", "content": "hi", "meta": 10**5000}
    with pytest.raises(ProviderError) as raised:
        asyncio.run(_provider(server).complete([*MESSAGES, message], TOOLS))
    assert str(raised.value).endswith(
        "sends no request: messages[2] cannot be encoded as JSON: "
        "an integer of more than 4300 digits"
    )
    assert not server.requests


def test_the_message_that_cannot_be_encoded_is_named_not_an_earlier_deep_one(
    server: FakeChatServer,
) -> None:
    """An encodable message past 100 levels is not blamed for a later one's long integer."""
    deep = {"role": "user", "content": [{"type": "text", "text": "a", "meta": _nested(150)}]}
    message = {"role": "user", "content": "hi", "meta": 10**5000}
    with pytest.raises(ProviderError) as raised:
        asyncio.run(_provider(server).complete([deep, *MESSAGES, message], TOOLS))
    assert str(raised.value).endswith(
        "sends no request: messages[3] cannot be encoded as JSON: "
        "an integer of more than 4300 digits"
    )
    assert not server.requests


@pytest.mark.parametrize("replaced", [float("nan"), "\ud800"])
def test_a_deep_message_is_named_when_a_nan_elsewhere_has_the_body_walked(
    server: FakeChatServer, replaced: Any
) -> None:
    """Each encodes alone, but a body walked for a NaN or a lone surrogate names the deep one."""
    deep = {"role": "user", "content": [{"type": "text", "text": "a", "meta": _nested(150)}]}
    message = {"role": "user", "content": "hi", "meta": replaced}
    with pytest.raises(ProviderError) as raised:
        asyncio.run(_provider(server).complete([*MESSAGES, message, deep], TOOLS))
    assert str(raised.value).endswith(
        "sends no request: messages[3] nests 153 levels deep (a session line may nest 100)"
    )
    assert not server.requests


def test_request_fault_names_the_part_to_blame_and_why_in_one_wording() -> None:
    """The shared rule names messages[i] or tools[i] with the reason, and nothing when clean."""
    looped: dict[str, Any] = {"role": "user", "content": "a"}
    looped["meta"] = looped
    deep_tool = {"type": "function", "function": {"name": "d", "parameters": _nested(5_000)}}
    cases: list[tuple[list[Any], list[Any], str | None]] = [
        (MESSAGES, TOOLS, None),
        (
            [*MESSAGES, looped],
            TOOLS,
            "messages[2] holds a dict or list that contains itself (no JSON can)",
        ),
        (
            MESSAGES,
            [*TOOLS, deep_tool],
            "tools[1] nests 5002 levels deep (a session line may nest 100)",
        ),
        (
            [{"role": "user", "content": "a", "n": 10**5000}],
            [],
            "messages[0] cannot be encoded as JSON: an integer of more than 4300 digits",
        ),
        # A set is the body encoder's to name; the loop after it is the fault.
        (
            [{"role": "user", "content": {1}}, looped],
            [],
            "messages[1] holds a dict or list that contains itself (no JSON can)",
        ),
        (
            [{"role": "user", "content": "a", "n": float("nan"), "meta": _nested(150)}],
            [],
            "messages[0] nests 151 levels deep (a session line may nest 100)",
        ),
    ]
    for messages, tools, expected in cases:
        assert request_fault(messages, tools) == expected


def test_the_body_is_encoded_once_and_a_request_that_goes_out_walks_no_message(
    server: FakeChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retried twice, the request is encoded once, and no message is looked through for faults."""
    import nanobot_core.providers.openai as module

    encoded: list[Any] = []
    walked: list[Any] = []

    def counting(body: Any) -> bytes:
        encoded.append(body)
        return request_content(body)

    monkeypatch.setattr(module, "request_content", counting)
    monkeypatch.setattr(module, "request_fault", lambda *parts: walked.append(parts))
    server.add(error_reply(503, "overloaded"), error_reply(500, "oops"), text_reply("finally"))
    reply = asyncio.run(_provider(server, max_retries=3).complete(MESSAGES, TOOLS))
    assert reply.content == "finally"
    assert len(server.requests) == 3
    assert len(encoded) == 1 and walked == []
    assert all(request.body == server.requests[0].body for request in server.requests)


def test_a_key_at_the_cut_of_a_long_error_object_is_masked_before_the_cut(
    server: FakeChatServer,
) -> None:
    """A key the 1,000-character cut would split is masked first: no piece of it is shown."""
    server.add(Reply(body={"error": {"message": "a" * 995 + API_KEY + "b" * 5_000}}))
    with pytest.raises(ProviderError) as caught:
        _complete(_provider(server))
    message = str(caught.value)
    assert "a" * 995 + "***" in message
    assert API_KEY[:5] not in message.split("answered with an error: ", 1)[1]
