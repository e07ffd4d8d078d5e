"""`snip_history` (budget phase): when still over budget, the oldest history goes.

Only when the request is over budget. The kept tail is the longest one that
fits and starts at a user message, so an assistant message is never split
from its results; leading system messages are always kept. When even the
newest user message with what follows it does not fit, the tool results
after it are cut head and tail (largest first); when that is not enough
either, only the newest user message is kept, cut head and tail to the room
left (never below `MIN_USER_TOKENS`), and the report says so. The request is
never empty and this stage never raises on a legal history.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nanobot_core.governance.messages import (
    content_text,
    leading_system_count,
    role_of,
    with_changes,
)
from nanobot_core.governance.stage import StageOutcome
from nanobot_core.governance.stages.start import CONTINUE, ensure_user_start
from nanobot_core.governance.survey import Kind, MessageFacts
from nanobot_core.governance.truncation import fit_to_tokens

if TYPE_CHECKING:
    from nanobot_core.governance.context import StageContext

__all__ = ["MIN_RESULT_TOKENS", "MIN_USER_TOKENS", "snip_history"]

#: The newest user message is never cut below this many tokens, even when it cannot fit.
MIN_USER_TOKENS = 128
#: A tool result after the newest user message is never cut below this many tokens.
MIN_RESULT_TOKENS = 64

_CUT_LABEL = "cut to fit the context budget"


def _fitting_start(known: list[MessageFacts], start: int, room: int) -> int | None:
    """The earliest user message from which the rest of the history fits in `room` tokens.

    `known` are the facts of the whole list; the history is what follows its
    first `start` (system) messages. The index is into the history.
    """
    user = Kind.USER
    best = None
    total = 0
    for index in range(len(known) - 1, start - 1, -1):
        fact = known[index]
        total += fact[1]
        if total > room:
            break
        if fact[3] == user:
            best = index - start
    return best


def _shrink_results(
    tail: list[Any], room: int, ctx: StageContext
) -> tuple[list[Any], list[str]] | None:
    """`tail` with its tool results cut head and tail until it fits `room`, or None."""
    excess = sum(ctx.message_tokens(m) for m in tail) - room
    sizes = []
    for position, message in enumerate(tail):
        if role_of(message) == "tool" and isinstance(content_text(message.get("content")), str):
            sizes.append((ctx.message_tokens(message), position))
    shrunk = list(tail)
    notes = []
    for tokens, position in sorted(sizes, key=lambda item: (-item[0], item[1])):
        if excess <= 0:
            break
        message = tail[position]
        text = content_text(message["content"]) or ""
        text_tokens = ctx.counter.count_text(text)
        target = max(MIN_RESULT_TOKENS, text_tokens - excess)
        if target >= text_tokens:
            continue
        cut = with_changes(message, content=fit_to_tokens(text, target, ctx.counter, _CUT_LABEL))
        excess -= tokens - ctx.message_tokens(cut)
        shrunk[position] = cut
        notes.append(
            f"tool result cut head and tail from {len(text)} to {len(cut['content'])} characters"
        )
    return (shrunk, notes) if excess <= 0 else None


def _cut_user(
    message: dict[str, Any], room: int, ctx: StageContext
) -> tuple[dict[str, Any], str | None]:
    """The newest user message cut head and tail to `room` tokens (at least `MIN_USER_TOKENS`)."""
    content = message.get("content")
    text = content_text(content)
    if text is None:  # parts that are not text cannot be cut: keep the text of the message
        parts = content if isinstance(content, list) else []
        text = "\n".join(
            p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    bare = ctx.message_tokens(with_changes(message, content=""))
    limit = max(MIN_USER_TOKENS, room - bare)
    cut = fit_to_tokens(text, limit, ctx.counter, _CUT_LABEL) or CONTINUE
    if cut is content or cut == content:  # already short enough (a message cut by an earlier run)
        return message, None
    note = (
        f"the newest user message alone does not fit the budget of {ctx.budget.limit} tokens: "
        f"kept it cut head and tail from {len(text)} to {len(cut)} characters"
    )
    return with_changes(message, content=cut), note


def _newest_turn_only(
    history: list[Any], room: int, ctx: StageContext
) -> tuple[int, list[Any], list[str]]:
    """(index of the newest user message, what is kept from it on, what was cut)."""
    newest = max(i for i, m in enumerate(history) if role_of(m) == "user")
    shrunk = _shrink_results(history[newest:], room, ctx)
    if shrunk is not None:
        kept, notes = shrunk
        return newest, kept, [f"after the newest user message: {note}" for note in notes]
    user, note = _cut_user(history[newest], room, ctx)
    notes = [note] if note else []
    after = len(history) - newest - 1
    if after:
        notes.append(
            f"dropped the {after} messages after the newest user message: "
            "they do not fit even cut down"
        )
    return newest, [user], notes


def snip_history(messages: list[Any], ctx: StageContext) -> StageOutcome:
    """Drop the oldest history (keeping whole turns) until the request fits."""
    if not ctx.over_budget(messages):
        return StageOutcome.unchanged(messages)
    working, inserted = ensure_user_start(messages)
    details = [inserted] if inserted else []
    start = leading_system_count(working)
    known = ctx.facts.aligned(working)
    prefix, history = working[:start], working[start:]
    room = ctx.budget.limit - ctx.fixed_tokens - sum(fact[1] for fact in known[:start])
    first = _fitting_start(known, start, room)
    notes: list[str] = []
    if first is not None:
        kept = history[first:]
        kept_known = known[:start] + known[start + first :]
    else:
        first, kept, notes = _newest_turn_only(history, room, ctx)
        kept_known = None
    if first:
        details.append(
            f"dropped the {first} oldest messages (messages[{start}..{start + first - 1}]) "
            "to fit the budget"
        )
    details += notes
    result = [*prefix, *kept]
    if len(result) == len(messages) and all(a is b for a, b in zip(result, messages, strict=True)):
        return StageOutcome.unchanged(messages)
    if kept_known is not None:
        ctx.facts.note(result, kept_known)
    return StageOutcome(result, changed=True, details=details)
