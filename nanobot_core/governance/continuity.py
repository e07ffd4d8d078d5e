"""A session's governance across calls: the state that keeps the request's prefix stable.

A provider's prompt cache reuses the longest byte-identical prefix of the
previous request, so what the governor sent once should stay as it was while
the request still fits. `GovernanceState` is what the governor of a session
decided last time, in indices of the history it was given (the session only
grows, so indices stay true): where the kept history starts, which steps of
that turn were left out, and which tool results were sent compacted. The next
call applies the same decisions first (`Continuity.view`), then runs the
stages on that view: while it fits, compaction and snipping find nothing to
do and the new request is the old one plus what was appended. When they must
act, they go down to the low watermark (a cut further, to the cut watermark)
and the new decisions are read back from what was sent (`Continuity.learn`).

The state survives a restart as a session line that is not a message,
``{"_meta": {"kind": "governance", "version": 1, ...}}`` (see
`GovernanceState.to_record`): the runner appends one whenever the state
changes and hands the newest back on resume. A record of a version newer than
`RECORD_VERSION` was written by a newer nanobot-core: it is not damage, but
not read either (`newest_state` passes it over). A fresh governor given the
same history and state sends the same messages. A state that does not fit
the history (shorter history, indices on the wrong kind of message) is
ignored and the history is governed whole.
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from itertools import compress, count, islice, repeat
from operator import is_, is_not
from typing import Any, NamedTuple

import attrs

from nanobot_core.governance._later import Later
from nanobot_core.governance.messages import (
    CallNames,
    leading_system_count,
    starts_with,
)
from nanobot_core.governance.stages.compact import COMPACT_PREFIX, compact_notice
from nanobot_core.governance.stages.snip import left_out_steps, step_starts, with_steps_notice
from nanobot_core.governance.survey import Origins

__all__ = [
    "META_KIND",
    "RECORD_VERSION",
    "Continuity",
    "GovernanceState",
    "PassedOver",
    "Prefix",
    "Recompaction",
    "is_governance_record",
    "latest_state",
    "newer_version",
    "newest_state",
    "read_record",
]


class Recompaction(NamedTuple):
    """How the session's view compacts again a result that was sent compacted.

    A named tuple: one is made for every call, and an attrs instance costs more to make
    than a short clean history costs to govern.
    """

    #: What the stages before compaction make of one tool result of the history, given the
    #: name of its call (a message, or something else when they drop it), as far as they
    #: can tell from it alone.
    prepare: Callable[[dict[str, Any], str | None], Any]
    #: Told of each compacted copy made: those stages made it already, and leave it as it is.
    made: Callable[[dict[str, Any]], None]


#: The ``kind`` of the session line that records a `GovernanceState`.
META_KIND = "governance"

#: The ``version`` of the governance records this nanobot-core writes, and the newest it
#: reads. A record without one was written before records had it: it is version 1. A
#: format that changes gets the next number, so that an older nanobot-core can tell a
#: record it does not know from a damaged one.
RECORD_VERSION = 1


def _indices(value: Any) -> tuple[int, ...]:
    if value == ():
        return ()
    return tuple(sorted(set(map(int, value))))


@attrs.frozen
class GovernanceState:
    """What the governor of a session decided, in indices of the history it governed.

    `start` is the user message the history sent after the leading system
    messages starts at (0 or the first one: nothing was cut); `steps_from`,
    when set, is the first step of that turn that was sent, the steps between
    `start` and it being left out (a notice on the user message says so); `compacted` are the tool
    results sent compacted; `length` is the length of the history it was
    worked out for. `steps_left_out`, with `steps_from`, is the count that
    notice gave: the steps of the turn as the repairs left it, which the
    history's own messages need not show (a stray result a repair dropped is
    no step). None (a state recorded before it was kept) counts them in the
    history.
    """

    start: int = 0
    steps_from: int | None = None
    compacted: tuple[int, ...] = attrs.field(default=(), converter=_indices)
    length: int = 0
    steps_left_out: int | None = None

    def to_record(self) -> dict[str, Any]:
        """The session line that records this state (never sent to the model)."""
        return {
            "_meta": {
                "kind": META_KIND,
                "version": RECORD_VERSION,
                "start": self.start,
                "steps_from": self.steps_from,
                "compacted": list(self.compacted),
                "length": self.length,
                "steps_left_out": self.steps_left_out,
            }
        }

    @classmethod
    def from_record(cls, record: Any) -> GovernanceState | None:
        """The state a session line records, or None when it is not a valid governance record."""
        return read_record(record)[0]

    def moved(self, other: GovernanceState) -> bool:
        """Whether `other` made other decisions (not just saw a longer history)."""
        return _decisions(self) != _decisions(other)

    def to_be_recorded(self, recorded: GovernanceState | None) -> bool:
        """Whether a session must record this state, `recorded` being the last it recorded
        (None: none yet, and then only a state that decided something is worth a line)."""
        if recorded is None:
            return bool(self.start or self.steps_from or self.compacted)
        return recorded.moved(self)


def is_governance_record(record: Any) -> bool:
    """Whether a session line says it is a governance record (``_meta`` of kind governance),
    valid or not."""
    meta = record.get("_meta") if isinstance(record, Mapping) else None
    return isinstance(meta, Mapping) and meta.get("kind") == META_KIND


def _whole(value: Any) -> bool:
    return type(value) is int and value >= 0


def _shown(value: Any) -> str:
    """`value` as a problem quotes it: JSON, clipped (a damaged line may hold anything)."""
    from nanobot_core._clip import clip

    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return clip(text, 80)


def read_record(record: Any) -> tuple[GovernanceState | None, str]:
    """The state a session line records, and what is wrong with it when it cannot be read.

    ``(state, "")`` for a valid governance record; ``(None, "")`` for a line that is no
    governance record at all; ``(None, why)`` for a damaged one (it says it is one, but
    its fields are not the state's): `why` names the first field at fault and its value.
    A record of a version newer than `RECORD_VERSION` is not read (its fields may mean
    something else): ``(None, why)``, `why` saying so; `newer_version` tells it from damage.
    """
    if not is_governance_record(record):
        return None, ""
    meta = record["_meta"]
    version = meta.get("version", 1)
    if not _whole(version) or version == 0:
        return None, f"version is {_shown(version)}, not a whole number of 1 or more"
    if version > RECORD_VERSION:
        return None, (
            f"version {version}, written by a newer nanobot-core "
            f"(this one reads up to version {RECORD_VERSION})"
        )
    start, steps, compacted, length, left_out = (
        meta.get("start"),
        meta.get("steps_from"),
        meta.get("compacted"),
        meta.get("length"),
        meta.get("steps_left_out"),
    )
    number = "a whole number of 0 or more"
    for key, value in (("start", start), ("length", length)):
        if not _whole(value):
            return None, f"{key} is {_shown(value)}, not {number}"
    if not (isinstance(compacted, list) and all(map(_whole, compacted))):
        return None, f"compacted is {_shown(compacted)}, not a list of whole numbers of 0 or more"
    if steps is not None and not _whole(steps):
        return None, f"steps_from is {_shown(steps)}, not null or {number}"
    if left_out is not None:
        # A notice counts one step at least, and only a cut between steps gives one.
        if not _whole(left_out) or left_out == 0:
            return None, f"steps_left_out is {_shown(left_out)}, not null or a whole number above 0"
        if steps is None:
            return None, f"steps_left_out is {left_out} without steps_from"
    return GovernanceState(start, steps, compacted, length, left_out), ""


def newer_version(record: Any) -> int | None:
    """The version of a governance record written by a newer nanobot-core (one above
    `RECORD_VERSION`), or None for any other line: such a record is no damage, only
    not for this nanobot-core to read."""
    if not is_governance_record(record):
        return None
    version = record["_meta"].get("version", 1)
    return version if _whole(version) and version > RECORD_VERSION else None


class PassedOver(NamedTuple):
    """A governance record newer than the one restored that could not be read, and why."""

    #: The session line it is on, as the store numbers lines (from 1).
    line: int
    #: What is wrong with it: its first field at fault, or the version it was written in.
    problem: str
    #: The version of a record written by a newer nanobot-core; None for a damaged one.
    newer_version: int | None


def newest_state(
    lines: Iterable[tuple[int, Any]],
) -> tuple[GovernanceState | None, int | None, list[PassedOver]]:
    """The newest valid governance state among numbered session lines given newest first,
    the line it is on, and the governance records newer than it that were passed over.

    What ``run`` and ``govern`` both resume from, so that they pass over the same
    records: damaged ones and ones of a newer nanobot-core (`newer_version`). Lines
    that are no governance record are skipped; the lines are read only down to the
    first valid record.
    """
    passed: list[PassedOver] = []
    for number, record in lines:
        if not is_governance_record(record):
            continue
        state, problem = read_record(record)
        if state is not None:
            return state, number, passed
        passed.append(PassedOver(number, problem, newer_version(record)))
    return None, None, passed


#: The state of a history governed afresh (frozen: one object serves every call).
_AFRESH = GovernanceState()


def latest_state(records: Sequence[Any]) -> GovernanceState | None:
    """The newest governance state among session lines, or None."""
    for record in reversed(records):
        state = GovernanceState.from_record(record)
        if state is not None:
            return state
    return None


@attrs.frozen
class Prefix:
    """Whether the messages sent on the previous call are the start of this call's messages.

    `changed_at` is the index (in this call's messages) of the first one that
    differs, or None when the prefix was kept; `reason` says why.
    """

    kept: bool
    changed_at: int | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        """``{"kept", "changed_at", "reason"}``, as printed by ``govern --json``."""
        return {"kept": self.kept, "changed_at": self.changed_at, "reason": self.reason}


FIRST_CALL = Prefix(True, None, "first request: nothing was sent before")
# The answer of most calls of a session, made once (a Prefix is immutable).
_APPENDED = Prefix(True, None, "the messages sent before are unchanged; new ones follow them")
# The answer of a governor handed one history after another, made once too.
_FIRST_DIFFERS = Prefix(False, 0, "messages[0] differs from what was sent before")


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def _valid(state: GovernanceState, history: Sequence[Any], leading: int) -> bool:
    count = len(history)
    if state.length > count:
        return False
    # Only a history whose first non-system message is a user message: anything else before
    # it (entries a repair drops, a reply before any user message) would change what leads.
    if leading < count and _role(history[leading]) != "user":
        return False
    cut = state.steps_from is not None or state.start > leading
    if cut and not (leading <= state.start < count and _role(history[state.start]) == "user"):
        return False
    if state.steps_from is not None and not (state.start < state.steps_from < count):
        return False
    return all(i < count and _role(history[i]) == "tool" for i in state.compacted)


def _decisions(state: GovernanceState) -> tuple[Any, ...]:
    return (state.start, state.steps_from, state.compacted, state.steps_left_out)


class Continuity:
    """The state of one session's governor and the last request it sent."""

    def __init__(self) -> None:
        self._state = GovernanceState()
        # The read-back of a first call, not done yet: see `learn`.
        self._coming: Later[GovernanceState] | None = None
        self._sent: list[Any] | None = None
        self._seen: list[Any] | None = None  # the history of the last call
        self._compacted: dict[int, tuple[Any, dict[str, Any]]] = {}
        # The decisions last found valid for a history that the current one extends.
        self._checked: tuple[Any, ...] | None = None
        self._history: list[Any] = []  # the history of the current call, as `view` took it
        # The last view: (its decisions, the history length, the view, its positions).
        self._last_view: tuple[tuple[Any, ...], int, list[Any], list[int]] | None = None
        # The history ranges (start, stop) the current view leaves out, oldest first.
        self.left_out: tuple[tuple[int, int], ...] = ()

    @property
    def state(self) -> GovernanceState:
        """The decisions of the last call (read back now if that was put off)."""
        if self._coming is not None:
            self._state = self._coming()
            self._coming = None
        return self._state

    @state.setter
    def state(self, state: GovernanceState) -> None:
        self._state = state
        self._coming = None

    def result_state(self) -> GovernanceState | Later[GovernanceState]:
        """What the result of the last call holds as its state: itself, or its read-back."""
        return self._coming if self._coming is not None else self._state

    def restore(self, state: GovernanceState | None) -> None:
        """Continue from `state` (recorded by an earlier process); None starts afresh."""
        self.state = state or GovernanceState()
        self._sent = None
        self._seen = None
        self._compacted.clear()
        self._checked = None
        self._last_view = None

    def _canonical(self, history: list[Any]) -> tuple[list[Any], bool]:
        """`history`, with the messages seen on the last call standing for equal copies of
        them, and whether it extends what was seen (so the last state may apply).

        A session store that hands out new objects on every load (a history
        decoded again) gives equal messages that are not the same objects: once
        they are found equal to what was seen (one compare), the objects seen
        stand for them, so that everything known of those carries over.
        """
        seen = self._seen
        if seen is None:
            return history, True
        count = len(seen)
        if len(history) < count:
            return history, False
        if starts_with(history, seen):
            return history, True
        if history[:count] == seen:
            return [*seen, *history[count:]], True
        return history, False

    def _current(self, history: Sequence[Any], leading: int, extends: bool) -> GovernanceState:
        state = self.state
        # Another history than the one the state was worked out for: govern it afresh.
        if not extends:
            self._checked = self._last_view = None
            return _AFRESH
        decisions = _decisions(state)
        if self._seen is not None and decisions == self._checked:
            return state  # its indices lie in what was seen, which this history starts with
        if not _valid(state, history, leading):
            return _AFRESH
        self._checked = decisions
        return state

    def view(
        self, history: list[Any], recompaction: Callable[[], Recompaction]
    ) -> tuple[list[Any], list[int]]:
        """`history` with the last decisions applied, and the history index of each view entry.

        The view entry of the noticed user message (or a compacted result) maps
        to the index of the message it stands for. A result compacted before is
        compacted again from what the `prepare` of `recompaction()` makes of it,
        as the compaction that sent it saw it (a result redacted and offloaded
        first says so again); `recompaction` is called only then.
        """
        history, extends = self._canonical(history)
        self._history = history
        leading = leading_system_count(history)
        # Set as the field: `_current` read the state, so none is still to be read back.
        state = self._state = self._current(history, leading, extends)
        if state.start <= leading and state.steps_from is None and not state.compacted:
            self._last_view = None
            self.left_out = ()
            return history, []
        decisions = _decisions(state)
        last = self._last_view
        if last is not None and last[0] == decisions and self._seen is not None:
            # The same decisions on a history that extends the last one: what was appended
            # follows the last view as it is.
            length = last[1]
            if length == len(self._seen) <= len(history):
                view, positions = (
                    last[2] + history[length:],
                    [*last[3], *range(length, len(history))],
                )
                self._last_view = (decisions, len(history), view, positions)
                return view, positions
        view, positions = self._build_view(history, state, leading, recompaction())
        self._last_view = (decisions, len(history), view, positions)
        return view, positions

    def _build_view(
        self,
        history: list[Any],
        state: GovernanceState,
        leading: int,
        recompaction: Recompaction,
    ) -> tuple[list[Any], list[int]]:
        positions = list(range(leading))
        view = history[:leading]
        left_out = [(leading, state.start)] if state.start > leading else []
        if state.steps_from is not None:
            # The notice goes on the last of the user messages the turn starts with
            # (merge_user_turns makes them one, whatever a repair drops between them);
            # the steps after it were left out. A turn holds no later user message.
            last = state.steps_from - 1
            while last > state.start and _role(history[last]) != "user":
                last -= 1
            steps = state.steps_left_out
            if steps is None:  # recorded without it: the steps as the history holds them
                steps = len(step_starts(history, last + 1, state.steps_from))
            view += history[state.start : last]
            view.append(with_steps_notice(history[last], steps))
            positions += range(state.start, last + 1)
            first = state.steps_from
            left_out.append((last + 1, first))
        else:
            first = max(state.start, leading)
        view += history[first:]
        positions += range(first, len(history))
        # The copies of the results this view compacts: one a later cut left behind is never
        # shown again, so it is let go rather than kept for as long as the session runs.
        kept: dict[int, tuple[Any, dict[str, Any]]] = {}
        if state.compacted:
            names = CallNames(history)
            for index in state.compacted:
                if index >= first:
                    at = len(view) - (len(history) - index)
                    view[at] = self._compacted_copy(history, index, names, recompaction)
                    kept[index] = self._compacted[index]
        self._compacted = kept
        self.left_out = tuple(left_out)
        return view, positions

    def _compacted_copy(
        self,
        history: list[Any],
        index: int,
        names: CallNames,
        recompaction: Recompaction,
    ) -> dict[str, Any]:
        message = history[index]
        memo = self._compacted.get(index)
        if memo is not None and memo[0] is message:
            return memo[1]
        # Never the history's own text: the stages before compaction may have redacted it,
        # and an offloaded copy of what they made is the only one the model may be shown.
        name = message.get("name")
        called = name if isinstance(name, str) and name else names(index)
        prepared = recompaction.prepare(message, called)
        shown = prepared if isinstance(prepared, dict) else message
        name = shown.get("name")
        tool = name if isinstance(name, str) and name else called
        copy = {**shown, "content": compact_notice(tool, shown.get("content"))}
        recompaction.made(copy)
        self._compacted[index] = (message, copy)
        return copy

    def learn(
        self,
        history: list[Any],
        view: list[Any],
        positions: list[int],
        sent: list[Any],
        *,
        budget_acted: bool,
        left_out: tuple[int, int] | None = None,
        origins: Origins | None = None,
    ) -> Prefix:
        """Remember what `sent` decided and say whether the previous request's prefix was kept.

        `left_out`: the view entries ``view[start:stop]`` the stages were never
        handed (the budget-first cut), which `sent` cannot hold. `origins` tell,
        of a message a stage made in place of another, which one that was, and
        whether a stage added it (it stands for no message of the history); they
        are read only when `budget_acted`.

        On a first call (nothing was sent before) the prefix says so whatever
        was decided, so the decisions are read back only when they are first
        asked for (`state`, the result's state, the next call): a caller that
        governs each history once with a new governor never pays for them.
        What they are read from is kept as it is now: the history and the
        messages sent as lists of their own, the origins as taken here.
        """
        previous, before = self._sent, self.state
        seen = list(self._history if len(self._history) == len(history) else history)
        if budget_acted:
            copies = {id(copy) for _, copy in self._compacted.values()}
            if previous is None:
                # Read back later: from lists of its own and origins kept as they are now.
                kept = origins.kept() if origins is not None else None
                shown = seen if view is history or view is self._history else view
                read_back = partial(
                    _read_back,
                    seen,
                    shown,
                    positions,
                    list(sent),
                    copies,
                    left_out,
                    kept.origin if kept is not None else None,
                    kept.added if kept is not None else None,
                )
                self._state, self._coming = before, Later(read_back)
            else:
                self.state = _read_back(
                    history,
                    view,
                    positions,
                    sent,
                    copies,
                    left_out,
                    origins.origin if origins is not None else None,
                    origins.added if origins is not None else None,
                )
        else:
            # Set as the field: reading `before` left none still to be read back.
            self._state = (
                before
                if before.length == len(history)
                else GovernanceState(
                    before.start,
                    before.steps_from,
                    before.compacted,
                    len(history),
                    before.steps_left_out,
                )
            )
        self._sent = sent
        self._seen = seen
        if previous is None:
            return FIRST_CALL
        return _compare(previous, sent, before, self._state)


def _read_back(
    history: list[Any],
    view: list[Any],
    positions: list[int],
    sent: list[Any],
    copies: set[int] | frozenset[int] = frozenset(),
    left_out: tuple[int, int] | None = None,
    origin: Callable[[Any], Any] | None = None,
    added: Callable[[Any], bool] | None = None,
) -> GovernanceState:
    """The decisions `sent` embodies, in history indices (linear in the messages sent).

    Messages handed on as they were are found by identity, at C speed; only
    the others (results a stage rewrote, a rewritten user message) are looked
    at one by one: a tool result by the message it was made from (`origin`),
    else by its ``tool_call_id``: among the results after the last message
    found, or, before the first message found (or when none is), among those
    before the next one, the nearest first; one a stage `added` is none of
    them. `copies` are the ids of the compacted copies the view holds in place
    of their results. The view entries `left_out` (``start, stop``) are not
    looked among.
    """
    places: Sequence[int] = positions or range(len(history))
    if left_out is None:
        where = dict(zip(map(id, view), places, strict=True))
    else:
        start, stop = left_out
        where = dict(zip(map(id, view[:start]), places[:start], strict=True))
        where.update(zip(map(id, view[stop:]), places[stop:], strict=True))
    leading = leading_system_count(sent)
    body = sent[leading:]
    found: list[int | None] = list(map(where.get, map(id, body)))
    compacted: list[int | None] = [found[k] for k in _offsets(body, copies)] if copies else []
    # The results no message before them was found for are matched from the first message
    # found after them, newest first: a request is the newest part of the history, so
    # under reused call ids the nearest namesake before it is theirs, not the oldest one.
    anchor = next(compress(count(), map(is_not, found, repeat(None))), len(found))
    # Those results lie before the first message found, or else before the end of the view.
    end = places[-1] + 1 if places else 0
    every: dict[str, list[int]] | None = None
    # The nearest result placed after the one looked up bounds it: followed down from the
    # anchor as the offsets go down, so that the walk is linear however many stay unplaced.
    bound = (found[anchor] or 0) if anchor < len(found) else end
    below = anchor  # the offsets from here on were looked at for `bound`

    def nearest_before(offset: int, message: Any) -> int | None:
        nonlocal every, bound, below
        for k in range(below - 1, offset, -1):
            placed = found[k]
            if placed is not None:
                bound = placed
        below = offset + 1
        if every is None:
            every = _results_after(history, places, -1, left_out)
        results = every.get(message.get("tool_call_id"), [])
        at = bisect_left(results, bound) - 1
        return results[at] if at >= 0 else None

    _place(
        body,
        reversed(range(anchor)),
        where,
        origin,
        added,
        found,
        history,
        compacted,
        nearest_before,
    )
    by_call: dict[str, list[int]] | None = None
    # The last message found before the one looked up: followed up as the offsets go up.
    last = found[anchor] if anchor < len(found) else None
    above = anchor  # the offsets before this were looked at for `last`

    def first_after(offset: int, message: Any) -> int | None:
        nonlocal by_call, last, above
        for k in range(above, offset):
            placed = found[k]
            if placed is not None:
                last = placed
        above = offset
        assert last is not None  # the anchor is found, and comes before
        if by_call is None:
            by_call = _results_after(history, places, last, left_out)
        results = by_call.get(message.get("tool_call_id"), [])
        at = bisect_right(results, last)
        return results[at] if at < len(results) else None

    unfound = compress(count(anchor), map(is_, islice(found, anchor, None), repeat(None)))
    _place(body, unfound, where, origin, added, found, history, compacted, first_after)
    if origin is not None:
        _place_leading(body, found, where, origin)
    mapped = [(k, found[k] or 0) for k in _first_two(found)]
    if not mapped:
        return GovernanceState(0, None, compacted, len(history))
    offset, position = mapped[0]
    start = _turn_start(history, position)
    if offset > 0:  # the user message sent was rewritten: merged with those before it, maybe
        while start > 0 and _role(history[start - 1]) == "user":
            start -= 1
        # A merge says which message it was made from (the first of the run): entries a
        # repair dropped between the user messages it merged do not end the run there.
        made = _by_origin(body[0], where, origin) if origin is not None else None
        if made is not None and made < start and _role(history[made]) == "user":
            start = made
    steps_from = None
    # Steps were left out only where the task says so: a message a repair dropped between
    # the user message and the next one sent is no step cut.
    noticed_steps = left_out_steps(sent[leading]) if leading < len(sent) else 0
    noticed = noticed_steps > 0
    if offset == 0 and position == start:  # the user message as it was, or with its notice
        after = mapped[1][1] if len(mapped) > 1 else None
        if noticed and after is not None and after > start + 1:
            steps_from = after
    elif noticed and position > start + 1:  # the user message was rewritten: a new notice
        steps_from = position
    if steps_from is None and start <= leading_system_count(history):
        start = 0
    # The count the notice gave is sent again as it was: the stage counted the steps of the
    # repaired turn, which the history's messages alone do not tell.
    steps_left_out = noticed_steps if steps_from is not None else None
    return GovernanceState(start, steps_from, compacted, len(history), steps_left_out)


def _by_origin(message: Any, where: dict[int, int], origin: Callable[[Any], Any]) -> int | None:
    """The history index of the view message `message` was made from, through any number of
    replacements (an offloaded result compacted, then rewritten by a plugin), or None.

    A stage that hands back a message it was handed before can close the chain
    into a loop: the walk stops at a message it has seen.
    """
    seen = {id(message)}
    made_from = origin(message)
    while made_from is not None and id(made_from) not in seen:
        position = where.get(id(made_from))
        if position is not None:
            return position
        seen.add(id(made_from))
        made_from = origin(made_from)
    return None


def _place_leading(
    body: list[Any], found: list[int | None], where: dict[int, int], origin: Callable[[Any], Any]
) -> None:
    """Place, by the messages they were made from, the messages before the second one placed
    that are not tool results (a user or assistant message a stage rewrote): where the turn
    and its first step sent start is read from the first two."""
    placed = 0
    for offset, message in enumerate(body):
        if found[offset] is None and _role(message) != "tool":
            found[offset] = _by_origin(message, where, origin)
        if found[offset] is not None:
            placed += 1
            if placed == 2:
                return


def _offsets(body: list[Any], ids: set[int] | frozenset[int]) -> list[int]:
    """The offsets in `body` of the entries whose ids are in `ids`."""
    return list(compress(count(), map(ids.__contains__, map(id, body))))


def _first_two(found: list[int | None]) -> list[int]:
    """The offsets of the first two entries of `found` that are not None."""
    return list(islice(compress(count(), map(is_not, found, repeat(None))), 2))


def _place(
    body: list[Any],
    offsets: Iterable[int],
    where: dict[int, int],
    origin: Callable[[Any], Any] | None,
    added: Callable[[Any], bool] | None,
    found: list[int | None],
    history: list[Any],
    compacted: list[int | None],
    lookup: Callable[[int, Any], int | None],
) -> None:
    """Place the sent tool results at `offsets` (in that order) that stand for one of the
    history: by the message `origin` says each was made from, else by `lookup` (offset,
    result), but not one a stage `added`. Each placed is recorded in `found`, and in
    `compacted` when it was sent compacted and its history message is not.

    One loop whose common path (a result one replacement away from the history)
    calls only `origin`: it runs for every result a compaction rewrote.
    """
    for offset in offsets:
        message = body[offset]
        if not isinstance(message, dict) or message.get("role") != "tool":
            continue
        # A message made from another was not added: ask `origin` first, and `added` only
        # of the messages no stage made. Most are one replacement away from the history.
        made_from = origin(message) if origin is not None else None
        if made_from is None:
            if added is not None and added(message):
                continue
            position = lookup(offset, message)
        else:
            position = where.get(id(made_from))
            if position is None and origin is not None:
                position = _by_origin(message, where, origin)
            if position is None:
                position = lookup(offset, message)
        if position is None:
            continue
        found[offset] = position
        text = message.get("content")
        if type(text) is str and text.startswith(COMPACT_PREFIX):
            original = history[position].get("content")
            if not (type(original) is str and original.startswith(COMPACT_PREFIX)):
                compacted.append(position)


def _results_after(
    history: list[Any],
    places: Sequence[int],
    last: int,
    left_out: tuple[int, int] | None = None,
) -> dict[str, list[int]]:
    """The history indices of the tool results in view after history index `last`, by call id.

    The view entries `left_out` (``start, stop``) are not among them: nothing sent is one.
    """
    by_call: dict[str, list[int]] = {}
    first = bisect_right(places, last)
    if left_out is None:
        looked: Sequence[int] = places[first:]
    else:
        start, stop = left_out
        looked = [*places[first:start], *places[max(first, stop) :]]
    for index in looked:
        message = history[index]
        if _role(message) == "tool" and isinstance(message.get("tool_call_id"), str):
            by_call.setdefault(message["tool_call_id"], []).append(index)
    return by_call


def _turn_start(history: list[Any], position: int) -> int:
    """The user message at or before `position` (0 when there is none)."""
    while position > 0 and _role(history[position]) != "user":
        position -= 1
    return position if _role(history[position]) == "user" else 0


def _compare(
    previous: list[Any] | None, sent: list[Any], before: GovernanceState, after: GovernanceState
) -> Prefix:
    if previous is None:
        return FIRST_CALL
    count = len(previous)
    if len(sent) >= count and sent[:count] == previous:
        return _APPENDED
    changed_at = _first_difference(previous, sent)
    if (after.start, after.steps_from) != (before.start, before.steps_from):
        reason = "over budget: the history was cut further, down to the cut watermark"
    elif after.compacted != before.compacted:
        reason = "over budget: older tool results were compacted, down to the low watermark"
    elif changed_at == 0:
        return _FIRST_DIFFERS
    else:
        reason = f"messages[{changed_at}] differs from what was sent before"
    return Prefix(False, changed_at, reason)


def _first_difference(previous: list[Any], sent: list[Any]) -> int:
    """The index of the first message `sent` holds in place of `previous`'s, or the length of
    the shorter list when one starts the other.

    A plain loop: a generator handed to ``next`` costs more than the compare itself on a
    short history, and a governor used for one history after another asks on every call.
    """
    for index, (before, now) in enumerate(zip(previous, sent, strict=False)):
        if before is not now and before != now:
            return index
    return min(len(previous), len(sent))
