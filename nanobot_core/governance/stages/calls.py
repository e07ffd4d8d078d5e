"""`strip_malformed_calls`: tool calls a provider would reject, repaired or dropped.

A call without a usable name cannot be repaired (nothing says what was
called): it is dropped, and so is its result when the run after the message
holds one (without that, a stale result would wedge the session for good).
Everything else is repaired in place, deterministically:

- a missing or empty id gets ``call_`` + a hash of (message index, position,
  name, arguments), and a result in the run after it with an empty id gets
  the same id (the k-th empty-id call pairs with the k-th empty-id result);
- an id that repeats inside one message gets a ``_<position>`` suffix, and
  the k-th result carrying that id is renamed with it;
- arguments become a JSON-object string (see `normalise_arguments`);
- ``type`` becomes ``"function"``; a flat ``{"name", "arguments"}`` call gets
  its ``function`` object.

A legacy ``function_call`` (OpenAI's functions API, which some servers still
answer with) becomes the message's one call when it has no ``tool_calls``,
with an id made as for a missing one, so that it is paired with a result (a
placeholder, when nobody answered it) instead of being sent back unanswered;
otherwise, or when it names no function, it is removed.

An assistant message left with no calls loses its ``tool_calls`` key, and is
dropped when it has no content either, unless a call of it was dropped. A
message that lost calls keeps one notice at the end of its content saying how
many and why: the first ``Error...`` result of a dropped call in its run (what
the runner answers a nameless call), else that a call needs a tool name. Told
nothing, the model would see its reply without the calls it made (or not at
all) and make the same nameless call again, turn after turn. The notice is
made from the message and its run alone, so the same history gives the same
bytes, and what it makes holds no dropped call, so governing it again adds none.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from nanobot_core._clip import quoted
from nanobot_core.governance.messages import (
    Message,
    content_text,
    preview,
    result_call_id,
    role_of,
    with_changes,
    without_key,
)
from nanobot_core.governance.stage import StageOutcome
from nanobot_core.governance.stages.arguments import normalise_arguments
from nanobot_core.governance.survey import Defect, Splice

if TYPE_CHECKING:
    from nanobot_core.governance.stage import StageContext

__all__ = ["NO_NAME_REASON", "dropped_calls_notice", "generated_call_id", "strip_malformed_calls"]

# The explanation kept from a dropped result is cut here: it is our own error text,
# but the result could have been written by anything.
_MAX_NOTE_CHARS = 600

# A bracketed paragraph ending a result: the hint the runner adds to every error result.
_TRAILING_HINT = re.compile(r"\n\n\[[^\[\]\n]*\]\s*\Z")

#: Why a dropped call did not run when its run holds no ``Error...`` result to say so.
NO_NAME_REASON = "A tool call needs the name of the tool to run: call tools by their names."


def generated_call_id(index: int, position: int, name: str, arguments: str) -> str:
    """The deterministic id given to a call that has none (no time, no randomness)."""
    seed = f"{index}\x1f{position}\x1f{name}\x1f{arguments}".encode("utf-8", "surrogatepass")
    return "call_" + hashlib.sha256(seed).hexdigest()[:24]


def _plain_id(value: Any) -> str:
    return value if isinstance(value, str) and value else ""


def _no_shift() -> int:
    return 0


@attrs.define
class _Repair:
    """The repaired calls of one assistant message and what happened to its run."""

    index: int
    # Added to `index` in generated ids: messages the governor left out before this list.
    index_shift: Callable[[], int] = _no_shift
    calls: list[Any] = attrs.field(factory=list)
    changed: bool = False
    details: list[str] = attrs.field(factory=list)
    # (original id or "", occurrence) of each call -> the call's new id, or None if dropped
    slots: dict[tuple[str, int], str | None] = attrs.field(factory=dict)
    # the calls of the message's tool_calls list dropped, for want of a usable name
    dropped: int = 0
    # the first ``Error...`` result of a dropped call, if the run held one
    dropped_result: str | None = None
    # (renamed result, the result it was made from): read back as the latter across calls
    renamed: list[tuple[Any, Any]] = attrs.field(factory=list)

    def note(self, position: int | None, text: str) -> None:
        where = f"messages[{self.index}]" + (
            f".tool_calls[{position}]" if position is not None else ""
        )
        self.details.append(f"{where}: {text}")
        self.changed = True


def _function_of(call: dict[str, Any]) -> dict[str, Any] | None:
    function = call.get("function")
    if isinstance(function, dict):
        return function
    if isinstance(call.get("name"), str):  # a flat call: {"id", "name", "arguments"}
        return {"name": call["name"], "arguments": call.get("arguments")}
    return None


def _repair_call(repair: _Repair, position: int, call: Any) -> dict[str, Any] | None:
    """The call with name, type and arguments made valid (id untouched), or None to drop it."""
    if not isinstance(call, dict):
        repair.note(position, f"dropped: a {type(call).__name__}, not a call {preview(call)}")
        return None
    function = _function_of(call)
    if function is None:
        repair.note(
            position, f"dropped: function is {preview(call.get('function'))}, not an object"
        )
        return None
    name = function.get("name")
    if not isinstance(name, str) or not name.strip():
        repair.note(position, f"dropped: the call has no name (name {preview(name)})")
        return None
    flat = call.get("function") is not function
    if flat:
        repair.note(position, "name and arguments moved into a function object")
    arguments, note = normalise_arguments(function.get("arguments"))
    if note:
        repair.note(position, note)
    repaired: dict[str, Any] = call
    if note or flat:
        repaired = {k: v for k, v in call.items() if not (flat and k in ("name", "arguments"))}
        repaired["function"] = with_changes(function, arguments=arguments)
    if repaired.get("type") != "function":
        repair.note(position, f"type {preview(repaired.get('type'))} set to 'function'")
        repaired = with_changes(repaired, type="function")
    return repaired


def _assign_ids(
    repair: _Repair, raw_calls: list[Any], repaired: list[dict[str, Any] | None]
) -> None:
    """Give every kept call a unique non-empty id and record each call's result slot."""
    used: set[str] = set()
    seen: dict[str, int] = {}
    for position, (raw, call) in enumerate(zip(raw_calls, repaired, strict=True)):
        original = _plain_id(raw.get("id") if isinstance(raw, dict) else None)
        occurrence = seen.get(original, 0)
        seen[original] = occurrence + 1
        slot = (original, occurrence)
        if call is None:
            repair.slots[slot] = None
            repair.dropped += 1
            continue
        identifier = original
        if not identifier:
            function = call["function"]
            identifier = generated_call_id(
                repair.index + repair.index_shift(),
                position,
                function["name"],
                function["arguments"],
            )
            repair.note(position, f"missing id {preview(raw.get('id'))} set to {identifier!r}")
        elif identifier in used:
            identifier = f"{original}_{position}"
            repair.note(
                position,
                f"id {quoted(original)} repeats in this message: renamed {quoted(identifier)}",
            )
        while identifier in used:
            identifier += "_"
        used.add(identifier)
        if call.get("id") != identifier:
            call = with_changes(call, id=identifier)
        repair.slots[slot] = identifier
        repair.calls.append(call)


def _repair_run(repair: _Repair, run: Sequence[Any]) -> list[Any]:
    """The run after the message with results renamed to their call's new id, or dropped."""
    kept: list[Any] = []
    seen: dict[str, int] = {}
    for offset, result in enumerate(run):
        linked = result_call_id(result)
        original = _plain_id(linked)
        occurrence = seen.get(original, 0)
        seen[original] = occurrence + 1
        slot = (original, occurrence)
        where = f"messages[{repair.index + 1 + offset}]"
        if slot not in repair.slots:
            kept.append(result)
        elif repair.slots[slot] is None:
            repair.details.append(f"{where}: dropped the result of a dropped call")
            repair.changed = True
            text = content_text(result.get("content"))
            if repair.dropped_result is None and text and text.lstrip().startswith("Error"):
                repair.dropped_result = text
        elif repair.slots[slot] != linked:
            new_id = repair.slots[slot]
            repair.details.append(f"{where}: result id {preview(original)} set to {new_id!r}")
            repair.changed = True
            renamed = with_changes(result, tool_call_id=new_id)
            repair.renamed.append((renamed, result))
            kept.append(renamed)
        else:
            kept.append(result)
    return kept


def _has_content(message: Message) -> bool:
    content = message.get("content")
    return content is not None and content != "" and content != []


def dropped_calls_notice(dropped: int, count: int, reason: str | None = None) -> str:
    """The notice kept in a reply `dropped` of whose `count` tool calls were left out.

    `reason` is the first ``Error...`` result of a dropped call (cut past 600
    characters, a bracketed hint at its end left out), or None for `NO_NAME_REASON`.
    Deterministic: the same arguments give the same text.
    """
    # The runner ends its error results with a bracketed hint; inside the notice's own
    # brackets it would nest them (``...]]``), and the notice already says what to do.
    reason = NO_NAME_REASON if reason is None else _TRAILING_HINT.sub("", reason).strip()
    if len(reason) > _MAX_NOTE_CHARS:
        reason = reason[:_MAX_NOTE_CHARS] + "..."
    if dropped >= count:
        head = f"None of the {count} tool call(s) of this reply could run."
    else:
        left = "it was" if dropped == 1 else "they were"
        head = f"{dropped} of the {count} tool call(s) of this reply could not run: {left}"
        head += " left out."
    return f"[{head} {reason}]".replace(". ]", ".]")


def _with_note(content: Any, note: str) -> Any:
    """`content` with `note` after it: a string, or one more text part of a list of parts.

    Content that already ends with `note` is returned as it is: a notice is never doubled.
    """
    if isinstance(content, list) and content:
        last = content[-1]
        if isinstance(last, dict) and last.get("type") == "text" and last.get("text") == note:
            return content
        return [*content, {"type": "text", "text": note}]
    text = content if isinstance(content, str) else ""
    if text == note or text.endswith("\n\n" + note):
        return text
    return f"{text}\n\n{note}" if text.strip() else note


def _with_dropped_notice(repair: _Repair, message: Message, count: int) -> Message:
    """`message` with the notice saying which of its `count` calls were dropped and why."""
    note = dropped_calls_notice(repair.dropped, count, repair.dropped_result)
    content = message.get("content")
    noted = _with_note(content, note)
    if noted is content:
        return message
    if repair.dropped >= count:
        repair.note(None, "no call could run: the reason is kept in the message's content")
    else:
        repair.note(None, f"{repair.dropped} call(s) left out: the message's content says why")
    return with_changes(message, content=noted)


def _repair_message(
    index: int, message: Message, run: Sequence[Any], index_shift: Callable[[], int]
) -> tuple[list[Any], _Repair]:
    """The messages replacing `message` and its run."""
    repair = _Repair(index, index_shift)
    if "function_call" in message:
        message = _without_legacy_call(repair, message)
        if "tool_calls" not in message:  # the legacy call named no function
            return _left_without_calls(repair, message, [], run)
    raw_calls = message["tool_calls"]
    if not isinstance(raw_calls, list):
        repair.note(None, f"tool_calls is a {type(raw_calls).__name__}, not a list: removed")
        raw_calls = []
    repaired = [_repair_call(repair, position, call) for position, call in enumerate(raw_calls)]
    _assign_ids(repair, raw_calls, repaired)
    new_run = _repair_run(repair, run)
    if not repair.changed:
        if raw_calls:
            return [message, *run], repair
        repair.note(None, "tool_calls is an empty list: removed")
    if repair.calls:
        kept = with_changes(message, tool_calls=repair.calls)
        if repair.dropped:
            kept = _with_dropped_notice(repair, kept, len(raw_calls))
        return [kept, *new_run], repair
    return _left_without_calls(repair, message, raw_calls, new_run)


def _left_without_calls(
    repair: _Repair, message: Message, raw_calls: list[Any], new_run: Sequence[Any]
) -> tuple[list[Any], _Repair]:
    """The messages replacing a message none of whose calls is left, and its run."""
    bare = without_key(message, "tool_calls")
    if repair.dropped:
        return [_with_dropped_notice(repair, bare, len(raw_calls)), *new_run], repair
    if _has_content(bare):
        return [bare, *new_run], repair
    repair.note(None, "dropped: no call left and no content")
    return list(new_run), repair


def _without_legacy_call(repair: _Repair, message: Message) -> Message:
    """`message` without its legacy ``function_call``: made its call when it has no other.

    The call gets no id here: `_assign_ids` makes one as for a missing id.
    """
    legacy = message["function_call"]
    bare = without_key(message, "function_call")
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        repair.note(None, "legacy function_call removed: the message's tool_calls are sent")
        return bare
    function = legacy if isinstance(legacy, dict) else {}
    name = function.get("name")
    if not isinstance(name, str) or not name.strip():
        repair.note(None, f"legacy function_call {preview(legacy)} names no function: removed")
        return without_key(bare, "tool_calls")
    call = {"type": "function", "function": {"name": name, "arguments": function.get("arguments")}}
    repair.note(None, f"legacy function_call of {quoted(name)} made a tool call")
    return with_changes(bare, tool_calls=[call])


def strip_malformed_calls(messages: list[Any], ctx: StageContext) -> StageOutcome:
    """Drop calls without a name; give calls unique ids and JSON-object arguments."""
    survey = ctx.survey(messages)
    if not survey.has(Defect.MALFORMED_CALLS):
        return StageOutcome.unchanged(messages)
    # The ids it makes count the messages the governor left out first (see budget_first).
    shift = ctx.index_shift
    result = Splice(messages, ctx.facts)
    details: list[str] = []
    copied = 0  # messages[:copied] are handled; what lies between repairs is copied as is
    for index in survey.malformed:  # only these can change; their runs change with them
        end = index + 1
        while end < len(messages) and role_of(messages[end]) == "tool":
            end += 1
        replaced, repair = _repair_message(index, messages[index], messages[index + 1 : end], shift)
        for renamed, original in repair.renamed:
            ctx.facts.made_from(renamed, original)
        result.copy(copied, index)
        result.add(*replaced)
        details += repair.details
        copied = end
    if not details:
        return StageOutcome.unchanged(messages)
    result.copy(copied)
    return StageOutcome(result.done(), changed=True, details=details)
