"""The HTTP side every provider shares: the retry loop, the server's error text, secret masking.

A provider supplies one attempt (an async function that posts the request and
parses the reply, raising :class:`Retryable` for what is worth another try and
:class:`~nanobot_core.errors.ProviderError` for the rest); :func:`send_with_retries`
runs it under a :class:`~nanobot_core.providers.retry.RetryPolicy`, tells the
progress callback about each retry and gives up with a ProviderError naming the
endpoint and the last failure. The built-in ``openai`` provider and plugin
providers use the same loop, so they retry the same way.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from nanobot_core._json_boundary import JSONBoundaryError, dumps, loads, without_lone_surrogates
from nanobot_core._logging import get_logger
from nanobot_core.errors import ProviderError
from nanobot_core.providers.base import ProgressCallback, RetryNotice
from nanobot_core.providers.retry import RetryPolicy, is_retryable_status, retry_after_seconds

if TYPE_CHECKING:
    import httpx

__all__ = [
    "Retryable",
    "describe_body",
    "error_text",
    "excerpt",
    "failure_for_status",
    "mask_secret",
    "reply_json",
    "request_content",
    "send_with_retries",
    "server_message",
    "transport_failure",
    "without_credentials",
]

log = get_logger("nanobot_core.providers.http")

_MAX_MESSAGE_CHARS = 1_000

T = TypeVar("T")


class Retryable(Exception):
    """An attempt failed in a way worth another; `server_wait` is what the server asked for."""

    def __init__(self, reason: str, server_wait: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.server_wait = server_wait


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

    Raises ProviderError ``"{url}: gave up after N attempt(s); last error: ..."``
    when the retries are used up; any other exception of `attempt` passes through.
    """
    retries = policy.max_retries
    for number in range(retries + 1):
        started = time.monotonic()
        try:
            result = await _within(attempt, timeout)
        except Retryable as failure:
            if number == retries:
                raise ProviderError(
                    f"{url}: gave up after {number + 1} attempt(s); last error: {failure.reason}"
                ) from None
            delay = policy.delay(number + 1, failure.server_wait)
            # Info, not warning: the progress callback is how a person hears about retries.
            log.info(
                "provider request failed; retrying",
                url=url,
                error=failure.reason,
                retry=number + 1,
                max_retries=retries,
                delay=round(delay, 3),
            )
            if progress is not None:
                progress(RetryNotice(number + 1, retries, delay, failure.reason))
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


def transport_failure(exc: Exception, timeout: float, secret: str | None) -> Retryable:
    """The Retryable for any ``httpx.RequestError`` of an attempt (the secret masked).

    A timeout, a connection that failed or broke off, and a reply body that
    cannot be decompressed (its ``Content-Encoding`` lies or it arrived
    damaged) are all faults of the transfer, not of the request: worth another try.
    """
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        return Retryable(f"timed out after {timeout:g}s ({type(exc).__name__})")
    if isinstance(exc, httpx.DecodingError):
        return Retryable(mask_secret(f"the reply body could not be decompressed: {exc}", secret))
    return Retryable(mask_secret(f"connection failed: {type(exc).__name__}: {exc}", secret))


def failure_for_status(response: httpx.Response, url: str, secret: str | None) -> Exception:
    """What a non-2xx reply means: a Retryable (408, 429, 5xx) or a ProviderError with its text."""
    status = response.status_code
    message = mask_secret(server_message(response), secret)
    if is_retryable_status(status):
        return Retryable(f"HTTP {status}: {message}", retry_after_seconds(response.headers))
    return ProviderError(f"{url} refused the request: HTTP {status}: {message}")


def request_content(body: Any) -> bytes:
    """A request body as strict UTF-8 JSON, whatever it holds (no NaN, no lone surrogate)."""
    return dumps(body, separators=(",", ":")).encode("utf-8")


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


def mask_secret(text: str, secret: str | None) -> str:
    """`text` with every occurrence of `secret` (an API key a server echoed) replaced by ``***``."""
    return text.replace(secret, "***") if secret else text


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
    """`url` without any ``user:password@`` part, for messages and logs."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))
