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
from functools import reduce
from itertools import compress, count
from operator import is_not, itemgetter, or_
from typing import Any, TypeAlias

import attrs

from nanobot_core.governance.checks import (
    arguments_ok,
    has_lone_surrogate,
    is_blank_content,
    is_placeholder_message,
)
from nanobot_core.governance.messages import has_tool_blocks, result_call_id, starts_with
from nanobot_core.governance.tokens import (
    MESSAGE_OVERHEAD,
    PLAIN_KEYS,
    EstimateCounter,
    TokenCounter,
    count_scanned,
    estimate_tokens,
    is_default_counter,
    keys_dirty,
    scan_text,
    utf8_length,
)

__all__ = [
    "KIND_BITS",
    "Defect",
    "FactsCache",
    "Kind",
    "Listing",
    "MessageFacts",
    "Origins",
    "Splice",
    "Survey",
    "survey_messages",
]


class Defect:
    """The kinds of defect the survey detects (bits of `Survey.defects`; each is a stage's job).

    Plain ints rather than an ``enum.IntFlag``: the survey combines them for
    every message, and enum arithmetic runs in Python.
    """

    NONE = 0
    NON_MESSAGES = 1  # entries that are not dicts, or that have an unknown role
    META = 2  # session bookkeeping (`_meta`) that must not reach the model
    PLACEHOLDERS = 4  # assistant messages that only say "[... omitted]"
    MALFORMED_CALLS = 8  # calls without a name, id, JSON-object arguments or unique id, or legacy
    STRAY_RESULTS = 16  # tool results outside their call's run, unknown or duplicated
    UNANSWERED_CALLS = 32  # calls with no result in the run after them
    DIRTY_TEXT = 64  # lone surrogates, content of a type providers reject
    EMPTY_RESULTS = 128  # tool results with no output
    NOT_USER_START = 256  # the history after the system messages does not start at a user
    RESULT_LINK = 512  # tool results naming their call in another field than ``tool_call_id``
    USER_TURNS = 1024  # two user messages in a row
    # Not found by the survey alone: the governor adds them from its size and the budget.
    LARGE_RESULTS = 1 << 16  # a tool result longer than ``max_tool_result_chars``
    OVER_BUDGET = 1 << 17  # the request is over the budget

    #: The bits a message can have on its own (the rest concern the order of the history).
    OWN = NON_MESSAGES | META | PLACEHOLDERS | MALFORMED_CALLS | DIRTY_TEXT | EMPTY_RESULTS
    OWN |= RESULT_LINK


#: The bits of each kind of work a stage may declare (`stage.WORK_KINDS`).
KIND_BITS: dict[str, int] = {
    "non_messages": Defect.NON_MESSAGES,
    "meta": Defect.META,
    "placeholders": Defect.PLACEHOLDERS,
    "malformed_calls": Defect.MALFORMED_CALLS,
    "dirty_text": Defect.DIRTY_TEXT,
    "empty_results": Defect.EMPTY_RESULTS,
    "result_links": Defect.RESULT_LINK,
    "large_results": Defect.LARGE_RESULTS,
    "stray_results": Defect.STRAY_RESULTS,
    "unanswered_calls": Defect.UNANSWERED_CALLS,
    "user_start": Defect.NOT_USER_START,
    "consecutive_users": Defect.USER_TURNS,
    "over_budget": Defect.OVER_BUDGET,
}


class Kind:
    """What an entry of a history is, as far as the runs of calls and results go."""

    NON_MESSAGE = 0  # not a dict, or a role no provider knows
    SYSTEM = 1  # system or developer
    USER = 2
    ASSISTANT = 3
    TOOL = 4


#: What is known of one entry on its own: (the entry, tokens, its own `Defect` bits, `Kind`,
#: link, result characters, holds lone surrogates, holds Anthropic tool blocks). The link
#: is, for an assistant message, the set of ids of its well-formed calls (empty when it
#: makes none) and, for a tool message, its ``tool_call_id`` when that is a string; None
#: otherwise. A plain tuple: it is read for every message of every survey.
MessageFacts: TypeAlias = tuple[Any, int, int, int, Any, int, bool, bool]


@attrs.frozen(slots=True)
class Survey:
    """What one pass over a history found, and where the defects of its runs are.

    The positions are indices into the surveyed list, so that the stages
    repairing them need not read the whole list again.
    """

    defects: int  # `Defect` bits
    tokens: int  # the messages only, without the system prompt and tools
    largest_result: int  # characters of the largest text tool result
    #: Assistant messages whose calls are malformed.
    malformed: tuple[int, ...] = ()
    #: Results outside their call's run or repeated in it: (index, the run's assistant or None).
    strays: tuple[tuple[int, int | None], ...] = ()
    #: Runs that leave calls unanswered: (assistant, index of the run's last message, the ids).
    open_runs: tuple[tuple[int, int, frozenset[str]], ...] = ()
    #: User messages right after a user message.
    user_turns: tuple[int, ...] = ()

    def has(self, defect: int) -> bool:
        """Whether any of `defect` is present."""
        return bool(self.defects & defect)


def _scan_calls(calls: list[Any]) -> tuple[int, bool, bool, frozenset[str]]:
    """(tokens, lone surrogates, well formed, ids of the well-formed calls) of ``tool_calls``.

    One pass both counts and checks the calls. A call of the usual shape (id,
    type and a function with name and arguments, all ASCII) is read inline.
    """
    tokens = 0
    surrogates = False
    well_formed = bool(calls)
    ids: set[str] = set()
    for call in calls:
        if type(call) is dict and len(call) == 3:
            identifier = call.get("id")
            function = call.get("function")
            if type(function) is dict and len(function) == 2 and type(identifier) is str:
                name = function.get("name")
                arguments = function.get("arguments")
                if (
                    type(name) is str
                    and type(arguments) is str
                    and call.get("type") == "function"
                    and identifier.isascii()
                    and name.isascii()
                    and arguments.isascii()
                ):
                    # "function", the type, counts 2 tokens.
                    tokens += (
                        ((len(identifier) + 3) >> 2)
                        + ((len(name) + 3) >> 2)
                        + ((len(arguments) + 3) >> 2)
                        + 2
                    )
                    if not identifier or identifier in ids:
                        well_formed = False
                    else:
                        ids.add(identifier)
                    if not name.strip() or not arguments_ok(arguments):
                        well_formed = False
                    continue
        more, bad = scan_text(call, 3)
        tokens += more
        surrogates = surrogates or bad
        if not _call_ok(call, ids):
            well_formed = False
    return tokens, surrogates, well_formed, frozenset(ids)


def _call_ok(call: Any, ids: set[str]) -> bool:
    """Whether one call is well formed; adds its id to `ids` when that id is usable."""
    if not isinstance(call, dict):
        return False
    well_formed = type(call) is dict
    identifier = call.get("id")
    if isinstance(identifier, str) and identifier and identifier not in ids:
        ids.add(identifier)
    else:
        well_formed = False
    function = call.get("function")
    if call.get("type") != "function" or type(function) is not dict:
        return False
    name = function.get("name")
    if type(name) is not str or not name.strip() or not arguments_ok(function.get("arguments")):
        return False
    return well_formed


def _check_calls(calls: Any) -> tuple[bool, frozenset[str]]:
    """(the calls are well formed, the ids of the well-formed ones) of one assistant message."""
    if type(calls) is not list or not calls:
        return False, frozenset()
    ids: set[str] = set()
    well_formed = True
    for call in calls:
        if not _call_ok(call, ids):
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

# Module-level names for the hot paths: a global is read faster than a class attribute.
_NON_MESSAGE, _SYSTEM, _USER, _ASSISTANT, _TOOL = (
    Kind.NON_MESSAGE,
    Kind.SYSTEM,
    Kind.USER,
    Kind.ASSISTANT,
    Kind.TOOL,
)
_DIRTY, _META, _EMPTY, _MALFORMED, _NOT_MESSAGE = (
    Defect.DIRTY_TEXT,
    Defect.META,
    Defect.EMPTY_RESULTS,
    Defect.MALFORMED_CALLS,
    Defect.NON_MESSAGES,
)


def _learn(
    message: Any,
    tokens: int,
    surrogates: bool,
    calls: tuple[int, bool, bool, frozenset[str]] | None = None,
) -> MessageFacts:
    """The facts of one entry whose tokens and surrogates are known.

    `calls` is what `_scan_calls` found in an assistant's ``tool_calls``, when
    the caller already scanned them.
    """
    if not isinstance(message, dict):
        return (message, tokens, _NOT_MESSAGE, _NON_MESSAGE, None, 0, surrogates, False)
    role = message.get("role")
    content = message.get("content")
    defects = _DIRTY if surrogates else 0
    blocks = False
    if content is not None and type(content) is not str:
        defects |= _content_defects(content)
        blocks = has_tool_blocks(message)
    if "_meta" in message:
        defects |= _META
    if role == "tool":
        if type(content) is str:
            size = len(content)
            if not size or content.isspace():
                defects |= _EMPTY
        else:
            size = _result_chars(content)
            if is_blank_content(content):
                defects |= _EMPTY
        if "tool_call_ids" in message:
            defects |= Defect.RESULT_LINK
        return (message, tokens, defects, _TOOL, result_call_id(message), size, surrogates, blocks)
    if role == "user":
        return (message, tokens, defects, _USER, None, 0, surrogates, blocks)
    if role == "assistant":
        ids = _NO_CALLS
        if calls is not None:
            if not calls[2]:
                defects |= _MALFORMED
            ids = calls[3]
        elif message.get("tool_calls") is not None:
            well_formed, ids = _check_calls(message["tool_calls"])
            if not well_formed:
                defects |= _MALFORMED
        if "function_call" in message:  # legacy: made a tool call, or dropped (never sent)
            defects |= _MALFORMED
        # None is never a placeholder; most texts are not even worth a look.
        looks = content is not None and (type(content) is not str or "[" in content)
        if looks and is_placeholder_message(message):
            defects |= Defect.PLACEHOLDERS
        return (message, tokens, defects, _ASSISTANT, ids, 0, surrogates, blocks)
    if role == "system" or role == "developer":
        return (message, tokens, defects, _SYSTEM, None, 0, surrogates, blocks)
    return (message, tokens, defects | _NOT_MESSAGE, _NON_MESSAGE, None, 0, surrogates, blocks)


def _learn_estimated(message: dict[Any, Any]) -> MessageFacts:
    """The facts of a dict, counted with the default estimate in the same pass."""
    tokens = MESSAGE_OVERHEAD
    surrogates = False
    calls = message.get("tool_calls") if message.get("role") == "assistant" else None
    if type(calls) is not list:
        calls = None  # anything else is counted below like any other value
    for item in message.values():
        if type(item) is str:
            if item.isascii():
                tokens += (len(item) + 3) >> 2
            else:
                tokens += -(-utf8_length(item) // 4)
                surrogates = surrogates or has_lone_surrogate(item)
        elif item is not None and item is not calls:
            more, bad = scan_text(item, 2)
            tokens += more
            surrogates = surrogates or bad
    if not PLAIN_KEYS.issuperset(message) and keys_dirty(message):
        surrogates = True
    if calls is None:
        return _learn(message, tokens, surrogates)
    scanned = _scan_calls(calls)  # counts the calls and checks them in one pass
    return _learn(message, tokens + scanned[0], surrogates or scanned[1], scanned)


#: What the plain messages of `_plain_facts` cost besides their texts, by the default
#: estimate: the message overhead and the role, "user" and "tool" one token, "assistant" three.
PLAIN_USER = PLAIN_TOOL = MESSAGE_OVERHEAD + 1
PLAIN_ASSISTANT = MESSAGE_OVERHEAD + 3


def _plain_facts(message: dict[Any, Any], content: Any) -> MessageFacts | None:
    """The facts of the commonest messages, read without a loop; None for any other.

    A user message ``{role, content}``, a tool result ``{role, tool_call_id,
    content}`` (and ``name``), with non-empty ASCII text, and an assistant
    message with ASCII text or calls (and ``reasoning_content``). The roles
    count one token ("user", "tool") or three ("assistant").
    """
    role = message.get("role")
    size = len(message)
    if role == "assistant":
        return _assistant_facts(message, content, size)
    if type(content) is not str or not content or not content.isascii():
        return None
    if role == "user" and size == 2:
        return (message, PLAIN_USER + ((len(content) + 3) >> 2), 0, _USER, None, 0, False, False)
    if role != "tool" or not 3 <= size <= 4 or content.isspace():
        return None
    identifier = message.get("tool_call_id")
    if type(identifier) is not str or not identifier.isascii():
        return None
    tokens = PLAIN_TOOL + ((len(content) + 3) >> 2) + ((len(identifier) + 3) >> 2)
    if size == 4:
        name = message.get("name")
        if type(name) is not str or not name.isascii():
            return None
        tokens += (len(name) + 3) >> 2
    return (message, tokens, 0, _TOOL, identifier, len(content), False, False)


def _assistant_facts(message: dict[Any, Any], content: Any, size: int) -> MessageFacts | None:
    """`_plain_facts` of an assistant message: role, content, and tool_calls or reasoning."""
    tokens = PLAIN_ASSISTANT
    if type(content) is str:
        if not content.isascii() or "[" in content:  # "[": maybe a placeholder
            return None
        tokens += (len(content) + 3) >> 2
    elif content is not None or "content" not in message:
        return None
    expected = 2  # role and content
    reasoning = message.get("reasoning_content")
    if reasoning is not None:
        if type(reasoning) is not str or not reasoning.isascii():
            return None
        tokens += (len(reasoning) + 3) >> 2
        expected += 1
    calls = message.get("tool_calls")
    if calls is None:
        return (
            (message, tokens, 0, _ASSISTANT, _NO_CALLS, 0, False, False)
            if size == expected
            else None
        )
    if type(calls) is not list or size != expected + 1:
        return None
    more, surrogates, well_formed, ids = _scan_calls(calls)
    if surrogates:
        return None
    defects = 0 if well_formed else _MALFORMED
    return (message, tokens + more, defects, _ASSISTANT, ids, 0, False, False)


_TOKENS = itemgetter(1)
_DEFECTS = itemgetter(2)
_KIND = itemgetter(3)
_RESULT_CHARS = itemgetter(5)
_TOOL_BLOCKS = itemgetter(7)


class Listing:
    """What is known of one list of a run: its entries' facts, and later its totals and survey.

    A list known to start with another one (the same objects: a session's
    history is the last one plus what was appended) carries what was worked
    out for that one, so its totals and survey cost only what follows it.
    """

    __slots__ = ("_after", "_results", "_sums", "_tokens", "known", "messages", "runs", "survey")

    def __init__(
        self,
        messages: Sequence[Any],
        known: list[MessageFacts],
        base: Listing | None = None,
        derived: tuple[_Sums | None, int | None] = (None, None),
    ) -> None:
        """`derived`: the totals of the list, or its tokens alone, when already worked out
        (`derive`)."""
        self.messages = messages  # held, so that its id stays its own
        self.known = known
        self.survey: Survey | None = None
        self.runs: _Runs | None = None
        self._sums: _Sums | None = derived[0]
        self._tokens: int | None = derived[1]
        self._results: tuple[int, int, int] | None = None
        # Of the list this one starts with: its totals, results, runs and length. Not the
        # list itself, so that a session's lists never make a chain back to its first call.
        self._after: tuple[_Sums | None, tuple[int, int, int] | None, _Runs | None, int] | None = (
            (base._sums, base._results, base.runs, len(base.known)) if base is not None else None
        )

    def sums(self) -> _Sums:
        """(tokens, defects of the entries themselves, largest result) over every entry."""
        if self._sums is None:
            known, start, defects, largest = self.known, 0, 0, 0
            after = self._after
            if after is not None and after[0] is not None:
                (_, defects, largest), start = after[0], after[3]
            rest = known[start:] if start else known
            if rest:
                # Most entries have no defect: OR only the distinct values, when any is set.
                if any(map(_DEFECTS, rest)):
                    defects |= reduce(or_, set(map(_DEFECTS, rest)))
                largest = max(largest, max(map(_RESULT_CHARS, rest)))
            self._sums = (self.tokens(), defects, largest)
        return self._sums

    def tokens(self) -> int:
        """The tokens of every entry: `sums`' first, without the rest when only it is asked
        (a list over budget is asked nothing else before the next stage changes it)."""
        if self._sums is not None:
            return self._sums[0]
        if self._tokens is None:
            after = self._after
            if after is not None and after[0] is not None:
                rest = self.known[after[3] :]
                self._tokens = after[0][0] + sum(map(_TOKENS, rest))
            else:
                self._tokens = sum(map(_TOKENS, self.known))
        return self._tokens

    def derive(
        self, removed: Sequence[MessageFacts], added: Sequence[MessageFacts]
    ) -> tuple[_Sums | None, int | None]:
        """What is known of the totals of a list made from this one by taking out the
        entries `removed` and putting in `added` (for `Listing`'s `derived`).

        The tokens add up whenever this list's are known. The defects and the
        largest result carry over only when no entry taken out had a defect or
        the largest result, which would have to be looked for again.
        """
        sums, tokens = self._sums, self._tokens
        if sums is None and tokens is None:
            return None, None
        change = sum(map(_TOKENS, added)) - sum(map(_TOKENS, removed))
        if sums is None:
            assert tokens is not None
            return None, tokens + change
        total, defects, largest = sums
        if any(map(_DEFECTS, removed)) or (removed and max(map(_RESULT_CHARS, removed)) >= largest):
            return None, total + change
        if added:
            defects |= reduce(or_, map(_DEFECTS, added))
            largest = max(largest, max(map(_RESULT_CHARS, added)))
        return (total + change, defects, largest), None

    def results(self, with_tokens: bool) -> tuple[int, int, int]:
        """(how many entries are tool results, the characters of their texts, their tokens).

        Their tokens only `with_tokens` (0 otherwise): a governor asks the same way on
        every call, and only one counting by another counter than the estimate needs them.
        """
        if self._results is None:
            known, start, tools, chars, tokens = self.known, 0, 0, 0, 0
            after = self._after
            if after is not None and after[1] is not None:
                (tools, chars, tokens), start = after[1], after[3]
            rest = known[start:] if start else known
            if rest:
                kinds = list(map(_KIND, rest))
                tools += kinds.count(_TOOL)
                chars += sum(map(_RESULT_CHARS, rest))
                if tools and with_tokens:  # at C speed: the tokens of the results
                    tokens += sum(compress(map(_TOKENS, rest), map(_TOOL.__eq__, kinds)))
            self._results = (tools, chars, tokens)
        return self._results

    def follow(self, followed: list[_Runs]) -> _Runs:
        """The runs of this list, going on from those of the list it starts with if known."""
        if self.runs is None:
            after = self._after
            if after is not None and after[2] is not None:
                self.runs = _Runs(self.known, after[2], after[3])
            else:
                base, shared = _base(followed, self.known)
                self.runs = _Runs(self.known, base, shared)
        return self.runs


#: (tokens, defects of the entries themselves, largest result) of a list.
_Sums = tuple[int, int, int]


def _origin(made_from: dict[int, tuple[Any, Any]], message: Any) -> Any:
    made = made_from.get(id(message))  # the entry holds the message: its id is its own
    return made[1] if made is not None and made[0] is message else None


def _added(made_from: dict[int, tuple[Any, Any]], message: Any) -> bool:
    made = made_from.get(id(message))
    return made is not None and made[0] is message and made[1] is None


class Origins:
    """What the messages stages made in one run were made from: `FactsCache.origins`.

    Read through to the run's own record; `kept` copies it for a later reader.
    """

    __slots__ = ("_made_from",)

    def __init__(self, made_from: dict[int, tuple[Any, Any]]) -> None:
        self._made_from = made_from

    def origin(self, message: Any) -> Any:
        """`FactsCache.origin`, as it was when these were taken."""
        return _origin(self._made_from, message)

    def added(self, message: Any) -> bool:
        """`FactsCache.added`, as it was when these were taken."""
        return _added(self._made_from, message)

    def kept(self) -> Origins:
        """These as they are now, for after the run (the next run forgets them)."""
        return Origins(dict(self._made_from))


class FactsCache:
    """Per-run memo of message facts, and of the facts, totals and surveys of whole lists.

    Everything is keyed by object identity and holds the object, so an id
    cannot be reused by another object while it is cached. A list is known
    again only while its length is the same.
    """

    def __init__(self, counter: TokenCounter | None = None) -> None:
        self.counter: TokenCounter = counter or EstimateCounter()
        self.estimate = is_default_counter(self.counter)
        self._facts: dict[int, MessageFacts] = {}
        self._lists: dict[int, Listing] = {}
        # (longer, shorter, their lengths, the answer) per pair of list ids, for this run.
        self._starts: dict[tuple[int, int], tuple[Any, Any, int, int, bool]] = {}
        # The runs of the lists surveyed last, newest first: a new list goes on from the one
        # it shares the longest start with.
        self._followed: list[_Runs] = []
        # Per run, id of each message made in place of another -> (it, the other): `made_from`.
        self._origins: dict[int, tuple[Any, Any]] = {}

    def of(self, message: Any) -> MessageFacts:
        """Everything known of one entry on its own (computed once per object)."""
        known = self._facts.get(id(message))
        if known is not None:  # the memo holds the object: its id is not anyone else's
            return known
        if self.estimate and type(message) is dict:
            learnt = _plain_facts(message, message.get("content")) or _learn_estimated(message)
        else:
            learnt = _learn(message, *count_scanned(message, self.counter))
        self._facts[id(message)] = learnt
        return learnt

    def replace_content(
        self, message: dict[str, Any], content: Any, known: MessageFacts | None = None
    ) -> MessageFacts:
        """The facts of a new dict, `message` with `content` (the dict is the first item).

        For a tool result whose text is replaced by other text (offloaded,
        compacted, cut) only the content's share changes, so nothing else of the
        message is read again. Any other message is learnt afresh. `known`
        are the facts of `message`, when the caller has them at hand.
        """
        changed = dict.copy(message)  # a plain dict, keys in order: faster than {**message}
        changed["content"] = content
        self._origins[id(changed)] = (changed, message)  # made_from, inlined: called per result
        known = known or self.of(message)
        old = message.get("content")
        if (
            not self.estimate
            or known[3] != _TOOL
            or known[6]
            or type(old) is not str
            or type(content) is not str
            or not content.isascii()
        ):
            return self.of(changed)
        own = (len(old) + 3) >> 2 if old.isascii() else estimate_tokens(old)
        tokens = known[1] - own + ((len(content) + 3) >> 2)
        blank = not content or content.isspace()
        defects = known[2] | _EMPTY if blank else known[2] & ~_EMPTY
        learnt = (changed, tokens, defects, _TOOL, known[4], len(content), False, False)
        self._facts[id(changed)] = learnt
        return learnt

    def with_content(self, message: dict[str, Any], content: Any) -> dict[str, Any]:
        """A new dict: `message` with `content`, its facts worked out from the old ones."""
        changed: dict[str, Any] = self.replace_content(message, content)[0]
        return changed

    def facts(self, message: Any) -> tuple[int, bool]:
        """(tokens, holds unencodable text) of one message or entry."""
        known = self.of(message)
        return known[1], known[6]

    def tokens(self, message: Any) -> int:
        """Tokens of one message."""
        return self.of(message)[1]

    def _listed(self, messages: Sequence[Any]) -> Listing:
        listed = self.listing(messages)
        if listed is not None:
            return listed
        known: list[Any] = list(map(self._facts.get, map(id, messages)))
        if None in known:  # found, and found again below, at C speed: most are known
            learn = self.of
            index = known.index(None)
            while True:
                known[index] = learn(messages[index])
                try:
                    index = known.index(None, index + 1)
                except ValueError:
                    break
        listed = self._lists[id(messages)] = Listing(messages, known)
        return listed

    def new_run(self) -> None:
        """Start a run: lists are known within one run only; messages across runs."""
        self._lists.clear()
        self._starts.clear()
        self._origins.clear()

    def made_from(self, message: Any, original: Any) -> None:
        """Record, for this run, that a stage made `message` in place of `original`.

        None for `original`: it added `message`, which stands for no message of the
        history (a placeholder result): see `added`.
        """
        self._origins[id(message)] = (message, original)

    def added(self, message: Any) -> bool:
        """Whether a stage added `message` this run (`made_from` it and None)."""
        return _added(self._origins, message)

    def carry(self, origins: Origins) -> None:
        """Record again, for this run, what an earlier run's `origins` (kept) say: its stages'
        outcome is handed on again, and what was sent is read back through them."""
        self._origins.update(origins._made_from)

    def origin(self, message: Any) -> Any:
        """The message `message` was made in place of this run (`made_from`), or None.

        Known of the messages `replace_content` made, and of those a per-message
        stage replaced one message by.
        """
        return _origin(self._origins, message)

    def origins(self) -> Origins:
        """`origin` and `added` of this run, as they stand (`Origins.kept` keeps them)."""
        return Origins(self._origins)

    def starts_with(self, longer: Sequence[Any], shorter: Sequence[Any]) -> bool:
        """`messages.starts_with`, answered once per pair of lists in a run.

        Several parts of one call ask it of the same history and the last one;
        like everything in a run, it holds while the lists keep their length.
        """
        key = id(longer), id(shorter)
        known = self._starts.get(key)
        if (
            known is not None
            and known[0] is longer
            and known[1] is shorter
            and known[2] == len(longer)
            and known[3] == len(shorter)
        ):
            return known[4]
        found = starts_with(longer, shorter)
        self._starts[key] = (longer, shorter, len(longer), len(shorter), found)
        return found

    def retain(self, *kept: Sequence[Any]) -> None:
        """Forget the messages not in `kept`, once the memo holds twice as many as they do.

        A governor keeps one cache for a session: what it learnt of a message is
        reused on every later call, and messages of histories it no longer sees
        are let go without a pass over the memo on every call.
        """
        wanted = sum(map(len, kept))
        if len(self._facts) <= 2 * wanted + 1024:
            return
        facts = self._facts
        keep: dict[int, MessageFacts] = {}
        for messages in kept:
            for key in map(id, messages):
                known = facts.get(key)
                if known is not None:
                    keep[key] = known
        self._facts = keep

    def registered(self, messages: Sequence[Any]) -> list[MessageFacts] | None:
        """The facts of `messages` when this run knows the list already, else None."""
        listed = self.listing(messages)
        return listed.known if listed is not None else None

    def listing(self, messages: Sequence[Any]) -> Listing | None:
        """What this run knows of the list `messages` (a list is known while its length is)."""
        listed = self._lists.get(id(messages))
        if (
            listed is not None
            and listed.messages is messages
            and len(listed.known) == len(messages)
        ):
            return listed
        return None

    def extend(self, messages: Sequence[Any], base: Listing) -> None:
        """Know `messages` as the list of `base` (an earlier run's) and what follows it.

        Only when `messages` starts with the very objects of that list (checked
        at C speed): a session's history is the last one plus what was appended.
        """
        if not self.starts_with(messages, base.messages):
            return
        known = [*base.known, *map(self.of, messages[len(base.known) :])]
        self._lists[id(messages)] = Listing(messages, known, base)

    def known(self, messages: Sequence[Any]) -> list[MessageFacts] | None:
        """The facts of every entry of `messages` when nearly all are known already, else None.

        For a history read on an earlier call, what the next call can know at
        once: the known ones cost no Python-level work, and the few new ones
        (at most an eighth) are learnt. None for a history mostly new to it.
        """
        registered = self.registered(messages)
        if registered is not None:
            return registered
        if len(self._facts) * 8 < len(messages) * 7:
            return None  # fewer facts known than it takes, whichever messages they are of
        known: list[Any] = list(map(self._facts.get, map(id, messages)))
        unknown = len(known) - sum(map(bool, known))  # truth, not equality: cheaper
        if unknown * 8 > len(known):
            return None
        if unknown:
            return self.aligned(messages)
        self._lists[id(messages)] = Listing(messages, known)
        return known

    def fit_totals(self, messages: Sequence[Any]) -> tuple[int, int, int, int] | None:
        """(tokens, tool results, their characters, their tokens) of `messages` when `known`
        has its facts."""
        if self.known(messages) is None:
            return None
        listed = self._listed(messages)
        return (listed.sums()[0], *listed.results(not self.estimate))

    def forget(self, message: Any) -> None:
        """Forget what is known of `message` (a stage edited it in place)."""
        self._facts.pop(id(message), None)

    def aligned(self, messages: Sequence[Any]) -> list[MessageFacts]:
        """The facts of every entry of `messages`, in order (memoised per list)."""
        return self._listed(messages).known

    def note(
        self,
        messages: Sequence[Any],
        known: list[MessageFacts],
        base: Listing | None = None,
        *,
        source: Sequence[Any] | None = None,
        removed: Sequence[MessageFacts] = (),
        added: Sequence[MessageFacts] = (),
    ) -> None:
        """Record the facts of a list a stage just built from another one (same order).

        `base`: a list `messages` starts with (the same objects), whose totals
        and survey carry over. `source`: the list `messages` was made from by
        taking out the entries `removed` and putting in `added`, whose totals
        (where this run worked them out) carry over with that change.
        """
        made_from = self.listing(source) if source is not None else None
        derived = made_from.derive(removed, added) if made_from is not None else (None, None)
        self._lists[id(messages)] = Listing(messages, known, base, derived)

    def tool_blocks(self, messages: Sequence[Any]) -> bool:
        """`is_anthropic_shape` from the facts (learnt where not known yet), at C speed."""
        return any(map(_TOOL_BLOCKS, self.aligned(messages)))

    def totals(self, messages: Sequence[Any]) -> tuple[int, int, int]:
        """(tokens, the `Defect` bits of the entries themselves, characters of the largest
        result) over `messages`, memoised per list: no survey of the runs."""
        return self._listed(messages).sums()

    def list_tokens(self, messages: Sequence[Any]) -> int:
        """Tokens of every message of `messages` (memoised per list)."""
        return self._listed(messages).tokens()

    def survey(self, messages: Sequence[Any]) -> Survey:
        """The survey of `messages` (computed once per list object and length)."""
        listed = self._listed(messages)
        if listed.survey is None:
            if not listed.known:
                listed.survey = _NOTHING
                return listed.survey
            followed = self._followed
            runs = listed.follow(followed)
            listed.survey = _survey_of(listed.sums(), runs)
            followed.insert(0, runs)
            del followed[_FOLLOWED_KEPT:]
        return listed.survey


class Splice:
    """A new list built from stretches of a surveyed one and new messages, with their facts.

    What the repair stages build: the stretches are copied as slices, and the
    facts of the result come with it, so the next survey need not look each
    message up again.
    """

    def __init__(self, messages: Sequence[Any], facts: FactsCache) -> None:
        self._messages = messages
        self._facts = facts
        self._known = facts.aligned(messages)
        self.messages: list[Any] = []
        self._result_known: list[MessageFacts] = []
        # What the list is made of, when its stretches come in order: the entries passed
        # over and those added, from which its totals follow (`Listing.derive`).
        self._next: int | None = 0  # None: a stretch came out of order
        self._removed: list[MessageFacts] = []
        self._added: list[MessageFacts] = []

    def copy(self, start: int, stop: int | None = None) -> None:
        """Append ``messages[start:stop]``."""
        self.messages += self._messages[start:stop]
        self._result_known += self._known[start:stop]
        end = len(self._known) if stop is None else min(stop, len(self._known))
        if self._next is None:
            return
        if 0 <= start <= end and start >= self._next:
            self._removed += self._known[self._next : start]
            self._next = end
        elif start != end:  # out of order (an empty stretch changes nothing)
            self._next = None

    def add(self, *messages: Any) -> None:
        """Append new (or moved) messages."""
        for message in messages:
            self.messages.append(message)
            fact = self._facts.of(message)
            self._result_known.append(fact)
            self._added.append(fact)

    def done(self) -> list[Any]:
        """The new list (its facts recorded)."""
        if self._next is None:
            self._facts.note(self.messages, self._result_known)
        else:
            self._facts.note(
                self.messages,
                self._result_known,
                source=self._messages,
                removed=[*self._removed, *self._known[self._next :]],
                added=self._added,
            )
        return self.messages


def survey_messages(messages: Sequence[Any], facts: FactsCache | None = None) -> Survey:
    """Find every defect in `messages` in one pass, with their token total."""
    return (facts or FactsCache()).survey(messages)


#: The survey of an empty list: no user message to start it, and nothing else.
_NOTHING = Survey(defects=Defect.NOT_USER_START, tokens=0, largest_result=0)


def _survey_of(sums: _Sums, runs: _Runs) -> Survey:
    tokens, defects, largest = sums
    return Survey(
        defects=defects | runs.defects,
        tokens=tokens,
        largest_result=largest,
        malformed=tuple(runs.malformed),
        strays=tuple(runs.strays),
        open_runs=tuple(runs.open_runs),
        user_turns=tuple(runs.user_turns),
    )


def _base(followed: list[_Runs], known: list[MessageFacts]) -> tuple[_Runs | None, int]:
    """The runs, among those `followed`, sharing the longest start with `known`, and its length.

    Newest first, and the first that shares all but the last few stretches is taken
    without looking further.
    """
    best, most = None, 0
    for runs in followed:
        mine = runs.known
        # One that cannot share more than the best so far is passed over at once.
        if len(mine) <= most or len(known) <= most or mine[most] is not known[most]:
            continue
        shared = runs.shared(known)
        if shared > most:
            best, most = runs, shared
            if shared + 4 * _CHECKPOINT_EVERY >= len(known):
                break
    return best, most


#: How many lists' runs a cache keeps to go on from.
_FOLLOWED_KEPT = 12

#: How often `_Runs` records where it is, so that a list sharing a start with one
#: followed before is followed from the last record inside that start.
_CHECKPOINT_EVERY = 64

#: Where `_Runs` was before an index: (index, defects, how many malformed, strays, open
#: runs and user turns were found, the pending ids, the run, started, the kind before).
_Checkpoint = tuple[int, int, int, int, int, int, frozenset[str], int, bool, int]


class _Runs:
    """The part of the survey that follows the order of the messages: calls and their results.

    Finds results outside their call's run (or repeated in it), runs leaving
    calls unanswered, malformed calls, user messages in a row, and a history
    not starting at a user.
    Given the runs of a list whose facts start the same way (`base`), it goes
    on from the last checkpoint within that common start: a history that only
    grew, or was changed near its end, costs what changed.
    """

    def __init__(
        self, known: list[MessageFacts], base: _Runs | None = None, shared: int | None = None
    ) -> None:
        """`shared`: how many facts `known` shares with `base` at its start, when known."""
        self.known = known
        self.checkpoints: list[_Checkpoint] = []
        start = base._resume_point(known, shared) if base is not None else None
        if start is None:
            self.defects = 0
            self.malformed: list[int] = []
            self.strays: list[tuple[int, int | None]] = []
            self.open_runs: list[tuple[int, int, frozenset[str]]] = []
            self.user_turns: list[int] = []
            self._follow(known, 0, set(), -1, False, -1)
            return
        assert base is not None
        index, defects, malformed, strays, open_runs, user_turns = start[:6]
        pending, run, started, previous = start[6:]
        self.defects = defects
        self.malformed = base.malformed[:malformed]
        self.strays = base.strays[:strays]
        self.open_runs = base.open_runs[:open_runs]
        self.user_turns = base.user_turns[:user_turns]
        self.checkpoints = [c for c in base.checkpoints if c[0] <= index]
        self._follow(known, index, set(pending), run, started, previous)

    def shared(self, known: list[MessageFacts]) -> int:
        """How many facts at the start of `known` are those of the list followed here."""
        mine = self.known
        return next(compress(count(), map(is_not, known, mine)), min(len(known), len(mine)))

    def _resume_point(
        self, known: list[MessageFacts], shared: int | None = None
    ) -> _Checkpoint | None:
        """The last checkpoint inside the start `known` shares with the list followed here."""
        if shared is None:
            shared = self.shared(known)
        best = None
        for checkpoint in self.checkpoints:
            if checkpoint[0] > shared:
                break
            best = checkpoint
        return best if best is not None and best[0] > 0 else None

    def _follow(
        self,
        known: list[MessageFacts],
        first: int,
        pending: set[str],
        run: int,
        started: bool,
        previous: int,
    ) -> None:
        """Follow `known` from `first`, with the state the messages before it left.

        `pending`: ids of the current run still waiting (none outside runs);
        `run`: the index of the current run's assistant message (-1: not in a
        run); `started`: seen the first message after the system messages;
        `previous`: the kind of the entry before.
        """
        tool, assistant, system, user = _TOOL, _ASSISTANT, _SYSTEM, _USER
        strays, open_runs, checkpoints = self.strays, self.open_runs, self.checkpoints
        total = len(known)
        for chunk in range(first, total, _CHECKPOINT_EVERY):
            if not checkpoints or checkpoints[-1][0] < chunk:  # chunks start at multiples
                checkpoints.append(
                    (
                        chunk,
                        self.defects,
                        len(self.malformed),
                        len(strays),
                        len(open_runs),
                        len(self.user_turns),
                        frozenset(pending),
                        run,
                        started,
                        previous,
                    )
                )
            stop = min(total, chunk + _CHECKPOINT_EVERY)
            for index in range(chunk, stop):
                fact = known[index]
                kind = fact[3]
                if kind == tool:
                    previous = kind
                    if fact[4] in pending:
                        pending.discard(fact[4])
                    else:
                        strays.append((index, run if run >= 0 else None))
                        if not started:
                            self.defects |= Defect.NOT_USER_START
                            started = True
                    continue
                if kind == user and previous == user:
                    self.defects |= Defect.USER_TURNS
                    self.user_turns.append(index)
                previous = kind
                if pending:
                    open_runs.append((run, index - 1, frozenset(pending)))
                    pending = set()
                run = -1
                if not started and kind != system and kind:
                    started = True
                    if kind != user:
                        self.defects |= Defect.NOT_USER_START
                if kind == assistant:
                    if fact[2] & _MALFORMED:
                        self.malformed.append(index)
                    if fact[4]:
                        pending = set(fact[4])
                        run = index
        # What only the end says: not kept in the checkpoints, which a longer list goes on from.
        if pending:
            open_runs.append((run, total - 1, frozenset(pending)))
        if not started:
            self.defects |= Defect.NOT_USER_START  # nothing but system messages: no user at all
        if strays:
            self.defects |= Defect.STRAY_RESULTS
        if open_runs:
            self.defects |= Defect.UNANSWERED_CALLS
