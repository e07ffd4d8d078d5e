"""The adapter for Anthropic-style histories: content blocks ``tool_use`` and ``tool_result``.

The stages speak the OpenAI shape. A history that holds Anthropic tool blocks
is converted to it (an assistant's ``tool_use`` blocks become ``tool_calls``
with the input encoded as arguments, a user message's ``tool_result`` blocks
become ``tool`` messages in front of what else the message said), governed,
and converted back (results merged into the user message that follows them).
Other blocks (text, images, thinking with its signature) travel as content
parts and come back untouched; block keys the adapter does not know are kept
aside and restored. A history the governor leaves unchanged is returned as
the very input, so a clean Anthropic history is never rebuilt.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import Any

from nanobot_core.governance.messages import Message

__all__ = ["from_openai_shape", "is_anthropic_shape", "to_openai_shape"]

_TOOL_BLOCKS = frozenset({"tool_use", "tool_result"})
# Where the keys of a block the OpenAI shape has no place for wait for the way back.
_EXTRA = "_anthropic_block"
_USE_KEYS = frozenset({"type", "id", "name", "input"})
_RESULT_KEYS = frozenset({"type", "tool_use_id", "content"})


def _tool_blocks(message: Any) -> bool:
    content = message.get("content") if type(message) is dict else None
    return type(content) is list and any(
        type(block) is dict and _kind(block) in _TOOL_BLOCKS for block in content
    )


def is_anthropic_shape(messages: Sequence[Any]) -> bool:
    """Whether any message holds an Anthropic ``tool_use`` or ``tool_result`` block."""
    for message in messages:  # a plain loop: this runs on every history, clean or not
        if type(message) is dict and type(message.get("content")) is list and _tool_blocks(message):
            return True
    return False


def _extras(block: dict[str, Any], known: frozenset[str]) -> dict[str, Any]:
    extra = {k: v for k, v in block.items() if k not in known}
    return {_EXTRA: extra} if extra else {}


def _call(block: dict[str, Any]) -> Message:
    arguments = block.get("input")
    if isinstance(arguments, dict):
        # Left as it is when it cannot be encoded: strip_malformed_calls repairs it, and says so.
        with contextlib.suppress(TypeError, ValueError):
            arguments = json.dumps(arguments, ensure_ascii=False, allow_nan=False)
    function = {"name": block.get("name"), "arguments": arguments}
    return {
        "id": block.get("id"),
        "type": "function",
        "function": function,
        **_extras(block, _USE_KEYS),
    }


def _result(block: dict[str, Any]) -> Message:
    return {
        "role": "tool",
        "tool_call_id": block.get("tool_use_id"),
        "content": block.get("content"),
        **_extras(block, _RESULT_KEYS),
    }


def _kind(block: Any) -> str | None:
    kind = block.get("type") if isinstance(block, dict) else None
    return kind if isinstance(kind, str) else None


def _converted(message: Message) -> list[Message]:
    blocks = message["content"]
    others = [block for block in blocks if _kind(block) not in _TOOL_BLOCKS]
    if message.get("role") == "assistant":
        calls = [_call(block) for block in blocks if _kind(block) == "tool_use"]
        return [{**message, "content": others or None, "tool_calls": calls}]
    results = [_result(block) for block in blocks if _kind(block) == "tool_result"]
    rest = [{**message, "content": others}] if others else []
    return [*results, *rest]


def to_openai_shape(messages: Sequence[Any]) -> list[Any]:
    """The history in the OpenAI shape (messages without tool blocks are shared, not copied)."""
    converted: list[Any] = []
    for message in messages:
        if _tool_blocks(message):
            converted += _converted(message)
        else:
            converted.append(message)
    return converted


def _input(arguments: Any) -> Any:
    try:
        return json.loads(arguments)
    except (TypeError, ValueError):
        return {}


def _use_block(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    block = {
        "type": "tool_use",
        "id": call.get("id"),
        "name": function.get("name"),
        "input": _input(function.get("arguments")),
    }
    return {**block, **call.get(_EXTRA, {})}


def _result_block(message: dict[str, Any]) -> dict[str, Any]:
    block = {
        "type": "tool_result",
        "tool_use_id": message.get("tool_call_id"),
        "content": message.get("content"),
    }
    return {**block, **message.get(_EXTRA, {})}


def _as_blocks(content: Any) -> list[Any]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else [content]


def from_openai_shape(messages: Sequence[Any]) -> list[Any]:
    """Back to Anthropic blocks: calls become ``tool_use``, each run of results one user message."""
    restored: list[Any] = []
    results: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role") if isinstance(message, dict) else None
        if role == "tool":
            results.append(_result_block(message))
            continue
        if results and role == "user":
            restored.append({**message, "content": [*results, *_as_blocks(message.get("content"))]})
            results = []
            continue
        if results:
            restored.append({"role": "user", "content": results})
            results = []
        if role == "assistant" and isinstance(message.get("tool_calls"), list):
            blocks = _as_blocks(message.get("content")) + [
                _use_block(c) for c in message["tool_calls"]
            ]
            restored.append(
                {k: v for k, v in message.items() if k != "tool_calls"} | {"content": blocks}
            )
        else:
            restored.append(message)
    if results:
        restored.append({"role": "user", "content": results})
    return restored
