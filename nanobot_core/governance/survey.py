"""One pass over a history that finds every kind of defect the stages repair, and its size.

Every built-in stage asks the survey first and returns its input untouched at
no further cost when its defect is absent: a clean history is read once, not
once per stage. What can be known of a message on its own (its tokens, its
role, the ids of its calls, its own defects) is learnt once per run and kept
in a memo keyed by object identity, so a survey of a list that shares most of
its dicts with an earlier one only re-reads the new dicts and follows the
call/result runs. The memo holds a reference to each object, so an identity
cannot be reused by another object while it is cached.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

import attrs

from nanobot_core.governance.checks import arguments_ok, is_placeholder_message
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

__all__ = ["Defect", "FactsCache", "Kind", "MessageFacts", "Survey", "survey_messages"]


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


class Kind:
    """What an entry of a history is, as far as the runs of calls and results go."""

    NON_MESSAGE = 0  # not a dict, or a role no provider knows
    SYSTEM = 1  # system or developer
    USER = 2
    ASSISTANT = 3
    TOOL = 4


_KINDS = {
    "system": Kind.SYSTEM,
    "developer": Kind.SYSTEM,
    "user": Kind.USER,
    "assistant": Kind.ASSISTANT,
    "tool": Kind.TOOL,
}

#: What is known of one entry on its own: (the entry, tokens, its own `Defect` bits, `Kind`,
#: link, result characters, holds lone surrogates). The link is, for an assistant message,
#: the set of ids of its well-formed calls (empty when it makes none) and, for a tool
#: message, its ``tool_call_id`` when that is a string; None otherwise. A plain tuple: it
#: is read for every message of every survey.
MessageFacts: TypeAlias = tuple[Any, int, int, int, Any, int, bool]


@attrs.frozen(slots=True)
class Survey:
    """What one pass over a history found."""

    defects: int  # `Defect` bits
    tokens: int  # the messages only, without the system prompt and tools
    largest_result: int  # characters of the largest text tool result

    def has(self, defect: int) -> bool:
        """Whether any of `defect` is present."""
        return bool(self.defects & defect)


def _estimate_message(message: dict[Any, Any]) -> tuple[int, bool]:
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


def _check_calls(calls: Any) -> tuple[bool, frozenset[str]]:
    """(the calls are well formed, the ids of the well-formed ones) of one assistant message."""
    if type(calls) is not list or not calls:
        return False, frozenset()
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
    return well_formed, frozenset(ids)


def _content_defects(content: Any) -> int:
    """DIRTY_TEXT for content of a type no provider accepts (not text, part dicts or null)."""
    if content is None or type(content) is str:
        return 0
    if type(content) is list:
        for part in content:
            if type(part) is not dict:
                return Defect.DIRTY_TEXT
        return 0
    return Defect.DIRTY_TEXT


def _result_chars(content: Any) -> int:
    if type(content) is str:
        return len(content)
    if type(content) is not list:
        return 0
    return sum(
        len(text)
        for part in content
        if type(part) is dict and type(text := part.get("text")) is str
    )


_NO_CALLS: frozenset[str] = frozenset()


def _learn(message: Any, tokens: int, surrogates: bool) -> MessageFacts:
    """The facts of one entry whose tokens and surrogates are known."""
    if not isinstance(message, dict):
        return (message, tokens, Defect.NON_MESSAGES, Kind.NON_MESSAGE, None, 0, surrogates)
    role = message.get("role")
    kind = _KINDS.get(role, Kind.NON_MESSAGE) if isinstance(role, str) else Kind.NON_MESSAGE
    content = message.get("content")
    defects = _content_defects(content)
    if surrogates:
        defects |= Defect.DIRTY_TEXT
    if "_meta" in message:
        defects |= Defect.META
    if kind == Kind.TOOL:
        if content is None or content == "" or content == []:
            defects |= Defect.EMPTY_RESULTS
        identifier = message.get("tool_call_id")
        link = identifier if type(identifier) is str else None
        return (message, tokens, defects, kind, link, _result_chars(content), surrogates)
    if kind == Kind.NON_MESSAGE:
        return (message, tokens, defects | Defect.NON_MESSAGES, kind, None, 0, surrogates)
    if kind != Kind.ASSISTANT:
        return (message, tokens, defects, kind, None, 0, surrogates)
    ids = _NO_CALLS
    calls = message.get("tool_calls")
    if calls is not None:
        well_formed, ids = _check_calls(calls)
        if not well_formed:
            defects |= Defect.MALFORMED_CALLS
    if (type(content) is not str or "[" in content) and is_placeholder_message(message):
        defects |= Defect.PLACEHOLDERS
    return (message, tokens, defects, kind, ids, 0, surrogates)


class FactsCache:
    """Per-run memo of message facts and of whole-list surveys."""

    def __init__(self, counter: TokenCounter | None = None) -> None:
        self.counter: TokenCounter = counter or EstimateCounter()
        self.estimate = is_default_counter(self.counter)
        self._facts: dict[int, MessageFacts] = {}
        self._surveys: dict[int, tuple[Sequence[Any], int, Survey]] = {}

    def of(self, message: Any) -> MessageFacts:
        """Everything known of one entry on its own (computed once per object)."""
        known = self._facts.get(id(message))
        if known is not None and known[0] is message:
            return known
        if self.estimate and type(message) is dict:
            tokens, surrogates = _estimate_message(message)
        elif self.estimate:
            tokens, surrogates = scan_text(message)
            tokens += MESSAGE_OVERHEAD
        else:
            tokens = count_message(message, self.counter)
            surrogates = scan_text(message)[1]
        learnt = _learn(message, tokens, surrogates)
        self._facts[id(message)] = learnt
        return learnt

    def facts(self, message: Any) -> tuple[int, bool]:
        """(tokens, holds unencodable text) of one message or entry."""
        known = self.of(message)
        return known[1], known[6]

    def tokens(self, message: Any) -> int:
        """Tokens of one message."""
        return self.of(message)[1]

    def survey(self, messages: Sequence[Any]) -> Survey:
        """The survey of `messages` (computed once per list object and length)."""
        cached = self._surveys.get(id(messages))
        if cached is not None and cached[0] is messages and cached[1] == len(messages):
            return cached[2]
        result = survey_messages(messages, self)
        self._surveys[id(messages)] = (messages, len(messages), result)
        return result


def survey_messages(messages: Sequence[Any], facts: FactsCache | None = None) -> Survey:
    """Find every defect in `messages` in one pass, with their token total."""
    facts = facts or FactsCache()
    known = facts._facts.get  # read inline: this loop is the hot path
    learn = facts.of
    tool, assistant, system, user = Kind.TOOL, Kind.ASSISTANT, Kind.SYSTEM, Kind.USER
    defects = 0
    tokens = 0
    largest = 0
    pending: set[str] = set()  # call ids of the current run still waiting for a result
    in_run = False
    started = False  # seen the first message after the system messages
    for message in messages:
        fact = known(id(message))
        if fact is None or fact[0] is not message:
            fact = learn(message)
        tokens += fact[1]
        defects |= fact[2]
        kind = fact[3]
        if kind == tool:
            if not started:
                defects |= Defect.NOT_USER_START
                started = True
            if in_run and fact[4] in pending:
                pending.discard(fact[4])
            else:
                defects |= Defect.STRAY_RESULTS
            if fact[5] > largest:
                largest = fact[5]
            continue
        if in_run:
            if pending:
                defects |= Defect.UNANSWERED_CALLS
            in_run = False
        if not started and kind != system and kind:
            started = True
            if kind != user:
                defects |= Defect.NOT_USER_START
        if kind == assistant and fact[4]:
            pending = set(fact[4])
            in_run = True
    if in_run and pending:
        defects |= Defect.UNANSWERED_CALLS
    if not started:
        defects |= Defect.NOT_USER_START  # nothing but system messages: no user message at all
    return Survey(defects=defects, tokens=tokens, largest_result=largest)
