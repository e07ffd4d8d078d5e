"""`backfill_results`: a placeholder result for every call that never got one.

A call without a result (the process died mid-call, a result was lost) makes
every later request fail. The placeholder is a plain tool message whose text
says the call was interrupted; it holds no time and no random id, so
governing the same history twice gives the same request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nanobot_core.governance.messages import Message, call_id
from nanobot_core.governance.stage import StageOutcome
from nanobot_core.governance.survey import Defect, Splice

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
    survey = ctx.survey(messages)
    if not survey.has(Defect.UNANSWERED_CALLS):
        return StageOutcome.unchanged(messages)
    result = Splice(messages, ctx.facts)
    details: list[str] = []
    copied = 0
    for assistant, last, unanswered in survey.open_runs:  # the runs the survey found open
        missing: list[str] = []
        for call in messages[assistant]["tool_calls"]:  # in the order of the calls
            identifier = call_id(call)
            if identifier in unanswered and identifier not in missing:
                missing.append(identifier)
        result.copy(copied, last + 1)
        result.add(*(synthesized_result(identifier) for identifier in missing))
        copied = last + 1
        details.append(
            f"messages[{assistant}]: no result for {', '.join(map(repr, missing))}: "
            "added a placeholder result"
        )
    result.copy(copied)
    return StageOutcome(result.done(), changed=True, details=details)
