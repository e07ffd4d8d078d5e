"""The pinned fetcher end to end, against servers on 127.0.0.1 and stub resolvers.

Host names used here (``site.test``, ``rebind.test``...) can only reach a
server through the stub resolver: the socket guard refuses real lookups, so a
fetch that succeeds proves the fetcher connected to the address it checked.
"""

from __future__ import annotations

import asyncio
import codecs
import encodings.aliases
import ipaddress
import itertools
import random
import re
import socket
import threading
import time
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpcore
import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from nanobot_core.testing_http import counting_ca_loads

from nanobot_web_tools import (
    FetchedPage,
    FetchFailed,
    FetchLimits,
    FetchRefused,
    PinnedFetcher,
    html_to_text,
)
from nanobot_web_tools._wire import WireLimitedTransport, wire_limit
from nanobot_web_tools.fetch import (
    _Inflater,
    _read_limited,
    content_type_of,
    decode_body,
    pinned_request_parts,
)

if TYPE_CHECKING:
    import ssl

    from conftest import LocalSite, SocketGuard


def to_loopback(host: str, port: int) -> list[str]:
    return ["127.0.0.1"]


class RebindingResolver:
    """Answers with `first` on the first lookup and `later` on every other one."""

    def __init__(self, first: Sequence[str], later: Sequence[str]) -> None:
        self.first, self.later, self.calls = list(first), list(later), 0

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls += 1
        return self.first if self.calls == 1 else self.later


def fetch(fetcher: PinnedFetcher, url: str) -> FetchedPage:
    return asyncio.run(fetcher.fetch(url))


def local_fetcher(**limits: Any) -> PinnedFetcher:
    return PinnedFetcher(FetchLimits(**limits), resolver=to_loopback, allow_loopback=True)


def test_a_page_is_fetched_from_loopback_with_the_test_switch(site: LocalSite) -> None:
    """With the loopback switch, an HTML page on 127.0.0.1 comes back as readable text."""
    page = fetch(local_fetcher(), f"http://site.test:{site.port}/page.html")
    assert page.status == 200
    assert page.content_type == "text/html"
    assert page.text == "Local test page\n\nHello\n\nFirst paragraph.\n\n- one\n\n- two"
    assert not page.truncated


def test_loopback_is_refused_without_the_switch(site: LocalSite) -> None:
    """Without the switch the same local server is refused, and it never sees a request."""
    fetcher = PinnedFetcher(resolver=to_loopback)
    with pytest.raises(FetchRefused, match=r"127\.0\.0\.1, which is loopback"):
        fetch(fetcher, f"http://site.test:{site.port}/page.html")
    with pytest.raises(FetchRefused, match="loopback"):
        fetch(fetcher, f"http://127.0.0.1:{site.port}/page.html")
    assert site.hits == {}


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/",
        "http://192.168.1.1:8080/admin",
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://[::ffff:10.0.0.1]/",
        "http://0.0.0.0:80/",
    ],
)
def test_private_and_metadata_urls_are_refused(url: str, socket_guard: SocketGuard) -> None:
    """Private, metadata and unspecified targets are refused before any connection is tried."""
    with pytest.raises(FetchRefused):
        fetch(PinnedFetcher(resolver=to_loopback, allow_loopback=True), url)
    assert socket_guard.blocked == []


def test_a_name_resolving_to_a_private_address_is_refused(socket_guard: SocketGuard) -> None:
    """A public-looking name whose address is private is refused, with no connection attempt."""
    fetcher = PinnedFetcher(resolver=lambda host, port: ["10.20.30.40"])
    with pytest.raises(FetchRefused, match=r"intranet\.test resolves to 10\.20\.30\.40"):
        fetch(fetcher, "http://intranet.test/")
    assert socket_guard.blocked == []


def test_rebinding_cannot_swap_in_an_internal_address(site: LocalSite) -> None:
    """The checked answer is the one connected to: a resolver that turns private later is moot."""
    resolver = RebindingResolver(first=["127.0.0.1"], later=["10.0.0.1"])
    fetcher = PinnedFetcher(resolver=resolver, allow_loopback=True)
    page = fetch(fetcher, f"http://rebind.test:{site.port}/host")
    assert resolver.calls == 1
    assert page.text == f"rebind.test:{site.port}"


def test_rebinding_to_loopback_after_a_public_answer_gets_nowhere(
    site: LocalSite, socket_guard: SocketGuard
) -> None:
    """A name that resolves public, then to loopback, is only ever dialled at the public IP."""
    resolver = RebindingResolver(first=["93.184.215.14"], later=["127.0.0.1"])
    fetcher = PinnedFetcher(resolver=resolver)
    with pytest.raises(FetchFailed, match="cannot connect"):
        fetch(fetcher, f"http://rebind.test:{site.port}/page.html")
    assert resolver.calls == 1
    assert socket_guard.blocked == ["93.184.215.14"]
    assert site.hits == {}


def test_the_host_header_keeps_the_requested_name(site: LocalSite) -> None:
    """The request goes to the IP address but carries the URL's host name and port."""
    page = fetch(local_fetcher(), f"http://Named.Test:{site.port}/host")
    assert page.text == f"named.test:{site.port}"


def test_https_is_verified_against_the_name_while_connecting_to_the_ip(
    tls_site: LocalSite, client_tls: ssl.SSLContext
) -> None:
    """Over TLS the SNI is the host name, so a certificate for that name validates."""
    fetcher = PinnedFetcher(resolver=to_loopback, allow_loopback=True, verify=client_tls)
    page = fetch(fetcher, f"https://site.test:{tls_site.port}/host")
    assert page.text == f"site.test:{tls_site.port}"


def test_https_with_a_certificate_for_another_name_fails(
    tls_site: LocalSite, client_tls: ssl.SSLContext
) -> None:
    """A certificate that does not name the requested host is rejected, not ignored."""
    fetcher = PinnedFetcher(resolver=to_loopback, allow_loopback=True, verify=client_tls)
    with pytest.raises(FetchFailed):
        fetch(fetcher, f"https://other.test:{tls_site.port}/host")
    assert tls_site.hits == {}


def test_redirects_are_followed_and_each_hop_is_checked(site: LocalSite) -> None:
    """A redirect to an allowed target is followed; the final URL is reported."""
    start = f"http://site.test:{site.port}/redirect?to=/data.json"
    page = fetch(local_fetcher(), start)
    assert page.url == f"http://site.test:{site.port}/data.json"
    assert page.text == '{"answer": 42}'


@pytest.mark.parametrize(
    ("target", "kind"),
    [
        ("http://10.0.0.1/", "private"),
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://metadata.google.internal/computeMetadata/v1/", "metadata"),
        ("http://[::ffff:192.168.0.1]/", "private"),
    ],
)
def test_a_redirect_to_an_internal_address_is_refused(
    site: LocalSite, socket_guard: SocketGuard, target: str, kind: str
) -> None:
    """A page that redirects into the private network is stopped at the redirect."""
    url = f"http://site.test:{site.port}/redirect?to={quote(target, safe='')}&status=307"
    with pytest.raises(FetchRefused, match=kind):
        fetch(local_fetcher(), url)
    assert site.hits["/redirect"] == 1
    assert socket_guard.blocked == []


def test_a_redirect_to_a_name_that_resolves_private_is_refused(site: LocalSite) -> None:
    """The redirect target's name is resolved and checked like the first URL's."""
    resolver = RebindingResolver(first=["127.0.0.1"], later=["10.9.9.9"])
    fetcher = PinnedFetcher(resolver=resolver, allow_loopback=True)
    url = f"http://site.test:{site.port}/redirect?to=http://internal.test/secret"
    with pytest.raises(FetchRefused, match=r"internal\.test resolves to 10\.9\.9\.9"):
        fetch(fetcher, url)
    assert resolver.calls == 2


@pytest.mark.parametrize("location", ["http:\\\\10.0.0.1\\", "http://[fec0::1]/", "http://[::1"])
def test_a_redirect_to_an_unparsable_or_site_local_location_is_refused_cleanly(
    site: LocalSite, socket_guard: SocketGuard, location: str
) -> None:
    """A Location httpx cannot parse (or a site-local one) is a FetchRefused, not InvalidURL."""
    url = f"http://site.test:{site.port}/redirect?to={quote(location, safe='')}"
    with pytest.raises(FetchRefused, match=r"invalid redirect location|site-local|private"):
        fetch(local_fetcher(), url)
    assert site.hits["/redirect"] == 1
    assert socket_guard.blocked == []


def test_redirects_are_bounded(site: LocalSite) -> None:
    """A redirect loop stops after the configured number of hops."""
    loop = f"http://site.test:{site.port}/redirect"
    with pytest.raises(FetchRefused, match="more than 2 redirects"):
        fetch(local_fetcher(max_redirects=2), loop)
    assert site.hits["/redirect"] == 3


def test_non_http_schemes_are_refused() -> None:
    """file:, ftp: and gopher: URLs are refused outright."""
    for url in ("file:///etc/passwd", "ftp://example.com/x", "gopher://example.com/"):
        with pytest.raises(FetchRefused, match="only http and https"):
            fetch(local_fetcher(), url)


def test_the_body_is_cut_at_the_size_limit(site: LocalSite) -> None:
    """A body larger than max_bytes is cut to exactly max_bytes and marked truncated."""
    page = fetch(local_fetcher(max_bytes=1_000), f"http://site.test:{site.port}/big.txt")
    assert page.truncated
    assert page.text == site.BIG[:1_000].decode()


def test_a_body_of_exactly_the_limit_is_complete(site: LocalSite) -> None:
    """A body exactly max_bytes long is not reported as truncated."""
    size = len(site.BIG)
    page = fetch(local_fetcher(max_bytes=size), f"http://site.test:{site.port}/big.txt")
    assert not page.truncated
    assert len(page.text) == size


@pytest.mark.parametrize("path", ["/page.gz", "/page.deflate", "/page.raw-deflate"])
def test_a_compressed_body_is_inflated(site: LocalSite, path: str) -> None:
    """A server that compresses despite Accept-Encoding: identity still gives the page's text."""
    page = fetch(local_fetcher(), f"http://site.test:{site.port}{path}")
    assert page.text == site.BIG.decode()
    assert not page.truncated


def test_a_gzip_bomb_is_inflated_no_further_than_the_size_limit(site: LocalSite) -> None:
    """A small gzipped body that inflates to 200 MB is cut at max_bytes without the memory."""
    assert len(site.bomb) < 1_000_000  # built before memory is traced
    tracemalloc.start()
    try:
        page = fetch(local_fetcher(max_bytes=1_000), f"http://site.test:{site.port}/bomb.txt")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert page.truncated
    assert page.text == "\0" * 1_000
    assert peak < 10_000_000


@pytest.mark.parametrize("path", ["/page.gz", "/page.raw-deflate"])
def test_a_compressed_body_is_read_under_the_largest_max_bytes(site: LocalSite, path: str) -> None:
    """A max_bytes as large as TOML's largest integer reads a compressed page whole (zlib,
    asked for one byte past it, raised OverflowError)."""
    page = fetch(local_fetcher(max_bytes=2**63 - 1), f"http://site.test:{site.port}{path}")
    assert page.text == site.BIG.decode()
    assert not page.truncated


def test_every_member_of_a_gzip_body_is_read(site: LocalSite) -> None:
    """A gzip body of two members (RFC 1952) gives the text of both, not the first alone."""
    page = fetch(local_fetcher(), f"http://site.test:{site.port}/gzip-members.txt")
    assert page.text == "first member, second member"
    assert not page.truncated


@pytest.mark.parametrize("kind", ["gzip", "deflate"])
def test_bytes_after_the_compressed_stream_are_neither_kept_nor_read(
    site: LocalSite, kind: str
) -> None:
    """After the end of its compressed stream a body is complete: 100 MB of trailing bytes are
    not read on nor held in memory (zlib kept them all, up to the timeout)."""
    fetch(local_fetcher(), f"http://site.test:{site.port}/page.gz")  # imports, TLS context
    tracemalloc.start()
    began = time.monotonic()
    try:
        page = fetch(
            local_fetcher(max_bytes=1_000), f"http://site.test:{site.port}/{kind}-then-junk.txt"
        )
        elapsed = time.monotonic() - began
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert page.text == "the whole page"
    assert not page.truncated
    assert peak < 10_000_000
    assert elapsed < 5


def _gzip(data: bytes) -> bytes:
    packer = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


async def _chunks(data: bytes, cuts: list[int]) -> AsyncIterator[bytes]:
    for start, end in itertools.pairwise(
        [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    ):
        if end > start:
            yield data[start:end]


@settings(max_examples=200, deadline=None)
@given(
    members=st.lists(st.binary(max_size=300), min_size=1, max_size=4),
    padding=st.sampled_from([b"", b"\0\0", b"trailing junk", b"\x1f"]),
    cuts=st.lists(st.integers(min_value=0, max_value=2_000), max_size=8),
    # Up to TOML's largest integer, as max_bytes may be set.
    limit=st.integers(min_value=1, max_value=1_500) | st.just(2**63 - 1),
)
def test_any_gzip_body_in_any_chunks_reads_as_its_members_up_to_the_limit(
    members: list[bytes], padding: bytes, cuts: list[int], limit: int
) -> None:
    """However a server splits gzip members (then padding or junk) into chunks, the body read is
    the members' bytes one after the other, cut at the limit and marked so."""
    wire = b"".join(_gzip(member) for member in members) + padding
    response = httpx.Response(200, content=_chunks(wire, cuts))
    body, truncated = asyncio.run(_read_limited(response, limit, _Inflater.for_encoding("gzip")))
    whole = b"".join(members)
    assert (body, truncated) == (whole[:limit], len(whole) > limit)


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(max_size=300),
    wrapped=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=6),
    limit=st.integers(min_value=1, max_value=400),
)
# Raw deflate whose first read is one byte: zlib could not yet tell it from its own header,
# and the body failed as not valid deflate data.
@example(data=b"the page", wrapped=False, cuts=[1], limit=400)
def test_any_deflate_body_in_any_chunks_reads_as_its_data_up_to_the_limit(
    data: bytes, wrapped: bool, cuts: list[int], limit: int
) -> None:
    """A deflate body, zlib-wrapped or raw (as some servers send it), however the server splits
    it into chunks, reads as its data, cut at the limit and marked so."""
    packer = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
    wire = packer.compress(data) + packer.flush()
    response = httpx.Response(200, content=_chunks(wire, cuts))
    body, truncated = asyncio.run(_read_limited(response, limit, _Inflater.for_encoding("deflate")))
    assert (body, truncated) == (data[:limit], len(data) > limit)


def test_a_deflate_body_of_one_byte_is_cut_short_not_an_empty_page() -> None:
    """The one byte of a deflate body held to tell zlib's header from raw deflate is, when no
    more comes, a stream cut short."""
    response = httpx.Response(200, content=_chunks(b"x", []))
    with pytest.raises(zlib.error, match="incomplete or truncated stream"):
        asyncio.run(_read_limited(response, 100, _Inflater.for_encoding("deflate")))


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("gzip-members", "the body had neither ended nor reached max_bytes (1000)"),
        ("deflate-blocks", "the body had neither ended nor reached max_bytes (1000)"),
        ("chunk-extensions", "the body had neither ended nor reached max_bytes (1000)"),
        ("informational", "the response's headers had not ended"),
    ],
)
def test_a_response_that_never_ends_and_adds_no_text_is_bounded_by_bytes_read(
    site: LocalSite, kind: str, said: str
) -> None:
    """Endless empty gzip members or deflate blocks, one-byte chunks behind 10 kB extensions and
    endless 100 Continue responses stop at twice max_bytes plus 64 KiB read, naming that limit
    (they were read until the timeout, or a page was made of the one-byte chunks)."""
    with pytest.raises(FetchFailed) as failed:
        fetch(
            local_fetcher(max_bytes=1_000, timeout=10),
            f"http://site.test:{site.port}/endless?kind={kind}",
        )
    assert str(failed.value) == (
        f"http://site.test:{site.port}/endless?kind={kind}: {said} after 67536 bytes from the "
        "server, the wire limit (twice max_bytes, plus 64 KiB)"
    )
    # What the socket buffers held besides, and no more: the server was not read on.
    assert site.sent[kind] < 50_000_000


def _honest_wire(body: bytes, *, gzip: bool, framing: str, chunk: int, header_pad: int) -> bytes:
    """A response as an honest server sends it: headers, then `body`, framed as `framing` says."""
    sent = _gzip(body) if gzip else body
    headers = [b"HTTP/1.1 200 OK", b"Content-Type: text/plain", b"Pad: " + b"p" * header_pad]
    if gzip:
        headers.append(b"Content-Encoding: gzip")
    if framing == "length":
        headers.append(b"Content-Length: %d" % len(sent))
    elif framing == "chunked":
        headers.append(b"Transfer-Encoding: chunked")
        pieces = (sent[at : at + chunk] for at in range(0, len(sent), chunk))
        sent = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces) + b"0\r\n\r\n"
    return b"\r\n".join([*headers, b"", sent])


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(min_value=0, max_value=150_000),
    seed=st.integers(min_value=0, max_value=2**32),
    gzip=st.booleans(),
    framing=st.sampled_from(["length", "chunked", "close"]),
    chunk=st.integers(min_value=8, max_value=20_000),
    header_pad=st.integers(min_value=0, max_value=12_000),
    reads=st.lists(st.integers(min_value=1, max_value=65_536), min_size=1, max_size=20),
    limit=st.integers(min_value=1, max_value=100_000),
)
# The most framing an honest server adds (8-byte chunks), under the most header it may send.
@example(
    size=150_000,
    seed=0,
    gzip=False,
    framing="chunked",
    chunk=8,
    header_pad=12_000,
    reads=[4_096],
    limit=100_000,
)
def test_an_honest_response_is_never_stopped_by_the_wire_limit(
    size: int,
    seed: int,
    gzip: bool,
    framing: str,
    chunk: int,
    header_pad: int,
    reads: list[int],
    limit: int,
) -> None:
    """Any body (of random bytes, gzip cannot shrink them) sent with its length, in chunks of
    8 bytes or more or up to the close, with headers of up to 12 kB and read in any pieces of
    64 KiB at most, reads as its first max_bytes, never failing on the wire limit."""
    body = random.Random(seed).randbytes(size)
    wire = _honest_wire(body, gzip=gzip, framing=framing, chunk=chunk, header_pad=header_pad)
    pieces, at = [], 0
    for length in itertools.cycle(reads):
        if at >= len(wire):
            break
        pieces.append(wire[at : at + length])
        at += length
    transport = WireLimitedTransport(
        wire_limit(limit),
        verify=False,
        limits=httpx.Limits(max_keepalive_connections=0),
        backend=httpcore.AsyncMockBackend(pieces),
    )

    async def read() -> tuple[bytes, bool]:
        async with (
            httpx.AsyncClient(transport=transport) as client,
            client.stream("GET", "http://honest.test/") as response,
        ):
            inflater = _Inflater.for_encoding("gzip" if gzip else "")
            return await _read_limited(response, limit, inflater)

    assert asyncio.run(read()) == (body[:limit], size > limit)


def test_a_compressed_body_cut_short_is_a_failure_not_a_page(site: LocalSite) -> None:
    """A gzip stream that ends early (its Content-Length matching the cut) is not a whole page."""
    with pytest.raises(FetchFailed, match="not valid gzip data: incomplete or truncated stream"):
        fetch(local_fetcher(), f"http://site.test:{site.port}/gzip-cut.txt")


def test_a_body_that_is_not_its_declared_encoding_fails_cleanly(site: LocalSite) -> None:
    """A body labelled gzip that is not gzip fails naming the encoding."""
    with pytest.raises(FetchFailed, match="not valid gzip data"):
        fetch(local_fetcher(), f"http://site.test:{site.port}/not-gzip.txt")


def test_an_unsupported_content_encoding_is_refused(site: LocalSite) -> None:
    """A content encoding other than gzip or deflate is refused, naming it."""
    with pytest.raises(FetchRefused, match="content encoding 'br' is not supported"):
        fetch(local_fetcher(), f"http://site.test:{site.port}/brotli.txt")


def test_a_connection_closed_mid_body_fails_cleanly(site: LocalSite) -> None:
    """A server that closes before its Content-Length is sent gives a FetchFailed, not httpx's."""
    with pytest.raises(FetchFailed, match="could not be read to its end"):
        fetch(local_fetcher(), f"http://site.test:{site.port}/cut-short.txt")


def test_a_host_with_thousands_of_unreachable_addresses_fails_in_one_short_line() -> None:
    """A DNS answer of 2,000 addresses none of which connects fails counting them and naming the
    first three, not with every failure listed (89,163 characters)."""
    with socket.socket() as probe:  # a port that nothing on 127.0.0.0/8 listens on, once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    answer = [f"127.0.{n // 250}.{n % 250 + 1}" for n in range(2_000)]
    fetcher = PinnedFetcher(
        FetchLimits(timeout=60), resolver=lambda host, port: answer, allow_loopback=True
    )
    with pytest.raises(FetchFailed) as failed:
        fetch(fetcher, f"http://many.test:{port}/")
    message = str(failed.value)
    assert message.startswith(
        "cannot connect to many.test: all 2000 addresses failed, the first 3: 127.0.0.1: "
    )
    assert "; 127.0.0.2: " in message
    assert "; 127.0.0.3: " in message
    assert "127.0.0.4" not in message
    assert message.endswith("; and 1997 more")
    assert len(message) < 500


def test_a_stalled_server_hits_the_time_limit(site: LocalSite) -> None:
    """A server that stops sending mid-body makes the fetch fail with a timeout."""
    with pytest.raises(FetchFailed, match="timed out"):
        fetch(local_fetcher(timeout=0.3), f"http://site.test:{site.port}/slow")


def test_other_coroutines_run_while_a_large_page_is_read(
    site: LocalSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While 1.2 MB of HTML is reduced to text, a concurrent coroutine keeps ticking (the reader
    ran on the event loop, which it held for the whole read: not one tick)."""
    reading = threading.Event()
    read = html_to_text

    def watched(text: str) -> str:
        reading.set()
        try:
            return read(text)
        finally:
            reading.clear()

    monkeypatch.setattr("nanobot_web_tools.fetch.html_to_text", watched)
    ticks: list[bool] = []

    async def ticker() -> None:
        while True:
            ticks.append(reading.is_set())
            await asyncio.sleep(0.002)

    async def fetch_while_ticking() -> FetchedPage:
        ticking = asyncio.create_task(ticker())
        try:
            return await local_fetcher().fetch(f"http://site.test:{site.port}/blocks.html")
        finally:
            ticking.cancel()

    page = asyncio.run(fetch_while_ticking())
    assert page.text == ""  # empty paragraphs: all of the page was read
    assert not page.truncated
    assert any(ticks)  # ticks taken while the page was being read


def test_the_timeout_covers_reading_the_page(
    site: LocalSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page whose reading outlasts the timeout fails at the timeout (the reader blocked the loop,
    and the fetch returned the page when it was done, whatever the deadline)."""
    release = threading.Event()

    def stuck(text: str) -> str:
        release.wait(5)
        return text

    monkeypatch.setattr("nanobot_web_tools.fetch.html_to_text", stuck)
    began = time.monotonic()
    try:
        with pytest.raises(FetchFailed, match=r"timed out after 0\.5 s"):
            fetch(local_fetcher(timeout=0.5), f"http://site.test:{site.port}/page.html")
        elapsed = time.monotonic() - began
    finally:
        release.set()
    assert elapsed < 4


def test_a_hanging_resolver_holds_up_neither_the_fetch_nor_the_loop_shutdown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A DNS lookup that never answers fails the fetch at its timeout, and asyncio.run ends then."""
    release = threading.Event()
    started = threading.Event()

    def hanging(*args: Any, **kwargs: Any) -> Any:
        started.set()
        release.wait(30)
        raise socket.gaierror("no answer")

    monkeypatch.setattr("nanobot_web_tools.addresses.socket.getaddrinfo", hanging)
    began = time.monotonic()
    try:
        with pytest.raises(FetchFailed, match=r"timed out after 0\.3 s"):
            fetch(PinnedFetcher(FetchLimits(timeout=0.3)), "http://hangs.test/")
        elapsed = time.monotonic() - began
    finally:
        release.set()
    assert started.is_set()
    assert elapsed < 5


@pytest.mark.parametrize(
    ("path", "shown"), [("/image.png", "image/png"), ("/untyped", "none given")]
)
def test_binary_or_untyped_content_is_refused(site: LocalSite, path: str, shown: str) -> None:
    """Only text-like content types are read; others are refused naming the type."""
    with pytest.raises(FetchRefused, match=f"content type {shown}"):
        fetch(local_fetcher(), f"http://site.test:{site.port}{path}")


def test_json_and_declared_charsets_come_back_as_text(site: LocalSite) -> None:
    """JSON is returned verbatim, and a declared charset is honoured when decoding."""
    assert fetch(local_fetcher(), f"http://site.test:{site.port}/latin1.txt").text == "café"
    json_page = fetch(local_fetcher(), f"http://site.test:{site.port}/data.json")
    assert json_page.content_type == "application/json"


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "text/csv",
        "text/markdown; charset=utf-8",
        "application/json",
        "application/ld+json",
        "application/xml",
        "application/atom+xml",
        "application/javascript",
        "application/x-ndjson",
    ],
)
def test_text_json_and_xml_types_come_back_as_they_are(site: LocalSite, content_type: str) -> None:
    """text/*, JSON, XML (and JavaScript, NDJSON) bodies are returned verbatim, markup and all."""
    body = "<p>kept &amp; as is</p>"
    url = f"http://site.test:{site.port}/typed?type={quote(content_type)}&body={quote(body)}"
    page = fetch(local_fetcher(), url)
    assert page.text == body
    assert page.content_type == content_type.split(";")[0]


@pytest.mark.parametrize("content_type", ["text/html", "application/xhtml+xml"])
def test_html_and_xhtml_are_reduced_to_text(site: LocalSite, content_type: str) -> None:
    """HTML, and XHTML although it is an XML type, come back as readable text."""
    body = "<p>reduced &amp; read</p><script>x()</script>"
    url = f"http://site.test:{site.port}/typed?type={quote(content_type)}&body={quote(body)}"
    assert fetch(local_fetcher(), url).text == "reduced & read"


@pytest.mark.parametrize(
    "content_type", ["application/octet-stream", "application/pdf", "image/svg", "font/woff2"]
)
def test_other_types_are_refused_naming_them(site: LocalSite, content_type: str) -> None:
    """Any type that is not text, JSON, XML or HTML is refused, naming the type."""
    url = f"http://site.test:{site.port}/typed?type={quote(content_type)}"
    with pytest.raises(FetchRefused, match=f"content type {content_type} is not text"):
        fetch(local_fetcher(), url)


@pytest.mark.parametrize(
    ("query", "shown"),
    [
        # One header naming two types, then two headers in one order and the other.
        ("typed?type=" + quote("text/plain, image/png"), "text/plain, image/png"),
        ("typed-apart?type=text/plain&type=image/png", "text/plain, image/png"),
        ("typed-apart?type=image/png&type=text/plain", "image/png, text/plain"),
    ],
)
def test_a_response_naming_two_content_types_is_refused_however_it_names_them(
    site: LocalSite, query: str, shown: str
) -> None:
    """Two media types in one Content-Type header, or in two headers in either order, are one
    ambiguous response, refused naming both (one header was read as text, the order decided)."""
    with pytest.raises(FetchRefused, match=re.escape(f"names 2 content types ({shown})")):
        fetch(local_fetcher(), f"http://site.test:{site.port}/{query}")


def test_one_content_type_sent_twice_is_read_as_that_type(site: LocalSite) -> None:
    """The same media type in two headers is that type, with the first charset declared."""
    types = "type=text/html&type=" + quote("TEXT/HTML; charset=iso-8859-1")
    page = fetch(local_fetcher(), f"http://site.test:{site.port}/typed-apart?{types}")
    assert (page.content_type, page.text) == ("text/html", "typed apart")


_MEDIA_TYPES = ["text/plain", "text/html", "application/json", "image/png", "application/pdf"]


@given(
    values=st.lists(
        st.tuples(
            st.sampled_from(_MEDIA_TYPES),
            st.sampled_from(["", "; charset=utf-8", '; charset="a,b"', ";q=1"]),
            st.sampled_from(["", " ", "  "]),
        ),
        min_size=1,
        max_size=5,
    ),
)
def test_a_content_type_header_reads_the_same_whatever_the_order_of_its_values(
    values: list[tuple[str, str, str]],
) -> None:
    """However a server orders the values of Content-Type, the outcome is the same: one media
    type (repeated or not) is that type, two or more are refused (commas in quotes are no split)."""

    def outcome(header: str) -> str:
        try:
            return content_type_of(header)[0]
        except FetchRefused:
            return "refused"

    spelled = [
        f"{space}{mime.upper() if space else mime}{params}" for mime, params, space in values
    ]
    forward, backward = outcome(",".join(spelled)), outcome(",".join(reversed(spelled)))
    distinct = {mime for mime, _, _ in values}
    assert forward == backward == (distinct.pop() if len(distinct) == 1 else "refused")


_CODEC_NAMES = sorted(set(encodings.aliases.aliases) | set(encodings.aliases.aliases.values()))


@given(
    charset=st.sampled_from(_CODEC_NAMES) | st.text(max_size=12),
    body=st.binary(max_size=64),
    truncated=st.booleans(),
)
def test_any_declared_charset_decodes_the_body_to_text(
    charset: str, body: bytes, truncated: bool
) -> None:
    """Whatever charset a page declares, its body decodes to text and decoding never raises."""
    assert isinstance(decode_body(body, charset, truncated=truncated), str)


@pytest.mark.parametrize("charset", ["zlib", "base64", "rot13", "punycode", "idna", "undefined"])
def test_a_charset_that_is_no_character_set_decodes_as_utf8(charset: str) -> None:
    """A codec name that is no character set (or a slow or failing one) means UTF-8."""
    body = "café ".encode() * 50_000  # punycode would take minutes over this
    assert decode_body(body, charset, truncated=False) == "café " * 50_000


def test_utf16_without_a_byte_order_mark_is_read_little_endian() -> None:
    """charset=utf-16 with no BOM is little-endian, as browsers read it; a BOM decides."""
    assert decode_body("héllo".encode("utf-16-le"), "utf-16", truncated=False) == "héllo"
    big = codecs.BOM_UTF16_BE + "héllo".encode("utf-16-be")
    assert decode_body(big, "UTF-16", truncated=False) == "héllo"
    assert decode_body("ok".encode("utf-32-le"), "utf-32", truncated=False) == "ok"


def test_http_errors_fail_with_the_status(site: LocalSite) -> None:
    """A 404 is a failure that names the status."""
    with pytest.raises(FetchFailed, match="HTTP 404"):
        fetch(local_fetcher(), f"http://site.test:{site.port}/missing")


def test_pinned_request_parts_for_https_and_ipv6() -> None:
    """The pinned request names the IP in the URL, the host in Host and in the TLS SNI."""
    target = httpx.URL("https://example.com:8443/a?b=1")
    url, headers, extensions = pinned_request_parts(target, ipaddress.ip_address("2001:db8::7"))
    assert str(url) == "https://[2001:db8::7]:8443/a?b=1"
    assert headers == {"Host": "example.com:8443"}
    assert extensions == {"sni_hostname": "example.com"}
    plain, plain_headers, plain_ext = pinned_request_parts(
        httpx.URL("http://example.com/"), ipaddress.ip_address("93.184.215.14")
    )
    assert str(plain) == "http://93.184.215.14/"
    assert plain_headers == {"Host": "example.com"}
    assert plain_ext == {}


def test_the_ca_certificates_are_loaded_once_not_for_every_fetch(site: LocalSite) -> None:
    """Fetches with the default verification share one SSL context: the CA certificates
    (tens of milliseconds of CPU to load) are read at most once in the process."""
    with counting_ca_loads() as loaded:
        pages = [
            fetch(local_fetcher(), f"http://site.test:{site.port}/page.html") for _ in range(3)
        ]
    assert [page.status for page in pages] == [200, 200, 200]
    assert len(loaded) <= 1


@pytest.mark.parametrize("port", [0, 65_536, 99_999])
def test_a_port_outside_the_tcp_range_is_refused_cleanly(
    site: LocalSite, socket_guard: SocketGuard, port: int
) -> None:
    """A port httpx accepts but no socket can use is a refusal naming it, as URL or redirect."""
    with pytest.raises(FetchRefused, match=f"port {port} is not a TCP port"):
        fetch(local_fetcher(), f"http://site.test:{port}/page.html")
    redirect = f"http://site.test:{site.port}/redirect?to=http://site.test:{port}/"
    with pytest.raises(FetchRefused, match=f"port {port} is not a TCP port"):
        fetch(local_fetcher(), redirect)
    assert site.hits == {"/redirect": 1}
    assert socket_guard.blocked == []
