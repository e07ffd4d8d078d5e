"""The `redact_secrets` governance stage: secrets out of the model's copy of the history.

The stage is pure. It never touches the list or the dicts it is given; a
message that contains a secret is copied (and within it only the content part
or tool call that changed), every other message is passed on as the same
object. The persisted history keeps the secrets; only the model copy loses them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from nanobot_redact.patterns import DEFAULT_PATTERNS, SecretPattern, redact_text

if TYPE_CHECKING:
    from nanobot_core.governance import StageContext, StageOutcome

__all__ = ["STAGE_NAME", "Finding", "make_stage_func", "redact_messages"]

STAGE_NAME = "redact_secrets"

#: Where a secret was found: (message index, field path, kind, count).
Finding = tuple[int, str, str, int]

Message = dict[str, Any]


def redact_messages(
    messages: Sequence[Message], patterns: Sequence[SecretPattern] = DEFAULT_PATTERNS
) -> tuple[list[Message], list[Finding]]:
    """Return the messages with secrets replaced, and what was found where."""
    result: list[Message] = []
    findings: list[Finding] = []
    for index, message in enumerate(messages):
        redacted, found = _redact_message(message, patterns)
        result.append(redacted)
        findings += [(index, field, kind, n) for field, kinds in found for kind, n in kinds.items()]
    return result, findings


def describe(finding: Finding) -> str:
    """One line of the governance report: which secret kind was removed, and where."""
    index, field, kind, count = finding
    times = f" ({count} times)" if count > 1 else ""
    return f"message {index} {field}: {kind} redacted{times}"


def make_stage_func(
    patterns: Sequence[SecretPattern] = DEFAULT_PATTERNS,
) -> Callable[[list[Message], StageContext], StageOutcome]:
    """The stage function, closed over the patterns chosen in config."""

    def redact_secrets(messages: list[Message], ctx: StageContext) -> StageOutcome:
        from nanobot_core.governance import StageOutcome

        redacted, findings = redact_messages(messages, patterns)
        if not findings:
            return StageOutcome(messages=messages, changed=False, details=[])
        return StageOutcome(
            messages=redacted, changed=True, details=[describe(f) for f in findings]
        )

    return redact_secrets


FieldFindings = list[tuple[str, Counter[str]]]


def _redact_message(
    message: Message, patterns: Sequence[SecretPattern]
) -> tuple[Message, FieldFindings]:
    if not isinstance(message, dict):
        return message, []
    found: FieldFindings = []
    updates: dict[str, Any] = {}
    content = message.get("content")
    if isinstance(content, str):
        text, kinds = redact_text(content, patterns)
        if kinds:
            updates["content"] = text
            found.append(("content", kinds))
    elif isinstance(content, list):
        parts = _redact_parts(content, patterns, found)
        if parts is not content:
            updates["content"] = parts
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        new_calls = _redact_calls(calls, patterns, found)
        if new_calls is not calls:
            updates["tool_calls"] = new_calls
    return ({**message, **updates} if updates else message), found


def _redact_parts(
    parts: list[Any], patterns: Sequence[SecretPattern], found: FieldFindings
) -> list[Any]:
    result = parts
    for position, part in enumerate(parts):
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            text, kinds = redact_text(part["text"], patterns)
            new_part: Any = {**part, "text": text}
            field = f"content[{position}].text"
        elif isinstance(part, str):
            text, kinds = redact_text(part, patterns)
            new_part, field = text, f"content[{position}]"
        else:
            continue
        if kinds:
            result = list(parts) if result is parts else result
            result[position] = new_part
            found.append((field, kinds))
    return result


def _redact_calls(
    calls: list[Any], patterns: Sequence[SecretPattern], found: FieldFindings
) -> list[Any]:
    result = calls
    for position, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        arguments, kinds = _redact_arguments(function.get("arguments"), patterns)
        if kinds:
            result = list(calls) if result is calls else result
            result[position] = {**call, "function": {**function, "arguments": arguments}}
            found.append((f"tool_calls[{position}].function.arguments", kinds))
    return result


def _redact_arguments(
    arguments: Any, patterns: Sequence[SecretPattern]
) -> tuple[Any, Counter[str]]:
    """Redact inside the decoded JSON when the arguments are JSON, so escapes do not hide secrets.

    A PEM key in a JSON string has its line breaks written as ``\\n``; matching
    the decoded value sees the real block. Arguments that are not JSON are
    redacted as plain text. The JSON is re-encoded only when something changed.
    """
    found: Counter[str] = Counter()
    if isinstance(arguments, dict):
        return _redact_json(arguments, patterns, found), found
    if not isinstance(arguments, str):
        return arguments, found
    try:
        decoded = json.loads(arguments)
    except ValueError:
        return redact_text(arguments, patterns)
    redacted = _redact_json(decoded, patterns, found)
    if not found:
        return arguments, found
    return json.dumps(redacted, ensure_ascii=False), found


def _redact_json(value: Any, patterns: Sequence[SecretPattern], found: Counter[str]) -> Any:
    if isinstance(value, str):
        text, kinds = redact_text(value, patterns)
        found.update(kinds)
        return text
    if isinstance(value, dict):
        return {key: _redact_json(item, patterns, found) for key, item in value.items()}
    if isinstance(value, list):
        return [_redact_json(item, patterns, found) for item in value]
    return value
