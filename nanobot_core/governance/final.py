"""The governor's own last step: the guarantees no configuration can switch off.

Whatever the stages did (disabled, raised, returned garbage, broke pairing),
this step runs the built-in repairs again, puts a user message first, and then
enforces the budget by snipping. On a legal history that fits, every step
finds nothing to do in the memoised survey and the history is handed on as is.

Last, the request ends where the history does: with an assistant message only
when the history ends with one that makes no call (the caller's own reply,
which a provider may continue). Anything else leaves the model to answer, but
a repair can leave an assistant message last: a reply every call of which was
dropped for want of a name, answered by error results, ends in the notice
that says so. Strict providers refuse a request that ends with the assistant
(or take it as a reply to go on with), so a user message follows it. It is
added here, after every stage, rather than by the stage that made the notice:
a stage's output for a message must not depend on whether messages follow it
(`Stage.local`), and the request alone, not the history, holds the added
message, so the next call, on a history that goes on, sends what it sent
before up to it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from nanobot_core._containment import describe
from nanobot_core.governance.messages import Message, role_of
from nanobot_core.governance.stage import Budget, StageContext, StageOutcome
from nanobot_core.governance.stages import final_stages
from nanobot_core.governance.stages.non_messages import non_message
from nanobot_core.governance.stages.start import CONTINUE, continue_message, ensure_user_start

__all__ = [
    "FINAL_STAGE",
    "FinalStep",
    "closing_room",
    "ends_with_reply",
    "final_step",
    "needs_final_step",
]

#: The name of the governor's own entry in the report.
FINAL_STAGE = "final"

_Step = tuple[str, Callable[[list[Any], StageContext], Any]]

# The step that puts a user message after an assistant message a repair left last.
_END_AT_USER = "end_at_user"


@attrs.frozen
class FinalStep:
    """What the final step did."""

    messages: list[Any]
    changed: bool
    details: list[str]


def _start_at_user(messages: list[Any], _ctx: StageContext) -> StageOutcome:
    fixed, note = ensure_user_start(messages)
    return StageOutcome(fixed, changed=True, details=[note]) if note else StageOutcome(messages)


def ends_with_reply(history: Sequence[Any]) -> bool:
    """Whether the last message of `history` (entries that are no message passed over) is an
    assistant message that makes no tool call: the one history a request may end as it does.

    A reply with calls (``tool_calls``, a legacy ``function_call``, Anthropic ``tool_use``
    blocks), a result, a user message: the model is to answer them.
    """
    for entry in reversed(history):
        if non_message(entry) is None:
            return bool(entry.get("role") == "assistant" and not _makes_a_call(entry))
    return False


def _makes_a_call(message: Message) -> bool:
    if message.get("tool_calls") or message.get("function_call"):
        return True
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(part, dict) and part.get("type") == "tool_use" for part in content
    )


def _left_last(messages: list[Any], reply_last: bool) -> bool:
    """Whether `messages` end with an assistant message the history did not end with."""
    return not reply_last and bool(messages) and role_of(messages[-1]) == "assistant"


def needs_final_step(messages: list[Any], reply_last: bool) -> bool:
    """Whether the final step has work on a history the stages left clean and within budget:
    an assistant message left last (see `final_step`)."""
    return _left_last(messages, reply_last)


def closing_room(messages: list[Any], ctx: StageContext, reply_last: bool) -> int:
    """The tokens of the user message the final step will end `messages` with (an assistant
    message left last, see `final_step`), or 0 when it adds none."""
    return ctx.message_tokens(continue_message()) if _left_last(messages, reply_last) else 0


def final_step(
    messages: list[Any],
    ctx: StageContext,
    options: Mapping[str, Mapping[str, Any]],
    *,
    reply_last: bool = False,
    reserved: bool = False,
) -> FinalStep:
    """Re-check shapes, calls, pairing and text, put a user message first, then the budget,
    then a user message after an assistant message left last.

    `reply_last`: the history ends with an assistant message that makes no call
    (`ends_with_reply`), so the request may too. `reserved`: `ctx.budget` already leaves
    room for that user message (`closing_room`), so the budget steps keep no more.
    """
    details: list[str] = []
    current = messages
    closing: Message | None = None  # the user message to end with, once the budget is known
    budget_ctx = ctx
    for name, step in _steps():
        if name in _BUDGET_STEPS and closing is None and _left_last(current, reply_last):
            # The budget steps keep room for it: the request with it must fit.
            closing = continue_message()
            room = 0 if reserved else ctx.message_tokens(closing)
            budget_ctx = attrs.evolve(ctx, budget=Budget(max(0, ctx.budget.limit - room)))
        base = budget_ctx if name in _BUDGET_STEPS else ctx
        context = attrs.evolve(base, options=options[name]) if name in options else base
        try:
            outcome = step(current, context)
        except Exception as exc:
            details.append(f"{name} failed: {describe(exc)}")
            continue
        if outcome.changed:
            current = outcome.messages
            details += [f"{name}: {line}" for line in outcome.details]
    if _left_last(current, reply_last):  # a snip may have left out what was last
        details.append(
            f"{_END_AT_USER}: messages[{len(current) - 1}] is an assistant message left last, "
            "where the history ends with no reply of the assistant's to go on with: added a "
            f"user message after it ({CONTINUE!r})"
        )
        current = [*current, closing or continue_message()]
    return FinalStep(current, current is not messages, details)


_BUDGET_STEPS = frozenset(stage.name for stage in final_stages() if stage.phase == "budget")


def _steps() -> list[_Step]:
    """The final stages of the table, with the user-first step before the budget ones."""
    steps: list[_Step] = []
    for stage in final_stages():
        if stage.phase == "budget" and ("start_at_user", _start_at_user) not in steps:
            steps.append(("start_at_user", _start_at_user))
        steps.append((stage.name, stage.func))
    if ("start_at_user", _start_at_user) not in steps:
        steps.append(("start_at_user", _start_at_user))
    return steps
