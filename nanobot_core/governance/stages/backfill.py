"""`backfill_results`: a placeholder result for every call that never got one.

A call without a result (the process died mid-call, a result was lost) makes
every later request fail. The placeholder is a plain tool message whose text
says the call was interrupted; it holds no time and no random id, so
governing the same history twice gives the same request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nanobot_core.governance.messages import Message, call_id, tool_runs
from nanobot_core.governance.stage import StageOutcome
from nanobot_core.governance.survey import Defect

if TYPE_CHECKING:
    from nanobot_core.governance.context import StageContext

__all__ = ["INTERRUPTED", "backfill_results", "synthesized_result"]

#: The content of a synthesized result.
INTERRUPTED = "[No result: the tool call was interrupted before it returned.]"


def synthesized_result(identifier: str) -> Message:
    """The placeholder result for the call `identifier`."""
    return {"role": "tool", "tool_call_id": identifier, "content": INTERRUPTED}


def backfill_results(messages: list[Any], ctx: StageContext) -> StageOutcome:
    """Give every call without a result in the run after it a placeholder result."""
    if not ctx.survey(messages).has(Defect.UNANSWERED_CALLS):
        return StageOutcome.unchanged(messages)
    additions: dict[int, list[Message]] = {}  # index of a run's last message -> placeholders
    details: list[str] = []
    for assistant, run in tool_runs(messages):
        answered = {
            identifier
            for i in run
            if isinstance(identifier := messages[i].get("tool_call_id"), str)
        }
        missing: list[str] = []
        for call in messages[assistant]["tool_calls"]:
            identifier = call_id(call)
            if identifier and identifier not in answered and identifier not in missing:
                missing.append(identifier)
        if missing:
            additions[run.stop - 1] = [synthesized_result(i) for i in missing]
            details.append(
                f"messages[{assistant}]: no result for {', '.join(map(repr, missing))}: "
                "added a placeholder result"
            )
    if not additions:
        return StageOutcome.unchanged(messages)
    result: list[Any] = []
    for index, message in enumerate(messages):
        result.append(message)
        result += additions.get(index, ())
    return StageOutcome(result, changed=True, details=details)
