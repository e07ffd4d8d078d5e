"""One pass over a history that finds every kind of defect the stages repair, and its size.

Every built-in stage asks the survey first and returns its input untouched at
no further cost when its defect is absent: a clean history is read once, not
once per stage. Surveys and per-message facts (tokens, unencodable text) are
memoised for the duration of one governor run, keyed by object identity; the
memo holds a reference to each object, so an identity cannot be reused by
another object while it is cached.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from nanobot_core.governance.checks import arguments_ok, is_placeholder_message
from nanobot_core.governance.messages import KNOWN_ROLES, SYSTEM_ROLES
from nanobot_core.governance.tokens import (
    MESSAGE_OVERHEAD,
    PLAIN_KEYS,
    EstimateCounter,
    TokenCounter,
    count_message,
    is_default_counter,
    keys_dirty,
    scan_text,
)

__all__ = ["Defect", "FactsCache", "Survey", "survey_messages"]


class Defect:
    """The kinds of defect the survey detects (bits of `Survey.defects`; each is a stage's job).

    Plain ints rather than an ``enum.IntFlag``: the survey combines them for
    every message, and enum arithmetic runs in Python.
    """

    NONE = 0
    NON_MESSAGES = 1  # entries that are not dicts, or that have an unknown role
    META = 2  # session bookkeeping (`_meta`) that must not reach the model
    PLACEHOLDERS = 4  # assistant messages that only say "[... omitted]"
    MALFORMED_CALLS = 8  # calls without a name, id, JSON-object arguments or unique id
    STRAY_RESULTS = 16  # tool results outside their call's run, unknown or duplicated
    UNANSWERED_CALLS = 32  # calls with no result in the run after them
    DIRTY_TEXT = 64  # lone surrogates, content of a type providers reject
    EMPTY_RESULTS = 128  # tool results with no output
    NOT_USER_START = 256  # the history after the system messages does not start at a user


@attrs.frozen(slots=True)
class Survey:
    """What one pass over a history found."""

    defects: int  # `Defect` bits
    tokens: int  # the messages only, without the system prompt and tools
    largest_result: int  # characters of the largest text tool result

    def has(self, defect: int) -> bool:
        """Whether any of `defect` is present."""
        return bool(self.defects & defect)


def _dirty(value: Any) -> bool:
    """Whether any string inside `value` (keys included) holds a lone surrogate."""
    return scan_text(value)[1]


class FactsCache:
    """Per-run memo of message facts (tokens, dirty text) and of whole-list surveys."""

    def __init__(self, counter: TokenCounter | None = None) -> None:
        self.counter: TokenCounter = counter or EstimateCounter()
        self._estimate = is_default_counter(self.counter)
        self._facts: dict[int, tuple[Any, int, bool]] = {}
        self._surveys: dict[int, tuple[Sequence[Any], int, Survey]] = {}

    def facts(self, message: Any) -> tuple[int, bool]:
        """(tokens, holds unencodable text) of one message or entry."""
        cached = self._facts.get(id(message))
        if cached is not None and cached[0] is message:
            return cached[1], cached[2]
        if self._estimate:
            tokens, dirty = scan_text(message)
            tokens += MESSAGE_OVERHEAD
        else:
            tokens, dirty = count_message(message, self.counter), _dirty(message)
        self._facts[id(message)] = (message, tokens, dirty)
        return tokens, dirty

    def tokens(self, message: Any) -> int:
        """Tokens of one message."""
        return self.facts(message)[0]

    def survey(self, messages: Sequence[Any]) -> Survey:
        """The survey of `messages` (computed once per list object and length)."""
        cached = self._surveys.get(id(messages))
        if cached is not None and cached[0] is messages and cached[1] == len(messages):
            return cached[2]
        result = survey_messages(messages, self)
        self._surveys[id(messages)] = (messages, len(messages), result)
        return result


def _estimate_message(message: dict[str, Any]) -> tuple[int, bool]:
    """`scan_text` of a message plus the overhead, with its top-level strings read inline."""
    tokens = MESSAGE_OVERHEAD
    dirty = not PLAIN_KEYS.issuperset(message) and keys_dirty(message)
    for item in message.values():
        if type(item) is str and item.isascii():
            tokens += (len(item) + 3) >> 2
        elif item is not None:
            more, bad = scan_text(item)
            tokens += more
            dirty = dirty or bad
    return tokens, dirty


def _check_calls(calls: Any) -> tuple[bool, set[str]]:
    """(the calls are well formed, the set of their ids) for one assistant message."""
    if type(calls) is not list or not calls:
        return False, set()
    ids: set[str] = set()
    well_formed = True
    for call in calls:
        if type(call) is not dict:
            well_formed = False
            continue
        identifier = call.get("id")
        if type(identifier) is not str or not identifier or identifier in ids:
            well_formed = False
        else:
            ids.add(identifier)
        function = call.get("function")
        if call.get("type") != "function" or type(function) is not dict:
            well_formed = False
            continue
        name = function.get("name")
        if type(name) is not str or not name.strip() or not arguments_ok(function.get("arguments")):
            well_formed = False
    return well_formed, ids


def _content_defects(content: Any) -> int:
    """DIRTY_TEXT for content of a type no provider accepts (not text, part dicts or null)."""
    if type(content) is list:
        for part in content:
            if type(part) is not dict:
                return Defect.DIRTY_TEXT
        return 0
    return Defect.DIRTY_TEXT


def _result_chars(content: Any) -> int:
    if type(content) is not list:
        return 0
    return sum(
        len(text)
        for part in content
        if type(part) is dict and type(text := part.get("text")) is str
    )


def survey_messages(messages: Sequence[Any], facts: FactsCache | None = None) -> Survey:
    """Find every defect in `messages` in one pass, with their token total."""
    facts = facts or FactsCache()
    known = facts._facts  # the per-message memo, read inline: this loop is the hot path
    estimate = facts._estimate
    defects = 0
    tokens = 0
    largest = 0
    pending: set[str] = set()  # call ids of the current run still waiting for a result
    in_run = False
    started = False  # seen the first message after the system messages
    for message in messages:
        cached = known.get(id(message))
        if cached is not None and cached[0] is message:
            size, dirty = cached[1], cached[2]
        elif estimate and type(message) is dict:
            size, dirty = _estimate_message(message)
            known[id(message)] = (message, size, dirty)
        else:
            size, dirty = facts.facts(message)
        tokens += size
        if type(message) is not dict:
            defects |= Defect.NON_MESSAGES
            if in_run and pending:
                defects |= Defect.UNANSWERED_CALLS
            in_run = False
            continue
        if dirty:
            defects |= Defect.DIRTY_TEXT
        if "_meta" in message:
            defects |= Defect.META
        role = message.get("role")
        content = message.get("content")
        if content is not None and type(content) is not str:
            defects |= _content_defects(content)
        if role == "tool":
            if not started:
                defects |= Defect.NOT_USER_START
                started = True
            identifier = message.get("tool_call_id")
            if in_run and type(identifier) is str and identifier in pending:
                pending.discard(identifier)
            else:
                defects |= Defect.STRAY_RESULTS
            if type(content) is str:
                if not content:
                    defects |= Defect.EMPTY_RESULTS
                elif len(content) > largest:
                    largest = len(content)
            elif content is None or content == []:
                defects |= Defect.EMPTY_RESULTS
            else:
                largest = max(largest, _result_chars(content))
            continue
        if in_run and pending:
            defects |= Defect.UNANSWERED_CALLS
        in_run = False
        if role not in KNOWN_ROLES:
            defects |= Defect.NON_MESSAGES
            continue
        if not started and role not in SYSTEM_ROLES:
            started = True
            if role != "user":
                defects |= Defect.NOT_USER_START
        if role != "assistant":
            continue
        calls = message.get("tool_calls")
        if calls is not None:
            well_formed, ids = _check_calls(calls)
            if not well_formed:
                defects |= Defect.MALFORMED_CALLS
            if ids:
                pending = ids
                in_run = True
        if (type(content) is not str or "[" in content) and is_placeholder_message(message):
            defects |= Defect.PLACEHOLDERS
    if in_run and pending:
        defects |= Defect.UNANSWERED_CALLS
    if not started:
        defects |= Defect.NOT_USER_START  # nothing but system messages: no user message at all
    return Survey(defects=defects, tokens=tokens, largest_result=largest)
