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

import functools
from collections.abc import Iterator
from itertools import compress, count, repeat
from operator import eq, itemgetter
from typing import TYPE_CHECKING, Any

from nanobot_core._clip import clip, quoted
from nanobot_core.governance.messages import CallNames, content_text
from nanobot_core.governance.stage import StageOption, StageOutcome
from nanobot_core.governance.stages.content import without_surrogates
from nanobot_core.governance.stages.offload import (
    OFFLOAD_PREFIX,
    offloaded_chars,
    offloaded_path,
)
from nanobot_core.governance.survey import Kind, MessageFacts
from nanobot_core.governance.watermark import low_watermark_tokens

if TYPE_CHECKING:
    from nanobot_core.governance.stage import StageContext

__all__ = [
    "COMPACT_OPTIONS",
    "COMPACT_PREFIX",
    "DEFAULT_KEEP",
    "compact_notice",
    "compact_results",
]

COMPACT_PREFIX = "[Tool result compacted to save context"
DEFAULT_KEEP = 3

#: What ``[governance.stages.compact_results]`` may hold (see `Stage.options`).
COMPACT_OPTIONS: dict[str, StageOption] = {
    "keep": StageOption(
        int, f"the newest N tool results are never compacted (default {DEFAULT_KEEP})", at_least=0
    ),
    "exclude_tools": StageOption(list[str], "tools whose results are never compacted"),
    "tools": StageOption(list[str], "only these tools' results are compacted (default: all)"),
    "clear_at_least": StageOption(
        int, "tokens cleared at least, once compacting (default 0)", at_least=0
    ),
}

# A message's kind, the fourth of its facts.
_KIND = itemgetter(3)


def compact_notice(tool: str | None, content: Any) -> str:
    """The short text that replaces a compacted result (deterministic)."""
    text = content if type(content) is str else content_text(content)
    return _notice(_names(tool)[0], text)


def _notice(head: str, text: str | None) -> str:
    """`compact_notice` of a result holding `text`, from its head (`_names`): one call per
    result, as `compact_results` makes hundreds of them on a long history."""
    if text is None:
        return f"{head} returned non-text content. {_NOTICE_TAIL}"
    path = offloaded_path(text) if text.startswith(OFFLOAD_PREFIX) else None
    if path is None:
        return f"{head} returned {len(text)} characters. {_NOTICE_TAIL}"
    # The size of the result itself, which the offload notice gives, not of that notice.
    chars = offloaded_chars(text) or len(text)
    return (
        f"{head} returned {chars} characters. {_NOTICE_TAIL} "
        f'The full result is saved: read_file(path="{path}").'
    )


#: What every compaction notice ends with.
_NOTICE_TAIL = "Call it again with narrower arguments if you still need it.]"

#: Tool names up to this long have their notice head and report name made once: a first
#: call on a long history compacts hundreds of results of a few tools. Longer names (which
#: a model can make up) are not kept.
_REMEMBERED_NAME_CHARS = 128


def _names(tool: str | None) -> tuple[str, str]:
    """(the notice up to the tool's name, the tool as the report names it)."""
    if tool is not None and len(tool) > _REMEMBERED_NAME_CHARS:
        return _made_names(tool)
    return _remembered_names(tool)


def _made_names(tool: str | None) -> tuple[str, str]:
    # The name as the repairs leave it, whether or not they ran on the message it came from.
    source = quoted(tool if tool.isascii() else without_surrogates(tool)) if tool else "the tool"
    return f"{COMPACT_PREFIX}: {source}", clip(tool) if tool else "a tool"


_remembered_names = functools.lru_cache(maxsize=256)(_made_names)


def _candidates(
    messages: list[Any], ctx: StageContext, known: list[MessageFacts]
) -> Iterator[tuple[int, int, str | None, str | None]]:
    """(minus tokens, index, tool name, text) of each result that may be compacted, oldest first.

    A generator: compaction usually stops after the first few results, so the
    names and texts of the rest are never worked out.
    """
    keep = max(0, int(ctx.option("keep", DEFAULT_KEEP)))
    excluded = set(ctx.option("exclude_tools", ()))
    only = ctx.option("tools", None)
    allowed = set(only) if only is not None else None
    results = list(compress(count(), map(eq, map(_KIND, known), repeat(Kind.TOOL))))
    call_names = CallNames(messages)
    # The newest `keep` stay, all of them when there are fewer (a negative end would count
    # from the end and hand out the oldest).
    for index in results[: max(0, len(results) - keep)]:
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
        yield -known[index][1], index, name, text


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
    named: dict[str | None, tuple[str, str]] = {}  # `_names` of each tool, once per call
    for minus_tokens, index, name, text in _candidates(messages, ctx, known):
        if excess <= 0 and cleared >= clear_at_least:
            break
        names = named.get(name)
        if names is None:
            names = named[name] = _names(name)
        compacted = replace(messages[index], _notice(names[0], text), known[index])
        saved = -minus_tokens - compacted[1]
        if saved <= 0:
            continue
        result[index] = compacted[0]
        replaced[index] = compacted
        excess -= saved
        cleared += saved
        details.append(f"messages[{index}]: compacted the result of {names[1]} ({saved} tokens)")
    if not details:
        return StageOutcome.unchanged(messages)
    ctx.facts.note(result, replaced)
    return StageOutcome(result, changed=True, details=details)
