"""The `redact_secrets` governance stage: secrets out of the model's copy of the history.

The stage works message by message: what it makes of a message depends on that
message alone (`redact_message`). It never touches the list or the dicts it is
given; a message that contains a secret is copied (and within it only the
content part or tool call that changed), every other message is passed on as
the same object. The persisted history keeps the secrets; only the model copy
loses them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from nanobot_redact.images import image_url_of, redact_image_part
from nanobot_redact.patterns import DEFAULT_PATTERNS, SecretPattern
from nanobot_redact.scanner import Scanner, scanner_for

if TYPE_CHECKING:
    from nanobot_core import StageContext, StageOutcome

__all__ = [
    "STAGE_NAME",
    "FieldFindings",
    "Finding",
    "describe",
    "make_stage_func",
    "redact_message",
    "redact_messages",
]

STAGE_NAME = "redact_secrets"

#: Where a secret was found: (message index, field path, kind, count).
Finding = tuple[int, str, str, int]
#: What one message held: (field path, count per kind), in field order.
FieldFindings = list[tuple[str, Counter[str]]]

Message = dict[str, Any]


def redact_messages(
    messages: Sequence[Message], patterns: Sequence[SecretPattern] | Scanner = DEFAULT_PATTERNS
) -> tuple[list[Message], list[Finding]]:
    """Return the messages with secrets replaced, and what was found where."""
    return _redact_all(messages, scanner_for(patterns))


def _redact_all(
    messages: Sequence[Message], scanner: Scanner
) -> tuple[list[Message], list[Finding]]:
    result: list[Message] = []
    findings: list[Finding] = []
    for index, message in enumerate(messages):
        redacted, found = redact_message(message, scanner)
        result.append(redacted)
        if found:
            findings += _numbered(index, found)
    return result, findings


def _numbered(index: int, found: FieldFindings) -> list[Finding]:
    return [(index, field, kind, n) for field, kinds in found for kind, n in kinds.items()]


def describe(finding: Finding) -> str:
    """One line of the governance report: which secret kind was removed, and where."""
    index, field, kind, count = finding
    times = f" ({count} times)" if count > 1 else ""
    return f"messages[{index}] {field}: {kind} redacted{times}"


def make_stage_func(
    patterns: Sequence[SecretPattern] | Scanner = DEFAULT_PATTERNS,
) -> Callable[[list[Message], StageContext], StageOutcome]:
    """The stage function, closed over the patterns chosen in config."""
    # Imported here, not per call: a per-message stage is called once a message.
    from nanobot_core import StageOutcome as Outcome

    scanner = scanner_for(patterns)

    def redact_secrets(messages: list[Message], ctx: StageContext) -> StageOutcome:
        if len(messages) == 1:  # as a governor hands a per-message stage its work
            message, found = redact_message(messages[0], scanner)
            if not found:
                return Outcome(messages)  # positional: the cheapest way to build it
            redacted, findings = [message], _numbered(0, found)
        else:
            redacted, findings = _redact_all(messages, scanner)
            if not findings:
                return Outcome(messages)
        return Outcome(redacted, True, [describe(f) for f in findings])

    return redact_secrets


def redact_message(message: Any, scanner: Scanner) -> tuple[Any, FieldFindings]:
    """One message with its secrets replaced (the same object when it has none), and where."""
    found: FieldFindings = []
    if not isinstance(message, dict):
        return message, found
    content = message.get("content")
    calls = message.get("tool_calls")
    if isinstance(content, str):
        text, kinds = scanner.scan(content)
        if kinds:
            content = text
            found.append(("content", kinds))
    elif isinstance(content, list):
        content = _redact_parts(content, scanner, found)
    if isinstance(calls, list) and calls:
        calls = _redact_calls(calls, scanner, found)
    if not found:  # the common case: nothing copied, nothing changed
        return message, found
    updates: dict[str, Any] = {}
    if content is not message.get("content"):
        updates["content"] = content
    if calls is not message.get("tool_calls"):
        updates["tool_calls"] = calls
    return {**message, **updates}, found


def _redact_parts(parts: list[Any], scanner: Scanner, found: FieldFindings) -> list[Any]:
    result = parts
    for position, part in enumerate(parts):
        new_part: Any
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            text, kinds = scanner.scan(part["text"])
            new_part, field = {**part, "text": text}, f"content[{position}].text"
        elif isinstance(part, str):
            text, kinds = scanner.scan(part)
            new_part, field = text, f"content[{position}]"
        elif scanner.images and isinstance(part, dict) and (image := image_url_of(part)):
            url, path = image
            new_part, kinds = redact_image_part(part, url, scanner)
            field = f"content[{position}].{path}"
        else:
            continue
        if kinds:
            result = list(parts) if result is parts else result
            result[position] = new_part
            found.append((field, kinds))
    return result


def _redact_calls(calls: list[Any], scanner: Scanner, found: FieldFindings) -> list[Any]:
    result = calls
    for position, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        arguments, kinds = _redact_arguments(function.get("arguments"), scanner)
        if kinds:
            result = list(calls) if result is calls else result
            result[position] = {**call, "function": {**function, "arguments": arguments}}
            found.append((f"tool_calls[{position}].function.arguments", kinds))
    return result


def _redact_arguments(arguments: Any, scanner: Scanner) -> tuple[Any, Counter[str] | None]:
    """Redact inside the decoded JSON when the arguments are JSON, so escapes do not hide secrets.

    A PEM key in a JSON string has its line breaks written as ``\\n``; matching
    the decoded value sees the real block. Arguments that are not JSON (or nest
    too deep to walk) are redacted as plain text. The JSON is re-encoded only
    when something changed. None (or an empty count) means nothing was found.
    """
    if isinstance(arguments, str) and "\\" not in arguments and not scanner.could_match(arguments):
        # Without escapes every decoded string is a piece of the raw text, so a raw
        # text that no rule can match holds no secret: no need to decode it.
        return arguments, None
    found: Counter[str] = Counter()
    if isinstance(arguments, dict):
        try:
            return _redact_json(arguments, scanner, found), found
        except RecursionError:
            return arguments, Counter()
    if not isinstance(arguments, str):
        return arguments, found
    try:
        redacted = _redact_json(json.loads(arguments), scanner, found)
    except (ValueError, RecursionError):
        return scanner.redact(arguments)
    if not found:
        return arguments, found
    encoded = json.dumps(redacted, ensure_ascii=False)
    try:
        encoded.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, escaped in the input: keep it escaped
        encoded = json.dumps(redacted)
    return encoded, found


def _redact_key(
    key: Any, keys: dict[Any, Any], taken: dict[Any, Any], scanner: Scanner, found: Counter[str]
) -> Any:
    """An object key with its secrets replaced, made unique among `keys` and those `taken`.

    Two keys that hold secrets of one kind become the same marker; a number is
    appended to the later ones so that no entry of the object is lost.
    """
    if not isinstance(key, str):
        return key
    text, kinds = scanner.scan(key)
    if not kinds:
        return key
    found.update(kinds)
    unique, number = text, 1
    while unique in taken or unique in keys:
        number += 1
        unique = f"{text} ({number})"
    return unique


def _redact_json(value: Any, scanner: Scanner, found: Counter[str]) -> Any:
    if isinstance(value, str):
        text, kinds = scanner.scan(value)
        if kinds:
            found.update(kinds)
        return text
    if isinstance(value, dict):
        result: dict[Any, Any] = {}
        for key, item in value.items():
            result[_redact_key(key, value, result, scanner, found)] = _redact_json(
                item, scanner, found
            )
        return result
    if isinstance(value, list):
        return [_redact_json(item, scanner, found) for item in value]
    return value
