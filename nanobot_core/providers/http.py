"""The HTTP side every provider shares: the retry loop, the reply's size, secret masking.

A provider supplies one attempt (an async function that posts the request with
:func:`post_request` and parses the reply, raising :class:`Retryable` for what
is worth another try and :class:`~nanobot_core.errors.ProviderError` for the
rest); :func:`send_with_retries` runs it under a
:class:`~nanobot_core.providers.retry.RetryPolicy`, tells the progress callback
about each retry and gives up with a ProviderError naming the endpoint and the
last failure. The built-in ``openai`` provider and plugin providers use the
same loop and the same reading of the reply, so they retry the same way and
refuse the same oversized replies.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import math
import os
import re
import threading
import time
import zlib
from collections.abc import (
    AsyncGenerator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from nanobot_core._clip import clip, quoted
from nanobot_core._json_boundary import (
    JSONBoundaryError,
    JSONLimitError,
    dumps,
    loads,
    without_lone_surrogates,
)
from nanobot_core._logging import get_logger
from nanobot_core.errors import ProviderError
from nanobot_core.governance.messages import nesting_fault
from nanobot_core.providers.base import ProgressCallback, RetryNotice
from nanobot_core.providers.retry import (
    HTTP_STATUSES,
    RetryPolicy,
    is_retryable_status,
    retry_after_seconds,
)

if TYPE_CHECKING:
    import ssl

    import httpx

__all__ = [
    "KeptClients",
    "Retryable",
    "describe_body",
    "error_text",
    "excerpt",
    "failure_for_status",
    "mask_secret",
    "post_request",
    "reply_json",
    "request_content",
    "request_fault",
    "send_with_retries",
    "server_message",
    "transport_failure",
    "without_credentials",
]

log = get_logger("nanobot_core.providers.http")

_MAX_MESSAGE_CHARS = 1_000

# The content codings asked for, and decoded here a piece at a time (see `post_request`).
ACCEPT_ENCODING = "gzip, deflate"
_PIECE = 64 * 1024
# Headers that describe the body as sent, not the decoded body `post_request` returns.
_BODY_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})

T = TypeVar("T")


class Retryable(ProviderError):
    """An attempt failed in a way worth another; `server_wait` is what the server asked for.

    A `ProviderError`: `send_with_retries` catches it to try again, and one
    raised outside it (or let go by a provider) is the provider's failure.
    """

    def __init__(self, reason: str, server_wait: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.server_wait = server_wait


class KeptClients:
    """The HTTP client a provider keeps from call to call: one per event loop, never shared
    between loops, so that the connections it opened (and their TLS setup) serve the next call.

    `get` returns the running loop's client, opened on first use with `timeout` (httpx's, for
    each network operation) and `transport` (None: httpx's own, over one SSL context the
    process builds once, since loading the CA certificates costs tens of milliseconds of CPU).
    Calls running at once on one loop share its client safely (each gets a connection of its
    own from the client's pool, which has no limit on their number). A client is closed, with
    its connections, when its event loop ends (``asyncio.run``, ``Runner.run_turn`` and
    ``asyncio.Runner`` close the loop's async generators at the end: one of them holds it) or
    when `aclose` is awaited on that loop; the next call on a loop opens a new one.
    """

    def __init__(
        self, *, timeout: float, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.timeout = timeout
        self._transport = transport
        self._lock = threading.Lock()  # a provider may be called from threads, each its loop
        self._kept: dict[asyncio.AbstractEventLoop, _Kept] = {}

    async def get(self) -> httpx.AsyncClient:
        """The running loop's client, opened (and tied to the loop's end) on first use."""
        loop = asyncio.get_running_loop()
        with self._lock:
            kept = self._kept.get(loop)
            if kept is not None:
                return kept.client
            for other in [other for other in self._kept if other.is_closed()]:
                del self._kept[other]  # a loop closed without closing its async generators
            kept = self._kept[loop] = _Kept(self._open())
        guard = kept.guard = self._closed_with_loop(loop, kept)
        # Runs to the generator's `yield` at once; from then on the loop closes it at its end.
        await anext(guard)
        return kept.client

    async def aclose(self) -> None:
        """Close the running loop's client and its connections; the next call opens a new one.

        A client kept on another loop is closed when that loop ends.
        """
        with self._lock:
            kept = self._kept.pop(asyncio.get_running_loop(), None)
        if kept is None:
            return
        if kept.guard is not None:
            await kept.guard.aclose()  # its `finally` closes the client
        else:  # pragma: no cover - `get` sets the guard before it yields to the loop
            await kept.client.aclose()

    def _open(self) -> httpx.AsyncClient:
        import httpx

        return httpx.AsyncClient(
            timeout=httpx.Timeout(self.timeout),
            transport=self._transport,
            verify=_ssl_context(),  # httpx's own default, built once (proxies use it too)
            # As many connections at once as calls, as when each call had a client of its own.
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=20),
            event_hooks={"response": [_hold_unreadable_location]},
        )

    async def _closed_with_loop(
        self, loop: asyncio.AbstractEventLoop, kept: _Kept
    ) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            with self._lock:
                if self._kept.get(loop) is kept:
                    del self._kept[loop]
            await kept.client.aclose()


class _Kept:
    """One loop's client, and the async generator that closes it when the loop ends."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.guard: AsyncGenerator[None, None] | None = None


_SSL_CONTEXTS: dict[tuple[str, str], ssl.SSLContext] = {}
_SSL_LOCK = threading.Lock()


def _ssl_context() -> ssl.SSLContext:
    """httpx's default SSL context (certifi's CA certificates, or ``SSL_CERT_FILE`` or
    ``SSL_CERT_DIR`` when set), built once for each value of those two variables."""
    key = (os.environ.get("SSL_CERT_FILE", ""), os.environ.get("SSL_CERT_DIR", ""))
    with _SSL_LOCK:
        context = _SSL_CONTEXTS.get(key)
        if context is None:
            import httpx

            context = _SSL_CONTEXTS[key] = httpx.create_ssl_context()
        return context


async def send_with_retries(
    attempt: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    url: str,
    progress: ProgressCallback | None = None,
    timeout: float | None = None,
) -> T:
    """`attempt()` until it returns, retrying on :class:`Retryable` as `policy` says.

    `timeout` bounds each attempt as a whole, from connecting to the last byte
    of the reply (httpx's own timeouts bound each network operation only, so a
    server that trickles its reply a byte at a time would never time out); an
    attempt that overruns it is retried like any other timeout.

    A wait the server asked for that is longer than the cap is said, with the cap, in
    the retry's notice; one asked for with the last failure, in the error.

    Raises ProviderError ``"{url}: gave up after N attempt(s); last error: ..."``
    when the retries are used up; any other exception of `attempt` passes through.
    """
    retries = policy.max_retries
    for number in range(retries + 1):
        started = time.monotonic()
        try:
            result = await _within(attempt, timeout)
        except Retryable as failure:
            wait = failure.server_wait
            if number == retries:
                # When to try again, if the server said: a person can wait it out.
                asked = f" (the server asked for a wait of {_seconds(wait)})" if wait else ""
                raise ProviderError(
                    f"{url}: gave up after {number + 1} attempt(s); last error: "
                    f"{failure.reason}{asked}"
                ) from None
            delay = policy.delay(number + 1, wait)
            reason = failure.reason
            if wait is not None and wait > policy.cap:
                reason += (
                    f" (the server asked for a wait of {_seconds(wait)}; "
                    f"provider.retry_after_cap is {_seconds(policy.cap)})"
                )
            # Info, not warning: the progress callback is how a person hears about retries.
            log.info(
                "provider request failed; retrying",
                url=url,
                error=reason,
                retry=number + 1,
                max_retries=retries,
                delay=round(delay, 3),
            )
            if progress is not None:
                progress(RetryNotice(number + 1, retries, delay, reason))
            await asyncio.sleep(delay)
            continue
        log.debug(
            "provider reply",
            url=url,
            attempt=number + 1,
            seconds=round(time.monotonic() - started, 3),
        )
        return result
    raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover


_DAY = 86_400.0


def _seconds(wait: float) -> str:
    """A wait as a person reads it: ``0.5s``, ``90s``, ``86400s (1.0 days)``; past a year,
    ``more than a year`` (a server may ask for 10**300 seconds)."""
    if wait > 365 * _DAY:
        return "more than a year"
    said = f"{wait:.0f}s" if wait >= 10 else f"{wait:g}s"
    return f"{said} ({wait / _DAY:.1f} days)" if wait >= _DAY else said


async def _within(attempt: Callable[[], Awaitable[T]], timeout: float | None) -> T:
    """`attempt()`, cancelled with a Retryable when it takes longer than `timeout` seconds."""
    if timeout is None or not math.isfinite(timeout):
        return await attempt()
    scope = asyncio.timeout(timeout)
    try:
        async with scope:
            return await attempt()
    except TimeoutError:
        if not scope.expired():
            raise
        raise Retryable(f"timed out after {timeout:g}s (no complete reply in that time)") from None


#: Where :func:`_hold_unreadable_location` keeps a ``Location`` httpx cannot read.
_HELD_LOCATION = "nanobot_core.held_location"


async def _hold_unreadable_location(response: httpx.Response) -> None:
    """A response hook of `KeptClients`: a ``Location`` httpx cannot read as a URL (a
    control character, a broken IPv6 address) is moved off the response into its
    extensions, for :func:`post_request` to put back.

    httpx reads the ``Location`` of every redirect, followed or not, and raises a
    ``RemoteProtocolError`` for one it cannot read, which would hide the redirect
    (its status, the address it names) behind what reads as a broken connection.
    """
    import httpx

    location = response.headers.get("location")
    if location is None:
        return
    try:
        httpx.URL(location)
    except httpx.InvalidURL:
        del response.headers["location"]
        response.extensions = {**response.extensions, _HELD_LOCATION: location}


async def post_request(
    client: httpx.AsyncClient,
    url: str,
    *,
    content: bytes,
    headers: Mapping[str, str],
    max_bytes: int,
    timeout: float,
    secret: str | None,
    url_setting: str | None = None,
) -> httpx.Response:
    """POST `content` to `url` and read the whole reply, refusing one of more than `max_bytes`.

    The body is read as it arrives and counted both as sent and as decoded:
    ``gzip`` and ``deflate`` (the codings asked for) are decoded here 64 KiB
    at a time, so a small compressed body that would decode to gigabytes is
    stopped at the limit like an endless one. A ``Content-Length`` over the
    limit is refused before any of the body is read. The response returned
    holds the decoded body (``content``, ``text``) and the server's headers,
    less those that describe the body as sent (``Content-Encoding``,
    ``Content-Length``, ``Transfer-Encoding``).

    Raises ProviderError ``"the reply from {url} was larger than N bytes ..."``
    (not worth retrying: a server that sent too much would do it again), and
    the error of :func:`transport_failure` when the transfer fails (a Retryable,
    unless the request itself is malformed or the answer is not HTTP; `url_setting`, the
    setting `url` came from as a person reads it, is added to the error of the latter).

    A redirect whose ``Location`` is no URL httpx can read (a control character in it)
    is returned like any other, that header as it came, when `client` is one of
    :class:`KeptClients` (see `_hold_unreadable_location`).
    """
    import httpx

    try:
        sent = httpx.Headers(headers)  # names and values are encoded as ASCII here
    except UnicodeEncodeError:
        # The exception holds the whole value (`object`): said without it, as h11's refusals are.
        raise ProviderError(_not_ascii(headers, without_credentials(url))) from None
    sent["Accept-Encoding"] = ACCEPT_ENCODING
    request = client.build_request("POST", url, content=content, headers=sent)
    try:
        response = await client.send(request, stream=True)
        try:
            body = await _read_body(response, max_bytes, without_credentials(url))
        finally:
            await response.aclose()
    except httpx.RequestError as exc:  # transport, timeout, undecodable body
        raise transport_failure(
            exc, timeout, secret, url=without_credentials(url), url_setting=url_setting
        ) from None
    held = response.extensions.get(_HELD_LOCATION)
    return httpx.Response(
        response.status_code,
        headers=[
            (name, value)
            for name, value in response.headers.multi_items()
            if name.lower() not in _BODY_HEADERS
        ]
        + ([("location", held)] if isinstance(held, str) else []),
        content=body,
        request=request,
        extensions={
            key: response.extensions[key]
            for key in ("http_version", "reason_phrase")
            if key in response.extensions
        },
    )


async def _read_body(response: httpx.Response, limit: int, url: str) -> bytes:
    """The decoded body of `response`, or a ProviderError once more than `limit` bytes came."""
    status = f"HTTP {response.status_code}"
    declared = response.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise _too_large(url, limit, f"{status} with Content-Length {declared}; none of it read")
    codings = response.headers.get_list("content-encoding", split_commas=True)
    decoder = _Decoder(codings, limit)
    pieces: list[bytes] = []
    received = 0
    try:
        async for chunk in response.aiter_raw():
            received += len(chunk)
            if received > limit:
                raise _too_large(url, limit, f"{status}; reading stopped at the limit")
            pieces.extend(decoder.decode(chunk))
        pieces.extend(decoder.flush())
    except _Overflow:
        coding = ", ".join(codings)
        raise _too_large(url, limit, f"{status}, {coding}; decoding stopped at the limit") from None
    return b"".join(pieces)


def _too_large(url: str, limit: int, seen: str) -> ProviderError:
    return ProviderError(
        f"the reply from {url} was larger than {limit} bytes ({seen}). A model's reply is "
        "a few MB at most, so this is not one; not retried (the limit is "
        "provider.max_reply_bytes)"
    )


# Internal: raised and caught within this module only, never public, so outside the tree.
class _Overflow(Exception):
    """A coding of the body decoded to more than the limit."""


_INFLATED = {"gzip": zlib.MAX_WBITS | 16, "x-gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS}
_MAX_CODINGS = 3


class _Decoder:
    """A body's content codings undone in pieces of at most 64 KiB, never all at once.

    ``gzip``, ``x-gzip`` and ``deflate`` (zlib-wrapped or raw, as httpx reads
    it) are decoded; ``identity`` and codings it does not know are passed
    through, as httpx does. What each coding decodes to counts against
    `limit` (`_Overflow` past it), so the work is bounded too. Raises
    ``httpx.DecodingError`` for a body that is not in the codings it claims,
    and for more than three of them.
    """

    def __init__(self, codings: Iterable[str], limit: int) -> None:
        names = [name for name in (c.strip().lower() for c in codings) if name in _INFLATED]
        if len(names) > _MAX_CODINGS:
            import httpx

            raise httpx.DecodingError(f"more than {_MAX_CODINGS} content codings: {names}")
        # The codings are listed in the order they were applied: undo them last first.
        self._layers = [_Inflater(name, limit) for name in reversed(names)]

    def decode(self, chunk: bytes) -> Iterator[bytes]:
        return self._through(0, (chunk,))

    def flush(self) -> Iterator[bytes]:
        for index, layer in enumerate(self._layers):
            yield from self._through(index + 1, layer.flush())

    def _through(self, start: int, pieces: Iterable[bytes]) -> Iterator[bytes]:
        for layer in self._layers[start:]:
            pieces = layer.decode_all(pieces)
        return iter(pieces)


class _Inflater:
    """One zlib coding, decoded with its output bounded per call and in all."""

    def __init__(self, coding: str, limit: int) -> None:
        self._inflate = zlib.decompressobj(_INFLATED[coding])
        # Some servers send raw deflate data as "deflate": which it is shows in the first
        # two bytes (a zlib header or not), so those are held until both have come.
        self._head: bytes | None = b"" if coding == "deflate" else None
        self._raw_allowed = False
        self._room = limit

    def decode_all(self, pieces: Iterable[bytes]) -> Iterator[bytes]:
        for piece in pieces:
            yield from self.decode(piece)

    def decode(self, data: bytes) -> Iterator[bytes]:
        if self._head is not None:
            self._head += data
            if len(self._head) < 2:
                return
            data, self._head, self._raw_allowed = self._head, None, True
        pending = data
        while True:
            try:
                out = self._inflate.decompress(pending, _PIECE)
            except zlib.error as exc:
                if self._raw_allowed:
                    self._raw_allowed = False
                    self._inflate = zlib.decompressobj(-zlib.MAX_WBITS)
                    continue
                import httpx

                raise httpx.DecodingError(str(exc)) from None
            self._raw_allowed = False
            pending = self._inflate.unconsumed_tail
            if out:
                yield self._counted(out)
            if not pending and len(out) < _PIECE:  # all input used, no output held back
                return

    def flush(self) -> Iterator[bytes]:
        if self._head:  # a one-byte body
            head, self._head, self._raw_allowed = self._head, None, True
            yield from self.decode(head)
        rest = self._inflate.flush()
        if rest:
            yield self._counted(rest)

    def _counted(self, out: bytes) -> bytes:
        self._room -= len(out)
        if self._room < 0:
            raise _Overflow
        return out


def transport_failure(
    exc: Exception,
    timeout: float,
    secret: str | None,
    *,
    url: str | None = None,
    url_setting: str | None = None,
) -> ProviderError:
    """The provider error for any ``httpx.RequestError`` of an attempt (the secret masked).

    A timeout, a connection that failed or broke off, and a reply body that
    cannot be decompressed (its ``Content-Encoding`` lies or it arrived
    damaged) are all faults of the transfer, not of the request: a Retryable,
    worth another try. What the HTTP library says is cut by `excerpt`: it
    quotes a status or header line it cannot read whole, and a server that does
    not speak HTTP sends up to 16 KiB of one. A request malformed on this side
    (``httpx.LocalProtocolError``: a header value holding a line break, say) would
    fail the same way every time: a plain ProviderError, not retried, naming the
    header and what is wrong with it, never its value; `url` (None: left out)
    names the endpoint in it.

    An answer that is not HTTP (a status line or headers HTTP cannot read, or a
    connection closed or reset after bytes that do not begin an HTTP status line: an
    SSH server's greeting, a TLS server's alert, random bytes; see `_not_http`) would
    come back the same every time too: a plain ProviderError naming `url` and
    `url_setting` (the setting the URL came from, as the error of a 404 names it), and
    quoting the start of what came, not retried. A connection closed before any of
    the answer came or in the middle of its body is a transfer cut short, and retried.
    """
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        return Retryable(f"timed out after {timeout:g}s ({type(exc).__name__})")
    if isinstance(exc, httpx.DecodingError):
        said = excerpt(mask_secret(str(exc), secret))
        return Retryable(f"the reply body could not be decompressed: {said}")
    if isinstance(exc, httpx.LocalProtocolError):
        where = f"{url}: " if url else ""
        fault = _request_fault(exc)
        said = excerpt(mask_secret(f"{type(exc).__name__}: {exc}", secret))
        return ProviderError(
            f"{where}the request was not sent: {fault + '; ' if fault else ''}not retried, "
            f"as it would fail the same way every time ({said})"
        )
    # Masked whole, then cut: a cut first could leave a piece of the key too short to mask.
    said = excerpt(mask_secret(f"{type(exc).__name__}: {exc}", secret))
    if _not_http(exc):
        where = f"{url}: " if url else ""
        if str(exc).startswith(_UNREADABLE_LOCATION):  # a client without the hook of KeptClients
            return ProviderError(
                f"{where}the server redirects to an address that is not a URL ({said}); "
                "redirects are not followed, so that the key never goes to another server"
            )
        setting = _setting_said(url_setting, secret)
        came = _head_received(exc)
        if came:  # the error says only that the connection closed: what came says the rest
            said += f"; before that it sent {mask_secret(repr(came[:_SHOWN_BYTES]), secret)}"
            said += f" ({len(came)} bytes)" if len(came) > _SHOWN_BYTES else ""
        return ProviderError(
            f"{where}the answer is not HTTP ({said}): no HTTP server answers at this address "
            "(another kind of server, such as SSH, at that port, or https:// served where "
            "http:// is set); not retried, as it would answer the same way" + setting
        )
    return Retryable(f"connection failed: {said}")


#: How httpx and h11 begin the errors of a connection the server closed before a whole
#: head came (httpcore says so whatever came before), or in the middle of the body.
_CLOSED = ("Server disconnected", "peer closed connection without sending complete")
#: How httpx begins the error of a redirect whose Location is not a URL it can read.
_UNREADABLE_LOCATION = "Invalid URL in location header"
#: How much of an answer that is not HTTP its error shows (an SSH greeting is some 30 bytes).
_SHOWN_BYTES = 80
#: How the status line of an HTTP/1.x answer begins.
_HTTP_START = b"HTTP/"


def _not_http(exc: Exception) -> bool:
    """Whether `exc` says the answer is not HTTP (not retried), not that a transfer was cut
    short (retried).

    An ``httpx.RemoteProtocolError`` is h11's refusal of a status line or header it
    cannot read, or httpx's of a redirect's Location (not HTTP), unless it is about
    the connection closing (`_CLOSED`). A connection closed or reset before a whole head came
    is told apart by what came before it (`_head_received`): nothing, or the start of an
    ``HTTP/`` status line, is a transfer cut short (a dropped keep-alive connection, a
    server restarting); anything else is another protocol's greeting, such as SSH's.
    """
    import httpx

    if isinstance(exc, httpx.RemoteProtocolError) and not str(exc).startswith(_CLOSED):
        return True
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        received = _head_received(exc)
        return bool(received) and not received.startswith(_HTTP_START[: len(received)])
    return False


def _head_received(exc: Exception) -> bytes:
    """What of the answer's head the connection had received when `exc` ended it, as h11
    holds it (``Connection.trailing_data``); b"" when no head was being read.

    Found on the frame of httpcore's HTTP/1.1 connection in the traceback of the httpcore
    error httpx raised `exc` from: an httpcore that keeps it elsewhere finds nothing,
    and the failure is retried as before.
    """
    import h11

    cause = exc.__cause__
    trace = cause.__traceback__ if cause is not None else None
    while trace is not None:
        state = getattr(trace.tb_frame.f_locals.get("self"), "_h11_state", None)
        if isinstance(state, h11.Connection):
            if state.their_state is not h11.SEND_RESPONSE:
                return b""  # the head came whole: the body was cut short
            return state.trailing_data[0]
        trace = trace.tb_next
    return b""


def _request_fault(exc: httpx.RequestError) -> str | None:
    """Which header of the request `exc` failed on no HTTP message can carry, and why,
    without its value: ``"the Authorization header holds a line break at byte 18 of its
    value (the value is not shown)"``; None when no header is to blame (or no request known).
    """
    try:
        request = exc.request
    except RuntimeError:  # raised outside a request
        return None
    for name, value in request.headers.raw:
        fault = _header_value_fault(value)
        if fault is not None:
            shown = name.decode("ascii", "backslashreplace")
            return f"the {shown} header holds {fault} of its value (the value is not shown)"
    return None


def _not_ascii(headers: Mapping[str, str], url: str) -> str:
    """Why `headers` cannot be sent at all: the first one past ASCII, and where, never its value."""
    for name, value in headers.items():
        at = next((n for n, char in enumerate(value, start=1) if not char.isascii()), None)
        if not name.isascii() or at is not None:
            what = (
                "a header name holds a character past ASCII"
                if not name.isascii()
                else f"the {name} header holds a character past ASCII at character {at} of its "
                "value (the value is not shown)"
            )
            break
    else:  # pragma: no cover - httpx encodes nothing else of them
        what = "a header cannot be encoded"
    return f"{url}: the request was not sent: {what}; not retried, as it would fail the same way"


def _header_value_fault(value: bytes) -> str | None:
    """The first byte of a header value HTTP/1.1 cannot carry, as h11 reads it, and where
    (from 1): ``"a line break at byte 18"``; None when there is none.

    A value is visible ASCII or bytes past 127, with spaces and tabs inside it, never at
    either end.
    """
    last = len(value)
    for position, byte in enumerate(value, start=1):
        if (byte > 0x20 and byte != 0x7F) or (byte in b" \t" and 1 < position < last):
            continue
        if byte in b"\r\n":
            kind = "a line break"
        elif byte in b" \t":
            where = "leading" if position == 1 else "trailing"
            kind = f"a {where} {'space' if byte == 0x20 else 'tab'}"
        else:
            kind = "a control character"
        return f"{kind} at byte {position}"
    return None


#: The headers that name a request in the server's own logs (Anthropic, OpenAI and most
#: OpenAI-compatible servers): quoted with a refusal, what the server's support asks for.
_REQUEST_ID_HEADERS = ("request-id", "x-request-id")


def _setting_said(url_setting: str | None, secret: str | None) -> str:
    """How an error ends that names the setting the URL came from (`url_setting`), masked."""
    return f" [{mask_secret(url_setting, secret)}]" if url_setting else ""


def failure_for_status(
    response: httpx.Response, url: str, secret: str | None, *, url_setting: str | None = None
) -> Exception:
    """What a non-2xx reply means: a Retryable (408, 429, 5xx) or a ProviderError with its text
    (and the server's id of the request, when it gave one).

    A status outside 100-599 (600, 999) is no HTTP status: a ProviderError naming it, `url`
    and `url_setting` (the setting the URL came from), not retried. A redirect (3xx) is
    never followed (the key would go with the request): its error says where it points
    (`_redirect_note`) and that ``provider.base_url``, as `url_setting` says it, is to be
    set to it; every provider says so in the same words.
    """
    status = response.status_code
    if status not in HTTP_STATUSES:
        setting = _setting_said(url_setting, secret)
        return ProviderError(
            f"{url} answered with status {status}, which is no HTTP status (they run from "
            f"{HTTP_STATUSES[0]} to {HTTP_STATUSES[-1]}): the answer is not HTTP; not retried, "
            "as it would answer the same way" + setting
        )
    message = mask_secret(server_message(response), secret)
    if is_retryable_status(status):
        return Retryable(f"HTTP {status}: {message}", retry_after_seconds(response.headers))
    refused = f"{url} refused the request: HTTP {status}: {message}{_request_id(response, secret)}"
    if 300 <= status <= 399:
        refused += f" [{mask_secret(_redirect_note(response, url_setting), secret)}]"
    return ProviderError(refused)


def _redirect_note(response: httpx.Response, url_setting: str | None) -> str:
    """What the error of a redirect adds: where it points, and why it was not followed.

    The address is quoted as `repr` writes it (a control character escaped, a line break
    too), its password masked before it is cut to 200 characters; the caller masks the key.
    """
    location = (response.headers.get("location") or "").strip()
    to = f" to {quoted(without_credentials(location))}" if location else ""
    setting = f": {url_setting}" if url_setting else ""
    return (
        f"the server redirects{to}; redirects are not followed, so that the key never goes "
        f"to another server: set provider.base_url to the new address{setting}"
    )


def _request_id(response: httpx.Response, secret: str | None) -> str:
    """`` (request id req_011...)``, as the server named the request, or ''."""
    for header in _REQUEST_ID_HEADERS:
        found = (response.headers.get(header) or "").strip()
        if found and found.isprintable():
            return f" (request id {mask_secret(clip(found, 100), secret)})"
    return ""


def request_content(body: Any) -> bytes:
    """A request body as strict UTF-8 JSON, whatever it holds (no NaN, no lone surrogate)."""
    return dumps(body, separators=(",", ":")).encode("utf-8")


def request_fault(messages: Sequence[Any], tools: Sequence[Any]) -> str | None:
    """Where the message or tool definition that stopped a request body from being built or
    encoded is, and why (``messages[2] holds a dict or list that contains itself (no JSON
    can)``); None when none is to blame.

    Call it only once building or encoding failed, so that a request that goes out
    costs no walk of its messages: `request_content` walks a body, and refuses nesting
    past `MAX_DEPTH` or a value holding itself, only when JSON cannot encode it as it is.

    First the value that cannot be encoded on its own (nested too deep, holding itself,
    an integer too long to write): a message past `MAX_DEPTH` that JSON encodes is not
    to blame for another's integer. Then, when each can be on its own (the body was
    walked for another reason, a NaN), the one nested past `MAX_DEPTH` (`nesting_fault`).
    A value that is not a JSON type is never the one named: the body's encoder says which.
    """
    parts = (("messages", messages), ("tools", tools))
    for place, values in parts:
        for index, value in enumerate(values):
            try:
                request_content(value)
            except JSONLimitError as exc:
                why = nesting_fault(value) or f"cannot be encoded as JSON: {exc}"
                return f"{place}[{index}] {why}"
            except TypeError:
                continue
    for place, values in parts:
        for index, value in enumerate(values):
            fault = nesting_fault(value)
            if fault is not None:
                return f"{place}[{index}] {fault}"
    return None


def reply_json(response: httpx.Response, url: str, secret: str | None) -> Any:
    """A 2xx reply's JSON, decoded at the core's JSON boundary (limits, replacements logged).

    Raises ProviderError naming `url` when the body cannot be used.
    """
    try:
        decoded = loads(response.content)
    except JSONBoundaryError as exc:
        raise ProviderError(
            f"{url} sent a reply that cannot be used: {exc}: "
            f"{mask_secret(excerpt(response.text), secret)!r}"
        ) from None
    if decoded.replaced:
        log.warning("provider reply decoded with replacements", replaced=list(decoded.replaced))
    return decoded.value


#: The ``user:password@`` of a URL `urlsplit` cannot read: what comes before the last ``@``
#: ahead of the path, after the scheme if any.
_USERINFO = re.compile(r"^((?:[A-Za-z][A-Za-z0-9+.-]*:)?//)?[^/?#]*@")

#: A piece of a key this long or longer is hidden wherever it shows (see `mask_secret`).
_MASKED_PIECE = 8


def mask_secret(text: str, secret: str | None) -> str:
    """`text` with `secret` (an API key a server or a library echoed) and every piece of it
    hidden, each stretch of them replaced by ``***``.

    Hidden are: every run of 8 or more characters of the key, and of each
    form it may be written in: ``repr()``, ``ascii()``, the ``repr()`` of its UTF-8 bytes
    (``b'...'``, as h11 writes a header value it refuses) and JSON (``\\uXXXX`` escapes
    or not), each with ``'`` escaped or not (``repr`` chooses by the whole text), and each
    of those escaped once more so (an exception's ``repr()`` escapes its message); and the
    whole of a key or form shorter than that (a piece of one is ordinary text). When the
    key's forms hold ``*``, the mask is made of a character none of them holds, so that a
    mask never joins the text around it into a piece of the key. No secret, or an empty
    one: `text` as it is. Linear in ``len(text)``.
    """
    if not secret:
        return text
    pieces, mask = _secret_pieces(secret)
    hidden = [False] * len(text)
    for size, wanted in pieces.items():
        for start in range(len(text) - size + 1):
            if text[start : start + size] in wanted:
                hidden[start : start + size] = [True] * size
    if not any(hidden):
        return text
    out: list[str] = []
    for is_hidden, run in itertools.groupby(zip(hidden, text, strict=True), key=lambda x: x[0]):
        out.append(mask if is_hidden else "".join(char for _, char in run))
    return "".join(out)


@functools.lru_cache(maxsize=32)
def _secret_pieces(secret: str) -> tuple[dict[int, frozenset[str]], str]:
    """What `mask_secret` hides for `secret` (by length) and the mask it writes instead."""
    first = {secret} | {escape(secret) for escape in _ESCAPES}
    forms = first | {escape(form) for form in first for escape in _ESCAPES}
    pieces: dict[int, set[str]] = {}
    for form in forms:
        size = min(len(form), _MASKED_PIECE)
        found = pieces.setdefault(size, set())
        found.update(form[start : start + size] for start in range(len(form) - size + 1))
    used = set("".join(forms))
    candidates = itertools.chain("*#~", map(chr, itertools.count(0x2022)))
    mask = next(char for char in candidates if char not in used) * 3
    return {size: frozenset(found) for size, found in pieces.items()}, mask


def _char_repr(char: str, quote: bool) -> str:
    """`char` as ``repr()`` writes it inside a str literal, ``'`` escaped when `quote`."""
    if char == "'":
        return "\\'" if quote else "'"
    return repr(char)[1:-1]


def _char_ascii(char: str, quote: bool) -> str:
    """`char` as ``ascii()`` writes it inside a str literal, ``'`` escaped when `quote`."""
    if char == "'":
        return "\\'" if quote else "'"
    return ascii(char)[1:-1]


def _bytes_repr(text: str, quote: bool) -> str:
    """`text`'s UTF-8 bytes as ``repr()`` writes them inside ``b'...'``, ``'`` escaped when
    `quote` (a lone surrogate as ``surrogatepass`` encodes it)."""
    data = text.encode("utf-8", "surrogatepass")
    return "".join(
        ("\\'" if quote else "'") if byte == 0x27 else repr(bytes([byte]))[2:-1] for byte in data
    )


#: The ways `mask_secret` knows of writing a key in a message, besides as it is.
_ESCAPES: tuple[Callable[[str], str], ...] = (
    lambda text: "".join(_char_repr(char, True) for char in text),
    lambda text: "".join(_char_repr(char, False) for char in text),
    lambda text: "".join(_char_ascii(char, True) for char in text),
    lambda text: "".join(_char_ascii(char, False) for char in text),
    lambda text: _bytes_repr(text, True),
    lambda text: _bytes_repr(text, False),
    lambda text: json.dumps(text)[1:-1],
    lambda text: json.dumps(text, ensure_ascii=False)[1:-1],
)


def server_message(response: httpx.Response) -> str:
    """The server's own explanation of an error status, as short plain text."""
    reason = response.reason_phrase or ""
    try:
        data: Any = loads(response.content).value
    except JSONBoundaryError:
        text = without_lone_surrogates(response.text.strip())
        return excerpt(text) if text else reason or "(empty body)"
    if isinstance(data, Mapping):
        for key in ("error", "message", "detail"):
            if data.get(key) is not None:
                return excerpt(error_text(data[key]))
    return excerpt(dumps(data))


def error_text(error: object) -> str:
    """An error object as text: ``message (code or type)``; OpenAI's and Anthropic's shapes."""
    if isinstance(error, Mapping):
        message = error.get("message")
        if isinstance(message, str) and message:
            code = error.get("code") or error.get("type")
            return f"{message} ({code})" if isinstance(code, str) and code else message
    if isinstance(error, str):
        return without_lone_surrogates(error)
    return dumps(error)


def excerpt(text: str) -> str:
    """`text` cut to a length fit for an error message."""
    if len(text) <= _MAX_MESSAGE_CHARS:
        return text
    return text[:_MAX_MESSAGE_CHARS] + f"... ({len(text)} characters)"


def describe_body(data: Mapping[str, Any]) -> str:
    """What a 200 reply of the wrong kind held, briefly: its keys and its ``object`` kind.

    For the error of a provider whose reply lacks the part it needs (OpenAI's
    ``choices``, Anthropic's ``content``): usually a body of another API
    behind a misconfigured base URL.
    """
    keys = ", ".join(sorted(str(key) for key in data)[:12]) or "(none)"
    if len(data) > 12:
        keys += f", ... ({len(data)} keys)"
    kind = data.get("object")
    described = f"top-level keys: {keys}"
    if isinstance(kind, str) and kind:
        described += f"; object: {excerpt(kind)!r}"
    return excerpt(described)


def without_credentials(url: str) -> str:
    """`url` without any ``user:password@`` part, for messages and logs (a server's
    ``Location`` too, which need be no URL `urlsplit` can read)."""
    try:
        parts = urlsplit(url)
    except ValueError:  # a broken IPv6 address ("http://[::1"): masked as it is written
        return _USERINFO.sub(r"\1***@", url, count=1)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))
