"""`provider.max_reply_bytes`: a reply body is read up to the limit, as sent and as decoded."""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nanobot_core.config import ProviderConfig
from nanobot_core.errors import ProviderError
from nanobot_core.providers import OpenAIProvider, post_request
from nanobot_core.testing_http import LoopbackRequest, LoopbackResponse, LoopbackServer
from tests.headless.conftest import provider_config

MESSAGES = [{"role": "user", "content": "hi"}]
COMPLETION = {
    "object": "chat.completion",
    "model": "fake-model",
    "choices": [{"message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}],
}
LIMIT = 1024 * 1024


class Script:
    """Answers requests with the given responses in turn and counts them."""

    def __init__(self, *responses: LoopbackResponse) -> None:
        self._responses = iter(responses)
        self.count = 0

    def __call__(self, request: LoopbackRequest) -> LoopbackResponse:
        self.count += 1
        return next(self._responses, LoopbackResponse(500, {"error": "no more replies"}))


def _config(server: LoopbackServer, **changes: Any) -> ProviderConfig:
    settings: dict[str, Any] = {"max_reply_bytes": LIMIT, "max_retries": 2}
    settings.update(changes)
    return provider_config(server.url + "/v1", **settings)


def _complete(config: ProviderConfig) -> Any:
    return asyncio.run(OpenAIProvider(config).complete(MESSAGES, []))


def _peak_bytes(call: Callable[[], object]) -> int:
    """The most memory Python held while `call` ran (every thread, the server's too)."""
    tracemalloc.start()
    try:
        call()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def _refused_at_peak(config: ProviderConfig) -> tuple[ProviderError, int]:
    """The error a completion under `config` ends with, and the peak memory it took."""
    caught: list[ProviderError] = []

    def run() -> None:
        try:
            _complete(config)
        except ProviderError as exc:
            caught.append(exc)

    peak = _peak_bytes(run)
    (error,) = caught
    return error, peak


def _endless_spaces() -> Iterator[bytes]:
    return itertools.repeat(b" " * 65_536)


def _endless_compressed(wbits: int) -> Iterator[bytes]:
    """A compressed stream of zeros that never ends (a megabyte decodes from ~1 KB)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    block = bytes(1 << 20)
    while True:
        out = packer.compress(block)
        if out:
            yield out


def _twice_gzipped_zeros(size: int) -> bytes:
    """`size` zero bytes gzipped twice: a few KB that decode to `size` bytes."""
    inner = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    block = bytes(1 << 20)
    layer = b"".join(inner.compress(block) for _ in range(size >> 20)) + inner.flush()
    return gzip.compress(layer, 9)


@pytest.mark.parametrize("status", [200, 503])
def test_an_endless_body_stops_at_the_limit_with_bounded_memory(status: int) -> None:
    """A body that never ends is a ProviderError at the limit, held in memory no larger than it."""
    script = Script(
        LoopbackResponse(200, COMPLETION),
        LoopbackResponse(status, chunks=_endless_spaces()),
    )
    with LoopbackServer(script) as server:
        config = _config(server)
        assert _complete(config).content == "fine"  # and the modules are imported
        error, peak = _refused_at_peak(config)
    assert f"was larger than {LIMIT} bytes (HTTP {status}; reading stopped" in str(error)
    assert "provider.max_reply_bytes" in str(error)
    assert script.count == 2  # not retried
    assert peak < 8 * LIMIT


_WBITS = {"gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS, "raw deflate": -zlib.MAX_WBITS}


@pytest.mark.parametrize("bomb", ["gzip", "deflate", "raw deflate", "gzip, gzip"])
def test_a_compressed_body_is_limited_by_its_decoded_size(bomb: str) -> None:
    """A zip bomb (a few KB decoding to 128 MiB, or without end) stops at the limit, decoded."""
    coding = bomb.removeprefix("raw ")
    headers = {"Content-Encoding": coding}
    if bomb == "gzip, gzip":
        answer = LoopbackResponse(200, _twice_gzipped_zeros(128 << 20), headers)
    else:
        answer = LoopbackResponse(200, headers=headers, chunks=_endless_compressed(_WBITS[bomb]))
    script = Script(LoopbackResponse(200, COMPLETION), answer)
    with LoopbackServer(script) as server:
        config = _config(server)
        _complete(config)
        error, peak = _refused_at_peak(config)
    assert f"larger than {LIMIT} bytes (HTTP 200, {coding}; decoding stopped" in str(error)
    assert script.count == 2
    assert peak < 8 * LIMIT


def test_a_huge_content_length_is_refused_before_the_body_is_read() -> None:
    """A Content-Length over the limit fails at once, naming it; nothing is retried."""
    huge = LoopbackResponse(200, COMPLETION, headers={"Content-Length": str(10**12)})
    script = Script(huge)
    with LoopbackServer(script) as server, pytest.raises(ProviderError) as caught:
        _complete(_config(server, timeout=30.0))
    assert str(caught.value).startswith(
        f"the reply from {server.url}/v1/chat/completions was larger than {LIMIT} bytes "
        "(HTTP 200 with Content-Length 1000000000000; none of it read)"
    )
    assert script.count == 1


def test_a_reply_of_exactly_the_limit_is_read_and_one_byte_more_is_not() -> None:
    """The limit is inclusive: a body of `max_reply_bytes` is used, one byte longer refused."""
    size = len(LoopbackResponse(200, COMPLETION).payload())
    script = Script(*[LoopbackResponse(200, COMPLETION)] * 2)
    with LoopbackServer(script) as server:
        assert _complete(_config(server, max_reply_bytes=size)).content == "fine"
        with pytest.raises(ProviderError, match=f"larger than {size - 1} bytes"):
            _complete(_config(server, max_reply_bytes=size - 1))


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_a_compressed_reply_within_the_limit_is_decoded(coding: str) -> None:
    """A gzip or deflate reply is decoded as before; the decoded size is what counts."""
    plain = json.dumps(COMPLETION).encode()
    packed = gzip.compress(plain) if coding == "gzip" else zlib.compress(plain)
    script = Script(LoopbackResponse(200, packed, headers={"Content-Encoding": coding}))
    with LoopbackServer(script) as server:
        assert _complete(_config(server, max_reply_bytes=len(plain))).content == "fine"


def test_the_limit_defaults_to_64_mib() -> None:
    """Without a setting a reply may hold 64 MiB, room for any real reply."""
    assert ProviderConfig().max_reply_bytes == 64 * 1024 * 1024


_CODINGS: dict[str, Callable[[bytes], bytes]] = {
    "identity": lambda data: data,
    "gzip": lambda data: gzip.compress(data),
    "deflate": zlib.compress,
    "raw deflate": lambda data: zlib.compress(data, wbits=-zlib.MAX_WBITS),
}


@settings(max_examples=100, deadline=None)
@given(
    body=st.binary(max_size=3_000) | st.text(max_size=3_000).map(str.encode),
    coding=st.sampled_from(sorted(_CODINGS)),
    cuts=st.none() | st.lists(st.integers(min_value=0, max_value=3_100), max_size=6),
    slack=st.integers(min_value=-80, max_value=80),
)
@example(body=b"", coding="raw deflate", cuts=[1], slack=0)  # its two bytes in two chunks
def test_a_body_is_used_exactly_when_neither_its_sent_nor_its_decoded_size_is_over(
    property_server: LoopbackServer,
    body: bytes,
    coding: str,
    cuts: list[int] | None,
    slack: int,
) -> None:
    """Whatever the body, coding and chunking, it is read whole iff both sizes fit the limit."""
    sent = _CODINGS[coding](body)
    limit = max(1, max(len(sent), len(body)) + slack)
    headers = {} if coding == "identity" else {"Content-Encoding": coding.split()[-1]}
    if cuts is None:
        answer = LoopbackResponse(201, sent, headers=headers)
    else:
        edges = [0, *sorted(c for c in cuts if c < len(sent)), len(sent)]
        pieces = [sent[a:b] for a, b in itertools.pairwise(edges)]
        answer = LoopbackResponse(201, headers=headers, chunks=pieces)

    async def post() -> httpx.Response:
        async with httpx.AsyncClient(timeout=10) as client:
            return await post_request(
                client,
                property_server.url + "/v1/x",
                content=b"{}",
                headers={},
                max_bytes=limit,
                timeout=10,
                secret=None,
            )

    _ANSWERS.append(answer)
    if max(len(sent), len(body)) <= limit:
        response = asyncio.run(post())
        assert (response.status_code, response.content) == (201, body)
        assert "content-encoding" not in response.headers
    else:
        with pytest.raises(ProviderError, match=f"was larger than {limit} bytes"):
            asyncio.run(post())


_ANSWERS: list[LoopbackResponse] = []


@pytest.fixture(scope="module")
def property_server() -> Iterator[LoopbackServer]:
    """One server for every example of the property: it sends the answer each one queued."""
    with LoopbackServer(lambda request: _ANSWERS.pop()) as server:
        yield server


def test_three_content_codings_are_decoded_and_four_refused_as_undecodable() -> None:
    """Gzip applied three times is undone; a body claiming four layers cannot be decompressed."""
    packed = json.dumps(COMPLETION).encode()
    for _ in range(3):
        packed = gzip.compress(packed)
    three = LoopbackResponse(200, packed, headers={"Content-Encoding": "gzip, gzip, gzip"})
    four = LoopbackResponse(
        200, gzip.compress(packed), headers={"Content-Encoding": "gzip, gzip, gzip, gzip"}
    )
    script = Script(three, four)
    with LoopbackServer(script) as server:
        assert _complete(_config(server)).content == "fine"
        with pytest.raises(ProviderError) as caught:
            _complete(_config(server, max_retries=0))
    assert "could not be decompressed: more than 3 content codings" in str(caught.value)
