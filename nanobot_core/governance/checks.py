"""Predicates over single messages and calls, shared by the survey and the stages.

They answer "is there anything to repair here?" without allocating, which is
what keeps governing a clean history cheap.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nanobot_core._json_boundary import (
    MAX_ARGUMENT_VALUES,
    MAX_ENCODED_DEPTH,
    JSONLimitError,
    check_values,
    nests_past,
    past_encoded_depth,
)
from nanobot_core.governance.messages import call_name, content_text

__all__ = [
    "NO_OUTPUT",
    "arguments_ok",
    "decode_arguments",
    "has_lone_surrogate",
    "has_named_call",
    "is_blank_content",
    "is_empty_result",
    "is_placeholder_message",
    "is_placeholder_text",
]

#: What an empty tool result reads as once sanitized.
NO_OUTPUT = "(no output)"

_SURROGATE = re.compile("[\ud800-\udfff]")

# The texts agents leave behind for a message they elided, e.g. nanobot's
# "[Previous assistant message omitted.]": brackets around (previous) (assistant)
# message|response|reply + omitted|removed|elided|truncated|hidden.
_PLACEHOLDER = re.compile(
    r"\[(?:(?:previous|earlier|prior)\s+)?(?:assistant\s+)?"
    r"(?:message|response|reply|turn|output|content)s?\s+"
    r"(?:omitted|removed|elided|truncated|hidden|redacted)(?:\s+for\s+brevity)?\.?\]"
    r"|\[(?:omitted|elided)\.?\]",
    re.IGNORECASE,
)
_PLACEHOLDER_MAX_CHARS = 80
#: Texts longer than this (whitespace included) are never taken for placeholders.
_PLACEHOLDER_SCAN_CHARS = 400


def has_lone_surrogate(text: str) -> bool:
    """Whether `text` holds a surrogate code point (which UTF-8 cannot encode)."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def is_placeholder_text(text: str, extra: Iterable[str] = ()) -> bool:
    """Whether `text` is only a placeholder for an elided message."""
    if len(text) > _PLACEHOLDER_SCAN_CHARS:
        return False
    stripped = text.strip()
    if not stripped or len(stripped) > _PLACEHOLDER_MAX_CHARS:
        return False
    if _PLACEHOLDER.fullmatch(stripped):
        return True
    return any(stripped == pattern.strip() for pattern in extra)


def has_named_call(message: Mapping[str, Any]) -> bool:
    """Whether an assistant message holds at least one call that names its function."""
    calls = message.get("tool_calls")
    return isinstance(calls, list) and any(call_name(call) for call in calls)


def _text_as_sanitized(content: Any) -> str | None:
    """The text of `content` as it reads once `sanitize_content` has fixed its parts.

    That stage drops null parts and turns bare strings into text parts, so a
    placeholder hidden among them is one already: it is found in the same run,
    not only when the history is governed again.
    """
    if type(content) is list and any(part is None or type(part) is str for part in content):
        content = [
            {"type": "text", "text": part} if type(part) is str else part
            for part in content
            if part is not None
        ]
    return content_text(content)


def is_placeholder_message(message: Any, extra: Iterable[str] = ()) -> bool:
    """An assistant message that only says a placeholder and makes no (usable) tool call."""
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return False
    text = _text_as_sanitized(message.get("content"))
    if text is None or not is_placeholder_text(text, extra):
        return False
    return not has_named_call(message)


def is_blank_content(content: Any) -> bool:
    """Whether content says nothing: null, blank text, or parts that are all blank text.

    Blank: empty or whitespace only (Anthropic refuses whitespace-only text,
    others refuse empty tool content). `str.isspace` stops at the first other
    character, so a real result costs one character.
    """
    if content is None:
        return True
    if type(content) is str:
        return not content or content.isspace()
    if type(content) is not list:
        return False
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text":
            return False
        text = part.get("text")
        if not isinstance(text, str) or not (not text or text.isspace()):
            return False
    return True


def is_empty_result(message: Mapping[str, Any]) -> bool:
    """Whether a tool message carries no output (missing, null, blank text or no parts)."""
    return is_blank_content(message.get("content"))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# Built once: json.loads with any option builds a new decoder on every call, which costs
# more than decoding a short arguments string does.
_STRICT = json.JSONDecoder(parse_constant=_reject_constant)
_LENIENT = json.JSONDecoder()


# The decoder's scanner, called directly for a string that opens an object: it skips
# `decode`'s two whitespace matches and its extra-data check, which is most of the
# cost of a short arguments string. Only JSON whitespace may follow the object.
_SCAN_ONCE: Callable[[str, int], tuple[Any, int]] = _STRICT.scan_once  # type: ignore[attr-defined]
_JSON_WHITESPACE = " \t\n\r"

_TOO_DEEP = f"arrays or objects nested deeper than {MAX_ENCODED_DEPTH} levels"


def decode_arguments(arguments: str, *, strict: bool = True) -> Any:
    """The value a call's `arguments` text holds, decoded within governance's limits.

    Raises `JSONLimitError` (its message reads after "arguments hold") for more
    than `MAX_ARGUMENT_VALUES` values or arrays and objects nested deeper than
    `MAX_ENCODED_DEPTH` levels, and ValueError for text that is not JSON (with
    `strict`, ``NaN`` and ``Infinity`` are not). Text that nests past the depth
    before a syntax error is refused for depth, whatever follows. The one rule
    governance reads arguments by, the same on every Python version: the standard
    library's parser gives up at a depth that depends on the version (about 1,000
    levels on 3.11, 1,500 on 3.12, 10,000 on 3.13), and that must not decide.
    """
    check_values(arguments, MAX_ARGUMENT_VALUES)
    try:
        value = (_STRICT if strict else _LENIENT).decode(arguments)
    except RecursionError:  # the parser reached the recursion limit: past 500 levels
        raise JSONLimitError(_TOO_DEEP) from None
    except json.JSONDecodeError as exc:
        if nests_past(arguments[: exc.pos], MAX_ENCODED_DEPTH):
            raise JSONLimitError(_TOO_DEEP) from None
        raise
    if past_encoded_depth(arguments, value):
        raise JSONLimitError(_TOO_DEEP)
    return value


def arguments_ok(arguments: Any) -> bool:
    """Whether `arguments` is a string holding a strict JSON object (no NaN or Infinity).

    Whether `decode_arguments` decodes it into a dict, without the cost of its
    exceptions: arguments of more than `MAX_ARGUMENT_VALUES` values, or nested deeper
    than `MAX_ENCODED_DEPTH` levels, are never decoded.
    """
    if type(arguments) is not str:
        return False
    try:
        # `check_values`'s own first test, inline: most arguments are shorter.
        if len(arguments) >= MAX_ARGUMENT_VALUES:
            check_values(arguments, MAX_ARGUMENT_VALUES)
        if arguments[:1] == "{":
            value, end = _SCAN_ONCE(arguments, 0)
            if end != len(arguments) and arguments[end:].strip(_JSON_WHITESPACE):
                return False
        elif not isinstance(value := _STRICT.decode(arguments), dict):
            return False
    # RecursionError: the parser reached the recursion limit, past `MAX_ENCODED_DEPTH` levels.
    except (ValueError, RecursionError, StopIteration):
        return False
    # `past_encoded_depth`'s own first test, inline: most arguments are shorter.
    return len(arguments) <= MAX_ENCODED_DEPTH or not past_encoded_depth(arguments, value)
