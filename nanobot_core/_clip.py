"""Text from outside quoted in a message: cut to its head and tail, saying how much was cut.

A path, a pattern, a tool name or an argument comes from the model and may be of any
length. An error, a notice or a log line that quoted it whole would hand a megabyte back
to the model, and write it into the logs and the session: each quotes it through `clip`
(as it is) or `quoted` (its repr), which keep both ends (a path's folder and its file
name, where a name differs from the one meant) and say how many characters they left
out. `nanobot_core.governance.truncation.truncate_middle` cuts tool results the same way.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["MAX_QUOTED_CHARS", "a_type", "clip", "keep_ends", "quoted"]

#: Characters a value quoted in a message takes at most, the marker of what was cut included.
MAX_QUOTED_CHARS = 200


def keep_ends(text: str, limit: int, marker: Callable[[int], str]) -> str:
    """`text` cut to at most `limit` characters: head, ``marker(characters cut)``, tail.

    Text that fits is returned unchanged, so cutting is idempotent. A `limit` too small
    for the marker gives the head alone.
    """
    if len(text) <= limit:
        return text
    limit = max(0, limit)
    # The marker for all of the text is at least as long as the one finally shown.
    keep = limit - len(marker(len(text)))
    if keep <= 0:
        return text[:limit]
    tail = keep // 2
    head = keep - tail
    return text[:head] + marker(len(text) - keep) + text[len(text) - tail :]


def _omitted(count: int) -> str:
    return f"[... {count} characters omitted ...]"


def clip(text: str, limit: int = MAX_QUOTED_CHARS) -> str:
    """`text` whole when it fits in `limit` characters, else its head and tail on one line.

    ``aaaa[... 99920 characters omitted ...]aaaa``.
    """
    return keep_ends(text, limit, _omitted)


def quoted(value: object, limit: int = MAX_QUOTED_CHARS) -> str:
    """``repr(value)``, as a message quotes a value (a string, a JSON value), cut by `clip`."""
    return clip(repr(value), limit)


def a_type(value: object) -> str:
    """What `value` is, named by its type for a message: ``None``, ``a dict``, ``an int``.

    Never the value itself: its repr may be long, a secret, or code of its own.
    """
    if value is None:
        return "None"
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"
