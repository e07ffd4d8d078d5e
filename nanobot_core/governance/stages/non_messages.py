"""`drop_non_messages`: entries that are not chat messages, and session bookkeeping.

A session file can hold stray values (a number, a string, a dict without a
role) or messages of roles no provider knows (a tool's private ``critic``
notes). They are left out of the model copy. The ``_meta`` key (session
bookkeeping: times, usage, rounds) is never sent either.

A message of the legacy ``function`` role (OpenAI's functions API: the answer
to a ``function_call``) holds a real result, so it is not dropped: it becomes
a tool result without an id, which `strip_malformed_calls` pairs with the
legacy call it answers (made a tool call with an id), as it pairs any result
without an id. One that answers nothing is then dropped by `pair_results`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nanobot_core.governance.messages import KNOWN_ROLES, preview, without_key
from nanobot_core.governance.stage import StageOutcome
from nanobot_core.governance.survey import Defect

if TYPE_CHECKING:
    from nanobot_core.governance.stage import StageContext

__all__ = ["META_KEY", "drop_non_messages", "non_message"]

META_KEY = "_meta"


def non_message(entry: Any) -> str | None:
    """What `entry` is when it is no chat message, which is dropped (None: a message, kept).

    The one rule for this stage and for the governor's report of a stage that
    returned such entries. A legacy ``function`` message is a message (see above).
    """
    if not isinstance(entry, dict):
        return f"a {type(entry).__name__}, not a message: {preview(entry)}"
    role = entry.get("role")
    if role == "function" or (isinstance(role, str) and role in KNOWN_ROLES):
        return None
    return f"a message with unknown role {preview(role)}"


def drop_non_messages(messages: list[Any], ctx: StageContext) -> StageOutcome:
    """Drop entries that are not dicts or have an unknown role; strip ``_meta`` from the rest."""
    if not ctx.survey(messages).has(Defect.NON_MESSAGES | Defect.META):
        return StageOutcome.unchanged(messages)
    kept = []
    details = []
    for index, message in enumerate(messages):
        what = non_message(message)
        if what is not None:
            details.append(f"messages[{index}]: dropped {what}")
            continue
        if message.get("role") == "function":
            message = _legacy_result(message)
            details.append(
                f"messages[{index}]: a legacy function message became a tool result "
                "without an id, to be paired with the legacy call it answers"
            )
        if META_KEY in message:
            message = without_key(message, META_KEY)
            details.append(f"messages[{index}]: removed session bookkeeping ({META_KEY})")
        kept.append(message)
    if not details:
        return StageOutcome.unchanged(messages)
    return StageOutcome(kept, changed=True, details=details)


def _legacy_result(message: dict[Any, Any]) -> dict[Any, Any]:
    """A legacy ``function`` message as a tool result without an id (its other keys kept)."""
    result = {key: value for key, value in message.items() if key not in ("role", "tool_call_id")}
    return {"role": "tool", "tool_call_id": "", **result}
