"""Budget first: history that can never reach the model is left out before the stages run.

`snip_history` keeps the newest history that fits and drops the rest. On a
history far over budget most of it is dropped however much the stages shrink
it, yet every stage would still read all of it. So before the stages, the
governor walks back from the newest message adding up a *lower bound* of what
each message can cost once every stage has done its best:

- a tool result answering its call counts as if compacted to the shortest
  notice (or offloaded, or cut to the offload limit), unless it is smaller;
- a message some repair may drop or rewrite (a defect of any kind, a result
  outside its call's run or repeated in it) counts nothing;
- a user message `merge_user_turns` merges with another one counts nothing,
  whatever a repair drops between them (`_Runs`);
- the newest user message and everything after it count nothing, since they
  may be cut down to a few tokens;
- any other message counts what it costs now: no stage changes it.

Once that bound, plus the system prompt, the tool definitions and the leading
system messages, exceeds the budget, no tail reaching that far back can fit.
The history is cut at the user message at or before that point (never inside
a turn, so never between a call and its results) and the stages run on what
is left. The result is the one the full pipeline gives (see `HistoryCut` for
the one thing that needs help), at a cost that grows with what fits rather
than with the length of the history.

When the cut is safe is derived from what the stages declare (the governor's
`_CutPlan`): per-message stages that declare nothing are applied in the walk
(`find_cut`'s `through`), and the entry of the last budget stage says what was
left out.
A history whose kept part holds Anthropic tool blocks is governed whole. One
that holds them only in the part left out is governed (and answered) in the
OpenAI shape: the shape of what the model will see is what counts, and
checking the rest would read the whole history again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from nanobot_core._containment import contained
from nanobot_core.governance.checks import is_placeholder_message
from nanobot_core.governance.messages import KNOWN_ROLES, SYSTEM_ROLES
from nanobot_core.governance.stages.compact import compact_notice
from nanobot_core.governance.stages.offload import offload_notice
from nanobot_core.governance.survey import PLAIN_ASSISTANT, PLAIN_USER, Kind, MessageFacts
from nanobot_core.governance.tokens import DEFAULT_COUNTER, MESSAGE_OVERHEAD, estimate_tokens
from nanobot_core.governance.watermark import cut_watermark_tokens

if TYPE_CHECKING:
    from nanobot_core.governance.stage import StageContext

__all__ = ["MIN_MESSAGES", "HistoryCut", "early_drops", "find_cut", "still_held"]

#: Shorter histories are governed whole: the walk would cost about what it saves.
MIN_MESSAGES = 512

# The shortest texts a tool result can be replaced by: a compaction notice for a
# one-letter tool and an empty result, and an offload notice with an empty path.
_SHORTEST_COMPACTED = DEFAULT_COUNTER.count_text(compact_notice("x", ""))
_SHORTEST_OFFLOADED = DEFAULT_COUNTER.count_text(offload_notice("", "", 0))


@attrs.define
class HistoryCut:
    """The oldest history left out before the stages: ``messages[start:stop]``.

    `start` is the first message after the leading system messages, `stop` a
    user message; the stages see `kept`, ``messages[:start] + messages[stop:]``.

    Everything they do to the kept messages is what they do in the full
    history, with one exception: `strip_malformed_calls` names a call that has
    no id after its message's index, which counts the messages left out. Those
    the two repairs before it would have dropped anyway must not be counted;
    `dropped_early` says which they are, and `index_shift` does the count (only
    when an id is actually generated, since it reads the part left out).
    """

    messages: Sequence[Any]
    start: int
    stop: int
    dropped_early: Callable[[Any], bool]
    kept: list[Any]
    #: The least the messages left out cost (tokens) when the cut went down to the cut
    #: watermark, else 0: counted in `StageContext.request_tokens`.
    floor: int = 0
    _shift: int | None = None

    @property
    def removed(self) -> int:
        """How many messages were left out."""
        return self.stop - self.start

    def index_shift(self) -> int:
        """How many of the left-out messages the full pipeline still has when ids are made."""
        if self._shift is None:
            self._shift = still_held(self.messages[self.start : self.stop], self.dropped_early)
        return self._shift

    def describe(self, before: str = "the stages") -> str:
        """The line for the report (`before`: what ran after the cut)."""
        line = (
            f"left out the {self.removed} oldest messages (messages[{self.start}.."
            f"{self.stop - 1}]) before {before} ran: they cannot fit even with every tool "
            "result compacted"
        )
        if self.floor:
            line += " into the cut watermark, all that is kept of a request over budget"
        return line


def still_held(left_out: Sequence[Any], dropped_early: Callable[[Any], bool] | None) -> int:
    """How many of the `left_out` entries the full pipeline still holds when ids are made: all
    but those the stages before the cut drop (`dropped_early`; None: none known)."""
    if dropped_early is None:
        return len(left_out)
    return len(left_out) - sum(map(dropped_early, left_out))


def _content_floors(offload_limit: int) -> tuple[int, int]:
    """The fewest tokens a tool result's text can come to: (at most the limit, longer)."""
    longer = min(_SHORTEST_COMPACTED, _SHORTEST_OFFLOADED, -(-max(0, offload_limit) // 4))
    return _SHORTEST_COMPACTED, longer


def _is_user(message: Any) -> bool:
    return isinstance(message, dict) and message.get("role") == "user"


@attrs.define
class _Runs:
    """Which user messages of `messages` `merge_user_turns` makes one: those with nothing
    between them but entries the stages before it take out.

    The repairs run before it, so two user messages in a row in the raw list are not the
    only ones merged: a stray result, a non-message, an entry of an unknown role, a
    placeholder or an assistant message with an empty list of calls between them is dropped
    first. (A reply whose calls have no name is kept, saying so: taken out here all the same,
    as any message with a defect, which only lowers the bound.) Counting each of
    two such user messages what it costs alone counts more than is sent (one message; the
    older runtime block left out), and a history that fits by a few tokens would be cut.
    An entry is taken out here when it is a message the walk counts as nothing because a
    repair may drop it (a defect of its own, a placeholder, or one the per-message stages
    `through` stands for turn into something else), or a tool result: with nothing but
    such entries between it and a user message, it is in no call's run, and `pair_results`
    moves or drops it. Counting a user message as merged when it is not only lowers the
    bound.

    The one rule for which user messages are one, in both walks and for where a cut goes.
    """

    messages: Sequence[Any]
    of: Callable[[Any], MessageFacts]
    patterns: tuple[str, ...]
    through: Callable[[Any], Any] | None
    #: The prefilters of the stages `through` stands for, when each declares one (see
    #: `find_cut`): false of a text those stages leave as it is.
    passes: Callable[[str], object] | None = None
    #: Whether the walk is past the cut watermark, where it asks the prefilters (`passes`)
    #: of a plain answer rather than `through`, which remembers what it is asked.
    past_watermark: bool = attrs.field(default=False, init=False)
    #: The last plain answer whose prefilters were asked past the watermark, and what they
    #: said: the walk, which reads it next, asks nothing again.
    spared_index: int = attrs.field(default=-1, init=False)
    spared: bool = attrs.field(default=False, init=False)
    # The user message `merged` was last asked of, and the one before it merged with it.
    _asked: int | None = attrs.field(default=None, init=False)
    _before: int | None = attrs.field(default=None, init=False)

    def merged(self, index: int) -> bool:
        """Whether the user message at `index` is merged with another one.

        The walks ask it of every user message they read, newest first. Merging
        is mutual: whether this one is merged with the user message after it was
        found when that one was asked, so only the first one asked looks forward.
        Past the cut watermark, looking forward would read the call that opens
        the user's turn, which the walk there does not read: most of its cost.
        """
        entry = self.messages[index - 1] if index else None
        if (
            type(entry) is dict
            and len(entry) == 2
            and not self.patterns
            and entry.get("role") == "assistant"
            and self._kept(index - 1, entry)
        ):
            before = None  # the commonest case, told without `beyond`
        else:
            before = self.beyond(index, -1)
        asked, merged_before = self._asked, self._before
        if (
            asked is not None
            and asked > index
            and (merged_before is None or merged_before <= index)
        ):
            after = merged_before == index
        else:  # the first asked, or one read out of order: look
            after = self.beyond(index, 1) is not None
        self._asked, self._before = index, before
        return before is not None or after

    def beyond(self, index: int, step: int) -> int | None:
        """The user message that the one at `index` is merged with, the nearest in the
        direction `step` (-1: before it, 1: after it), or None."""
        messages = self.messages
        plain = not self.patterns
        index += step
        while 0 <= index < len(messages):
            entry = messages[index]
            role = entry.get("role") if isinstance(entry, dict) else None
            if role == "user":
                return index
            if plain and role == "assistant" and len(entry) == 2 and self._kept(index, entry):
                return None
            if not self._taken_out(entry):
                return None
            index += step
        return None

    def _kept(self, index: int, entry: dict[str, Any]) -> bool:
        """Whether the stages leave `entry`, an assistant message with a content and nothing
        else, as one message, when that is quick to tell (False: not told here).

        The commonest entry next to a user message, an assistant's answer in ASCII
        text, has no defect (as `_plain_facts` says): told without working out its
        facts. With per-message stages, what the walk asks of it next is asked
        now: `through` inside the cut watermark (which remembers its answer), the
        prefilters past it (their answer kept in `spared` for the walk).
        """
        content = entry.get("content")
        if not (type(content) is str and content.isascii() and "[" not in content):
            return False
        through = self.through
        if through is None:
            return True
        if not self.past_watermark:
            return through(entry) is not None
        spared = False
        if self.passes is not None:
            try:
                spared = not self.passes(content)
            except BaseException as exc:  # `through` asks again, and reports what it raises
                contained(exc)
                spared = False
        self.spared_index, self.spared = index, spared
        return spared

    def _taken_out(self, entry: Any) -> bool:
        """Whether `entry`, between two user messages, is gone before they are merged."""
        if isinstance(entry, dict) and entry.get("role") == "tool":
            return True  # not read: past the cut watermark no result is
        fact = self.of(entry)
        kind = fact[3]
        if fact[2] or (
            self.patterns
            and kind == Kind.ASSISTANT
            and is_placeholder_message(entry, self.patterns)
        ):
            return True
        through = self.through
        if through is None:
            return False
        if kind == Kind.ASSISTANT and fact[4]:
            return True  # not handed to `through`: past the cut watermark no call is
        return through(entry) is None


def _is_system(message: Any) -> bool:
    role = message.get("role") if isinstance(message, dict) else None
    return isinstance(role, str) and role in SYSTEM_ROLES


def _answered(ids: frozenset[str], run: list[Any], floors: list[int]) -> int:
    """The floors of the results in `run` (call ids) that answer one of `ids` exactly once."""
    seen: dict[Any, int] = {}
    for identifier in run:
        if identifier in ids:
            seen[identifier] = seen.get(identifier, 0) + 1
    return sum(
        floor for identifier, floor in zip(run, floors, strict=True) if seen.get(identifier) == 1
    )


def _bound_exceeded(
    messages: Sequence[Any],
    start: int,
    index: int,
    room: int,
    ctx: StageContext,
    patterns: tuple[str, ...],
    runs: _Runs,
    through: Callable[[Any], Any] | None = None,
    low: _Low | None = None,
    quick_past: bool = True,
) -> int | None:
    """Walking back from `index`, where the lower bound of what follows first exceeds `room`.

    None when it never does. `through` gives, for a message with no defect of
    its own, the message the budget phase will see (None: not known, counted
    as nothing). With `low`, it also records where the bound first exceeds
    `low.room` and, from there on, the bound at each user message (all that
    a cut there could keep), and the bound where it exceeds `room`. `runs`
    says which user messages are merged. With `quick_past` (the default), the
    walk past `low.room` goes on in `_beyond_low`, which counts less at less
    cost; without, it counts as it did before it, every message. The loop is
    the whole cost of a cut, so it is written out in one piece.
    """
    of = ctx.facts.of
    estimate = ctx.facts.estimate
    limit = ctx.config.max_tool_result_chars
    short, longer = _content_floors(limit)
    tool, assistant, user = Kind.TOOL, Kind.ASSISTANT, Kind.USER
    total = 0
    run: list[Any] = []  # call ids of the results after `index`, newest first
    floors: list[int] = []  # their lower bounds
    low_room = low.room if low is not None else None
    while index >= start:
        message = messages[index]
        fact = of(message)
        if through is not None and not fact[2]:
            seen = through(message)
            if seen is None:
                fact = _UNKNOWN[fact[3]]
            elif seen is not message:
                message, fact = seen, of(seen)
        kind = fact[3]
        if kind == tool:
            run.append(fact[4])
            content = message.get("content")
            if fact[2]:  # a repair may drop it
                floors.append(0)
            elif estimate and type(content) is str:
                size = len(content)
                own = (size + 3) >> 2 if content.isascii() else estimate_tokens(content)
                least = short if size <= limit else longer
                floors.append(fact[1] - own + (least if least < own else own))
            else:  # only the default estimate is known to add up this way
                floors.append(MESSAGE_OVERHEAD)
            index -= 1
            continue
        if run:
            if kind == assistant and not fact[2]:
                ids = fact[4]
                if len(set(run)) == len(run) and ids.issuperset(run):
                    total += sum(floors)
                else:  # duplicates or strays: only the results sure to stay count
                    total += _answered(ids, run, floors)
            run = []
            floors = []
        total += _own_bound(fact, message, index, patterns, runs)
        if low_room is not None and total > low_room:
            assert low is not None
            if low.exceeded is None:
                low.exceeded = index
            elif fact[7]:
                low.blocks = True  # counted as it is, yet its blocks become other messages
            if kind == user:
                low.kept[index] = total
            if total > room:
                low.total = total
                return index
            if quick_past:
                return _beyond_low(
                    messages, start, index - 1, total, room, ctx, patterns, runs, through, low
                )
        if total > room:
            return index
        index -= 1
    return None


def _beyond_low(
    messages: Sequence[Any],
    start: int,
    first: int,
    total: int,
    room: int,
    ctx: StageContext,
    patterns: tuple[str, ...],
    runs: _Runs,
    through: Callable[[Any], Any] | None,
    low: _Low,
) -> int | None:
    """`_bound_exceeded` past the cut watermark: a lower bound read at less cost.

    What lies here is left out whatever the bound says; it only has to show
    that the request is over budget. So user messages and assistant messages
    without calls count what they cost as the stages leave them (as above),
    and tool results and messages with calls count nothing and are not read
    (nor handed to `through`): the bound is lower, the walk goes further back
    and each message costs less.
    """
    of = ctx.facts.of
    kept = low.kept
    # Without placeholder texts to test, the commonest messages (a user's or an assistant's
    # ASCII text and nothing else) that the stages leave as they are count what
    # `_plain_facts` says, worked out here and not remembered: the walk is all that reads them.
    plain = not patterns and ctx.facts.estimate
    passes = low.passes
    runs.past_watermark = True
    for index in range(first, start - 1, -1):
        message = messages[index]
        role = message.get("role") if type(message) is dict else None
        if role == "tool":  # the commonest message here counts nothing: nothing else to ask
            continue
        if role is None and _is_user(message):
            runs.merged(index)  # not read, counts nothing; asked all the same (see there)
            continue
        if plain and (role == "user" or role == "assistant") and len(message) == 2:
            content = message.get("content")
            unchanged = type(content) is str and content.isascii()
            if unchanged and through is not None:
                if runs.spared_index == index:  # asked already, for the user message after it
                    unchanged = runs.spared
                else:
                    try:
                        unchanged = passes is not None and not passes(content)
                    except BaseException as exc:  # `through` runs it again, and reports
                        contained(exc)
                        unchanged = False
                unchanged = unchanged or through(message) is message
            if unchanged:
                if role == "user" and content:
                    if runs.merged(index):
                        kept[index] = total  # merged with its neighbour: counts nothing
                    else:
                        total += PLAIN_USER + ((len(content) + 3) >> 2)
                        kept[index] = total
                        if total > room:
                            low.total = total
                            return index
                    continue
                if role == "assistant" and "[" not in content:
                    total += PLAIN_ASSISTANT + ((len(content) + 3) >> 2)
                    if total > room:
                        low.total = total
                        return index
                    continue
        if role == "user" or (role == "assistant" and message.get("tool_calls") is None):
            fact = of(message)
            blocks = fact[7]
            if through is not None and not fact[2]:
                seen = through(message)
                if seen is None:
                    fact = _UNKNOWN[fact[3]]
                elif seen is not message:
                    message, fact = seen, of(seen)
                    blocks = blocks or fact[7]
            if blocks:
                low.blocks = True  # counted as it is, yet its blocks become other messages
            total += _own_bound(fact, message, index, patterns, runs)
            if role == "user":
                kept[index] = total
            if total > room:
                low.total = total
                return index
    return None


def _own_bound(
    fact: MessageFacts, message: Any, index: int, patterns: tuple[str, ...], runs: _Runs
) -> int:
    """What a message that is not a tool result counts on its own: nothing if a repair may
    drop it, or merge it (a user message merged with another one costs less, see `_Runs`)."""
    kind = fact[3]
    if kind == Kind.USER:  # asked of every user message read (see `_Runs.merged`)
        return 0 if runs.merged(index) or fact[2] else fact[1]
    if fact[2] or (
        patterns and kind == Kind.ASSISTANT and is_placeholder_message(message, patterns)
    ):
        return 0
    return fact[1]


@attrs.define
class _Low:
    """What `_bound_exceeded` records for a cut down to the cut watermark (`room`)."""

    room: int
    exceeded: int | None = None  # where the bound first exceeds `room` (the walk reads less)
    kept: dict[int, int] = attrs.field(factory=dict)  # user message -> bound from it on
    total: int = 0  # the bound where the walk stopped
    #: Whether the walk past `exceeded` counted a message with Anthropic tool blocks.
    blocks: bool = False
    #: Whether the stages `through` stands for may change a message whose one text is
    #: the given one (true, or raising: ask `through`); see `find_cut`.
    passes: Callable[[str], object] | None = None


# What the walk counts for a message whose stages made something it does not know: a
# defect, which counts nothing (and makes its run count nothing), by kind.
_UNKNOWN: dict[int, MessageFacts] = {
    kind: (None, 0, 1, kind, frozenset() if kind == Kind.ASSISTANT else None, 0, False, False)
    for kind in (Kind.NON_MESSAGE, Kind.SYSTEM, Kind.USER, Kind.ASSISTANT, Kind.TOOL)
}


def find_cut(
    messages: Sequence[Any],
    ctx: StageContext,
    *,
    patterns: tuple[str, ...] = (),
    dropped_early: Callable[[Any], bool],
    through: Callable[[Any], Any] | None = None,
    passes: Callable[[str], object] | None = None,
    watermark: bool = False,
) -> HistoryCut | None:
    """The oldest part of `messages` that cannot be in any request within budget, or None.

    `patterns` are the extra placeholder texts of `strip_placeholders`;
    `dropped_early` tells the entries the repairs before `strip_malformed_calls`
    drop (see `HistoryCut`). With `watermark` (the last budget stage declares
    `cuts_to_watermark`), a history whose bound exceeds the budget is over
    budget whatever the stages do, so that stage will keep no more than the
    cut watermark: the cut then leaves out what cannot fit into that, and
    `HistoryCut.floor` carries the bound of the part left out between the two
    cuts, so that the request is still seen to be over budget. Past the cut
    watermark, `passes` (when given) is asked first of a user's or an
    assistant's message that holds one text: false when the stages `through`
    stands for leave such a message as it is (their prefilters), at less cost
    than `through`; when it is true or raises, `through` is asked.
    """
    if through is None and _fits_at_least(messages, ctx):
        return None
    of = ctx.facts.of
    count = len(messages)
    start = 0
    fixed = ctx.fixed_tokens
    while start < count and (fact := of(messages[start]))[3] == Kind.SYSTEM:
        fixed += 0 if fact[2] else fact[1]
        start += 1
    index = count - 1
    while index > start and not _is_user(messages[index]):
        index -= 1
    # The newest user message and what follows count nothing: they may be cut to a few tokens.
    room = ctx.budget.limit - fixed
    low = _Low(cut_watermark_tokens(ctx) - fixed, passes=passes) if watermark else None
    runs = _Runs(messages, of, patterns, through, passes)
    exceeded = _bound_exceeded(messages, start, index - 1, room, ctx, patterns, runs, through, low)
    if (
        exceeded is None
        and low is not None
        and low.exceeded is not None
        and ctx.facts.known(messages) is None
    ):
        # The quick bound past the cut watermark counts no tool result and no call: on a
        # history a few times the budget, mostly results, it runs out of history before
        # it shows the request over budget, and every stage then reads every message (a
        # 2,500-message history cost twice what a 10,000-message one does). Those count
        # too, once, before the history is governed whole: on a history new to this
        # governor. One it has read before (a session's, call after call) is mostly
        # within the budget, where a second walk would find nothing, every call.
        low = _Low(low.room, passes=passes)
        runs = _Runs(messages, of, patterns, through, passes)
        exceeded = _bound_exceeded(
            messages, start, index - 1, room, ctx, patterns, runs, through, low, quick_past=False
        )
    if exceeded is None:
        return None  # all of it might fit
    stop = _at_turn_start(messages, start, exceeded, runs)
    if stop is None:
        return None
    floor = 0
    if low is not None and low.exceeded is not None:
        lower = _turn_start(messages, stop, low.exceeded, runs)
        if lower > stop and lower in low.kept:
            # Left out too, but its bound proves the request over budget: what the bound
            # counted there must be in the OpenAI shape.
            if low.blocks:
                return None
            floor = low.total - low.kept[lower]
            stop = lower
    kept = [*messages[:start], *messages[stop:]]
    # From the facts, which the stages read next: touching every message again would
    # cost a cache miss each on a long history.
    if ctx.facts.tool_blocks(kept):
        return None  # its tool blocks become other messages: the bounds above do not hold
    return HistoryCut(messages, start, stop, dropped_early, kept, floor)


def _fits_at_least(messages: Sequence[Any], ctx: StageContext) -> bool:
    """Whether an upper limit of the lower bound says all of it might fit, read at C speed.

    Only when every message is known already (a history read on an earlier
    call): then the walk is not worth starting. The limit adds, over every
    message, what it costs now, less for each tool result a quarter of its
    characters (at most its text's share, by the default estimate) plus the
    shortest text it can be replaced by. With another counter the walk counts
    a tool result `MESSAGE_OVERHEAD` at most, and so does the limit: without
    that, a session over budget before its results are compacted walked its
    whole history every call, to find nothing.
    """
    totals = ctx.facts.fit_totals(messages)
    if totals is None:
        return False
    bound, tools, chars, result_tokens = totals
    if ctx.facts.estimate:
        short, longer = _content_floors(ctx.config.max_tool_result_chars)
        bound += tools * max(short, longer) - chars // 4
    else:
        bound += tools * MESSAGE_OVERHEAD - result_tokens
    return bool(ctx.fixed_tokens + bound <= ctx.budget.limit)


def _at_turn_start(messages: Sequence[Any], start: int, index: int, runs: _Runs) -> int | None:
    """Where the cut at `index` moves back to (the user message at or before it), or None.

    The leading system messages stay the same only if no system message comes
    after them before the first user message (a repair could drop what is in
    between and make it leading); histories where one does are governed whole.
    """
    stop = _turn_start(messages, start, index, runs)
    first = start
    while first < stop and not _is_user(messages[first]):
        if _is_system(messages[first]):
            return None
        first += 1
    return stop if stop > first else None


def _turn_start(messages: Sequence[Any], start: int, index: int, runs: _Runs) -> int:
    """The first of the user messages merged into one (`_Runs`) at or before `index`
    (`start` at the least)."""
    stop = index
    while stop > start and not _is_user(messages[stop]):
        stop -= 1
    # Never between user messages that become one, whatever a repair takes out between them.
    while stop > start and (before := runs.beyond(stop, -1)) is not None and before >= start:
        stop = before
    return stop


def early_drops(
    *, placeholders: bool, non_messages: bool, patterns: tuple[str, ...]
) -> Callable[[Any], bool]:
    """What `strip_placeholders` and `drop_non_messages` drop, when they run."""

    def dropped(entry: Any) -> bool:
        if non_messages:
            role = entry.get("role") if isinstance(entry, dict) else None
            if not (isinstance(role, str) and role in KNOWN_ROLES):
                return True
        return placeholders and is_placeholder_message(entry, patterns)

    return dropped
