"""`sanitize_content`: text every provider can encode, and no empty tool result.

- A lone surrogate (half of a split emoji, a bad decoder) cannot be encoded
  as UTF-8, so the request cannot even be sent: surrogate pairs are joined
  into the character they stand for, lone ones become U+FFFD, and the report
  says which of the two was done. Every string of the message is checked,
  keys the pipeline does not know included.
- Content that is neither a string, a list of part objects nor null becomes
  JSON text; inside a part list, a string becomes a text part and null is
  dropped.
- An empty tool result (missing, null, blank text or no parts) reads
  "(no output)": several providers reject empty tool content, Anthropic
  whitespace-only text.
- A tool result that names its call in SWE-agent's ``tool_call_ids`` list
  gets OpenAI's ``tool_call_id`` instead (the list is removed), the link the
  earlier stages followed (`result_call_id`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from nanobot_core._json_boundary import surrogates_fixed
from nanobot_core._json_boundary import without_lone_surrogates as without_surrogates
from nanobot_core.governance.checks import NO_OUTPUT, is_empty_result
from nanobot_core.governance.messages import (
    Message,
    preview,
    result_call_id,
    with_changes,
    without_key,
)
from nanobot_core.governance.stage import StageOutcome
from nanobot_core.governance.survey import Defect

if TYPE_CHECKING:
    from nanobot_core.governance.stage import StageContext

__all__ = ["sanitize_content", "without_surrogates"]


# The notes of `sanitize_content` for what it did to a message's surrogates.
_LONE_REPLACED = "lone surrogates (not encodable in UTF-8) replaced with U+FFFD"
_PAIRS_JOINED = "surrogate pairs held as two code points joined into the characters they encode"


def _clean(value: Any, seen: set[str]) -> Any:
    """`value` with every string cleaned; the same object when nothing changed.

    Adds to `seen` the note for each kind of fix made (`_LONE_REPLACED`, `_PAIRS_JOINED`).
    """
    if isinstance(value, str):
        fixed = without_surrogates(value)
        joined, lone = surrogates_fixed(value, fixed)
        if joined:
            seen.add(_PAIRS_JOINED)
        if lone:
            seen.add(_LONE_REPLACED)
        return fixed
    if isinstance(value, dict):
        cleaned = {
            _clean(k, seen) if isinstance(k, str) else k: _clean(v, seen) for k, v in value.items()
        }
        same = all(
            a is b and x is y for (a, x), (b, y) in zip(value.items(), cleaned.items(), strict=True)
        )
        return value if same and len(cleaned) == len(value) else cleaned
    if isinstance(value, list):
        items = [_clean(item, seen) for item in value]
        return value if all(a is b for a, b in zip(value, items, strict=True)) else items
    return value


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _fixed_content(content: Any) -> tuple[Any, str | None]:
    """Content of a type providers accept, and what was changed."""
    if content is None or isinstance(content, str):
        return content, None
    if not isinstance(content, list):
        return _as_text(content), f"content (a {type(content).__name__}) converted to JSON text"
    if all(isinstance(part, dict) for part in content):
        return content, None
    parts = [
        part if isinstance(part, dict) else {"type": "text", "text": _as_text(part)}
        for part in content
        if part is not None
    ]
    return parts, "content parts that were not objects turned into text parts"


def _sanitized(index: int, message: Message, dirty: bool) -> tuple[Message, list[str]]:
    notes: list[str] = []
    if dirty:
        seen: set[str] = set()
        message = _clean(message, seen)
        notes += [note for note in (_LONE_REPLACED, _PAIRS_JOINED) if note in seen]
    content, note = _fixed_content(message.get("content"))
    if note:
        message = with_changes(message, content=content)
        notes.append(note)
    if message.get("role") == "tool" and is_empty_result(message):
        notes.append(f"empty tool result ({preview(message.get('content'))}) set to {NO_OUTPUT!r}")
        message = with_changes(message, content=NO_OUTPUT)
    if message.get("role") == "tool" and "tool_call_ids" in message:
        link = result_call_id(message)
        message = without_key(message, "tool_call_ids")
        if link is not None and link != message.get("tool_call_id"):
            message = with_changes(message, tool_call_id=link)
            notes.append(f"tool_call_ids [{link!r}] given as tool_call_id")
        else:
            notes.append("tool_call_ids removed (tool_call_id names the call)")
    return message, [f"messages[{index}]: {note}" for note in notes]


def sanitize_content(messages: list[Any], ctx: StageContext) -> StageOutcome:
    """Replace lone surrogates, fix content types, fill empty tool results."""
    if not ctx.survey(messages).has(Defect.DIRTY_TEXT | Defect.EMPTY_RESULTS | Defect.RESULT_LINK):
        return StageOutcome.unchanged(messages)
    result: list[Any] = []
    details: list[str] = []
    for index, message in enumerate(messages):
        if isinstance(message, dict):
            _, dirty = ctx.facts.facts(message)
            message, notes = _sanitized(index, message, dirty)
            details += notes
        result.append(message)
    if not details:
        return StageOutcome.unchanged(messages)
    return StageOutcome(result, changed=True, details=details)
