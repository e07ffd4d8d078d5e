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
import re
from collections.abc import Mapping
from datetime import UTC, datetime

import attrs

__all__ = [
    "HTTP_STATUSES",
    "SERVER_ERRORS",
    "RetryPolicy",
    "is_retryable_status",
    "retry_after_seconds",
]

_RNG = random.Random()

#: The statuses HTTP defines (RFC 9110 section 15), 100 to 599: h11 reads any three digits,
#: so a server that does not speak HTTP may answer 600 or 999. Every provider reads its
#: bounds here.
HTTP_STATUSES = range(100, 600)
#: The server errors (5xx), 500 to 599: each is retried.
SERVER_ERRORS = range(500, 600)


def is_retryable_status(status: int) -> bool:
    """Whether an HTTP status means "try again later" rather than "this request is wrong".

    408, 429 and `SERVER_ERRORS`; a status past 599 is no HTTP status, never one to wait out.
    """
    return status in (408, 429) or status in SERVER_ERRORS


def retry_after_seconds(headers: Mapping[str, str], *, now: datetime | None = None) -> float | None:
    """The wait the server asked for, in seconds, or None when it asked for nothing readable.

    Reads ``retry-after-ms`` (milliseconds: digits, a fraction allowed), then
    ``Retry-After`` as RFC 9110 writes it: delay-seconds (ASCII digits only, the spaces
    and tabs around a field value not part of it) or an HTTP date. A date in the past
    means "now" (0). Anything else (``+5``, ``-3``, ``5.5``, ``1e3``, ``0x10``) is no
    wait RFC 9110 allows: it is read as none, so the normal backoff applies rather than
    a wait the server did not ask for. A number of more than 15 digits is read as 10**15
    seconds (more than any cap), so one of a million digits costs one pass over them.
    """
    lowered = {key.lower(): value.strip(_OWS) for key, value in headers.items()}
    millis = _number(lowered.get("retry-after-ms"), _MILLISECONDS)
    if millis is not None:
        return millis / 1000
    value = lowered.get("retry-after")
    if not value:
        return None
    seconds = _number(value, _DELAY_SECONDS)
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


#: The spaces and tabs around a field value, which are not part of it (RFC 9110 section 5.5).
_OWS = " \t"
#: delay-seconds (RFC 9110 section 10.2.3): ``1*DIGIT``, ASCII digits only (``str.isdigit``
#: and ``float`` take other scripts' digits, signs, exponents and ``_`` too).
_DELAY_SECONDS = re.compile(r"[0-9]+")
#: OpenAI's ``retry-after-ms``, which no RFC defines: digits, with a fraction or not.
_MILLISECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")
#: The wait read for a number of more digits than `_SIGNIFICANT_DIGITS` (some 31 million
#: years): more than any cap, so the cap is waited and the wait said, as for any past it.
_LONGEST_READ_WAIT = 1e15
_SIGNIFICANT_DIGITS = 15


def _number(value: str | None, form: re.Pattern[str]) -> float | None:
    """`value` as a number when it is written as `form` allows, else None; read in time
    linear in its length, a number past `_SIGNIFICANT_DIGITS` digits as `_LONGEST_READ_WAIT`."""
    if value is None or form.fullmatch(value) is None:
        return None
    whole = value.partition(".")[0].lstrip("0")
    if len(whole) > _SIGNIFICANT_DIGITS:
        return _LONGEST_READ_WAIT
    return float(value)


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
