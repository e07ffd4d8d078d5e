"""`compact_results` (budget phase): when over budget, the largest old tool results make room.

Only when the request is over budget. The largest compactable results go
first (ties: the oldest first), each replaced by a short notice that says
which tool it came from, how big it was, and how to get what is needed with a
narrower call; an offloaded result's notice keeps its file path. Compaction
stops once the request fits and at least ``clear_at_least`` tokens were
cleared.

Options: ``keep`` (the newest N tool results are never compacted; default 3),
``exclude_tools`` (never compacted), ``tools`` (only these are compacted;
default: every tool), ``clear_at_least`` (tokens; default 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nanobot_core.governance.messages import content_text, result_tool_names, with_changes
from nanobot_core.governance.stage import StageOutcome
from nanobot_core.governance.stages.offload import offloaded_path

if TYPE_CHECKING:
    from nanobot_core.governance.context import StageContext

__all__ = ["COMPACT_PREFIX", "DEFAULT_KEEP", "compact_notice", "compact_results"]

COMPACT_PREFIX = "[Tool result compacted to save context"
DEFAULT_KEEP = 3


def compact_notice(tool: str | None, content: Any) -> str:
    """The short text that replaces a compacted result (deterministic)."""
    text = content_text(content)
    size = f"{len(text)} characters" if text is not None else "non-text content"
    source = f"{tool!r}" if tool else "the tool"
    notice = (
        f"{COMPACT_PREFIX}: {source} returned {size} here. If you still need it, call the "
        "tool again with narrower arguments (a smaller range, a filter or a limit).]"
    )
    path = offloaded_path(text) if text is not None else None
    if path:
        notice += f' The full result is saved: read_file(path="{path}").'
    return notice


def _candidates(messages: list[Any], ctx: StageContext) -> list[tuple[int, int, str | None]]:
    """(tokens, index, tool name) of every result that may be compacted."""
    keep = max(0, int(ctx.option("keep", DEFAULT_KEEP)))
    excluded = set(ctx.option("exclude_tools", ()))
    only = ctx.option("tools", None)
    allowed = set(only) if only is not None else None
    results = [i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "tool"]
    names = result_tool_names(messages)
    found = []
    for index in results[: len(results) - keep] if keep else results:
        message = messages[index]
        name = message.get("name") if isinstance(message.get("name"), str) else names.get(index)
        if name in excluded or (allowed is not None and name not in allowed):
            continue
        text = content_text(message.get("content"))
        if text is not None and text.startswith(COMPACT_PREFIX):
            continue
        found.append((ctx.message_tokens(message), index, name))
    found.sort(key=lambda item: (-item[0], item[1]))
    return found


def compact_results(messages: list[Any], ctx: StageContext) -> StageOutcome:
    """Replace the largest compactable tool results with a notice until the request fits."""
    excess = ctx.request_tokens(messages) - ctx.budget.limit
    if excess <= 0:
        return StageOutcome.unchanged(messages)
    clear_at_least = int(ctx.option("clear_at_least", 0))
    result = list(messages)
    details: list[str] = []
    cleared = 0
    for tokens, index, name in _candidates(messages, ctx):
        if excess <= 0 and cleared >= clear_at_least:
            break
        message = messages[index]
        compacted = with_changes(message, content=compact_notice(name, message.get("content")))
        saved = tokens - ctx.message_tokens(compacted)
        if saved <= 0:
            continue
        result[index] = compacted
        excess -= saved
        cleared += saved
        details.append(
            f"messages[{index}]: compacted the result of {name or 'a tool'} ({saved} tokens)"
        )
    if not details:
        return StageOutcome.unchanged(messages)
    return StageOutcome(result, changed=True, details=details)
