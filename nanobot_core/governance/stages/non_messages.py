"""`drop_non_messages`: entries that are not chat messages, and session bookkeeping.

A session file can hold stray values (a number, a string, a dict without a
role) or messages of roles no provider knows (the legacy ``function`` role, a
tool's private ``critic`` notes). They are left out of the model copy. The
``_meta`` key (session bookkeeping: times, usage, rounds) is never sent either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nanobot_core.governance.messages import KNOWN_ROLES, preview, without_key
from nanobot_core.governance.stage import StageOutcome
from nanobot_core.governance.survey import Defect

if TYPE_CHECKING:
    from nanobot_core.governance.stage import StageContext

__all__ = ["META_KEY", "drop_non_messages"]

META_KEY = "_meta"


def drop_non_messages(messages: list[Any], ctx: StageContext) -> StageOutcome:
    """Drop entries that are not dicts or have an unknown role; strip ``_meta`` from the rest."""
    if not ctx.survey(messages).has(Defect.NON_MESSAGES | Defect.META):
        return StageOutcome.unchanged(messages)
    kept = []
    details = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            details.append(
                f"messages[{index}]: dropped a {type(message).__name__}, not a message: "
                f"{preview(message)}"
            )
            continue
        role = message.get("role")
        if not (isinstance(role, str) and role in KNOWN_ROLES):
            details.append(
                f"messages[{index}]: dropped a message with unknown role {preview(role)}"
            )
            continue
        if META_KEY in message:
            message = without_key(message, META_KEY)
            details.append(f"messages[{index}]: removed session bookkeeping ({META_KEY})")
        kept.append(message)
    if not details:
        return StageOutcome.unchanged(messages)
    return StageOutcome(kept, changed=True, details=details)
