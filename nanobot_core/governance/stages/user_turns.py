"""`merge_user_turns`: never two user messages in a row.

A provider call that failed leaves the user's message in the session, and the
next turn adds another: ``[system, user, user]``. The chat templates of many
local servers (vLLM, llama.cpp with strict templates) refuse that, and the
session is wedged. Each run of user messages becomes one message: their
contents in order (text joined by a blank line; as content parts when any of
them has parts), with the runtime block of the newest one last. Runtime
blocks of the older ones are left out: they describe turns that never got an
answer, and the model reads the current time and channel from the last one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nanobot_core.governance.messages import Message, role_of, with_changes
from nanobot_core.governance.stage import StageOutcome
from nanobot_core.governance.survey import Defect, Splice
from nanobot_core.prompt.runtime import RUNTIME_BLOCK_CLOSE, RUNTIME_BLOCK_OPEN

if TYPE_CHECKING:
    from nanobot_core.governance.stage import StageContext

__all__ = ["merge_user_turns"]

_SEPARATOR = "\n\n"


def _split_block(text: str) -> tuple[str, str | None]:
    """(`text` without a runtime block at its end, that block or None)."""
    if not text.rstrip().endswith(RUNTIME_BLOCK_CLOSE):
        return text, None
    start = text.rfind(RUNTIME_BLOCK_OPEN)
    if start < 0:
        return text, None
    return text[:start].rstrip("\n"), text[start:]


def _parts(content: Any) -> tuple[list[Any], str | None]:
    """The content as a list of parts without a trailing runtime block, and that block."""
    if content is None or content == "":
        return [], None
    if isinstance(content, str):
        body, block = _split_block(content)
        return ([{"type": "text", "text": body}] if body else []), block
    if not isinstance(content, list):
        return [content], None
    parts = list(content)
    last = parts[-1] if parts else None
    if isinstance(last, dict) and last.get("type") == "text" and isinstance(last.get("text"), str):
        body, block = _split_block(last["text"])
        if block is not None:
            parts[-1:] = [with_changes(last, text=body)] if body else []
            return parts, block
    return parts, None


def _merged(run: list[Message]) -> Message:
    """One user message holding the contents of `run` in order, the newest runtime block last."""
    parts: list[Any] = []
    block: str | None = None
    for message in run:
        more, found = _parts(message.get("content"))
        parts += more
        block = found if found is not None else block
    if all(isinstance(m.get("content"), str | None) for m in run):
        texts = [part["text"] for part in parts]
        if block is not None:
            texts.append(block)
        return with_changes(run[0], content=_SEPARATOR.join(texts))
    if block is not None:
        parts.append({"type": "text", "text": block})
    return with_changes(run[0], content=parts)


def merge_user_turns(messages: list[Any], ctx: StageContext) -> StageOutcome:
    """Merge every run of user messages into one, content in order, the runtime block last."""
    if not ctx.survey(messages).has(Defect.USER_TURNS):
        return StageOutcome.unchanged(messages)
    result = Splice(messages, ctx.facts)
    details: list[str] = []
    copied = 0
    index = 0
    while index < len(messages):
        end = index + 1
        if role_of(messages[index]) == "user":
            while end < len(messages) and role_of(messages[end]) == "user":
                end += 1
        if end - index > 1:
            result.copy(copied, index)
            merged = _merged(messages[index:end])
            result.add(merged)
            # Read back as the first of them: the turn it opens starts there, whatever a
            # repair dropped between them (see `FactsCache.made_from`).
            ctx.facts.made_from(merged, messages[index])
            details.append(
                f"messages[{index}..{end - 1}]: merged {end - index} user messages in a row "
                "into one"
            )
            copied = end
        index = end
    if not details:
        return StageOutcome.unchanged(messages)
    result.copy(copied)
    return StageOutcome(result.done(), changed=True, details=details)
