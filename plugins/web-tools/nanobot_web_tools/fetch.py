"""Fetching one URL safely: checked and pinned addresses, manual redirects, hard limits.

Each hop (the URL, then every redirect target) is resolved once and checked
(`resolve_checked`); the request then goes to the checked IP address itself,
with the original ``Host`` header and, for https, the original name as TLS
SNI, so the certificate is still verified against the name. Connections are
never reused across hops, and proxies from the environment are ignored: both
would let a connection reach something other than the checked address.
"""

from __future__ import annotations

import asyncio
import codecs
import functools
import math
import re
import sys
import threading
import zlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
from nanobot_core import clip, quoted, run_in_daemon_thread

from nanobot_web_tools.addresses import IPAddress, Resolver, resolve_checked, system_resolver
from nanobot_web_tools.errors import FetchFailed, FetchRefused
from nanobot_web_tools.html_text import html_to_text

if TYPE_CHECKING:
    import ssl

    import httpx

__all__ = [
    "FetchLimits",
    "FetchedPage",
    "PinnedFetcher",
    "pinned_request_parts",
    "without_userinfo",
]


_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/xhtml+xml",
        "application/javascript",
        "application/x-ndjson",
    }
)
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_MAX_PORT = 65_535
_ASCII_WHITESPACE = " \t\n\r\f"
#: How an error names the bytes a connection may read (`nanobot_web_tools._wire.wire_limit`).
_WIRE_LIMIT = "the wire limit (twice max_bytes, plus 64 KiB)"
#: The addresses (of a host's DNS answer) whose connection failures an error names one by one.
_FAILURES_SHOWN = 3
# The "user:password@" of a URL's authority (up to its last "@"), so that no message shows it.
_USERINFO = re.compile(r"//(?:[^/?#@]*+@)++")
USER_AGENT = "nanobot-web-fetch/0.1 (+https://pypi.org/project/nanobot-web-tools/)"


def _finite(value: float) -> bool:
    """Whether `value` is a finite number of seconds; an int too large for a float is not."""
    try:
        return math.isfinite(value)
    except OverflowError:  # a TOML hex literal of hundreds of digits, say
        return False


def _positive(instance: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    # NaN passes `<= 0`, and the core then leaves the tool out without naming the option;
    # infinity would let one fetch hang for ever, and an int past a float's range fails
    # the plugin (OverflowError) when the deadline is computed.
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not value > 0
        or not _finite(value)
    ):
        raise ValueError(
            f"web_fetch option {attribute.name!r} must be a positive number (a finite number)"
        )


def _positive_int(instance: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"web_fetch option {attribute.name!r} must be a positive integer")


def _non_negative_int(instance: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"web_fetch option {attribute.name!r} must be an integer >= 0")


@attrs.frozen
class FetchLimits:
    """How much one fetch may take: bytes read, seconds in total, redirects followed."""

    max_bytes: int = attrs.field(default=2_000_000, validator=_positive_int)
    timeout: float = attrs.field(default=20.0, validator=_positive)
    max_redirects: int = attrs.field(default=5, validator=_non_negative_int)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> FetchLimits:
        """Build limits from the ``[tools.options.web_fetch]`` table (other keys are ignored)."""
        names = {field.name for field in attrs.fields(cls)}
        return cls(**{key: value for key, value in options.items() if key in names})


@attrs.frozen
class FetchedPage:
    """A fetched response, its body already turned into text."""

    url: str
    status: int
    content_type: str
    text: str
    truncated: bool


def pinned_request_parts(
    target: httpx.URL, address: IPAddress
) -> tuple[httpx.URL, dict[str, str], dict[str, Any]]:
    """The URL, headers and extensions that send a request for `target` to `address`.

    The URL names the IP address, so the HTTP stack has nothing left to
    resolve; the ``Host`` header and the TLS SNI name keep the original host.
    """
    host = target.raw_host.decode("ascii")
    authority = f"[{host}]" if ":" in host else host
    host_header = authority if target.port is None else f"{authority}:{target.port}"
    url = target.copy_with(host=str(address))
    extensions: dict[str, Any] = {"sni_hostname": host} if target.scheme == "https" else {}
    return url, {"Host": host_header}, extensions


def media_type(content_type: str) -> tuple[str, str | None]:
    """The lower-cased media type of a Content-Type header, and its charset parameter."""
    mime, _, params = content_type.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip("\"'")
    return mime.strip().lower(), charset


def header_values(header: str) -> list[str]:
    """The comma-separated values of a header (commas inside quoted strings kept), empty ones
    dropped: several headers of one name reach us joined by ", ", in the order sent."""
    values: list[str] = []
    start, quoting, escaped = 0, False, False
    for index, char in enumerate(header):
        if escaped:
            escaped = False
        elif quoting and char == "\\":
            escaped = True
        elif char == '"':
            quoting = not quoting
        elif char == "," and not quoting:
            values.append(header[start:index])
            start = index + 1
    values.append(header[start:])
    return [value for value in values if value.strip()]


def content_type_of(header: str) -> tuple[str, str | None]:
    """The media type and charset of a Content-Type header; `FetchRefused` when it names two.

    One rule for one header (``text/plain, image/png``) and for several headers
    (joined the same way): values that name different media types are
    ambiguous, and refused, whichever comes first. Values that repeat one media
    type are one type, whose charset is the first one declared.
    """
    parsed = [media_type(value) for value in header_values(header)]
    types = list(dict.fromkeys(mime for mime, _ in parsed))
    if len(types) > 1:
        shown = clip(", ".join(types))  # the server's header: of any length
        raise FetchRefused(
            f"the response names {len(types)} content types ({shown}), so what the body is "
            "cannot be told"
        )
    charset = next((charset for _, charset in parsed if charset), None)
    return (types[0] if types else ""), charset


def is_textual(mime: str) -> bool:
    """Whether a body of this media type is text the model can read."""
    return mime.startswith("text/") or mime in _TEXT_TYPES or mime.endswith(("+json", "+xml"))


# Codecs Python has that are no character set of a page: host-name label codecs (punycode
# takes quadratic time, idna refuses errors="replace") and one that fails on any input.
_NOT_CHARSETS = frozenset({"idna", "punycode", "undefined"})
# UTF-16 and UTF-32 without a byte order mark are read little-endian, as browsers read them.
_BOM_OR_LITTLE_ENDIAN = {
    "utf-16": ((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE), "utf-16-le"),
    "utf-32": ((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE), "utf-32-le"),
}


def body_encoding(charset: str | None, body: bytes) -> str:
    """The codec that decodes `body` declared in `charset`: UTF-8 unless it names a text one.

    A charset the page (whoever wrote it) declares must not pick a codec that is
    not a character set: ``zlib``, ``base64`` or ``rot13`` (no text encodings at
    all), or the codecs in `_NOT_CHARSETS`. Those, and unknown names, mean UTF-8.
    """
    if not charset:
        return "utf-8"
    try:
        encoding = codecs.lookup(charset).name
        if encoding in _NOT_CHARSETS:
            return "utf-8"
        b"a".decode(encoding, "replace")  # LookupError when it is no text encoding
    except (LookupError, ValueError):  # ValueError: a name holding NUL
        return "utf-8"
    if encoding in _BOM_OR_LITTLE_ENDIAN:
        marks, little_endian = _BOM_OR_LITTLE_ENDIAN[encoding]
        return encoding if body.startswith(marks) else little_endian
    return encoding


def decode_body(body: bytes, charset: str | None, *, truncated: bool) -> str:
    """Decode `body`, dropping a multi-byte character cut in half by truncation."""
    decoder = codecs.getincrementaldecoder(body_encoding(charset, body))(errors="replace")
    return decoder.decode(body, final=not truncated)


_DEFAULT_CONTEXT: list[ssl.SSLContext] = []
_CONTEXT_LOCK = threading.Lock()


def _default_context() -> ssl.SSLContext:
    """httpx's default SSL context (certifi's CA certificates, the environment not read),
    built once for the process: loading the certificates costs tens of milliseconds of CPU,
    and an ``SSLContext`` holds no TLS session of a client's to carry to another host."""
    with _CONTEXT_LOCK:
        if not _DEFAULT_CONTEXT:
            import httpx

            _DEFAULT_CONTEXT.append(httpx.create_ssl_context(trust_env=False))
        return _DEFAULT_CONTEXT[0]


class PinnedFetcher:
    """Fetches http(s) URLs while refusing internal addresses on every hop.

    `resolver` turns a host name into addresses (default: the system
    resolver); it is called once per hop. `allow_loopback` lets 127.0.0.0/8
    and ::1 through and is meant for tests only. `verify` is passed to httpx
    (an ``ssl.SSLContext`` lets tests trust their own certificate authority).
    """

    def __init__(
        self,
        limits: FetchLimits | None = None,
        *,
        resolver: Resolver = system_resolver,
        allow_loopback: bool = False,
        verify: ssl.SSLContext | bool = True,
        user_agent: str = USER_AGENT,
    ) -> None:
        self.limits = limits or FetchLimits()
        self.resolver = resolver
        self.allow_loopback = allow_loopback
        self.verify = verify
        self.user_agent = user_agent

    async def fetch(self, url: str) -> FetchedPage:
        """Fetch `url`; raise `FetchRefused` or `FetchFailed` when there is no page to return."""
        try:
            async with asyncio.timeout(self.limits.timeout):
                return await self._fetch(url)
        except TimeoutError:
            raise FetchFailed(f"timed out after {self.limits.timeout:g} s") from None

    async def _fetch(self, url: str) -> FetchedPage:
        import httpx

        from nanobot_web_tools._wire import WireLimitedTransport, wire_limit

        # Spaces or a line break around the URL (a model's slip) are dropped, as a browser does.
        target = _http_url(url.strip(_ASCII_WHITESPACE))
        # No keep-alive: a pooled connection is keyed by IP and could carry the
        # TLS session (and SNI) of another host name to a later hop.
        transport = WireLimitedTransport(
            wire_limit(self.limits.max_bytes),
            verify=_default_context() if self.verify is True else self.verify,
            limits=httpx.Limits(max_keepalive_connections=0),
        )
        client = httpx.AsyncClient(
            transport=transport,
            trust_env=False,
            follow_redirects=False,
            timeout=self.limits.timeout,
        )
        async with client:
            for _ in range(self.limits.max_redirects + 1):
                addresses = await self._resolve(target)
                response = await self._send(client, target, addresses)
                try:
                    location = response.headers.get("location")
                    if response.status_code not in _REDIRECTS or not location:
                        return await self._read(response, target)
                    target = _redirect_target(target, location)
                finally:
                    await response.aclose()
        raise FetchRefused(f"more than {self.limits.max_redirects} redirects")

    async def _resolve(self, target: httpx.URL) -> tuple[IPAddress, ...]:
        port = target.port or (443 if target.scheme == "https" else 80)
        host = target.raw_host.decode("ascii")
        # Not asyncio.to_thread: a hung lookup would hold up the end of asyncio.run.
        return await run_in_daemon_thread(
            functools.partial(
                resolve_checked,
                host,
                port,
                resolver=self.resolver,
                allow_loopback=self.allow_loopback,
            ),
            name=f"resolve {clip(host)}",
        )

    async def _send(
        self, client: httpx.AsyncClient, target: httpx.URL, addresses: tuple[IPAddress, ...]
    ) -> httpx.Response:
        import httpx

        from nanobot_web_tools._wire import WireLimitExceeded

        failures: list[str] = []
        for address in addresses:
            url, headers, extensions = pinned_request_parts(target, address)
            headers |= {"User-Agent": self.user_agent, "Accept-Encoding": "identity"}
            request = client.build_request("GET", url, headers=headers, extensions=extensions)
            try:
                response: httpx.Response = await client.send(request, stream=True)
            except httpx.ConnectError as exc:
                failures.append(f"{address}: {clip(str(exc) or type(exc).__name__)}")
                continue
            except httpx.InvalidURL as exc:
                # httpx parses a redirect's Location while receiving the response.
                raise FetchRefused(
                    f"invalid redirect location from {_shown(target)}: {clip(str(exc))}"
                ) from exc
            except httpx.RemoteProtocolError as exc:
                if "location" not in str(exc).lower():
                    raise FetchFailed(f"{_shown(target)}: {_failure(exc)}") from exc
                raise FetchRefused(
                    f"invalid redirect location from {_shown(target)}: {clip(str(exc))}"
                ) from exc
            except httpx.HTTPError as exc:
                raise FetchFailed(f"{_shown(target)}: {_failure(exc)}") from exc
            except WireLimitExceeded as exc:  # 1xx responses without end, say
                raise FetchFailed(
                    f"{_shown(target)}: the response's headers had not ended after "
                    f"{exc.limit} bytes from the server, {_WIRE_LIMIT}"
                ) from None
            return response
        raise FetchFailed(f"cannot connect to {clip(target.host)}: {_connect_failures(failures)}")

    async def _read(self, response: httpx.Response, target: httpx.URL) -> FetchedPage:
        import httpx

        from nanobot_web_tools._wire import WireLimitExceeded

        if not 200 <= response.status_code < 300:
            raise FetchFailed(
                f"HTTP {response.status_code} {clip(response.reason_phrase)} for {_shown(target)}"
            )
        mime, charset = content_type_of(response.headers.get("content-type", ""))
        if not is_textual(mime):
            shown = clip(mime) if mime else "none given"  # the server's header: of any length
            raise FetchRefused(f"content type {shown} is not text (text/*, JSON, XML, HTML)")
        encoding = response.headers.get("content-encoding", "").strip().lower()
        inflater = _Inflater.for_encoding(encoding)
        try:
            body, truncated = await _read_limited(response, self.limits.max_bytes, inflater)
        except zlib.error as exc:
            raise FetchFailed(
                f"{_shown(target)}: the body is not valid {encoding} data: {exc}"
            ) from None
        except httpx.HTTPError as exc:
            raise FetchFailed(
                f"{_shown(target)}: the body could not be read to its end: {_failure(exc)}"
            ) from None
        except WireLimitExceeded as exc:
            raise FetchFailed(
                f"{_shown(target)}: the body had neither ended nor reached max_bytes "
                f"({self.limits.max_bytes}) after {exc.limit} bytes from the server, {_WIRE_LIMIT}"
            ) from None
        # In a thread: reading up to max_bytes of markup takes up to a second or so of CPU,
        # which on the loop would stall every other tool call, and the timeout with them.
        text = await run_in_daemon_thread(
            functools.partial(
                _page_text, body, charset, truncated=truncated, html=mime in _HTML_TYPES
            ),
            name="web_fetch read page",
        )
        return FetchedPage(
            url=str(target),
            status=response.status_code,
            content_type=mime,
            text=text,
            truncated=truncated,
        )


def _page_text(body: bytes, charset: str | None, *, truncated: bool, html: bool) -> str:
    """The text of a body: decoded, and reduced to readable text when it is HTML."""
    text = decode_body(body, charset, truncated=truncated)
    return html_to_text(text) if html else text


def _redirect_target(target: httpx.URL, location: str) -> httpx.URL:
    """Where a redirect leads, checked like any URL; a Location httpx cannot parse is refused."""
    import httpx

    try:
        joined = str(target.join(location))
    except (httpx.InvalidURL, ValueError) as exc:
        raise FetchRefused(
            f"invalid redirect location {quoted(without_userinfo(location))}: {clip(str(exc))}"
        ) from exc
    return _http_url(joined)


def _http_url(url: str) -> httpx.URL:
    import httpx

    try:
        parsed: httpx.URL = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise FetchRefused(
            f"invalid URL {quoted(without_userinfo(url))}: {clip(str(exc))}"
        ) from exc
    if "://" not in url:  # "example.com/page": httpx reads "example.com" as a scheme, or none
        raise FetchRefused("the URL must begin with http:// or https://")
    if parsed.scheme not in ("http", "https"):
        shown = quoted(parsed.scheme or without_userinfo(url))
        raise FetchRefused(f"only http and https URLs can be fetched, not {shown}")
    if not parsed.raw_host:
        raise FetchRefused(f"the URL {quoted(without_userinfo(url))} has no host")
    if parsed.userinfo:
        # httpx would send them as Basic authentication, to whatever the URL names.
        raise FetchRefused("the URL holds credentials (user:password@), and web_fetch sends none")
    # httpx takes any number as a port; the socket layer then fails with an error httpx
    # does not wrap (an OverflowError inside an ExceptionGroup).
    if parsed.port is not None and not 0 < parsed.port <= _MAX_PORT:
        raise FetchRefused(f"port {clip(str(parsed.port))} is not a TCP port (1 to {_MAX_PORT})")
    return parsed


def without_userinfo(url: str) -> str:
    """`url` with any credentials in it (``user:password@``) shown as ``***@``."""
    return _USERINFO.sub("//***@", url)


def _shown(target: httpx.URL) -> str:
    """A URL as an error quotes it: the model's (or a redirect's) URL may be of any length."""
    return clip(str(target))


def _connect_failures(failures: list[str]) -> str:
    """Why each address failed, the first `_FAILURES_SHOWN` of them: a DNS answer (a DNS server's
    choice) may hold thousands of addresses, and the message must stay a line."""
    if len(failures) <= _FAILURES_SHOWN:
        return "; ".join(failures)
    shown = "; ".join(failures[:_FAILURES_SHOWN])
    return (
        f"all {len(failures)} addresses failed, the first {_FAILURES_SHOWN}: {shown}; "
        f"and {len(failures) - _FAILURES_SHOWN} more"
    )


def _failure(exc: Exception) -> str:
    """An httpx error as a message says it: its text may quote the URL it was about."""
    return f"{type(exc).__name__}: {clip(str(exc))}"


class _Inflater:
    """Decompresses a gzip or deflate body a bounded piece at a time.

    httpx would inflate each chunk from the network whole before the size
    limit is looked at: a gzip bomb of a few kilobytes per chunk would become
    many megabytes of memory. Here no call returns more than it is asked for.

    Where the compressed stream ends is where the body ends. A gzip body may
    hold several members one after the other (RFC 1952), read in turn; bytes
    after the last stream are ignored and not read on (zlib would keep every
    one of them in ``unused_data``, memory that only the timeout would bound).
    A body that ends inside a stream is incomplete (`check_complete`).
    """

    def __init__(self, wbits: int, *, raw_fallback: bool = False, members: bool = False) -> None:
        self._wbits = wbits
        self._inflate = zlib.decompressobj(wbits)
        self._raw_fallback = raw_fallback  # "deflate" is zlib-wrapped or, from some servers, raw
        self._members = members
        self._started = False
        self._between_members = False
        self._next_member = b""  # the first byte of what follows a member, when it came alone
        self._first_byte = b""  # of a deflate body, when it came alone (see `inflate`)
        #: The compressed stream has ended; nothing after it is part of the body.
        self.finished = False

    @classmethod
    def for_encoding(cls, encoding: str) -> _Inflater | None:
        """The inflater of a Content-Encoding (None for none); refuse those it cannot read."""
        if encoding in ("", "identity"):
            return None
        if encoding in ("gzip", "x-gzip"):
            return cls(16 + zlib.MAX_WBITS, members=True)
        if encoding == "deflate":
            return cls(zlib.MAX_WBITS, raw_fallback=True)
        raise FetchRefused(
            f"content encoding {quoted(encoding)} is not supported (only gzip and deflate are)"
        )

    def inflate(self, data: bytes, at_most: int) -> bytes:
        """At most `at_most` (>= 1) bytes of the body from `data`; zlib.error when invalid."""
        if self._raw_fallback and not self._started:
            # zlib tells its own header from raw deflate by the first 2 bytes: a first read
            # of 1 byte is held for the next, else raw deflate is taken for a zlib stream.
            data, self._first_byte = self._first_byte + data, b""
            if len(data) < 2:
                self._first_byte = data
                return b""
        out = bytearray()
        while data and not self.finished and len(out) < at_most:
            if self._between_members:
                data = self._start_member(data)
                if not data:
                    break
            out += self._decompress(data, at_most - len(out))
            if not self._inflate.eof:
                break  # all of `data` taken, or the rest kept in unconsumed_tail past at_most
            data = self._inflate.unused_data
            self._between_members = self._members
            self.finished = not self._members
        return bytes(out)

    def check_complete(self) -> None:
        """Raise zlib.error when the body ended inside a compressed stream."""
        if self._first_byte or (self._started and not (self.finished or self._between_members)):
            raise zlib.error("incomplete or truncated stream")

    def _start_member(self, data: bytes) -> bytes:
        """What of `data` the next gzip member reads (b"" when there is none yet)."""
        data = (self._next_member + data).lstrip(b"\0")  # zero padding after a member
        self._next_member = b""
        if len(data) < 2:
            self._next_member = data
            return b""
        if not data.startswith(b"\x1f\x8b"):  # trailing bytes that are no gzip member
            self.finished = True
            return b""
        self._inflate = zlib.decompressobj(self._wbits)
        self._between_members = False
        return data

    def _decompress(self, data: bytes, at_most: int) -> bytes:
        # zlib takes a C ssize_t: one byte past a max_bytes of TOML's largest integer would
        # overflow it, and no call could return that much anyway.
        at_most = min(at_most, sys.maxsize)
        try:
            out = self._inflate.decompress(data, at_most)
        except zlib.error:
            if self._started or not self._raw_fallback:
                raise
            self._inflate = zlib.decompressobj(-zlib.MAX_WBITS)
            out = self._inflate.decompress(data, at_most)
        self._started = True
        return out


async def _read_limited(
    response: httpx.Response, limit: int, inflater: _Inflater | None = None
) -> tuple[bytes, bool]:
    """Read at most `limit` bytes of the (inflated) body, and whether there was more.

    The download stops as soon as one byte past the limit has arrived; a body
    of exactly `limit` bytes is complete, not truncated. A compressed body is
    inflated no further than that byte either, and read no further than the end
    of its compressed stream.
    """
    body = bytearray()
    async for chunk in response.aiter_raw():
        if inflater is not None:
            chunk = inflater.inflate(chunk, limit + 1 - len(body))
        body += chunk
        if len(body) > limit:
            return bytes(body[:limit]), True
        if inflater is not None and inflater.finished:
            return bytes(body), False
    if inflater is not None:
        inflater.check_complete()
    return bytes(body), False
