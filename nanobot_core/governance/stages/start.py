"""The history after the system messages starts at a user message, and is never empty.

Providers reject a conversation that opens with an assistant or tool turn,
and a request without messages. Rather than dropping what comes first (the
model would lose it), a minimal user message is put in front of it.
"""

from __future__ import annotations

from typing import Any

from nanobot_core.governance.messages import Message, leading_system_count, role_of

__all__ = ["CONTINUE", "continue_message", "ensure_user_start"]

#: The text of the user message synthesized when the history has none to start with.
CONTINUE = "(continue)"


def continue_message() -> Message:
    """The synthesized user message."""
    return {"role": "user", "content": CONTINUE}


def ensure_user_start(messages: list[Any]) -> tuple[list[Any], str | None]:
    """`messages` with a user message first after the system messages, and what was done."""
    start = leading_system_count(messages)
    if start < len(messages) and role_of(messages[start]) == "user":
        return messages, None
    if start == len(messages):
        what = "no message follows the system messages: added a user message"
    else:
        what = (
            f"messages[{start}] is a {role_of(messages[start])!r} message, not a user message: "
            "inserted a user message before it"
        )
    fixed = [*messages[:start], continue_message(), *messages[start:]]
    return fixed, f"{what} ({CONTINUE!r})"
