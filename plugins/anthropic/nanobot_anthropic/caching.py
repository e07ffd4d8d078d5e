"""Where the prompt-cache breakpoints go, by the rules Anthropic documents.

A ``cache_control`` mark on a block caches the request's prefix up to and
including that block (tools, then system, then messages). A request reads
from cache when, at one of its marks or at most 20 blocks before it, the
prefix is one an earlier request wrote; a prefix shorter than the model's
minimum cacheable length is never cached; a request carries at most four
marks. So, in order of worth, marks go on:

1. the newest message's last block: the next call of an agent loop extends
   this very prefix, so it reads what this call writes;
2. the end of the unchanged prefix, when governance says it changed the
   history (``prefix``): what an earlier call wrote up to there is read again;
3. the end of the previous call's messages (the user turn before the newest
   assistant message), when it is more than 20 blocks before mark 1, so the
   lookback alone would not find it;
4. the system prompt, and 5. the tool definitions: stable across sessions.

The first four that apply are placed. Marks already in the history are
removed first (those on the blocks a ``tool_result`` holds too, which the
API counts alike), so there are never more than four. Thinking blocks cannot
carry a mark; the nearest block before them does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs
from nanobot_core.governance import EstimateCounter

__all__ = [
    "LOOKBACK_BLOCKS",
    "MAX_BREAKPOINTS",
    "CachePlan",
    "minimum_cacheable",
    "place_breakpoints",
]

MAX_BREAKPOINTS = 4
LOOKBACK_BLOCKS = 20
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})
_COUNTER = EstimateCounter()

# Anthropic's documented minimum cacheable prompt length, in tokens, by model family.
_MINIMUMS = (
    (("opus-4-5", "opus-4-6", "haiku-4-5", "opus-4.5", "opus-4.6", "haiku-4.5"), 4096),
    (("sonnet-4-6", "sonnet-4.6", "3-haiku", "3-5-haiku", "haiku-3"), 2048),
)
_DEFAULT_MINIMUM = 1024


def minimum_cacheable(model: str) -> int:
    """The fewest prompt tokens `model` caches (1024 unless the model is known to need more)."""
    for names, minimum in _MINIMUMS:
        if any(name in model for name in names):
            return minimum
    return _DEFAULT_MINIMUM


@attrs.frozen
class CachePlan:
    """The request parts with their marks, and where the marks went (for logs and tests)."""

    tools: list[dict[str, Any]]
    system: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    marks: list[str]


@attrs.define
class _Slot:
    """A block of the request, in prefix order, with the tokens of the prefix it ends."""

    part: str  # "tools", "system" or "messages"
    index: int  # the tool, the system block, or the message
    block: int  # the block within the message (0 for tools and system)
    prefix_tokens: int


def _tokens(value: Any) -> int:
    return _COUNTER.count_text(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _unmarked(block: Any) -> Any:
    """`block` without a mark, and a ``tool_result`` without marks on the blocks it holds."""
    if not isinstance(block, dict):
        return block
    inner = block.get("content")
    if (
        block.get("type") == "tool_result"
        and isinstance(inner, list)
        and any(isinstance(part, dict) and "cache_control" in part for part in inner)
    ):
        block = {**block, "content": [_unmarked(part) for part in inner]}
    if "cache_control" in block:
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


def _slots(
    tools: list[dict[str, Any]], system: list[dict[str, Any]], messages: list[dict[str, Any]]
) -> list[_Slot]:
    slots: list[_Slot] = []
    total = 0
    for index, tool in enumerate(tools):
        total += _tokens(tool)
        slots.append(_Slot("tools", index, 0, total))
    for index, block in enumerate(system):
        total += _tokens(block)
        slots.append(_Slot("system", index, 0, total))
    for index, message in enumerate(messages):
        for number, block in enumerate(message["content"]):
            total += _tokens(block)
            slots.append(_Slot("messages", index, number, total))
    return slots


def _markable(slots: list[_Slot], position: int, messages: list[dict[str, Any]]) -> int | None:
    """The nearest slot at or before `position` that may carry a mark."""
    while position >= 0:
        slot = slots[position]
        if slot.part != "messages":
            return position
        block = messages[slot.index]["content"][slot.block]
        if isinstance(block, dict) and block.get("type") not in _UNMARKABLE:
            text = block.get("text")
            if block.get("type") != "text" or (isinstance(text, str) and text.strip()):
                return position
        position -= 1
    return None


def _last_of(slots: list[_Slot], part: str) -> int | None:
    found = [n for n, slot in enumerate(slots) if slot.part == part]
    return found[-1] if found else None


def _previous_call_end(slots: list[_Slot], messages: list[dict[str, Any]]) -> int | None:
    """The last slot of the user turn before the newest assistant message."""
    assistants = [n for n, m in enumerate(messages) if m["role"] == "assistant"]
    if not assistants or assistants[-1] == 0:
        return None
    target = assistants[-1] - 1
    found = [n for n, s in enumerate(slots) if s.part == "messages" and s.index <= target]
    return found[-1] if found else None


def _unchanged_end(
    slots: list[_Slot], messages: list[dict[str, Any]], kept: Sequence[dict[str, Any]] | None
) -> int | None:
    """The last slot whose block is the same in `kept`, the request cut where governance
    first changed it (None: no change)."""
    if kept is None:
        return None
    position: int | None = None
    for n, slot in enumerate(slots):
        if slot.part != "messages":
            continue
        if slot.index >= len(kept) or slot.block >= len(kept[slot.index]["content"]):
            break
        if _unmarked(kept[slot.index]["content"][slot.block]) != _unmarked(
            messages[slot.index]["content"][slot.block]
        ):
            break
        position = n
    return position


def place_breakpoints(
    tools: list[dict[str, Any]],
    system: list[dict[str, Any]],
    messages: list[dict[str, Any]],
    *,
    ttl: str,
    model: str,
    kept: Sequence[dict[str, Any]] | None = None,
) -> CachePlan:
    """The request parts with at most four ``cache_control`` marks (none when `ttl` is "off").

    `kept` is what the OpenAI-shape request cut at the first message governance
    changed converts to (``to_messages_api(request, prefix=...).prefix_messages``,
    found in the pass that converted the request; None: nothing changed). The
    inputs are not modified; marked blocks are copies.
    """
    tools = [_unmarked(t) for t in tools]
    system = [_unmarked(b) for b in system]
    messages = [{**m, "content": [_unmarked(b) for b in m["content"]]} for m in messages]
    if ttl == "off":
        return CachePlan(tools, system, messages, [])
    slots = _slots(tools, system, messages)
    minimum = minimum_cacheable(model)
    newest = _markable(slots, len(slots) - 1, messages) if messages else None
    changed = _unchanged_end(slots, messages, kept)
    previous = _previous_call_end(slots, messages)
    if previous is not None and (newest is None or newest - previous <= LOOKBACK_BLOCKS):
        previous = None  # the lookback from the newest mark finds it anyway
    candidates = [
        ("newest message", newest),
        ("unchanged prefix", _markable(slots, changed, messages) if changed is not None else None),
        ("previous call", _markable(slots, previous, messages) if previous is not None else None),
        ("system", _last_of(slots, "system")),
        ("tools", _last_of(slots, "tools")),
    ]
    chosen: dict[int, str] = {}
    for label, position in candidates:
        if position is None or position in chosen or len(chosen) == MAX_BREAKPOINTS:
            continue
        if slots[position].prefix_tokens < minimum:
            continue  # too short to be cached: the mark would only take a slot
        chosen[position] = label
    control: dict[str, Any] = {"type": "ephemeral"}
    if ttl == "1h":
        control["ttl"] = "1h"
    for position in sorted(chosen):
        slot = slots[position]
        if slot.part == "tools":
            tools[slot.index] = {**tools[slot.index], "cache_control": control}
        elif slot.part == "system":
            system[slot.index] = {**system[slot.index], "cache_control": control}
        else:
            content = messages[slot.index]["content"]
            content[slot.block] = {**content[slot.block], "cache_control": control}
    return CachePlan(tools, system, messages, [chosen[p] for p in sorted(chosen)])
