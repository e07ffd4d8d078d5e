"""`compact_results` (budget phase): when over budget, the oldest tool results make room.

Only when the request is over budget. The oldest compactable results go
first, each replaced by a short notice that says which tool it came from, how
big it was, and to call again with narrower arguments; an offloaded result's
notice keeps its file path. Compaction stops once the request is down to the
low watermark (``low_watermark`` of the budget, so that the next turns need no
new compaction) and at least ``clear_at_least`` tokens were cleared.

Oldest first, because the request changes from the first result compacted: the
results compacted by earlier calls are then always older than the ones a new
compaction takes, so the part of the request before it (what a provider's
prompt cache reuses) stays as it was sent. The oldest results are also the ones
the model is least likely to need.

Options: ``keep`` (the newest N tool results are never compacted; default 3),
``exclude_tools`` (never compacted), ``tools`` (only these are compacted;
default: every tool), ``clear_at_least`` (tokens; default 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nanobot_core.governance.messages import CallNames, content_text
from nanobot_core.governance.stage import StageOutcome
from nanobot_core.governance.stages.offload import OFFLOAD_PREFIX, offloaded_path
from nanobot_core.governance.survey import Kind
from nanobot_core.governance.watermark import low_watermark_tokens

if TYPE_CHECKING:
    from nanobot_core.governance.stage import StageContext

__all__ = ["COMPACT_PREFIX", "DEFAULT_KEEP", "compact_notice", "compact_results"]

COMPACT_PREFIX = "[Tool result compacted to save context"
DEFAULT_KEEP = 3


def compact_notice(tool: str | None, content: Any) -> str:
    """The short text that replaces a compacted result (deterministic)."""
    text = content if type(content) is str else content_text(content)
    if text is None:
        return _plain_notice(tool, None)
    path = offloaded_path(text) if text.startswith(OFFLOAD_PREFIX) else None
    if path is None:
        return _plain_notice(tool, len(text))
    return f'{_plain_notice(tool, len(text))} The full result is saved: read_file(path="{path}").'


def _plain_notice(tool: str | None, chars: int | None) -> str:
    size = f"{chars} characters" if chars is not None else "non-text content"
    source = f"{tool!r}" if tool else "the tool"
    return (
        f"{COMPACT_PREFIX}: {source} returned {size}. Call it again with narrower "
        "arguments if you still need it.]"
    )


def _candidates(messages: list[Any], ctx: StageContext) -> list[tuple[int, int, str | None]]:
    """(minus tokens, index, tool name) of every result that may be compacted, oldest first."""
    keep = max(0, int(ctx.option("keep", DEFAULT_KEEP)))
    excluded = set(ctx.option("exclude_tools", ()))
    only = ctx.option("tools", None)
    allowed = set(only) if only is not None else None
    known = ctx.facts.aligned(messages)
    tool = Kind.TOOL
    results = [i for i, fact in enumerate(known) if fact[3] == tool]
    call_names = CallNames(messages)
    found = []
    for index in results[: len(results) - keep] if keep else results:
        message = messages[index]
        name = message.get("name")
        if not isinstance(name, str):
            name = call_names(index)
        if name in excluded or (allowed is not None and name not in allowed):
            continue
        content = message.get("content")
        text = content if type(content) is str else content_text(content)
        if text is not None and text.startswith(COMPACT_PREFIX):
            continue
        found.append((-known[index][1], index, name))
    return found


def compact_results(messages: list[Any], ctx: StageContext) -> StageOutcome:
    """Replace the oldest compactable tool results with a notice, down to the low watermark."""
    tokens = ctx.request_tokens(messages)
    if tokens <= ctx.budget.limit:
        return StageOutcome.unchanged(messages)
    excess = tokens - low_watermark_tokens(ctx)
    clear_at_least = int(ctx.option("clear_at_least", 0))
    replace = ctx.facts.replace_content
    result = list(messages)
    known = ctx.facts.aligned(messages)
    replaced = list(known)
    details: list[str] = []
    cleared = 0
    for minus_tokens, index, name in _candidates(messages, ctx):
        if excess <= 0 and cleared >= clear_at_least:
            break
        message = messages[index]
        compacted = replace(message, compact_notice(name, message.get("content")), known[index])
        saved = -minus_tokens - compacted[1]
        if saved <= 0:
            continue
        result[index] = compacted[0]
        replaced[index] = compacted
        excess -= saved
        cleared += saved
        details.append(
            f"messages[{index}]: compacted the result of {name or 'a tool'} ({saved} tokens)"
        )
    if not details:
        return StageOutcome.unchanged(messages)
    ctx.facts.note(result, replaced)
    return StageOutcome(result, changed=True, details=details)
