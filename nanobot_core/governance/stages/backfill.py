"""`backfill_results`: a placeholder result for every call that never got one.

A call without a result (the process died mid-call, a result was lost) makes
every later request fail. The placeholder is a plain tool message whose text
says the call was interrupted; it holds no time and no random id, so
governing the same history twice gives the same request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nanobot_core.governance.messages import Message, call_id, call_name
from nanobot_core.governance.stage import StageOutcome
from nanobot_core.governance.survey import Defect, Splice

if TYPE_CHECKING:
    from nanobot_core.governance.stage import StageContext

__all__ = ["INTERRUPTED", "backfill_results", "synthesized_result"]

#: The content of a synthesized result.
INTERRUPTED = "[No result: the tool call was interrupted before it returned.]"


def synthesized_result(identifier: str, name: str | None = None) -> Message:
    """The placeholder result for the call `identifier` of the tool `name`.

    It carries the tool's ``name`` as every other tool message does (some
    Gemini-backed endpoints require it); a call without a usable name gets none.
    """
    result: Message = {"role": "tool", "tool_call_id": identifier}
    if name is not None:
        result["name"] = name
    result["content"] = INTERRUPTED
    return result


def backfill_results(messages: list[Any], ctx: StageContext) -> StageOutcome:
    """Give every call without a result in the run after it a placeholder result."""
    survey = ctx.survey(messages)
    if not survey.has(Defect.UNANSWERED_CALLS):
        return StageOutcome.unchanged(messages)
    result = Splice(messages, ctx.facts)
    details: list[str] = []
    copied = 0
    for assistant, last, unanswered in survey.open_runs:  # the runs the survey found open
        missing: dict[str, str | None] = {}  # id -> the tool's name, in the order of the calls
        for call in messages[assistant]["tool_calls"]:
            identifier = call_id(call)
            if identifier in unanswered and identifier not in missing:
                missing[identifier] = call_name(call)
        result.copy(copied, last + 1)
        added = [synthesized_result(identifier, name) for identifier, name in missing.items()]
        for placeholder in added:  # read back as no result of the history, whatever its id
            ctx.facts.made_from(placeholder, None)
        result.add(*added)
        copied = last + 1
        details.append(
            f"messages[{assistant}]: no result for {', '.join(map(repr, missing))}: "
            "added a placeholder result"
        )
    result.copy(copied)
    return StageOutcome(result.done(), changed=True, details=details)
