"""The `redact_secrets` governance stage: secrets out of the model's copy of the history.

The stage works message by message: what it makes of a message depends on that
message alone (`redact_message`). It never touches the list or the dicts it is
given; a message that contains a secret is copied (and within it only the
part, block or call that changed), every other message is passed on as the
same object. The persisted history keeps the secrets; only the model copy
loses them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from nanobot_core import STRUCTURAL_KEYS

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
    """One message with its secrets replaced (the same object when it has none), and where.

    Every text in it is scanned, at any depth, except what is under the keys the
    pipeline pairs and names messages by (`STRUCTURAL_KEYS`) and the opaque
    values a provider checks (`_OPAQUE_KEYS`): the content and its parts, the
    reasoning (``reasoning_content``, thinking blocks), a ``refusal``, the
    arguments of every call (decoded first when they are JSON), and any other
    key a provider or an agent adds.
    """
    found: FieldFindings = []
    if not isinstance(message, dict):
        return message, found
    content = message.get("content")
    if type(content) is str and _CONTENT_AND_STRUCTURE.issuperset(message):
        # The commonest message, one text and its names: told at the cost of one scan.
        text, kinds = scanner.scan(content)
        if not kinds:
            return message, found
        found.append(("content", kinds))
        return {**message, "content": text}, found
    try:
        return _redact_dict(message, scanner, found, "", None), found
    except RecursionError:  # a value nested too deep to walk: kept as it is, the rest redacted
        found = []
        return _redact_dict(message, scanner, found, "", None, guarded=True), found


def _opaque_data(container: dict[Any, Any], parent: Any) -> bool:
    """Whether `container`'s ``data`` is an encoded payload (see `_OPAQUE_KEYS`), not text."""
    return container.get("type") in _OPAQUE_DATA or parent == "input_audio"


#: Keys whose value is no text anyone wrote: a provider's signature over a thinking
#: block, encrypted reasoning, a file's base64 (and ``data``, where `_opaque_data` says).
#: They are sent back as they came: changed, the provider refuses them, and scanning
#: base64 only finds look-alikes.
_OPAQUE_KEYS = frozenset(
    {"signature", "encrypted_content", "thought_signature", "thoughtSignature", "file_data"}
)
#: The types of a container whose ``data`` is base64: an image or document ``source``, a
#: ``redacted_thinking`` block (and the ``input_audio`` of an audio part).
_OPAQUE_DATA = frozenset({"base64", "redacted_thinking"})
#: Keys never scanned: what names and pairs messages, and image URLs, which `_redact_list`
#: handles whole (cutting a secret out of a URL would leave an image that does not load).
_SKIPPED = STRUCTURAL_KEYS | {"image_url"}
_CONTENT_AND_STRUCTURE = STRUCTURAL_KEYS | {"content"}
# A call of the usual shape: its one text is its arguments (see the core's `_call_texts`).
_CALL_KEYS = STRUCTURAL_KEYS | {"function"}
_FUNCTION_KEYS = STRUCTURAL_KEYS | {"arguments"}
#: Keys whose string value is not scanned as it is: opaque, or arguments (decoded first).
_SPECIAL = _OPAQUE_KEYS | {"data", "arguments"}


def _redact_dict(
    value: dict[Any, Any],
    scanner: Scanner,
    found: FieldFindings,
    path: str,
    parent: Any,
    guarded: bool = False,
) -> dict[Any, Any]:
    """`value` with the secrets of its texts replaced (itself when none), found noted by path.

    With `guarded`, a nested value too deep to walk is kept as it is.
    """
    result = value
    for key, item in value.items():
        if key in _SKIPPED:
            continue
        new: Any
        if isinstance(item, str):
            if key not in _SPECIAL:  # the common case: one test
                new, kinds = scanner.scan(item)
            elif key == "arguments":
                new, kinds = _redact_arguments(item, scanner)
            elif key in _OPAQUE_KEYS or _opaque_data(value, parent):
                continue
            else:
                new, kinds = scanner.scan(item)
            if not kinds:
                continue
            found.append((f"{path}.{key}" if path else str(key), kinds))
        elif isinstance(item, dict | list):
            where = f"{path}.{key}" if path else str(key)
            try:
                if key == "arguments" and isinstance(item, dict):
                    new, kinds = _redact_arguments(item, scanner)
                    if kinds:
                        found.append((where, kinds))
                elif isinstance(item, dict):
                    new = _redact_dict(item, scanner, found, where, key)
                elif key == "tool_calls":
                    new = _redact_calls(item, scanner, found, where)
                else:
                    new = _redact_list(item, scanner, found, where, key)
            except RecursionError:
                if not guarded:
                    raise
                continue
            if new is item:
                continue
        else:
            continue
        result = dict(value) if result is value else result
        result[key] = new
    if result is not value and value.get("type") == "thinking" and "signature" in result:
        # The signature covers the text as the provider wrote it: sent with another
        # text it is refused on every later call. Unsigned, the block is left out.
        del result["signature"]
    return result


def _redact_calls(calls: list[Any], scanner: Scanner, found: FieldFindings, path: str) -> list[Any]:
    """`_redact_list` of tool calls: a call of the usual shape costs what its arguments do."""
    result = calls
    for position, call in enumerate(calls):
        function = call.get("function") if type(call) is dict else None
        if (
            type(function) is dict
            and _CALL_KEYS.issuperset(call)
            and _FUNCTION_KEYS.issuperset(function)
        ):
            arguments, kinds = _redact_arguments(function.get("arguments"), scanner)
            if not kinds:
                continue
            new = {**call, "function": {**function, "arguments": arguments}}
            found.append((f"{path}[{position}].function.arguments", kinds))
        else:
            new = _redact_item(call, scanner, found, f"{path}[{position}]", "tool_calls")
        if new is not call:
            result = list(calls) if result is calls else result
            result[position] = new
    return result


def _redact_list(
    items: list[Any], scanner: Scanner, found: FieldFindings, path: str, parent: Any
) -> list[Any]:
    result = items
    for position, item in enumerate(items):
        new = _redact_item(item, scanner, found, f"{path}[{position}]", parent)
        if new is not item:
            result = list(items) if result is items else result
            result[position] = new
    return result


def _redact_item(item: Any, scanner: Scanner, found: FieldFindings, where: str, parent: Any) -> Any:
    """An item of a list with its secrets replaced (itself when none); an image part whose URL
    holds one becomes a text part."""
    if isinstance(item, str):
        new, kinds = scanner.scan(item)
        if kinds:
            found.append((where, kinds))
        return new
    if isinstance(item, dict):
        if scanner.images and (image := image_url_of(item)):
            url, field = image
            part, kinds = redact_image_part(item, url, scanner)
            if kinds:  # replaced whole: nothing else in the part is sent
                found.append((f"{where}.{field}", kinds))
                return part
        return _redact_dict(item, scanner, found, where, parent)
    if isinstance(item, list):
        return _redact_list(item, scanner, found, where, parent)
    return item


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
