"""Small helpers over chat messages in the OpenAI shape, shared by the stages.

Nothing here mutates its arguments: a changed message is always a new dict
(`with_changes`), and every untouched dict and string is shared, never copied.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import is_
from typing import Any

from nanobot_core._json_boundary import MAX_DEPTH

__all__ = [
    "KNOWN_ROLES",
    "ONE_TEXT_KEYS",
    "STRUCTURAL_KEYS",
    "SYSTEM_ROLES",
    "TOOL_BLOCK_TYPES",
    "CallNames",
    "Message",
    "any_text_passes",
    "block_type",
    "call_id",
    "call_name",
    "container_copy",
    "content_text",
    "has_tool_blocks",
    "leading_system_count",
    "nesting_fault",
    "result_call_id",
    "role_of",
    "tool_calls_of",
    "with_changes",
    "without_key",
]

Message = dict[str, Any]

SYSTEM_ROLES = frozenset({"system", "developer"})
KNOWN_ROLES = SYSTEM_ROLES | {"user", "assistant", "tool"}


#: The ``type`` of the Anthropic content blocks that carry a call or its result.
TOOL_BLOCK_TYPES = frozenset({"tool_use", "tool_result"})


def block_type(block: Any) -> str | None:
    """The ``type`` of a content block, when it is a dict with a string type."""
    kind = block.get("type") if isinstance(block, dict) else None
    return kind if isinstance(kind, str) else None


def has_tool_blocks(message: Any) -> bool:
    """Whether a message's content holds an Anthropic ``tool_use`` or ``tool_result`` block."""
    content = message.get("content") if type(message) is dict else None
    return type(content) is list and any(
        type(block) is dict and block_type(block) in TOOL_BLOCK_TYPES for block in content
    )


def role_of(message: Any) -> Any:
    """The role of a message, or None for anything that is not a dict."""
    return message.get("role") if isinstance(message, dict) else None


def tool_calls_of(message: Any) -> list[Any]:
    """The tool calls of an assistant message as a list (empty when it has none or garbage)."""
    if role_of(message) != "assistant":
        return []
    calls = message.get("tool_calls")
    return calls if isinstance(calls, list) else []


def call_id(call: Any) -> str | None:
    """The id of a call when it is a non-empty string, else None."""
    value = call.get("id") if isinstance(call, dict) else None
    return value if isinstance(value, str) and value else None


def result_call_id(message: Any) -> str | None:
    """The id of the call a tool message answers, or None when it names none usably.

    The one place that reads the link from a result to its call: OpenAI's
    ``tool_call_id`` string, or else SWE-agent's ``tool_call_ids`` list when it
    holds exactly one string (a result answers one call). Anything else links
    to no call, and the result counts as a stray.
    """
    if not isinstance(message, dict):
        return None
    identifier = message.get("tool_call_id")
    if type(identifier) is str:
        return identifier
    listed = message.get("tool_call_ids")
    if type(listed) is list and len(listed) == 1 and type(listed[0]) is str:
        return listed[0]
    return None


def call_name(call: Any) -> str | None:
    """The function name of a call when it is a non-blank string, else None."""
    function = call.get("function") if isinstance(call, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) and name.strip() else None


def with_changes(message: Mapping[str, Any], **changes: Any) -> Message:
    """A new message dict: `message` with `changes` applied (unknown keys kept, in order)."""
    updated = dict(message)
    updated.update(changes)
    return updated


def without_key(message: Mapping[str, Any], key: str) -> Message:
    """A new message dict without `key`."""
    return {k: v for k, v in message.items() if k != key}


def content_text(content: Any) -> str | None:
    """The text of a content value: the string itself, or the joined text of text parts.

    None when the content holds anything else than text (images, files, ...),
    because such content cannot be cut or saved as text without losing it.
    """
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text"):
                return None
            text = part.get("text")
            if not isinstance(text, str):
                return None
            texts.append(text)
        return "".join(texts)
    return None


class CallNames:
    """The name of the call each tool message answers, found run by run as it is asked for.

    The name is that of the first named call with the message's id in the
    assistant message its run of tool messages follows. Each run is read once
    while the questions come in order, so asking for every result is linear.
    """

    def __init__(self, messages: Sequence[Any]) -> None:
        self._messages = messages
        self._run: tuple[int, int, dict[str, str]] = (0, -1, {})  # first, last index, names

    def __call__(self, index: int) -> str | None:
        """The name for the tool message at `index`, or None."""
        first, last, names = self._run
        if not first <= index <= last:
            first, last, names = self._run = self._read_run(index)
        identifier = result_call_id(self._messages[index])
        return names.get(identifier) if identifier is not None else None

    def _read_run(self, index: int) -> tuple[int, int, dict[str, str]]:
        messages = self._messages
        first = last = index
        while first > 0 and role_of(messages[first - 1]) == "tool":
            first -= 1
        while last + 1 < len(messages) and role_of(messages[last + 1]) == "tool":
            last += 1
        calls = tool_calls_of(messages[first - 1]) if first > 0 else []
        names: dict[str, str] = {}
        for call in calls:
            identifier, name = call_id(call), call_name(call)
            if identifier and name and identifier not in names:
                names[identifier] = name
        return first, last, names


def leading_system_count(messages: Sequence[Any]) -> int:
    """How many messages at the start are system (or developer) messages."""
    count = 0
    for message in messages:
        role = role_of(message)
        if not (isinstance(role, str) and role in SYSTEM_ROLES):
            break
        count += 1
    return count


def starts_with(longer: Sequence[Any], shorter: Sequence[Any]) -> bool:
    """Whether `longer` starts with the very objects of `shorter` (by identity, at C speed).

    How the governor tells that a list is an earlier one plus what was appended.
    """
    return len(longer) >= len(shorter) and all(map(is_, shorter, longer))


# Values a copy shares as they are: immutable, and never a container to mend.
_LEAVES = frozenset({str, int, float, bool, type(None)})


def container_copy(value: Any) -> Any:
    """A copy of every dict and list inside `value`, sharing the (immutable) leaves.

    Cheaper than a deep copy: strings, the bulk of a history, are never
    duplicated. Used to hand an untrusted stage something it may mutate.
    """
    kind = type(value)
    if kind is dict:  # the common case, copied at C speed and then mended where nested
        copy = dict.copy(value)
        if not _LEAVES.issuperset(map(type, copy.values())):  # a plain message: done
            for key, item in copy.items():
                if type(item) not in _LEAVES and isinstance(item, dict | list):
                    copy[key] = container_copy(item)
        return copy
    if kind is list:
        return [item if type(item) in _LEAVES else container_copy(item) for item in value]
    if isinstance(value, dict):
        return {key: container_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [container_copy(item) for item in value]
    return value


#: The keys a stage's prefilter is not asked about (nothing under them is a text it is
#: given): what names and links a message, not what it says.
STRUCTURAL_KEYS = frozenset({"role", "type", "name", "id", "tool_call_id", "tool_use_id"})
#: A message with only these keys holds one text at most: its content.
ONE_TEXT_KEYS = STRUCTURAL_KEYS | {"content"}
# An assistant message of the usual shape, with calls or reasoning: its texts are its
# content, its reasoning and the arguments of each call (a call's id and type, a
# function's name are structure).
_CALLING = ONE_TEXT_KEYS | {"tool_calls", "reasoning_content"}
_CALL_KEYS = STRUCTURAL_KEYS | {"function"}
_FUNCTION_KEYS = STRUCTURAL_KEYS | {"arguments"}


def _call_texts(message: dict[str, Any]) -> list[str] | None:
    """The texts of a message with calls or reasoning of the usual shape (None: another)."""
    texts = []
    for key in ("content", "reasoning_content"):
        text = message.get(key)
        if type(text) is str:
            texts.append(text)
        elif text is not None:
            return None
    calls = message.get("tool_calls")
    if calls is None:
        return texts
    if type(calls) is not list:
        return None
    for call in calls:
        function = call.get("function") if type(call) is dict else None
        if type(function) is not dict or not _CALL_KEYS.issuperset(call):
            return None
        arguments = function.get("arguments")
        if type(arguments) is not str or not _FUNCTION_KEYS.issuperset(function):
            return None
        texts.append(arguments)
    return texts


def any_text_passes(message: Any, test: Callable[[str], object]) -> bool:
    """Whether `test` is true of a text in `message`: what a stage's prefilter is asked.

    The texts are the string values at any depth, except what is under
    `STRUCTURAL_KEYS`. Iterative, so a deeply nested entry costs its size and
    never the recursion limit. A value of another type than a string, a dict, a
    list, a number, a bool or None (a tuple, an object) counts as passing: what
    it holds is not looked into.
    """
    if type(message) is dict:
        if ONE_TEXT_KEYS.issuperset(message):
            content = message.get("content")  # the commonest messages: one text or none
            if type(content) is str:
                return bool(test(content))
            if content is None:
                return False
        elif _CALLING.issuperset(message):
            texts = _call_texts(message)
            if texts is not None:
                return any(map(test, texts))
    pending = [message]
    while pending:
        container = pending.pop()
        if isinstance(container, dict):
            values: Any = (v for k, v in container.items() if k not in STRUCTURAL_KEYS)
        elif isinstance(container, list):
            values = container
        else:
            values = (container,)
        for value in values:
            kind = type(value)
            if kind is str or (kind not in _LEAVES and isinstance(value, str)):
                if test(value):
                    return True
            elif kind not in _LEAVES:
                if not isinstance(value, dict | list):
                    return True
                pending.append(value)
    return False


def preview(value: Any, limit: int = 60) -> str:
    """A short repr of `value` for the report."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _inside(value: Any) -> Iterable[Any] | None:
    """What a dict or list (as the token count reads them: mappings, tuples) holds, else None."""
    if isinstance(value, str):
        return None
    if isinstance(value, Mapping):
        return value.values()
    if isinstance(value, list | tuple):
        return value
    return None


def nesting_fault(value: Any) -> str | None:
    """Why no JSON can hold `value`, or None: a dict or list in it holds itself, or its dicts
    and lists nest deeper than `MAX_DEPTH` levels (`value` itself is the first).

    Iterative, and each container is read once however often it is shared: it
    answers for any value, even where the recursion limit is near.
    """
    children = _inside(value)
    if children is None:
        return None
    heights: dict[int, int] = {}  # id -> levels, of each container read to its end
    path = {id(value)}  # the containers being read: one met again holds itself
    # Per container being read: it, what is left of it, its tallest child so far.
    stack: list[list[Any]] = [[value, iter(children), 0]]
    while stack:
        top = stack[-1]
        for child in top[1]:
            inner = _inside(child)
            if inner is None:
                continue
            key = id(child)
            if key in path:
                return "holds a dict or list that contains itself (no JSON can)"
            known = heights.get(key)
            if known is None:
                path.add(key)
                stack.append([child, iter(inner), 0])
                break
            top[2] = max(top[2], known)
        else:
            stack.pop()
            path.discard(id(top[0]))
            height = heights[id(top[0])] = top[2] + 1
            if stack:
                stack[-1][2] = max(stack[-1][2], height)
    levels = heights[id(value)]
    if levels > MAX_DEPTH:
        return f"nests {levels} levels deep (a session line may nest {MAX_DEPTH})"
    return None
