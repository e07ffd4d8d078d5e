"""Bytes read from a server counted below HTTP, so that a response is bounded on the wire too.

`max_bytes` bounds the body a fetch keeps, after chunked framing is taken off
and gzip or deflate inflated. A server can send without end and still add
nothing to that body: empty deflate blocks, empty gzip members, chunks of one
byte behind kilobytes of chunk extensions, or ``100 Continue`` responses one
after the other. What the connection reads is counted here, under httpx and
its HTTP parser, and a read past the connection's allowance is refused.

Imported when a fetch starts (it loads httpx and httpcore), not with the plugin.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import httpcore
import httpx

if TYPE_CHECKING:
    import ssl

__all__ = ["WireLimitExceeded", "WireLimitedTransport", "wire_limit"]

#: What a response may read from the connection beyond twice max_bytes: its headers,
#: and the one read (64 KiB at most, httpcore's) that may run past what is used of it.
WIRE_SLACK = 64 * 1024


def wire_limit(max_bytes: int) -> int:
    """The bytes one connection may read for a body of `max_bytes`: twice it, plus 64 KiB.

    Twice, so that chunked framing (a chunk of 8 bytes costs 13) and the few
    bytes gzip adds to data it cannot shrink stay within it; the 64 KiB take
    the headers and httpcore's last read.
    """
    return 2 * max_bytes + WIRE_SLACK


class WireLimitExceeded(Exception):
    """A connection read its allowance of bytes and was asked for more."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


class _Allowance:
    """The bytes one connection has read, and how many it may."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0


class _CountedStream(httpcore.AsyncNetworkStream):
    """A network stream whose reads are counted, and refused once the allowance is used up.

    A read is refused only when asked for after the allowance is reached, never
    cut: the bytes of the read that reaches it still arrive, so a body that
    fills `max_bytes` with them is kept (truncated), not failed.
    """

    def __init__(self, stream: httpcore.AsyncNetworkStream, allowance: _Allowance) -> None:
        self._stream = stream
        self._allowance = allowance

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._allowance.used >= self._allowance.limit:
            raise WireLimitExceeded(self._allowance.limit)
        data = await self._stream.read(max_bytes, timeout)
        self._allowance.used += len(data)
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._stream.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        # The TLS stream reads through the one below it: its plain text is what is counted.
        stream = await self._stream.start_tls(ssl_context, server_hostname, timeout)
        return _CountedStream(stream, self._allowance)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _CountingBackend(httpcore.AsyncNetworkBackend):
    """Opens connections through `backend`, each with an allowance of its own of `limit` bytes."""

    def __init__(self, backend: httpcore.AsyncNetworkBackend, limit: int) -> None:
        self._backend = backend
        self._limit = limit

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._backend.connect_tcp(
            host, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )
        return _CountedStream(stream, _Allowance(self._limit))

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._backend.connect_unix_socket(
            path, timeout=timeout, socket_options=socket_options
        )
        return _CountedStream(stream, _Allowance(self._limit))

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


class WireLimitedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport, whose connections each read at most `limit` bytes (`WireLimitExceeded`).

    `backend` opens the connections (httpcore's for asyncio and trio unless
    given; tests give a mock).
    """

    def __init__(
        self,
        limit: int,
        *,
        verify: ssl.SSLContext | bool,
        limits: httpx.Limits,
        backend: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        import ssl

        context = (
            verify
            if isinstance(verify, ssl.SSLContext)
            else httpx.create_ssl_context(verify=verify, trust_env=False)
        )
        super().__init__(verify=context, trust_env=False, limits=limits)
        # httpx takes no network backend, so its pool is made again on one that counts;
        # the rest of the transport (requests, responses, errors) is httpx's own.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_CountingBackend(backend or httpcore.AnyIOBackend(), limit),
        )
