"""`strip_placeholders`: assistant messages that only stand in for an elided message.

Agents that compact their history leave lines such as "[Previous assistant
message omitted.]". Sent back, they teach the model to answer the same way.
A message that also makes a tool call is kept (its calls matter). Option
``patterns``: extra exact texts to treat as placeholders.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nanobot_core.governance.checks import is_placeholder_message
from nanobot_core.governance.messages import preview
from nanobot_core.governance.stage import StageOption, StageOutcome
from nanobot_core.governance.survey import Defect

if TYPE_CHECKING:
    from nanobot_core.governance.stage import StageContext

__all__ = ["PLACEHOLDER_OPTIONS", "strip_placeholders"]

#: What ``[governance.stages.strip_placeholders]`` may hold (see `Stage.options`).
PLACEHOLDER_OPTIONS: dict[str, StageOption] = {
    "patterns": StageOption(
        list[str], "more exact texts that make an assistant message a placeholder"
    ),
}


def strip_placeholders(messages: list[Any], ctx: StageContext) -> StageOutcome:
    """Drop assistant messages that only say a placeholder and make no tool call."""
    extra = tuple(str(p) for p in ctx.option("patterns", ()))
    if not extra and not ctx.survey(messages).has(Defect.PLACEHOLDERS):
        return StageOutcome.unchanged(messages)
    kept = []
    details = []
    for index, message in enumerate(messages):
        if is_placeholder_message(message, extra):
            details.append(f"messages[{index}]: dropped placeholder {preview(message['content'])}")
        else:
            kept.append(message)
    if not details:
        return StageOutcome.unchanged(messages)
    return StageOutcome(kept, changed=True, details=details)
