"""Small helpers over chat messages in the OpenAI shape, shared by the stages.

Nothing here mutates its arguments: a changed message is always a new dict
(`with_changes`), and every untouched dict and string is shared, never copied.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = [
    "KNOWN_ROLES",
    "SYSTEM_ROLES",
    "Message",
    "call_id",
    "call_name",
    "container_copy",
    "content_text",
    "leading_system_count",
    "result_tool_names",
    "role_of",
    "tool_calls_of",
    "tool_runs",
    "with_changes",
    "without_key",
]

Message = dict[str, Any]

SYSTEM_ROLES = frozenset({"system", "developer"})
KNOWN_ROLES = SYSTEM_ROLES | {"user", "assistant", "tool"}


def role_of(message: Any) -> Any:
    """The role of a message, or None for anything that is not a dict."""
    return message.get("role") if isinstance(message, dict) else None


def tool_calls_of(message: Any) -> list[Any]:
    """The tool calls of an assistant message as a list (empty when it has none or garbage)."""
    if role_of(message) != "assistant":
        return []
    calls = message.get("tool_calls")
    return calls if isinstance(calls, list) else []


def call_id(call: Any) -> str | None:
    """The id of a call when it is a non-empty string, else None."""
    value = call.get("id") if isinstance(call, dict) else None
    return value if isinstance(value, str) and value else None


def call_name(call: Any) -> str | None:
    """The function name of a call when it is a non-blank string, else None."""
    function = call.get("function") if isinstance(call, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) and name.strip() else None


def with_changes(message: Mapping[str, Any], **changes: Any) -> Message:
    """A new message dict: `message` with `changes` applied (unknown keys kept, in order)."""
    updated = dict(message)
    updated.update(changes)
    return updated


def without_key(message: Mapping[str, Any], key: str) -> Message:
    """A new message dict without `key`."""
    return {k: v for k, v in message.items() if k != key}


def content_text(content: Any) -> str | None:
    """The text of a content value: the string itself, or the joined text of text parts.

    None when the content holds anything else than text (images, files, ...),
    because such content cannot be cut or saved as text without losing it.
    """
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text"):
                return None
            text = part.get("text")
            if not isinstance(text, str):
                return None
            texts.append(text)
        return "".join(texts)
    return None


def tool_runs(messages: Sequence[Any]) -> Iterator[tuple[int, range]]:
    """(index of an assistant message with calls, range of the tool messages right after it)."""
    index = 0
    count = len(messages)
    while index < count:
        message = messages[index]
        index += 1
        if role_of(message) != "assistant" or not isinstance(message.get("tool_calls"), list):
            continue
        start = index
        while index < count and role_of(messages[index]) == "tool":
            index += 1
        yield start - 1, range(start, index)


def result_tool_names(messages: Sequence[Any]) -> dict[int, str]:
    """For every tool message in a run, the name of the call it answers (by message index)."""
    names: dict[int, str] = {}
    for assistant, run in tool_runs(messages):
        by_id = {}
        for call in messages[assistant]["tool_calls"]:
            identifier, name = call_id(call), call_name(call)
            if identifier and name and identifier not in by_id:
                by_id[identifier] = name
        for position in run:
            name = by_id.get(messages[position].get("tool_call_id"))
            if name:
                names[position] = name
    return names


def leading_system_count(messages: Sequence[Any]) -> int:
    """How many messages at the start are system (or developer) messages."""
    count = 0
    for message in messages:
        role = role_of(message)
        if not (isinstance(role, str) and role in SYSTEM_ROLES):
            break
        count += 1
    return count


def container_copy(value: Any) -> Any:
    """A copy of every dict and list inside `value`, sharing the (immutable) leaves.

    Cheaper than a deep copy: strings, the bulk of a history, are never
    duplicated. Used to hand an untrusted stage something it may mutate.
    """
    if isinstance(value, dict):
        return {key: container_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [container_copy(item) for item in value]
    return value


def preview(value: Any, limit: int = 60) -> str:
    """A short repr of `value` for the report."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
