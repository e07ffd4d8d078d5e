"""Repairing broken JSON from a model, in time linear in its length.

Two ways, tried in order:

1. **Truncation** (the model ran out of output tokens mid-value), at any size:
   one regular-expression pass over the text finds the strings and brackets;
   the open string is closed, then the open arrays and objects, trying a
   fixed few cuts of the unfinished tail (a dangling comma, a key without
   its value, a half-written literal). Each try is one linear ``json.loads``.
   The last member is dropped only when it could be JSON cut short: a whole
   member in another syntax (``'text': 'abc'``, ``b: 2``) goes to 2.
2. **Anything else** (single quotes, comments, unquoted keys, Python
   literals): json-repair, which is quadratic on some inputs, so it is only
   given texts of at most `MAX_REPAIR_CHARS` characters. Longer texts that
   are not a truncation are refused with a message saying so.

The result always passes through the JSON boundary (its depth and number
limits apply).
"""

from __future__ import annotations

import re
from typing import Any

from nanobot_core._json_boundary import (
    MAX_ARGUMENT_VALUES,
    MAX_DEPTH,
    JSONLimitError,
    JSONSyntaxError,
    loads,
)

__all__ = ["MAX_REPAIR_CHARS", "repair"]

#: Broken JSON longer than this is repaired only when it is a truncation.
MAX_REPAIR_CHARS = 65_536

# A string (closed, or open up to the end of the text), a bracket, or a comma. The string is the
# unrolled loop with possessive repeats: it never backtracks, and its long runs are matched by a
# single character-class repeat.
_STRING_OPENED = r'"[^"\\]*+(?:\\.[^"\\]*+)*+'
_TOKEN = re.compile(_STRING_OPENED + r'(?P<closed>")?|[\[\]{},]', re.DOTALL)
_CLOSER = {"[": "]", "{": "}"}


def repair(
    text: str,
    *,
    keep_nonfinite: bool = False,
    written_numbers: bool = False,
    max_values: int = MAX_ARGUMENT_VALUES,
    unique_keys: bool = False,
) -> tuple[Any, str]:
    """(the value `text` most likely meant, what was done).

    Raises `JSONSyntaxError` when nothing sensible can be made of `text`, and
    `JSONLimitError` when it is too deep or too long to repair. The options
    are the JSON boundary's (`loads`); `max_values` defaults to the limit for
    tool arguments; with `unique_keys`, an object that gives a key twice is
    refused (`JSONRepeatedKeyError`), repaired or not. With `written_numbers`, a cut-off text
    keeps every number as the model wrote it; json-repair writes the numbers
    of what it repairs again, as Python's ``json`` writes them (``3.10`` as
    ``3.1``).
    """
    options: dict[str, Any] = {
        "keep_nonfinite": keep_nonfinite,
        "written_numbers": written_numbers,
        "max_values": max_values,
        "unique_keys": unique_keys,
    }
    truncated = _close_truncation(text, options)
    if truncated is not None:
        return truncated
    if len(text) > MAX_REPAIR_CHARS:
        raise JSONLimitError(
            f"broken JSON of {len(text)} characters that is not a cut-off value "
            f"(at most {MAX_REPAIR_CHARS} characters are repaired otherwise)"
        )
    import json_repair

    try:
        repaired = json_repair.repair_json(text, return_objects=False)
    except Exception as exc:  # json-repair is third-party code on hostile text
        reason = type(exc).__name__
        raise JSONSyntaxError(f"broken JSON that cannot be repaired ({reason})") from None
    if not isinstance(repaired, str) or repaired.strip() in ("", '""', "null"):
        raise JSONSyntaxError("text that is not JSON")
    return loads(repaired, **options).value, "repaired malformed JSON"


def _close_truncation(text: str, options: dict[str, Any]) -> tuple[Any, str] | None:
    """The value of `text` completed at its end, or None when `text` is not a cut-off value."""
    stack: list[str] = []
    # For each open container, where its last member began (just after "[", "{" or ",").
    starts: list[int] = []
    open_string = False
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token[0] == '"':
            open_string = match.group("closed") is None  # only the last token can be open
        elif token in "[{":
            stack.append(_CLOSER[token])
            starts.append(match.end())
            if len(stack) > MAX_DEPTH:
                raise JSONLimitError(f"nested deeper than {MAX_DEPTH} levels")
        elif token in "]}":
            if not stack or stack[-1] != token:
                return None  # a mismatched bracket: broken, not cut off
            stack.pop()
            starts.pop()
        elif token == "," and starts:
            starts[-1] = match.end()
    if not stack and not open_string:
        return None
    body = text
    if open_string:
        # A backslash at the very end would escape the closing quote.
        body = body[:-1] if _odd_backslashes_at_end(body) else body
        body += '"'
    closers = "".join(reversed(stack))
    stripped = body.rstrip()
    candidates = [stripped[:-1]] if stripped.endswith(",") else [stripped]
    if starts and _could_be_cut_json(text[starts[-1] :]):
        # Drop the unfinished member: back to where it began, and a comma before it.
        cut = text[: starts[-1]].rstrip()
        candidates.append(cut[:-1] if cut.endswith(",") else cut)
    for candidate in candidates:
        try:
            # The scan bounded the depth: every bracket of a candidate was on the stack.
            decoded = loads(candidate + closers, depth_checked=True, **options)
        except JSONSyntaxError:
            continue
        return decoded.value, "repaired malformed JSON"
    return None


# What a JSON member cut short holds outside its strings: a colon, a number's characters,
# the letters of true, false and null, whitespace, and the brackets and commas of the
# arrays and objects it holds.
_CUT_MEMBER_REST = frozenset(" \t\n\r:,[]{}0123456789+-.eEtruefalsn")
# A string, closed or open to the end (where an escape may be cut after its backslash).
_STRINGS = re.compile(_STRING_OPENED + r'(?:"|\\\Z)?', re.DOTALL)


def _could_be_cut_json(member: str) -> bool:
    """Whether `member`, the last member of a cut-off text, could be JSON cut short.

    Dropping it is right for ``"b": tr`` or ``"key"``; for ``'text': 'abc'`` (single
    quotes) or ``b: 2`` (a bare key) it would drop a whole member in silence, which
    json-repair then keeps.
    """
    return _CUT_MEMBER_REST.issuperset(_STRINGS.sub("", member))


def _odd_backslashes_at_end(text: str) -> bool:
    count = len(text) - len(text.rstrip("\\"))
    return count % 2 == 1
