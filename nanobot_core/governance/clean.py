"""The fast path: a history that is already clean and fits, recognised in one tight pass.

Most calls govern a history that needs nothing: every stage would find its
defect absent and hand the list on. Proving that through the general survey
means building the facts of every message for stages that will not run. This
pass instead reads each message once, in the shapes agents actually write
(text, calls and results of the usual form), counts its tokens by the default
estimate and follows the call/result runs; at the first thing it does not
recognise, the first defect, or as soon as the total cannot fit, it gives up
and the governor takes the general path.

So it only ever answers for histories the survey would find clean, with the
same token count; anything else costs it at most the messages it read. It is
written out in one piece because it is the whole cost of governing a clean
history.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nanobot_core.governance.checks import arguments_ok

__all__ = ["clean_tokens"]


def clean_tokens(messages: Sequence[Any], room: int, max_result_chars: int) -> int | None:
    """The tokens of `messages` if they are clean and fit in `room` tokens, else None.

    Clean: nothing any built-in stage would change, and no tool result longer
    than `max_result_chars`. None also means "not sure": the caller surveys.
    """
    try:
        return _clean_tokens(messages, room, max_result_chars)
    except (KeyError, TypeError):  # a key missing, an unhashable id: not a shape known here
        return None


def _clean_tokens(messages: Sequence[Any], room: int, max_result_chars: int) -> int | None:
    # Keys every message of the shape has are read by subscript (faster than .get): a
    # missing one raises KeyError, which means "not this shape".
    tokens = 0
    pending: set[str] = set()  # call ids of the current run still waiting for a result
    started = False  # seen a user message (the first after the system messages must be one)
    after_user = False  # the message before was a user message
    for message in messages:
        if type(message) is not dict:
            return None
        role = message["role"]
        content = message["content"]
        if type(content) is str:
            if content.isascii():
                text = (len(content) + 3) >> 2
            else:
                wide = _wide_tokens(content)
                if wide is None:
                    return None
                text = wide
        elif content is None and role == "assistant":
            text = 0
        else:
            return None
        size = len(message)
        if role == "user":
            if pending or size != 2 or after_user:
                return None
            started = after_user = True
            tokens += 5 + text  # overhead 4, "user" 1
            if tokens > room:
                return None
            continue
        after_user = False
        if role == "assistant":
            if pending or not started or (content and "[" in content):  # maybe a placeholder
                return None
            tokens += 7 + text  # overhead 4, "assistant" 3
            if size == 3 and (calls := message.get("tool_calls")) is not None:
                # The usual message with calls, which has no room for reasoning too.
                more = _calls_tokens(calls, pending)
                if more is None:
                    return None
                tokens += more
            elif size != 2:
                more = _assistant_extras(message, size, pending)
                if more is None:
                    return None
                tokens += more
        elif role == "tool":
            # Every id in `pending` is a non-empty ASCII string: so is one found in it.
            identifier = message["tool_call_id"]
            if (
                identifier not in pending
                or not content
                or len(content) > max_result_chars
                or content.isspace()
            ):
                return None
            pending.discard(identifier)
            tokens += 5 + text + ((len(identifier) + 3) >> 2)  # overhead 4, "tool" 1
            if size == 4:
                name = message["name"]
                if type(name) is not str or not name.isascii():
                    return None
                tokens += (len(name) + 3) >> 2
            elif size != 3:
                return None
        elif (role == "system" or role == "developer") and size == 2 and not pending:
            tokens += 4 + ((len(role) + 3) >> 2) + text  # "system" 2, "developer" 3
        else:
            return None
        # Checked on the way, not only at the end: a long history over the budget is given
        # up as soon as it cannot fit, not read to its end.
        if tokens > room:
            return None
    if pending or not started:
        return None
    return tokens


def _assistant_extras(message: dict[Any, Any], size: int, pending: set[str]) -> int | None:
    """Tokens of an assistant's reasoning and calls; the calls' ids go into `pending`."""
    tokens = 0
    expected = 2  # role and content
    reasoning = message.get("reasoning_content")
    if reasoning is not None:
        if type(reasoning) is not str:
            return None
        text = (len(reasoning) + 3) >> 2 if reasoning.isascii() else _wide_tokens(reasoning)
        if text is None:
            return None
        tokens += text
        expected += 1
    calls = message.get("tool_calls")
    if calls is None:
        return tokens if size == expected else None
    if size != expected + 1:
        return None
    more = _calls_tokens(calls, pending)
    return None if more is None else tokens + more


def _calls_tokens(calls: Any, pending: set[str]) -> int | None:
    """Tokens of an assistant's `calls` (its ``tool_calls``); their ids go into `pending`."""
    if type(calls) is not list or not calls:
        return None
    tokens = 0
    for call in calls:
        if type(call) is not dict or len(call) != 3:
            return None
        identifier = call["id"]
        function = call["function"]
        if (
            type(identifier) is not str
            or not identifier
            or identifier in pending
            or not identifier.isascii()
            or type(function) is not dict
            or len(function) != 2
            or call["type"] != "function"
        ):
            return None
        name = function["name"]
        arguments = function["arguments"]
        if type(name) is not str or not name.isascii() or not name.strip():
            return None
        if type(arguments) is not str or not arguments_ok(arguments):
            return None
        text = (len(arguments) + 3) >> 2 if arguments.isascii() else _wide_tokens(arguments)
        if text is None:
            return None
        pending.add(identifier)
        # "function", the type, counts 2.
        tokens += 2 + ((len(identifier) + 3) >> 2) + ((len(name) + 3) >> 2) + text
    return tokens


def _wide_tokens(text: str) -> int | None:
    """Tokens of text that is not ASCII, or None when it holds a lone surrogate."""
    try:
        return -(-len(text.encode("utf-8")) // 4)  # strict: a lone surrogate raises
    except UnicodeEncodeError:
        return None
