"""The key kept out of what a provider writes: escaped, cut, or in a request no server gets."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nanobot_core.errors import ProviderError
from nanobot_core.providers import (
    KeptClients,
    Retryable,
    RetryNotice,
    RetryPolicy,
    mask_secret,
    post_request,
    send_with_retries,
)
from tests.headless.fake_server import FakeChatServer, text_reply

PIECE = 8


def _quoted(text: str, literal: Callable[[str], str], prefix: int) -> str:
    """`text` as `literal` (repr or ascii) writes it, as inside a longer literal holding both
    quotes (so ' escaped): the quote rule of the text around it is not the key's to choose."""
    return literal(text + "'\"")[prefix:-4]


def _embeddings(key: str) -> dict[str, str]:
    """The ways a message may write `key`: as it is, and as repr, ascii, bytes repr and JSON
    write it, each inside a longer text whose quote choice the key does not make."""
    data = key.encode("utf-8", "surrogatepass")
    return {
        "raw": key,
        "repr": _quoted(key, repr, 1),
        "repr, ' not escaped": repr(key + "'")[1:-2] if '"' not in key else key,
        "ascii": _quoted(key, ascii, 1),
        "bytes repr": repr(data + b"'\"")[2:-4],
        "bytes repr, ' not escaped": repr(data + b"'")[2:-2] if b'"' not in data else key,
        "json": json.dumps(key)[1:-1],
        "json, no ascii escapes": json.dumps(key, ensure_ascii=False)[1:-1],
    }


def _forbidden(written: str) -> list[str]:
    """What must not be left of a key written as `written`: all of it when it is shorter
    than 8 characters, else every piece of 8."""
    if len(written) < PIECE:
        return [written]
    return [written[start : start + PIECE] for start in range(len(written) - PIECE + 1)]


keys = st.text(min_size=1, max_size=40) | st.text(
    st.sampled_from("sk-AB9'\"\\\n\r\t\x00\x7fé€\u2028*"), min_size=1, max_size=30
)


@settings(max_examples=300, deadline=None)
@given(
    key=keys,
    how=st.sampled_from(sorted(_embeddings("k"))),
    before=st.text(max_size=20),
    after=st.text(max_size=20),
    cut=st.tuples(st.integers(0, 200), st.integers(0, 200)),
)
@example(key="sk-abc\ndefghijk", how="bytes repr", before="b'Bearer ", after="'", cut=(0, 0))
@example(key="ab***cdefgh", how="raw", before="ab", after="", cut=(0, 0))
@example(key="sk-ab'cd\"efgh", how="repr", before="", after="", cut=(0, 0))
def test_no_key_nor_piece_of_it_survives_masking_however_it_is_written(
    key: str, how: str, before: str, after: str, cut: tuple[int, int]
) -> None:
    """Whatever the key and however it is written (as it is, repr, ascii, bytes repr, JSON;
    whole or a cut of 8+ characters), the masked text holds neither it nor a piece of 8."""
    written = _embeddings(key)[how]
    start, length = cut
    if length >= PIECE and len(written) >= PIECE:  # a message cut the key
        start %= len(written) - PIECE + 1
        written = written[start : start + length]
    masked = mask_secret(before + written + after, key)
    for piece in [key, *_forbidden(written)]:
        assert piece not in masked, (piece, masked)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=60), key=keys)
def test_text_without_any_of_the_key_is_left_as_it_is(text: str, key: str) -> None:
    """A text holding no piece of the key's forms comes back unchanged (only the key is hidden)."""
    forms = set(_embeddings(key).values())
    if any(piece in text for form in forms for piece in _forbidden(form)):
        return
    assert mask_secret(text, key) == text


def test_the_key_and_each_stretch_of_it_become_three_stars() -> None:
    """The key in h11's bytes repr, and a cut piece of it, become ``***``; the rest is kept."""
    key = "sk-test-Zq8V\nbN3kWm5"
    text = f"Illegal header value {('Bearer ' + key).encode()!r}; again: {key[4:14]!r}."
    assert mask_secret(text, key) == "Illegal header value b'Bearer ***'; again: '***'."
    assert mask_secret("no key here", key) == "no key here"
    for no_key in (None, ""):
        assert mask_secret("the key sk-abc", no_key) == "the key sk-abc"


def test_a_key_holding_stars_is_masked_with_another_character() -> None:
    """A mask of ``*`` could join the text around it into the key: then ``#`` is used."""
    assert mask_secret("ab***cdefgh and ***", "ab***cdefgh") == "### and ***"


def test_masking_is_linear_in_the_text() -> None:
    """A megabyte of near-misses of a long escaped key is masked in well under a second each."""
    key = "sk-" + "é\n" * 100
    text = ("sk-é\\n" * 3 + "x") * (1_000_000 // 16)
    mask_secret("warm the cache", key)
    started = time.monotonic()
    mask_secret(text, key)
    assert time.monotonic() - started < 5


class _PluginProvider:
    """A third-party provider built on the core's HTTP helpers, without `check_endpoint`."""

    def __init__(self, base_url: str, api_key: str, progress: Callable[[Any], None]) -> None:
        self.url = base_url + "/chat/completions"
        self.api_key = api_key
        self.progress = progress
        self.clients = KeptClients(timeout=5.0)
        self.attempts = 0

    async def complete(self) -> int:
        headers = {"Authorization": f"Bearer {self.api_key}"}

        async def attempt() -> int:
            self.attempts += 1
            response = await post_request(
                await self.clients.get(),
                self.url,
                content=b"{}",
                headers=headers,
                max_bytes=1_000_000,
                timeout=5.0,
                secret=self.api_key,
            )
            return response.status_code

        return await send_with_retries(
            attempt, RetryPolicy(3, 0.001, 0.01), url=self.url, progress=self.progress
        )


BAD_KEYS = {
    "line break": ("sk-test-Zq8V\nbN3kWm5Lr7", "a line break at byte 20"),
    "carriage return": ("sk-test-Zq8VbN3\rkWm5Lr7", "a line break at byte 23"),
    "NUL": ("sk-test-\x00Zq8VbN3kWm5Lr7", "a control character at byte 16"),
    "trailing tab": ("sk-test-Zq8VbN3kWm5Lr7\t", "a trailing tab at byte 30"),
}


@pytest.mark.parametrize("name", sorted(BAD_KEYS))
def test_a_request_malformed_on_this_side_fails_at_once_naming_the_header(
    name: str, server: FakeChatServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key no header can carry, sent by a provider that never checked it, is one attempt and
    a ProviderError naming the header and the fault: no retry, no notice, no key shown."""
    key, fault = BAD_KEYS[name]
    server.add(text_reply("never sent"))
    notices: list[RetryNotice] = []
    provider = _PluginProvider(server.base_url, key, notices.append)
    with pytest.raises(ProviderError) as raised:
        asyncio.run(provider.complete())
    assert not isinstance(raised.value, Retryable)
    message = str(raised.value)
    assert message.startswith(f"{provider.url}: the request was not sent: ")
    assert f"the Authorization header holds {fault} of its value (the value is not shown)" in (
        message
    )
    assert "not retried" in message and "LocalProtocolError" in message
    assert provider.attempts == 1 and notices == [] and server.requests == []
    captured = capsys.readouterr()
    for text in (message, repr(raised.value), captured.out, captured.err):
        assert key not in text
        for written in _embeddings(key).values():
            assert written not in text


@pytest.mark.parametrize("key", ["sk-test-Zq8VbN3kWm5Lr7\u00e9", "sk-test-Zq8V\u2028bN3kWm5Lr7"])
def test_a_key_past_ascii_fails_at_once_naming_the_header_never_the_key(
    key: str, server: FakeChatServer
) -> None:
    """A key past ASCII, sent by a provider that never checked it, is one attempt and a
    ProviderError naming the header and the character's place: no retry, no key shown."""
    server.add(text_reply("never sent"))
    notices: list[RetryNotice] = []
    provider = _PluginProvider(server.base_url, key, notices.append)
    with pytest.raises(ProviderError) as raised:
        asyncio.run(provider.complete())
    assert not isinstance(raised.value, Retryable)
    at = next(n for n, char in enumerate(f"Bearer {key}", start=1) if not char.isascii())
    assert str(raised.value) == (
        f"{provider.url}: the request was not sent: the Authorization header holds a character "
        f"past ASCII at character {at} of its value (the value is not shown); not retried, as "
        "it would fail the same way"
    )
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
    assert provider.attempts == 1 and notices == [] and server.requests == []


def test_a_connection_failure_is_still_retried() -> None:
    """A refused connection stays a Retryable: the transfer failed, not the request."""
    with FakeChatServer() as server:
        url = server.base_url
    notices: list[RetryNotice] = []
    provider = _PluginProvider(url, "sk-test-Zq8VbN3kWm5Lr7", notices.append)
    with pytest.raises(ProviderError, match="gave up after 4 attempt"):
        asyncio.run(provider.complete())
    assert [notice.attempt for notice in notices] == [1, 2, 3]
    assert all("connection failed" in notice.reason for notice in notices)


def test_httpx_still_names_the_error_the_fix_relies_on() -> None:
    """httpx raises LocalProtocolError, a RequestError, for a header value h11 refuses."""
    assert issubclass(httpx.LocalProtocolError, httpx.RequestError)
