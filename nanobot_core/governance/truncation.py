"""Cutting text down to a size while keeping its head and its tail.

The start of a tool result says what it is, the end holds the summary or the
error: both are kept, and a marker in the middle says how much was left out.
Truncating text that already fits returns it unchanged, so truncation is
idempotent. The cut is `nanobot_core._clip.keep_ends`, the one that messages
quoting a long value use too.
"""

from __future__ import annotations

from nanobot_core._clip import keep_ends
from nanobot_core.governance.tokens import TokenCounter

__all__ = ["fit_to_tokens", "truncate_middle"]


def _marker(omitted: int, label: str) -> str:
    return f"\n[... {omitted} characters {label} ...]\n"


def truncate_middle(text: str, limit: int, label: str = "omitted") -> str:
    """`text` cut to at most `limit` characters: head, a marker saying what was cut, tail."""
    return keep_ends(text, limit, lambda omitted: _marker(omitted, label))


def fit_to_tokens(text: str, max_tokens: int, counter: TokenCounter, label: str = "omitted") -> str:
    """`text` truncated head and tail until `counter` counts at most `max_tokens` for it."""
    tokens = counter.count_text(text)
    if tokens <= max_tokens:
        return text
    if max_tokens <= 0:
        return ""
    chars = len(text) * max_tokens // tokens
    while chars > 0:
        candidate = truncate_middle(text, chars, label)
        counted = counter.count_text(candidate)
        if counted <= max_tokens:
            return candidate
        chars = min(chars - 1, chars * max_tokens // counted)
    return ""
