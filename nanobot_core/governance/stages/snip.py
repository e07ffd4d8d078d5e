"""`snip_history` (budget phase): when still over budget, the oldest history goes.

Only when the request is over budget, and then down to the cut watermark
(``low_watermark`` squared of the budget: a cut changes the request from its
first message, so it leaves more room than a compaction does), so that the
next turns append without a new cut and the request's start stays the same for
the provider's prompt cache. Leading system messages are always kept. The kept
tail is the longest one that fits the cut watermark and starts at a user
message, so an assistant message is never split from its results; when none
does, the newest user turn is kept whole if it fits the budget.

When the newest user turn alone does not fit (a coding agent: one task, then
hundreds of steps), the cut falls between its steps, a step being an assistant
message and all its results: the turn's user message (the task) is kept, then
the newest steps that fit, and a short notice appended to that user message
says how many steps were left out (never a separate user message: two user
messages in a row are refused by strict servers). When even the user message
and the newest step do not fit, that step's tool results are cut head and
tail (largest first) with a notice telling the model to narrow the call rather
than repeat it; when that is not enough either, only the newest user message
is kept, cut head and tail to the room left (never below `MIN_USER_TOKENS`),
with a notice that all the turn's steps were left out and to take smaller ones
(a model told nothing takes the same step again), and the report says so.
The request is never empty and this stage never raises on a legal history.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
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
from nanobot_core.governance.watermark import cut_watermark_tokens

if TYPE_CHECKING:
    from nanobot_core.governance.stage import StageContext

__all__ = [
    "MIN_RESULT_TOKENS",
    "MIN_USER_TOKENS",
    "NARROW_LABEL",
    "left_out_steps",
    "snip_history",
    "step_starts",
    "steps_notice",
    "with_steps_notice",
]

#: The newest user message is never cut below this many tokens, even when it cannot fit.
MIN_USER_TOKENS = 128
#: A tool result after the newest user message is never cut below this many tokens.
MIN_RESULT_TOKENS = 64

_CUT_LABEL = "cut to fit the context budget"
#: The marker label of a tool result too big to fit on its own.
NARROW_LABEL = (
    "cut to fit the context budget; do not repeat the call, narrow it instead "
    "(a smaller range, a filter or a limit) to see the rest"
)
# The notice appended to the task when steps of its turn were left out; read back so that
# cutting again adds up rather than stacking notices.
_STEPS_NOTICE = re.compile(
    r"\n\n\[(\d+) (?:earlier )?steps? of this task (?:was|were) left out to fit the context "
    r"budget; (?:the newest ones follow|none fitted, not even the newest cut down: take smaller "
    r"steps, with fewer or narrower tool calls)\.\]\Z"
)


def steps_notice(count: int, *, none_kept: bool = False) -> str:
    """The text appended to the user message of a turn whose `count` oldest steps were left out.

    With `none_kept`, every step was: not even the newest fitted beside the task, its
    results cut down. Told so, the model takes a smaller step next; told nothing, it
    would take the same one again (a reply of thousands of calls), to be left out again.
    """
    steps = "step of this task was" if count == 1 else "steps of this task were"
    if none_kept:
        return (
            f"\n\n[{count} {steps} left out to fit the context budget; none fitted, not even "
            "the newest cut down: take smaller steps, with fewer or narrower tool calls.]"
        )
    return (
        f"\n\n[{count} earlier {steps} left out to fit the context budget; the newest ones follow.]"
    )


def left_out_steps(message: Any) -> int:
    """How many steps the notice at the end of `message`'s text says were left out (0 if none)."""
    text = _last_text(message)
    found = _STEPS_NOTICE.search(text) if text else None
    return int(found.group(1)) if found else 0


def _last_text(message: Any) -> str | None:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content:
        last = content[-1]
        if isinstance(last, dict) and last.get("type") == "text":
            text = last.get("text")
            return text if isinstance(text, str) else None
    return None


def with_steps_notice(
    message: dict[str, Any], count: int, *, none_kept: bool = False
) -> dict[str, Any]:
    """`message` (a user message) saying that `count` steps after it were left out in all
    (`none_kept`: every one of them, see `steps_notice`).

    A notice already there is replaced, its count included in `count` by the caller.
    """
    earlier = left_out_steps(message)
    content = message.get("content")
    notice = steps_notice(count, none_kept=none_kept)
    if isinstance(content, str):
        bare = _STEPS_NOTICE.sub("", content) if earlier else content
        return with_changes(message, content=bare + notice)
    if isinstance(content, list):
        parts = list(content)
        if earlier:
            last = parts[-1]
            parts[-1] = {**last, "text": _STEPS_NOTICE.sub("", last["text"])}
        return with_changes(message, content=[*parts, {"type": "text", "text": notice.lstrip()}])
    return with_changes(message, content=notice.lstrip())


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
        cut = with_changes(message, content=fit_to_tokens(text, target, ctx.counter, NARROW_LABEL))
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


def step_starts(history: Sequence[Any], first: int, stop: int | None = None) -> list[int]:
    """Where each step of ``history[first:stop]`` starts (`first` follows a user message).

    A step is an assistant message and its results. Anything but a tool
    message starts one, and so does whatever comes first, so a tool message
    is never separated from the message it follows.
    """
    end = len(history) if stop is None else stop
    return [
        index for index in range(first, end) if index == first or role_of(history[index]) != "tool"
    ]


def _noticed(user: dict[str, Any], count: int, ctx: StageContext) -> dict[str, Any]:
    """`with_steps_notice`, recorded as made from `user`: read back, the turn starts where
    that message (or the first of those merged into it) does."""
    noticed = with_steps_notice(user, count)
    ctx.facts.made_from(noticed, user)
    return noticed


def _newest_steps(
    history: list[Any], newest: int, sizes: list[int], room: int, low: int, ctx: StageContext
) -> tuple[list[Any], list[str]] | None:
    """The task (noticed) and the newest steps of the newest turn that fit, or None if none does.

    As many steps as fit `low` (the cut watermark), else the newest one alone if it fits `room`.
    """
    starts = step_starts(history, newest + 1)
    user = history[newest]
    earlier = left_out_steps(user)
    # The notice for every step left out is the longest it can be: count with it.
    noticed = with_steps_notice(user, earlier + len(starts))
    user_tokens = ctx.message_tokens(noticed)
    ends = [*starts[1:], len(history)]
    kept_from = None
    total = user_tokens
    for first, stop in zip(reversed(starts), reversed(ends), strict=True):
        total += sum(sizes[first:stop])
        if total > low:
            break
        kept_from = first
    if kept_from is None:
        if user_tokens + sum(sizes[starts[-1] :]) > room:
            return None
        kept_from = starts[-1]
    left_out = starts.index(kept_from)
    if left_out == 0:
        return None  # every step fits: the turn is not too big after all
    notes = [
        f"the newest user turn alone does not fit: kept its user message and its newest "
        f"{len(starts) - left_out} steps, left out the {left_out} steps before them "
        "(a notice on the user message says so)"
    ]
    return [_noticed(user, earlier + left_out, ctx), *history[kept_from:]], notes


def _newest_turn_only(
    history: list[Any], sizes: list[int], room: int, low: int, ctx: StageContext
) -> tuple[int, list[Any], list[str]]:
    """(index of the newest user message, what is kept from it on, what was cut)."""
    newest = max(i for i, m in enumerate(history) if role_of(m) == "user")
    if newest + 1 < len(history):
        if sum(sizes[newest:]) <= room:
            return newest, history[newest:], []
        stepped = _newest_steps(history, newest, sizes, room, low, ctx)
        if stepped is not None:
            return newest, *stepped
        # Not even the newest step fits beside the task: cut the results of that step.
        starts = step_starts(history, newest + 1)
        user = history[newest]
        left_out = len(starts) - 1
        task = _noticed(user, left_out_steps(user) + left_out, ctx) if left_out else user
        shrunk = _shrink_results([task, *history[starts[-1] :]], room, ctx)
        if shrunk is not None:
            kept, notes = shrunk
            if left_out:
                notes.insert(0, f"left out the {left_out} older steps of the newest user turn")
            return newest, kept, [f"after the newest user message: {note}" for note in notes]
    user = history[newest]
    after = len(history) - newest - 1
    if not after:
        cut, note = _cut_user(user, room, ctx)
        return newest, [cut], [note] if note else []
    # Every step goes: the task says so, with the count of them all, and the notice
    # is made room for before the task is cut (it is what the model must read).
    steps = left_out_steps(user) + len(step_starts(history, newest + 1))
    extra = ctx.message_tokens(with_steps_notice(user, steps, none_kept=True))
    extra -= ctx.message_tokens(user)
    cut, note = _cut_user(user, room - max(0, extra), ctx)
    noticed = with_steps_notice(cut, steps, none_kept=True)
    told = f" (a notice on the user message says that its {steps} {_steps(steps)} left out)"
    if ctx.message_tokens(noticed) > room:
        plain, plain_note = _cut_user(user, room, ctx)
        if ctx.message_tokens(plain) <= room:  # a request that fits comes first: no notice
            noticed, note, told = plain, plain_note, ""
    if noticed is not user:
        ctx.facts.made_from(noticed, user)
    notes = [note] if note else []
    notes.append(
        f"dropped the {after} messages after the newest user message: they do not fit even "
        f"cut down{told}"
    )
    return newest, [noticed], notes


def _steps(count: int) -> str:
    return "step was" if count == 1 else "steps were"


def snip_history(messages: list[Any], ctx: StageContext) -> StageOutcome:
    """Drop the oldest history (keeping whole turns, then whole steps) until the request fits."""
    if not ctx.over_budget(messages):
        return StageOutcome.unchanged(messages)
    working, inserted = ensure_user_start(messages)
    details = [inserted] if inserted else []
    start = leading_system_count(working)
    known = ctx.facts.aligned(working)
    prefix, history = working[:start], working[start:]
    leading = ctx.fixed_tokens + sum(fact[1] for fact in known[:start])
    room = ctx.budget.limit - leading
    low = cut_watermark_tokens(ctx) - leading
    first = _fitting_start(known, start, low)
    notes: list[str] = []
    if first is not None:
        kept = history[first:]
        kept_known = known[:start] + known[start + first :]
    else:
        sizes = [fact[1] for fact in known[start:]]
        first, kept, notes = _newest_turn_only(history, sizes, room, low, ctx)
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
    if kept_known is not None:  # the entries dropped are all that changed: totals carry over
        ctx.facts.note(result, kept_known, source=working, removed=known[start : start + first])
    return StageOutcome(result, changed=True, details=details)
