"""When to retry a model request, and how long to wait: pure functions, no I/O.

Retried: HTTP 408, 429 and every 5xx (500-599), plus connection errors,
timeouts and reply bodies that cannot be decompressed.
The wait is the server's ``Retry-After`` (or OpenAI's ``retry-after-ms``)
when it sends one, else exponential backoff with jitter; either way never
more than the cap (``provider.retry_after_cap``).
"""

from __future__ import annotations

import email.utils
import random
from collections.abc import Mapping
from datetime import UTC, datetime

import attrs

__all__ = ["RetryPolicy", "is_retryable_status", "retry_after_seconds"]

_RNG = random.Random()


def is_retryable_status(status: int) -> bool:
    """Whether an HTTP status means "try again later" rather than "this request is wrong".

    408, 429 and 500-599; a status past 599 is no HTTP status, never one to wait out.
    """
    return status in (408, 429) or 500 <= status <= 599


def retry_after_seconds(headers: Mapping[str, str], *, now: datetime | None = None) -> float | None:
    """The wait the server asked for, in seconds, or None when it asked for nothing readable.

    Reads ``retry-after-ms`` (milliseconds), then ``Retry-After`` as seconds or
    as an HTTP date. A date in the past means "now" (0). A negative number is
    no wait RFC 9110 allows (a delay is non-negative): it is read as none, so the
    normal backoff applies rather than a retry at once.
    """
    lowered = {key.lower(): value.strip() for key, value in headers.items()}
    millis = _number(lowered.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    value = lowered.get("retry-after")
    if not value:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # HTTP dates are GMT, but be lenient about how they say it
        when = when.replace(tzinfo=UTC)
    current = now or datetime.now(UTC)
    return max(0.0, (when - current).total_seconds())


def _number(value: str | None) -> float | None:
    """A finite, non-negative number of `value`, or None (not a number, NaN, infinite, < 0)."""
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    if number != number or number in (float("inf"), float("-inf")):  # NaN or infinite
        return None
    if number < 0:  # RFC 9110: a delay is non-negative; a negative one says nothing usable
        return None
    return max(0.0, number)  # -0 as 0


@attrs.frozen
class RetryPolicy:
    """How many times to retry, and the base and cap of the waits (seconds)."""

    max_retries: int = 4
    backoff_base: float = 0.5
    cap: float = 60.0

    def delay(
        self, retry: int, server_wait: float | None, rng: random.Random | None = None
    ) -> float:
        """The wait before retry number `retry` (1 for the first retry).

        The server's wait is honoured exactly (up to the cap); otherwise the
        wait doubles with each retry and is jittered into its upper half, so
        clients that failed together do not come back together.
        """
        if server_wait is not None:
            return min(server_wait, self.cap)
        ceiling = min(self.backoff_base * 2.0 ** (retry - 1), self.cap)
        factor: float = (rng or _RNG).uniform(0.5, 1.0)
        return ceiling * factor
