"""Turning whatever a call's ``arguments`` hold into a JSON object encoded as a string.

Providers reject a history whose arguments are an object instead of a string,
truncated JSON, or JSON that is not an object. Broken JSON is repaired in
linear time (`nanobot_core._json_repair`, the same repair tool calls get);
what cannot become an object is replaced by ``{}``, as are arguments outside the limits
governance reads them within (`decode_arguments`: too many values, or nested deeper than
500 levels, on every Python version). Every change is described for the report.
"""

from __future__ import annotations

import json
from typing import Any

from nanobot_core._json_boundary import JSONLimitError
from nanobot_core.governance.checks import arguments_ok, decode_arguments
from nanobot_core.governance.messages import preview

__all__ = ["normalise_arguments"]

EMPTY_OBJECT = "{}"


def _encode(value: dict[str, Any]) -> str | None:
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None


def _repaired(text: str) -> tuple[str, str]:
    """What arguments `text`, which is not JSON, become: repaired when that makes an object."""
    from nanobot_core._json_repair import repair

    try:
        repaired = repair(text)[0]
    except ValueError:
        repaired = None
    if isinstance(repaired, dict):
        encoded = _encode(repaired)
        if encoded is not None:
            return encoded, f"broken JSON arguments {preview(text)} repaired"
    return EMPTY_OBJECT, f"arguments {preview(text)} are not a JSON object: replaced with {{}}"


def _from_text(text: str) -> tuple[str, str]:
    if not text.strip():
        return EMPTY_OBJECT, "empty arguments replaced with {}"
    try:
        decoded = decode_arguments(text)
    except JSONLimitError as exc:
        return EMPTY_OBJECT, f"arguments {preview(text)} hold {exc}: replaced with {{}}"
    except ValueError:
        return _repaired(text)
    if isinstance(decoded, str) and arguments_ok(decoded):
        return decoded, "double-encoded JSON arguments decoded once"
    if decoded is None:
        return EMPTY_OBJECT, "null arguments replaced with {}"
    kind = type(decoded).__name__
    return (
        EMPTY_OBJECT,
        f"arguments were JSON {kind} {preview(text)}, not an object: replaced with {{}}",
    )


def normalise_arguments(value: Any) -> tuple[str, str | None]:
    """(arguments as a JSON-object string, what was done or None when `value` was fine)."""
    if arguments_ok(value):
        return value, None
    if isinstance(value, str):
        return _from_text(value)
    if value is None:
        return EMPTY_OBJECT, "missing arguments replaced with {}"
    if isinstance(value, dict):
        encoded = _encode(value)
        if encoded is not None:
            return encoded, "object arguments encoded as a JSON string"
        return EMPTY_OBJECT, "object arguments could not be encoded as JSON: replaced with {}"
    return (
        EMPTY_OBJECT,
        f"arguments were a {type(value).__name__} {preview(value)}: replaced with {{}}",
    )
