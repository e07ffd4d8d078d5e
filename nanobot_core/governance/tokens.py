"""Token counting for the budget: the counter protocol, the offline estimate, request totals.

A message counts as a fixed overhead plus the tokens of every string inside it
(content, tool names, arguments, ids, and keys the pipeline does not know, such
as ``reasoning_content``); dict keys and the JSON punctuation are covered by the
overhead. Tool definitions count as their compact JSON text. `count_request`
is the one definition of "the size of a request": the governor's figures and
the budget checks of the tests both use it.
"""

from __future__ import annotations

import json
import operator
import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from nanobot_core._containment import contained
from nanobot_core._json_boundary import MAX_DEPTH
from nanobot_core._logging import get_logger
from nanobot_core.governance.history_file import HistoryFormatError

__all__ = [
    "MEMO_CHARS",
    "MESSAGE_OVERHEAD",
    "PLAIN_KEYS",
    "TOO_DEEP",
    "CheckedCounter",
    "EstimateCounter",
    "MemoCounter",
    "TokenCounter",
    "count_message",
    "count_request",
    "count_scanned",
    "count_system",
    "count_tools",
    "is_default_counter",
    "keys_dirty",
    "remembering",
    "scan_text",
    "utf8_length",
]

#: Tokens charged per message for its role, separators and keys.
MESSAGE_OVERHEAD = 4
#: How much a `MemoCounter` remembers: the characters of the texts it keeps the counts
#: of, each text charged `_ENTRY_CHARS` more for its entry (at most about 16 MB).
MEMO_CHARS = 1 << 22
_ENTRY_CHARS = 64

_SURROGATE = re.compile("[\ud800-\udfff]")
_log = get_logger(__name__)
# Whether a GIL makes each call on a dict atomic: a free-threaded build (3.13t) may run without.
_GIL: bool = getattr(sys, "_is_gil_enabled", lambda: True)()


@runtime_checkable
class TokenCounter(Protocol):
    """What the `nanobot_token_counter` hook returns: a text-to-token-count function."""

    def count_text(self, text: str) -> int: ...


def utf8_length(text: str) -> int:
    """Bytes of `text` in UTF-8; lone surrogates count as the three bytes they would take."""
    if text.isascii():  # O(1) in CPython: ASCII-ness is a flag of the string object
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def estimate_tokens(text: str) -> int:
    """Tokens of `text` by the default estimate: its UTF-8 bytes over four, rounded up.

    The one statement of the estimate. The survey's hottest loops inline the
    ASCII case, ``(len(text) + 3) >> 2``, which is the same number; a test
    holds them to it.
    """
    return (len(text) + 3) >> 2 if text.isascii() else -(-utf8_length(text) // 4)


@attrs.frozen
class EstimateCounter:
    """The offline default: about `bytes_per_token` UTF-8 bytes a token, rounded up.

    Real tokenizers give 3 to 4.5 bytes a token for English and code; the
    estimate errs on the side of counting more, so a request it admits fits.
    """

    bytes_per_token: int = 4

    def count_text(self, text: str) -> int:
        """Tokens of `text`: its UTF-8 length divided by `bytes_per_token`, rounded up."""
        if self.bytes_per_token == 4:
            return estimate_tokens(text)
        return -(-utf8_length(text) // self.bytes_per_token)


DEFAULT_COUNTER = EstimateCounter()


def _check_counter(instance: Any, _attribute: Any, value: Any) -> None:
    if not callable(getattr(value, "count_text", None)):
        raise TypeError(
            f"{type(instance).__name__}: counter must have a count_text(text) -> int method, "
            f"got {type(value).__name__}"
        )


def _check_memo_chars(instance: Any, _attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{type(instance).__name__}: memo_chars must be a whole number of characters, "
            f"got {type(value).__name__}"
        )
    if value < 0:
        raise ValueError(
            f"{type(instance).__name__}: memo_chars must be at least 0 (0 remembers nothing), "
            f"got {value}"
        )


@attrs.define(eq=False)
class MemoCounter:
    """`counter`, asked once per distinct text: each count it gave is remembered for the text.

    Every call of a session hands the governor the texts it counted on the call
    before (the history, its compacted and offloaded copies, the same notices),
    and a real tokenizer costs per character. A counter is a function of the
    text, as `TokenCounter` says. The texts remembered add up to at most
    `memo_chars` characters (`MEMO_CHARS`); the least recently used go first.

    A governor puts any counter but the estimate behind one (`remembering`),
    and every governor a `PluginManager` builds shares the one its
    `token_counter` hands out; a program may hand one to the governors of
    several managers (`Governor(counter=...)`, `build_governor`), or give
    it another bound. `counter` without ``count_text`` is a `TypeError`, as
    is a `memo_chars` that is not an int; one below 0 is a `ValueError`.
    One may be shared by governors in several threads: the memo is changed
    under a lock, which is not held while `counter` counts, so two threads may
    count the same text at once (it is remembered once). A remembered count is
    read without it where there is a GIL (the hot path: most texts a session
    counts are remembered), in two calls that are each atomic under it.
    """

    counter: TokenCounter = attrs.field(validator=_check_counter)
    memo_chars: int = attrs.field(default=MEMO_CHARS, kw_only=True, validator=_check_memo_chars)
    # text -> the counter's count of it, the least recently used first.
    _memo: OrderedDict[str, int] = attrs.field(factory=OrderedDict, init=False, repr=False)
    _memo_held: int = attrs.field(default=0, init=False, repr=False)  # charged against memo_chars
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False)

    def count_text(self, text: str) -> int:
        """The counter's count of `text`, remembered from the last time it was asked."""
        plain = type(text) is str  # a subclass may compare or hash as it likes: not remembered
        if plain:
            if _GIL:
                known = self._memo.get(text)
                if known is not None:
                    # A `with suppress` costs more than the lookup it would guard.
                    try:  # noqa: SIM105
                        self._memo.move_to_end(text)
                    except KeyError:  # forgotten by another thread meanwhile: the count holds
                        pass
                    return known
            else:
                with self._lock:
                    known = self._memo.get(text)
                    if known is not None:
                        self._memo.move_to_end(text)
                        return known
        counted, kept = self._ask(text)
        if plain and kept:
            self._remember(text, counted)
        return counted

    def _ask(self, text: str) -> tuple[int, bool]:
        """(the count of `text`, whether it may be remembered)."""
        return self.counter.count_text(text), True

    def _remember(self, text: str, counted: int) -> None:
        charged = len(text) + _ENTRY_CHARS
        if charged > self.memo_chars:
            return
        with self._lock:
            memo = self._memo
            if text in memo:  # another thread counted it meanwhile: charged once
                memo.move_to_end(text)
                return
            memo[text] = counted
            self._memo_held += charged
            while self._memo_held > self.memo_chars:
                oldest, _ = memo.popitem(last=False)
                self._memo_held -= len(oldest) + _ENTRY_CHARS


@attrs.define(eq=False)
class CheckedCounter(MemoCounter):
    """A plugin's counter, each of whose answers is checked before the budget trusts it.

    A count that raises (``SystemExit`` and the like included: it is plugin
    code) or that is not a whole number of at least 0 would end the call or
    make a request of any size "fit"; that text counts the default estimate
    instead, and the first such failure is logged naming `owner` (the plugin
    and its version). Governance goes on: a tokenizer that cannot read one
    text must not wedge the session.

    A count the plugin gave is remembered, as by `MemoCounter`; a count it
    failed on is not (the failure may not recur), so a governor handed a
    `CheckedCounter` puts no second memo in front of it.
    """

    owner: str
    #: How many texts got the estimate because the counter failed on them.
    failures: int = attrs.field(default=0, init=False)

    def _ask(self, text: str) -> tuple[int, bool]:
        try:
            counted: Any = self.counter.count_text(text)
        except BaseException as exc:  # plugin code, called per text: see `contained`
            return self._estimate(text, f"raised {contained(exc)}"), False
        if type(counted) is not int:
            try:  # a whole number of another type (numpy's, say) is one
                counted = None if isinstance(counted, bool) else operator.index(counted)
            except Exception:
                counted = None
            if counted is None:
                return self._estimate(text, "answered something that is not a whole number"), False
        if counted < 0:
            return self._estimate(text, f"answered {counted}, less than 0"), False
        return int(counted), True

    def _estimate(self, text: str, why: str) -> int:
        with self._lock:  # counted from several threads: none lost, the first one logged
            self.failures += 1
            first = self.failures == 1
        if first:
            _log.warning(
                "token counter failed; the default estimate counts the text instead",
                plugin=self.owner,
                why=why,
                text_chars=len(text),
            )
        return estimate_tokens(text)


def remembering(counter: TokenCounter) -> TokenCounter:
    """`counter` as a governor counts with it: behind a `MemoCounter` unless it is one already.

    The built-in estimate is cheaper than a memo's lookup and is left as it is.
    """
    if type(counter) is EstimateCounter or isinstance(counter, MemoCounter):
        return counter
    return MemoCounter(counter)


def _has_surrogate(text: str) -> bool:
    return not text.isascii() and _SURROGATE.search(text) is not None


# Keys every message shape uses; any other key is checked for lone surrogates.
PLAIN_KEYS = frozenset(
    {
        "role",
        "content",
        "name",
        "tool_call_id",
        "tool_calls",
        "id",
        "type",
        "function",
        "arguments",
        "text",
        "reasoning_content",
        "image_url",
        "url",
        "detail",
    }
)


def keys_dirty(value: dict[Any, Any]) -> bool:
    """Whether a key of `value` holds a lone surrogate (checked in C unless a key is unusual)."""
    if PLAIN_KEYS.issuperset(value):
        return False
    return any(isinstance(key, str) and _has_surrogate(key) for key in value)


def _scan_dict(value: dict[Any, Any], depth: int) -> tuple[int, bool]:
    if depth > MAX_DEPTH:
        raise HistoryFormatError(TOO_DEEP)
    tokens = 0
    dirty = keys_dirty(value)
    for item in value.values():
        kind = type(item)
        if kind is str:
            if item.isascii():
                tokens += (len(item) + 3) >> 2
            else:
                tokens += -(-utf8_length(item) // 4)
                dirty = dirty or _SURROGATE.search(item) is not None
        elif item is None or kind is bool or kind is int or kind is float:
            continue
        else:
            more, bad = scan_text(item, depth + 1)
            tokens += more
            dirty = dirty or bad
    return tokens, dirty


#: What `scan_text` says of a value that nests too deep (or holds itself).
TOO_DEEP = f"nested deeper than {MAX_DEPTH} levels (or holding itself)"


def scan_text(value: Any, depth: int = 1) -> tuple[int, bool]:
    """(tokens of every string inside `value` by the default estimate, any lone surrogate).

    One walk answers both questions the survey asks of every message; it is
    written for speed because it is the only per-message work on a clean
    history. `depth` is the level `value` is at in its message (1: the
    message itself): dicts and lists nested deeper than `MAX_DEPTH` levels, as
    no session line may be, raise `HistoryFormatError` (`TOO_DEEP`), so a
    value that holds itself does too, long before the recursion limit.
    """
    kind = type(value)
    if kind is dict:
        return _scan_dict(value, depth)
    if kind is str:
        if value.isascii():
            return (len(value) + 3) >> 2, False
        return -(-utf8_length(value) // 4), _SURROGATE.search(value) is not None
    if kind is list or kind is tuple:
        if depth > MAX_DEPTH:
            raise HistoryFormatError(TOO_DEEP)
        tokens = 0
        dirty = False
        depth += 1
        for item in value:
            more, bad = scan_text(item, depth)
            tokens += more
            dirty = dirty or bad
        return tokens, dirty
    if isinstance(value, str):
        return scan_text(str(value))
    if isinstance(value, Mapping):
        return _scan_dict(dict(value), depth)
    if isinstance(value, list | tuple):
        return scan_text(list(value), depth)
    return 0, False


def _value_tokens(value: Any, counter: TokenCounter) -> int:
    """Tokens of every string inside `value`, counted by `counter`."""
    if isinstance(value, str):
        return counter.count_text(value)
    if isinstance(value, Mapping):
        return sum(_value_tokens(item, counter) for item in value.values())
    if isinstance(value, list | tuple):
        return sum(_value_tokens(item, counter) for item in value)
    return 0


def is_default_counter(counter: TokenCounter | None) -> bool:
    """Whether `counter` is the default estimate (so the fast `scan_text` path applies)."""
    return counter is None or (type(counter) is EstimateCounter and counter.bytes_per_token == 4)


def count_message(message: Any, counter: TokenCounter | None = None) -> int:
    """Tokens of one message (any value: entries that are not dicts are counted as well).

    Raises `HistoryFormatError` for a message nested deeper than `MAX_DEPTH`
    levels or holding itself (`scan_text`).
    """
    return count_scanned(message, counter)[0]


def count_scanned(message: Any, counter: TokenCounter | None = None) -> tuple[int, bool]:
    """(`count_message`, whether `message` holds a lone surrogate), in as few walks as may be."""
    tokens, dirty = scan_text(message)  # first: it refuses what the counter's walk cannot end
    if is_default_counter(counter):
        return MESSAGE_OVERHEAD + tokens, dirty
    assert counter is not None
    return MESSAGE_OVERHEAD + _value_tokens(message, counter), dirty


def count_system(system: str | None, counter: TokenCounter | None = None) -> int:
    """Tokens of the system prompt sent beside the messages (0 when there is none)."""
    if system is None:
        return 0
    text = system if isinstance(system, str) else json.dumps(system, default=str)
    return MESSAGE_OVERHEAD + (counter or DEFAULT_COUNTER).count_text(text)


def count_tools(tools: Iterable[Any], counter: TokenCounter | None = None) -> int:
    """Tokens of the tool definitions, as their compact JSON text."""
    definitions = list(tools)
    if not definitions:
        return 0
    text = json.dumps(definitions, ensure_ascii=False, separators=(",", ":"), default=str)
    return (counter or DEFAULT_COUNTER).count_text(text)


def count_request(
    system: str | None,
    messages: Sequence[Any],
    tools: Iterable[Any] = (),
    counter: TokenCounter | None = None,
) -> int:
    """Tokens of a whole request: system prompt, tool definitions and messages."""
    return (
        count_system(system, counter)
        + count_tools(tools, counter)
        + sum(count_message(message, counter) for message in messages)
    )
