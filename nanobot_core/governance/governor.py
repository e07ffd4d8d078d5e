"""The governor: runs the stages over the history, then its own final guarantees, and reports.

`Governor.govern` never changes what it is given. Stages work copy-on-write:
each returns its input list untouched when it has nothing to do, or a new
list that shares every dict it did not change. A stage that declares
nothing is handed a list that gives out a copy of each message (every dict
and list in it; strings are shared) as the stage reads it (`Handed`), and a
per-message stage a copy of its one message: even a stage that edits what it
is handed in place cannot reach the caller's history, and one that reads
nothing costs nothing. What a stage hands back unchanged is swapped back for
the original. A whole-list stage that declares its work (`acts_on`) promises
to build new dicts for what it changes, and is handed the history itself.
When no stage and no final check changed anything, the result *is* the input
list.

Every shortcut is derived from what the stages declare (`Stage.acts_on`,
`widened_by`, `per_message`, `whole_list_with`, `local`), never from which
stage it is, and none changes any result: a stage is skipped when none of its
kinds of work is present; a history that is already clean and fits is
recognised in one pass and handed back at once when every stage declares its
work (`clean.py`); history that cannot fit however the stages shrink it is left
out before they run (`budget_first.py`), or at the start of the budget phase
when a whole-list stage before it declares nothing and reads its `Deferred`
list; a per-message stage runs only on the messages that have its work (that
may reach the model, when it declares none), and its outcome per message
object is remembered; what the leading local stages made of the last call's
history is reused when only messages without work were appended (`_Pass`).
"""

from __future__ import annotations

import functools
import gc
import operator
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import compress, count, repeat
from operator import and_, gt, itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import attrs

from nanobot_core._containment import contained
from nanobot_core._logging import get_logger
from nanobot_core.config import (
    Config,
    GovernanceConfig,
    check_config,
    option_source,
    source_of,
)
from nanobot_core.errors import ConfigError, SessionLockedError
from nanobot_core.governance import budget_first as cutting
from nanobot_core.governance._handed import Deferred, Handed
from nanobot_core.governance._later import Later, resolved
from nanobot_core.governance.anthropic import (
    from_openai_shape,
    is_anthropic_shape,
    misplaced_tool_blocks,
    to_openai_shape,
)
from nanobot_core.governance.budget_first import HistoryCut, early_drops, find_cut, still_held
from nanobot_core.governance.clean import clean_tokens
from nanobot_core.governance.continuity import (
    FIRST_CALL,
    Continuity,
    GovernanceState,
    Prefix,
    Recompaction,
)
from nanobot_core.governance.final import (
    FINAL_STAGE,
    FinalStep,
    closing_room,
    ends_with_reply,
    final_step,
    needs_final_step,
)
from nanobot_core.governance.history_file import HistoryFormatError
from nanobot_core.governance.messages import (
    ONE_TEXT_KEYS,
    any_text_passes,
    container_copy,
    nesting_fault,
)
from nanobot_core.governance.ordering import place_stages
from nanobot_core.governance.stage import Budget, Stage, StageContext, StageOutcome
from nanobot_core.governance.stages import builtin_stages
from nanobot_core.governance.stages.non_messages import non_message
from nanobot_core.governance.store import ResultStore, default_store
from nanobot_core.governance.survey import (
    KIND_BITS,
    Defect,
    FactsCache,
    Kind,
    Listing,
    Origins,
    Splice,
    Survey,
)
from nanobot_core.governance.tokens import (
    EstimateCounter,
    TokenCounter,
    count_system,
    count_tools,
    is_default_counter,
    remembering,
)

__all__ = [
    "GovernanceReport",
    "GovernanceResult",
    "Governor",
    "ReportEntry",
    "build_governor",
]

if TYPE_CHECKING:
    from nanobot_core.kernel.manager import PluginManager

log = get_logger("nanobot_core.governance")


@attrs.define
class ReportEntry:
    """What one stage did in one run: whether it changed the history, why, and the token cost.

    Not frozen only because a frozen attrs class costs three times as much to build,
    and a report holds one entry per stage for every model call.
    """

    stage: str
    changed: bool
    details: list[str] = attrs.field(factory=list)
    tokens_before: int | None = None
    tokens_after: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The entry as printed by ``nanobot-core govern --json``."""
        return {
            "stage": self.stage,
            "changed": self.changed,
            "details": list(self.details),
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
        }


class GovernanceReport(list[ReportEntry]):
    """The report of one run: one entry per stage in pipeline order, then ``final``."""

    @property
    def changed(self) -> bool:
        """Whether any stage (or the final step) changed the history."""
        return any(entry.changed for entry in self)

    def entry(self, stage: str) -> ReportEntry | None:
        """The entry of `stage`, or None."""
        return next((entry for entry in self if entry.stage == stage), None)

    def to_json(self) -> list[dict[str, Any]]:
        """Every entry as JSON."""
        return [entry.to_json() for entry in self]


# A field held as itself or as a `Later` standing for it compares by what it stands for.
_BY_VALUE = attrs.cmp_using(eq=lambda a, b: resolved(a) == resolved(b), require_same_type=False)


@attrs.frozen
class GovernanceResult:
    """The model copy of the history and how it was obtained.

    `messages` is what to send after the system prompt: it never includes the
    `system` argument (system messages that were in the history stay). It
    shares unchanged dicts with the input, so treat it as read-only. `tokens`
    counts the whole request (system prompt, tool definitions, messages);
    `fits` says whether that is within `budget`.
    """

    messages: list[Any]
    # The report, or for a call whose stages all left the history alone its entries to
    # build when first read (`_idle_report`): compared and shown as the report either way.
    _report: GovernanceReport | Later[GovernanceReport] = attrs.field(
        alias="report", eq=_BY_VALUE, repr=lambda report: repr(resolved(report))
    )
    tokens: int
    budget: int
    fits: bool
    #: Whether the messages sent on this governor's previous call start these (prompt caches).
    prefix: Prefix = FIRST_CALL
    # The decisions, or on a governor's first call their read-back, done when first asked
    # for (`Continuity.learn`): compared and shown as the decisions either way.
    _state: GovernanceState | Later[GovernanceState] = attrs.field(
        factory=GovernanceState,
        alias="state",
        eq=_BY_VALUE,
        repr=lambda state: repr(resolved(state)),
    )

    @property
    def state(self) -> GovernanceState:
        """The decisions to carry to the next call (and to record in the session)."""
        return resolved(self._state)

    @property
    def report(self) -> GovernanceReport:
        """One entry per stage in pipeline order, then ``final``."""
        return resolved(self._report)

    @property
    def changed(self) -> bool:
        """Whether the messages differ from the input."""
        report = self._report
        # One still to build is of a call whose stages all left the history alone.
        return False if isinstance(report, Later) else report.changed


def _idle_report(notes: Sequence[tuple[str, tuple[str, ...]]], tokens: int) -> GovernanceReport:
    """The report of a call whose stages (`notes`: name, what it says) all left it alone."""
    return GovernanceReport(
        [ReportEntry(name, False, [*note], tokens, tokens) for name, note in notes]
    )


class _Run(NamedTuple):
    """What one run of the pipeline gave: the first fields of its `GovernanceResult`.

    A plain tuple until the call returns: a frozen attrs instance costs more to
    build than governing a short clean history.
    """

    messages: list[Any]
    report: GovernanceReport | Later[GovernanceReport]
    tokens: int
    budget: int
    fits: bool


_DISABLED_NOTE = "disabled in config (governance.disabled)"
# Shorter histories always take the one-pass check: asking what is known costs about as much.
_KNOWN_FROM = 64
# How many times a history answered in Anthropic blocks is governed again to fit.
_REFITS = 3


class Governor:
    """Runs governance stages in pipeline order, then the final guarantees.

    `stages` are ordered with `place_stages` (problems are logged and kept in
    `placement_problems`); stages named in ``config.disabled`` are skipped and
    reported as disabled. Without a `store`, results are offloaded to the
    default store of `workspace`, or truncated when there is no workspace.

    With `budget_first` (the default), history that cannot fit whatever the
    stages do is left out before they run, or at the start of the budget
    phase (see `_CutPlan`); the messages are the same either way.

    A `counter` other than the built-in estimate is asked once per distinct
    text: the governor puts it behind a `MemoCounter` unless it is one already
    (a plugin's, as `PluginManager.token_counter` hands it out, is).

    The ``config.stages`` table of every stage that declares its options is
    checked here, once (`Stage.check_options`): a `ConfigError` names the key,
    the stage and, from `origins` (stage name -> the plugin that contributed
    it), its plugin.
    """

    def __init__(
        self,
        stages: Sequence[Stage],
        *,
        config: GovernanceConfig | Config,
        counter: TokenCounter | None = None,
        store: ResultStore | None = None,
        workspace: Path | None = None,
        budget_first: bool = True,
        origins: Mapping[str, str] | None = None,
    ) -> None:
        if isinstance(config, Config):  # the whole configuration, as `build_governor` takes it
            config = config.governance
        elif not isinstance(config, GovernanceConfig):
            raise TypeError(
                "Governor: config must be a GovernanceConfig or a Config, got "
                f"{type(config).__name__}"
            )
        check_config(config)  # built in code, it was never checked
        stages = checked_stages(stages, "Governor")
        _check_stage_options(stages, config, origins or {})
        # Read only when a stage fails, to name its plugin in the warning.
        self._origins: Mapping[str, str] = dict(origins or {})
        placement = place_stages(stages)
        self.config = config
        self.budget = Budget.from_config(config)
        # Any counter but the estimate is asked once per distinct text: the session's calls
        # count the same texts again and again (`remembering`).
        self.counter: TokenCounter = (
            remembering(counter) if counter is not None else EstimateCounter()
        )
        self.workspace = Path(workspace) if workspace is not None else None
        if store is None and self.workspace is not None:
            store = default_store(self.workspace, config.store)
        self.store = store
        self.placement_problems = placement.problems
        for problem, name in zip(placement.problems, placement.problem_stages, strict=True):
            origin = self._origins.get(name)  # the plugin whose stage declared the constraint
            named = {} if origin is None else {"plugin": origin}
            log.warning("governance stage constraint ignored", problem=problem, **named)
        disabled = set(config.disabled)
        names = {stage.name for stage in placement.stages}
        # A name that matches no stage is most likely a typo: said, as tools.disabled does.
        for name in sorted(disabled - names):
            log.warning(
                "unknown stage name in governance.disabled",
                name=name,
                key="governance.disabled",
                **source_of(config.disabled),
            )
        for name in sorted(set(config.stages) - names):
            log.warning(
                "options for an unknown stage in governance.stages",
                name=name,
                key=f"governance.stages.{name}",
                **source_of(config.stages, name),
            )
        self._options: dict[str, Mapping[str, Any]] = dict(config.stages)
        self._pipeline = [
            (_as_configured(s, self._options.get(s.name, {})), s.name in disabled)
            for s in placement.stages
        ]
        # The bits of the work each stage declares, or None when it always has work.
        self._work = [
            _work_bits(stage, self._options.get(stage.name, {})) for stage, _ in self._pipeline
        ]
        # Per-message stages: stage name -> {id(message): (message, replacement or None, details)}.
        self._memo: dict[str, dict[int, _Remembered]] = {}
        # `_passes`, per tuple of stage names.
        self._passes_of: dict[tuple[str, ...], Callable[[str], object] | None] = {}
        self._tools_memo: tuple[tuple[Any, ...], int] | None = None
        self._system_memo: tuple[str | None, int] = (None, 0)
        self._cut_plan = _CutPlan.of(self._pipeline, self._work) if budget_first else None
        # What each stage (then the final step) says about a history it leaves alone.
        self._idle_notes = [
            (stage.name, (_DISABLED_NOTE,) if disabled else ())
            for stage, disabled in self._pipeline
        ] + [(FINAL_STAGE, ())]
        # A history `clean_tokens` accepts holds no kind of work: when every stage declares
        # its work, they would all be skipped, so skip straight to the result.
        self._clean_path = is_default_counter(self.counter) and all(
            disabled or work is not None
            for (_, disabled), work in zip(self._pipeline, self._work, strict=True)
        )
        self._continuity = Continuity()
        # Held by the call running, if any: a governor keeps one session's state across
        # calls, so a second call meanwhile (another thread, a stage) is refused at once.
        self._running = threading.Lock()
        # The per-message stages that come before the first stage that acts when over budget
        # (a compaction): what they make of a result is what a compaction saw of it.
        self._preparing = _preparing(self._pipeline, self._work)
        # The leading stages whose outcome on the history governed last time is reused when
        # only messages without work were appended (`Stage.local`), and that outcome.
        self._local_block = _local_block(self._pipeline, self._work)
        self._block_memo: _Block | None = None
        # `_view_shift` of the ranges the session's view leaves out, with their first entries
        # (held, not their ids: an id of a message freed since could be another message's).
        self._view_shift_memo: tuple[Any, tuple[Any, ...], int] | None = None
        # What is known of each message, kept across calls: a session's history grows, and
        # only what was appended since the last call is read (messages are never edited in
        # place once handed to a governor: a changed message is a new dict).
        self._facts = FactsCache(self.counter)
        self._shape_memo: list[Any] | None = None  # the last list found without Anthropic blocks
        self._last_view: Listing | None = None  # what the last run knew of its view

    @classmethod
    def from_plugins(cls, pm: PluginManager) -> Governor:
        """The governor over every plugin's stages, counter and store: `build_governor`'s code."""
        contributions = pm.contributions("stage")
        return build_governor(
            pm.config,
            pm.context.workspace,
            [c.item for c in contributions],
            counter=pm.token_counter(),
            store=pm.result_store(),
            origins={c.name: c.plugin.describe() for c in contributions},
        )

    # -- the session: what was decided on earlier calls --------------------------------

    @property
    def state(self) -> GovernanceState:
        """What this governor decided on its last call (see `continuity`)."""
        return self._continuity.state

    def restore(self, state: GovernanceState | None) -> None:
        """Continue a session from a recorded `state` (None: start afresh).

        Raises `SessionLockedError` while a `govern` of this governor runs, and
        `TypeError` for what is no `GovernanceState` (a saved session line is read
        with `GovernanceState.from_record`), which the next call would fail on.
        """
        if state is not None and not isinstance(state, GovernanceState):
            raise TypeError(
                "Governor.restore: state must be a GovernanceState or None, got "
                f"{type(state).__name__} (a session line such as GovernanceState.to_record() "
                "gives is read back with GovernanceState.from_record(line))"
            )
        if not self._running.acquire(blocking=False):
            raise _busy()
        try:
            self._continuity.restore(state)
            self._view_shift_memo = None
        finally:
            self._running.release()

    @property
    def stages(self) -> list[Stage]:
        """The active stages, in pipeline order."""
        return [stage for stage, disabled in self._pipeline if not disabled]

    def stage_names(self) -> list[str]:
        """The names of the active stages, in pipeline order."""
        return [stage.name for stage in self.stages]

    # -- sizes of the fixed parts, memoised across runs --------------------------------

    def _system_tokens(self, system: str | None) -> int:
        """The tokens of the system prompt `system`, counted once per new prompt."""
        known, tokens = self._system_memo
        # Compared by value: a session store that decodes every load hands an equal prompt,
        # not the same object, and comparing costs less than counting it again.
        if known is system or (type(system) is str and known == system):
            return tokens
        tokens = count_system(system, self.counter)
        self._system_memo = (system, tokens)
        return tokens

    def _tools_tokens(self, tools: Sequence[Any]) -> int:
        """The tokens of the tool definitions `tools`, checked and counted once per new list."""
        definitions = tuple(tools)
        memo = self._tools_memo
        # Compared item by item: the same definitions are the same objects, found at once.
        if memo is None or memo[0] != definitions:
            _check_definitions(definitions)
            memo = self._tools_memo = (definitions, count_tools(definitions, self.counter))
        return memo[1]

    def _view_shift(self, history: list[Any]) -> int:
        """`StageContext.view_shift` for the view of `history` the session's state made.

        The entries it leaves out, less those the stages before the cut drop (as a
        `HistoryCut` counts them). Worked out once per decision: a session's history
        only grows, so what the view leaves out stays as it was.
        """
        ranges = self._continuity.left_out
        if not ranges:
            return 0
        firsts = tuple(history[start] for start, _ in ranges)
        memo = self._view_shift_memo
        if memo is not None and memo[0] == ranges and all(map(operator.is_, memo[1], firsts)):
            return memo[2]
        plan = self._cut_plan
        dropped = plan.deferred().dropped_early if plan is not None else None
        shift = sum(still_held(history[start:stop], dropped) for start, stop in ranges)
        self._view_shift_memo = (ranges, firsts, shift)
        return shift

    def _prepare(self, message: dict[str, Any], tool: str | None) -> Any:
        """What the stages before compaction make of `message`, a result of the call `tool`.

        A per-message stage runs as in the pipeline: its prefilter asked,
        handed a copy, skipped when it raises or returns garbage; one that drops
        the message or makes several of it ends the preparing with what it had.
        A whole-list stage past the repairs (one that offloads only some tools'
        results, a plugin's) is handed a copy of the result alone, named after
        its call, and only the text it makes of it is taken.
        """
        ctx = StageContext(
            budget=self.budget,
            counter=self.counter,
            store=self.store,
            workspace=self.workspace,
            config=self.config,
        )
        for stage in self._preparing:
            context = self._context(stage, ctx)
            if not stage.per_message:
                named = message if message.get("name") or not tool else {**message, "name": tool}
                outcome = _call(stage, [container_copy(named)], context, self._origins)
                if isinstance(outcome, str) or not outcome.changed:
                    continue
                made = outcome.messages
                if len(made) == 1 and isinstance(made[0], dict) and nesting_fault(made[0]) is None:
                    message = {**message, "content": made[0].get("content")}
                continue
            remembered = self._remember(stage, message, context, {})
            if isinstance(remembered, str):
                continue
            replacement = remembered[1]
            if replacement is not None:
                if len(replacement) != 1:
                    break
                message = replacement[0]
        return message

    def _recompaction(self) -> Recompaction:
        """How the view compacts again the results sent compacted before.

        Made when a view needs it, never kept: held by the governor, its bound methods
        would make it a cycle that only the garbage collector frees.
        """
        return Recompaction(self._prepare, self._spare)

    def _spare(self, copy: dict[str, Any]) -> None:
        """Remember a compacted copy as left as it is by the per-message stages before
        compaction: it is what they made of its result, compacted (run again, a stage that
        rewrites results would rewrite the notice, which the call that compacted did not)."""
        for stage in self._preparing:
            if stage.per_message:
                self._memo.setdefault(stage.name, {})[id(copy)] = (copy, None, _NO_LINES)

    # -- one run ----------------------------------------------------------------------

    def govern(
        self,
        messages: Sequence[Any],
        *,
        system: str | None = None,
        tools: Sequence[Any] = (),
    ) -> GovernanceResult:
        """Govern a copy of `messages` for a request with `system` and `tools`.

        The input is never modified. Messages may be in the OpenAI shape or
        hold Anthropic ``tool_use``/``tool_result`` blocks (answered in the
        same shape, unless the blocks are only in history too old to fit: see
        `budget_first`). Never raises on any content of `messages` but one
        that no JSON can hold: a message read that holds a dict or list
        containing itself, or whose dicts and lists nest deeper than
        `MAX_DEPTH` (100) levels, as no session line may, raises
        `HistoryFormatError` naming its index. The governor is then as it was
        before the call. The cyclic garbage collector is paused while it runs
        (docs/governance.md, "Performance").

        A governor governs one history at a time: called while one of its calls
        runs (from another thread, or from a stage of that call), it raises
        `SessionLockedError` at once, having done nothing; use a governor per
        session (or per thread).

        `messages` that are not a list of messages (a single message dict, a
        string, None) and `tools` that are not tool definitions (a
        `ToolRegistry` rather than its `definitions()`) raise `TypeError`
        saying so: iterated as they are, they would be governed into a
        request that loses the history or miscounts the tools. `tools=None`
        is no tools.
        """
        tools = _checked_request(messages, tools)
        if not self._running.acquire(blocking=False):
            raise _busy()
        try:
            return self._govern_one(messages, system, tools)
        finally:
            self._running.release()

    def _govern_one(
        self, messages: Sequence[Any], system: str | None, tools: Sequence[Any]
    ) -> GovernanceResult:
        """`govern`, holding the governor."""
        caller = messages if isinstance(messages, list) else None
        # A list of its own: what the governor keeps for the next call must not change when
        # the caller appends to or edits its list afterwards, as an agent's loop does.
        given = list(messages)
        tools = tools if type(tools) is list or type(tools) is tuple else list(tools)
        # Checked (and counted) before anything changes: a list that is no tool definitions
        # raises here, the governor as it was.
        tools_tokens = self._tools_tokens(tools)
        before = dict(vars(self._continuity))  # a refused history leaves the session as it was
        # The cyclic garbage collector is paused for the call: a call on a long history makes
        # tens of thousands of small objects, all alive until it returns, so the collections
        # they would trigger find nothing to free and cost about 6% of the call. Restored on
        # every way out; left off when the caller had turned it off (or another call has).
        collecting = gc.isenabled()
        if collecting:
            gc.disable()
        try:
            return self._governed(caller, given, system, tools_tokens)
        except (HistoryFormatError, RecursionError):
            refusal = _refusal(given)  # iterative: the recursion limit may be near
            vars(self._continuity).update(before)
            self._forget_run()
            if refusal is None:
                raise
        finally:
            if collecting:
                gc.enable()
        raise refusal from None

    def _forget_run(self) -> None:
        """Drop what a run that ended in an error may have left half-known: the next call
        works it out again (none of it changes a result)."""
        self._facts.new_run()
        self._last_view = None
        self._block_memo = None
        self._shape_memo = None
        self._view_shift_memo = None

    def _governed(
        self,
        caller: list[Any] | None,
        given: list[Any],
        system: str | None,
        tools_tokens: int,
    ) -> GovernanceResult:
        """`govern` of `given` (the caller's list, when it is one, is `caller`), with tool
        definitions of `tools_tokens` tokens."""
        view, positions = self._continuity.view(given, self._recompaction)
        # With no earlier decision applied, the view is the history (or the equal messages
        # seen before, standing for it): a history handed back untouched is the caller's.
        untouched = given if not positions else view
        result, working_fit, acted, left_out = self._govern(
            given, view, untouched, system, tools_tokens, self.budget
        )
        limit = self.budget.limit
        # The stages budget the OpenAI shape; turned back into Anthropic blocks the history
        # can take more (a lone tool_result block costs more than its tool message). What
        # fitted as worked on must fit as returned: govern again for less, by the excess.
        for _ in range(_REFITS):
            if result.fits or not working_fit:
                break
            tighter = Budget(max(0, result.budget - (result.tokens - limit)))
            if tighter.limit >= result.budget:
                break
            result, working_fit, acted, left_out = self._govern(
                given, view, untouched, system, tools_tokens, tighter
            )
        if result.budget != limit:
            result = result._replace(budget=limit, fits=result.tokens <= limit)
        self._facts.retain(given, result.messages)
        self._last_view = self._facts.listing(view)
        # Handed out: the caller's own list when nothing changed, else a list nothing here
        # keeps (the caller may edit it, and hand it back as the next history).
        handed = (
            caller if result.messages is given and caller is not None else list(result.messages)
        )
        if acted is None:  # Anthropic blocks became other messages: indices would not carry over
            self._continuity.restore(None)
            return GovernanceResult(*result._replace(messages=handed))
        prefix = self._continuity.learn(
            given,
            view,
            positions,
            result.messages,
            budget_acted=acted,
            left_out=left_out,
            # Read only to read back what a budget stage decided.
            origins=self._facts.origins() if acted else None,
        )
        return GovernanceResult(
            handed,
            result.report,
            result.tokens,
            result.budget,
            result.fits,
            prefix,
            self._continuity.result_state(),
        )

    def _govern(
        self,
        given: list[Any],
        view: list[Any],
        untouched: list[Any],
        system: str | None,
        tools_tokens: int,
        budget: Budget,
        reserve: int = 0,
    ) -> tuple[_Run, bool, bool | None, tuple[int, int] | None]:
        """One run of the pipeline over `view` (`given` with earlier decisions applied).

        `untouched` is what to hand back when the view is clean and fits. The stages
        work to `budget` less `reserve` tokens: the room the user message the final step
        ends the request with takes (`final.closing_room`), when it adds one.

        Returns the result, whether the working copy fitted `budget`, whether
        a budget stage decided anything new (None: the history was in the
        Anthropic shape, whose indices do not carry over), and the view entries
        left out before any stage saw them (``start, stop``), if any.
        """
        fixed = self._system_tokens(system), tools_tokens
        self._facts.new_run()
        last = self._last_view
        if last is not None:
            self._facts.extend(view, last)
        # The one-pass check is for histories new to this governor; one that extends the
        # last one is known message by message, and the survey answers at once.
        if self._clean_path and (len(view) < _KNOWN_FROM or self._facts.registered(view) is None):
            room = budget.limit - fixed[0] - fixed[1]
            tokens = clean_tokens(view, room, self.config.max_tool_result_chars)
            if tokens is not None:
                result = self._untouched(untouched, fixed[0] + fixed[1] + tokens)
                if view is not given:  # it says so: built now, and changed
                    report = resolved(result.report)
                    _report_kept(report, self._continuity.state)
                    result = result._replace(report=report)
                return result, True, False, None
        ctx = StageContext(
            budget=Budget(max(0, budget.limit - reserve)) if reserve else budget,
            counter=self.counter,
            store=self.store,
            workspace=self.workspace,
            config=self.config,
            system_tokens=fixed[0],
            tools_tokens=fixed[1],
            facts=self._facts,
            view_shift=self._view_shift(given),
        )
        plan = self._cut_plan
        report = GovernanceReport()
        run = self._run_stages(view, ctx, report)
        current, tokens, anthropic = run.current, run.tokens, run.anthropic
        reply_last = ends_with_reply(given)
        room = 0 if reserve else closing_room(current, ctx, reply_last)
        if room and tokens + room > budget.limit:
            # The request ends with a user message the stages did not count: what fits
            # without it may not with it. Run them again with room for it, so that what
            # makes room is their choice (compacting, cutting to the watermark), as it is
            # for a history that takes those tokens itself, not a snip by the final step.
            return self._govern(given, view, untouched, system, tools_tokens, budget, room)
        clean = not run.present
        if run.early_cut is not None and plan is not None:
            _report_cut(report, plan.snipper, run.early_cut.describe())
        elif run.late_cut is not None and plan is not None:
            _report_cut(report, plan.snipper, run.late_cut.describe("the budget stages"))
        ctx.cut = None  # the final step works on the snipped history
        current, after = self._finish(
            current, tokens, clean, ctx, report, reply_last, budget.limit, reserved=bool(reserve)
        )
        working_fit = after <= budget.limit
        acted = any(entry.changed and entry.stage in _BUDGET_ENTRIES for entry in report)
        if view is not given:
            _report_kept(report, self._continuity.state)
        # Tool blocks a role cannot send are left out by the OpenAI shape stages work on: the
        # history then changed even when no stage says so, and must not be handed back as is.
        if anthropic:
            _report_stray_blocks(report, misplaced_tool_blocks(given))
        if not report.changed:
            current = given
        elif anthropic:
            current = from_openai_shape(current)
        if anthropic:
            after = ctx.request_tokens(current)  # the shape returned is the one that must fit
        result = _Run(current, report, after, budget.limit, after <= budget.limit)
        cut = run.early_cut
        left_out = (cut.start, cut.stop) if cut is not None and cut.messages is view else None
        return result, working_fit, (None if anthropic else acted), left_out

    def _finish(
        self,
        current: list[Any],
        tokens: int,
        clean: bool,
        ctx: StageContext,
        report: GovernanceReport,
        reply_last: bool,
        limit: int,
        *,
        reserved: bool,
    ) -> tuple[list[Any], int]:
        """The final step and its report entry: (the messages, their request tokens).

        `reply_last`: the history ends with an assistant message that makes no call, so
        the request may end with it (`final.ends_with_reply`). `limit`: the budget the
        request must fit; `reserved`: `ctx.budget` is less, leaving room for the user
        message the final step ends it with (`final.closing_room`).
        """
        # On a clean history the final repairs would each find nothing: skip them, unless a
        # repair left an assistant message last, which the request must not end with.
        if clean and not needs_final_step(current, reply_last):
            final = FinalStep(current, False, [])
        else:
            final = final_step(
                current, ctx, self._options, reply_last=reply_last, reserved=reserved
            )
        after = ctx.request_tokens(final.messages) if final.changed else tokens
        details = list(final.details)
        if after > limit:
            details.append(
                f"the request takes {after} tokens, over the budget of {limit}, with "
                "only the newest user message left: the system prompt and tool definitions "
                f"alone take {ctx.fixed_tokens}"
            )
        report.append(ReportEntry(FINAL_STAGE, final.changed, details, tokens, after))
        return final.messages, after

    def _untouched(self, messages: list[Any], tokens: int) -> _Run:
        """The result for a history that is clean and fits: itself, every stage idle."""
        # Built when first read: a caller that never reads it does not pay for it.
        report = Later(functools.partial(_idle_report, self._idle_notes, tokens))
        return _Run(messages, report, tokens, self.budget.limit, True)

    def _cut(self, messages: list[Any], ctx: StageContext, plan: _CutPlan) -> HistoryCut | None:
        """The oldest history that cannot fit, when leaving it out is worth it."""
        if len(messages) < cutting.MIN_MESSAGES:
            return None
        through = self._through(plan.mapped, ctx) if plan.mapped else None
        try:
            return find_cut(
                messages,
                ctx,
                dropped_early=plan.dropped_early,
                through=through,
                passes=self._passes(plan.mapped) if plan.mapped else None,
                watermark=plan.watermark,
            )
        except _StageFailed:
            return None  # it is skipped on the whole history: govern it whole, and report so

    def _through(self, names: tuple[str, ...], ctx: StageContext) -> Callable[[Any], Any]:
        """What the per-message stages `names` make of one message, in pipeline order.

        None when they make something else than one message of the same kind and
        links (the walk then counts it as nothing). Each outcome is remembered as
        when the stage runs, so the messages the walk read are not read again.
        """
        steps = [
            self._step(stage, self._context(stage, ctx), self._memo.setdefault(stage.name, {}))
            for stage, disabled in self._pipeline
            if not disabled and stage.name in names
        ]
        if len(steps) == 1:
            return steps[0]  # the walk calls it for every message it reads: no loop around it

        def through(message: Any) -> Any:
            for step in steps:
                message = step(message)
                if message is None:
                    return None
            return message

        return through

    def _step(
        self, stage: Stage, context: StageContext, memo: dict[int, _Remembered]
    ) -> Callable[[Any], Any]:
        """`_through` for one per-message `stage`: the message it leaves, or None (see there)."""
        remember = self._remember
        prefilter = stage.prefilter
        recall = memo.get
        one_text = ONE_TEXT_KEYS.issuperset

        def step(message: Any) -> Any:
            key = id(message)
            known = recall(key)  # the memo holds its messages: ids are theirs
            if known is None:
                # `_remember`'s commonest case, without a call: a prefilter that has
                # nothing to ask for (one that raises is left to it, which reports).
                if prefilter is not None and type(message) is dict:
                    try:
                        # A message of one text (most of them) is asked of it here:
                        # `any_text_passes` would, at the cost of one more call.
                        content = message.get("content")
                        if type(content) is str and one_text(message):
                            idle = not prefilter(content)
                        else:
                            idle = not any_text_passes(message, prefilter)
                    except BaseException as exc:  # `remember` asks again, and reports
                        contained(exc)
                        idle = False
                    if idle:
                        memo[key] = (message, None, _NO_LINES)
                        return message
                found = remember(stage, message, context, memo)
                if isinstance(found, str):
                    raise _StageFailed(found)
                known = found
            replacement = known[1]
            if replacement is None:
                return message
            if len(replacement) != 1 or not _same_links(message, replacement[0]):
                return None
            return replacement[0]

        return step

    def _passes(self, names: tuple[str, ...]) -> Callable[[str], object] | None:
        """Whether the per-message stages `names` may change a message whose one text is the
        given one, by their prefilters alone (None: one of them declares none).

        For what the walk reads past the cut watermark and never sends, so nothing is
        remembered. The walk asks `through` of a text this is true of, or that it
        raises on: that runs the stage's prefilter again and reports the error as it
        says. Built once per set of stages: the pipeline does not change.
        """
        if names not in self._passes_of:
            tests = [
                stage.prefilter
                for stage, disabled in self._pipeline
                if not disabled and stage.name in names
            ]
            known = [test for test in tests if test is not None]
            passes: Callable[[str], object] | None = None
            if known and len(known) == len(tests):
                # Asked of every message the walk reads: one prefilter is called as it is.
                passes = known[0] if len(known) == 1 else lambda t: any(p(t) for p in known)
            self._passes_of[names] = passes
        return self._passes_of[names]

    def _remember(
        self,
        stage: Stage,
        message: Any,
        context: StageContext,
        memo: dict[int, _Remembered],
        index: int = 0,
    ) -> _Remembered | str:
        """What the per-message `stage` makes of `message` (at `index` of the history, for
        the report), which `memo` does not hold yet."""
        prefilter = stage.prefilter
        if prefilter is not None and type(message) is dict:
            try:
                idle = not any_text_passes(message, prefilter)
            except BaseException as exc:  # plugin code (see `_call`)
                said = contained(exc)
                log.warning(
                    "governance stage's prefilter raised; skipped",
                    **_named(stage, self._origins),
                    error=said,
                )
                why = f"skipped: the stage's prefilter raised {said}"
                return _owned(why, stage, self._origins)
            if idle:  # declared: the stage would hand it on as it is, with nothing to say
                spared: _Remembered = (message, None, _NO_LINES)
                memo[id(message)] = spared
                return spared
        outcome = _call(stage, [container_copy(message)], context, self._origins)
        if isinstance(outcome, str):
            return outcome
        changed = outcome.changed and not _same(outcome.messages, [message])
        if changed:
            try:  # learnt now rather than when spliced in: what cannot be read is not kept
                for made in outcome.messages:
                    context.facts.of(made)
            except (HistoryFormatError, RecursionError) as exc:
                why = _unreadable(
                    outcome.messages, exc, f"the stage's outcome for messages[{index}] holds"
                )
                log.warning(
                    "governance stage returned garbage; ignored",
                    **_named(stage, self._origins),
                    why=why,
                )
                return _owned(why, stage, self._origins)
        details = outcome.details
        strays = _strays(outcome.messages, [message]) if changed else []
        if strays:
            # Said in this message's line (`messages[0]`, renumbered), as for a whole list.
            line = self._stray_line(stage, strays, len(outcome.messages))
            details = [*details, f"{_FIRST}: {line}"]
        remembered = (message, outcome.messages if changed else None, details)
        memo[id(message)] = remembered
        return remembered

    def _run_stages(self, view: list[Any], ctx: StageContext, report: GovernanceReport) -> _Pass:
        """Every stage in order over `view`, with the budget-first cut where it is safe.

        The cut is made before every stage when they all declare their work
        (`_CutPlan.early`). When some before the budget phase declare nothing,
        the stages before each of those are deferred and it is handed a
        `Deferred` list: if it hands its input on without reading it, it did
        nothing whatever the history held, and the cut is made at the budget
        phase as if it were not there (the stages deferred then run on what
        is kept). If it reads, the deferred stages run then, on the whole
        history, and the cut waits for the budget phase.
        """
        plan = self._cut_plan
        run = _Pass(self, ctx, report)
        if plan is not None and plan.early:
            ctx.cut = run.early_cut = self._cut(view, ctx, plan)
        deferring = (
            plan is not None
            and not plan.early
            and plan.deferrable
            and len(view) >= cutting.MIN_MESSAGES
        )
        if ctx.cut is not None:
            run.begin(ctx.cut.kept, shaped=True)
        elif not deferring:
            run.begin(view)
        late = plan is not None and not plan.early
        waiting: list[tuple[int, list[str] | None]] = []  # stages deferred, in order
        for index, ((stage, disabled), work) in enumerate(
            zip(self._pipeline, self._work, strict=True)
        ):
            if deferring and plan is not None and stage.phase == "budget":
                deferring = late = False
                ctx.cut = run.early_cut = self._cut(view, ctx, plan.deferred())
                run.begin(ctx.cut.kept if ctx.cut is not None else view, ctx.cut is not None)
                run.replay(waiting)
            elif deferring:
                if disabled or work is not None or stage.per_message:
                    waiting.append((index, None))
                    continue
                deferred = Deferred(functools.partial(run.resume, view, waiting))
                outcome = _call(stage, deferred, self._context(stage, ctx), self._origins)
                if not deferred.forced:
                    if isinstance(outcome, str):
                        waiting.append((index, [outcome]))
                        continue
                    if not outcome.changed or outcome.messages is deferred:
                        waiting.append((index, outcome.details))
                        continue
                deferred.force()  # the deferred stages run, for what they report
                deferring = False
                run.take(stage, deferred, outcome)
                continue
            if late and stage.phase == "budget" and plan is not None:
                late = False
                run.late_cut = self._cut(run.current, ctx, plan)
                if run.late_cut is not None:
                    ctx.cut = run.late_cut  # for its floor: the repairs have run
                    run.begin(run.late_cut.kept, shaped=True)
            run.step(index)
        if deferring:  # no budget phase: nothing to cut
            run.begin(view)
            run.replay(waiting)
        return run

    def _anthropic(self, messages: list[Any]) -> bool:
        """`is_anthropic_shape`, reading only what follows the last list found without blocks."""
        last = self._shape_memo
        if last is not None and self._facts.starts_with(messages, last):
            found = is_anthropic_shape(messages[len(last) :])
        else:
            found = is_anthropic_shape(messages)
        self._shape_memo = None if found else messages
        return found

    def _present(self, messages: list[Any], ctx: StageContext) -> int:
        """The `Defect` bits of every kind of work present: 0 when clean and within budget."""
        if ctx.over_budget(messages):  # first: the total is cheap and often settles it
            return Defect.OVER_BUDGET | _EVERY_KIND  # not worth a survey: run what is declared
        survey = ctx.survey(messages)
        present = survey.defects
        if survey.largest_result > self.config.max_tool_result_chars:
            present |= Defect.LARGE_RESULTS
        return present

    def _context(self, stage: Stage, ctx: StageContext) -> StageContext:
        options = self._options.get(stage.name)
        return attrs.evolve(ctx, options=options) if options else ctx

    def _run_stage(
        self, stage: Stage, work: int | None, messages: list[Any], ctx: StageContext, tokens: int
    ) -> tuple[list[Any], ReportEntry]:
        """A whole-list stage: one that declares nothing reads copies (see `Handed`)."""
        handed = messages if work is not None else Handed(messages)
        outcome = _call(stage, handed, self._context(stage, ctx), self._origins)
        return self._taken(stage, handed, outcome, messages, ctx, tokens)

    def _taken(
        self,
        stage: Stage,
        handed: list[Any],
        outcome: StageOutcome | str,
        messages: list[Any],
        ctx: StageContext,
        tokens: int,
    ) -> tuple[list[Any], ReportEntry]:
        """What a whole-list stage handed `handed` (standing for `messages`) made of them."""
        if isinstance(outcome, str):
            return messages, ReportEntry(stage.name, False, [outcome], tokens, tokens)
        returned = outcome.messages if outcome.changed else None
        if returned is not None and isinstance(handed, Handed):
            # It may have edited its copies in place: take back the original of every
            # message it handed on as it was, and compare the contents.
            given = list.copy(returned) if returned is handed else returned
            returned = handed.originals(given)
            for item in returned:
                if id(item) in handed.given:
                    ctx.facts.forget(item)
        if returned is not None and (returned is messages or _same(returned, messages)):
            returned = None
        if returned is None:
            return messages, ReportEntry(stage.name, False, outcome.details, tokens, tokens)
        try:
            after = _sent_tokens(ctx, returned)  # the first read of what the stage made
        except (HistoryFormatError, RecursionError) as exc:
            why = _unreadable(returned, exc, "the stage's outcome holds")
            log.warning(
                "governance stage returned garbage; ignored",
                **_named(stage, self._origins),
                why=why,
            )
            owned = _owned(why, stage, self._origins)
            return messages, ReportEntry(stage.name, False, [owned], tokens, tokens)
        log.info(
            "governance stage changed the history", stage=stage.name, changes=len(outcome.details)
        )
        details = outcome.details
        strays = _strays(returned, messages, ctx.facts)
        if strays:
            # Kept as the stage made it (the final step drops them, as it must whoever made
            # them); said here, as the stage's own fault, or only `final` tells of them.
            details = [*details, self._stray_line(stage, strays, len(returned))]
        return returned, ReportEntry(stage.name, True, details, tokens, after)

    def _stray_line(self, stage: Stage, strays: list[tuple[int, str]], returned: int) -> str:
        """The report line (and warning) for the non-messages a stage returned: `strays`,
        of the `returned` entries, as `_strays` found them."""
        index, what = strays[0]
        log.warning(
            "governance stage returned non-messages; the final step drops them",
            **_named(stage, self._origins),
            count=len(strays),
            first=f"messages[{index}]: {what}",
        )
        if len(strays) == 1:
            why = f"returned a non-message: messages[{index}] of its outcome is {what}"
            return _owned(f"{why}; the final step drops it", stage, self._origins)
        why = (
            f"returned non-messages: {len(strays)} of the {returned} entries of its outcome "
            f"are not messages, the first messages[{index}], {what}"
        )
        return _owned(f"{why}; the final step drops them", stage, self._origins)

    def _run_per_message(
        self, stage: Stage, work: int | None, messages: list[Any], ctx: StageContext, tokens: int
    ) -> tuple[list[Any], ReportEntry]:
        """A per-message stage, on a copy of each message that has its work, remembered."""
        context = self._context(stage, ctx)
        known = ctx.facts.aligned(messages)
        if work is None or work & ~(Defect.OWN | Defect.LARGE_RESULTS):
            chosen: Sequence[int] = range(len(messages))
        else:
            # The totals of the list (its tokens are needed anyway) say whether any entry
            # has the work at all: most lists need no pass for it.
            _, own, largest = ctx.facts.totals(messages)
            chosen = (
                list(compress(count(), map(and_, map(_OWN_DEFECTS, known), repeat(work))))
                if own & work
                else []
            )
            limit = self.config.max_tool_result_chars
            if work & Defect.LARGE_RESULTS and largest > limit:  # known of a result alone
                large = compress(count(), map(gt, map(_CHARS, known), repeat(limit)))
                chosen = sorted({*chosen, *large})
        memo = self._memo.get(stage.name, {})
        handed = messages if isinstance(chosen, range) else [messages[i] for i in chosen]
        # What is remembered is found at C speed (an entry holds its message, so its id is
        # nobody else's); only the messages not seen before are handed to the stage.
        found: list[Any] = list(map(memo.get, map(id, handed)))
        for offset in compress(count(), map(operator.is_, found, repeat(None))):
            remembered = self._remember(stage, handed[offset], context, memo, chosen[offset])
            if isinstance(remembered, str):
                return messages, ReportEntry(stage.name, False, [remembered], tokens, tokens)
            found[offset] = remembered
        # Bounded: rebuilt from what this history holds once it holds more than twice as much.
        # A call whose messages it holds already (the cut's walk asked the stage of them just
        # now) keeps it as it is rather than copying it entry by entry.
        if len(memo) > _MEMO_SLACK * len(handed):
            memo = dict(zip(map(id, handed), found, strict=True))
        self._memo[stage.name] = memo
        replaced = {
            chosen[offset]: found[offset][1]
            for offset in compress(
                count(), map(operator.is_not, map(_REPLACEMENT, found), repeat(None))
            )
        }
        details = [
            _renumbered(line, chosen[offset])
            for offset in compress(count(), map(_LINES, found))
            for line in found[offset][2]
        ]
        if not replaced:
            return messages, ReportEntry(stage.name, False, details, tokens, tokens)
        splice = Splice(messages, ctx.facts)
        copied = 0
        for index in sorted(replaced):
            splice.copy(copied, index)
            splice.add(*replaced[index])
            if len(replaced[index]) == 1:  # what was sent is read back through it
                ctx.facts.made_from(replaced[index][0], messages[index])
            copied = index + 1
        splice.copy(copied)
        result = splice.done()
        after = _sent_tokens(ctx, result)
        log.info("governance stage changed the history", stage=stage.name, changes=len(details))
        return result, ReportEntry(stage.name, True, details, tokens, after)


class _Pass:
    """One run of the stages: the messages so far, their tokens, the work present, the cuts."""

    def __init__(self, governor: Governor, ctx: StageContext, report: GovernanceReport) -> None:
        self.governor = governor
        self.ctx = ctx
        self.report = report
        self.current: list[Any] = []
        self.tokens = 0
        self.present = 0
        self.anthropic = False
        self.early_cut: HistoryCut | None = None  # made before the stages ran
        self.late_cut: HistoryCut | None = None  # made at the start of the budget phase
        self._whole: list[Any] | None = None  # the history as given, when begun from it
        self._skip = 0  # the stages before this index were done by reusing the last call's
        self._block_input: tuple[list[Any], int] | None = None

    def begin(self, messages: list[Any], shaped: bool = False) -> None:
        """Go on from `messages` (`shaped`: known to be in the OpenAI shape already)."""
        if not shaped:
            self.anthropic = self.governor._anthropic(messages)
            if self.anthropic:
                messages = to_openai_shape(messages)
        self.current = messages
        self._whole = None if shaped or self.anthropic else messages
        self.tokens = _sent_tokens(self.ctx, messages)
        self.present = self.governor._present(messages, self.ctx)

    def replay(self, waiting: list[tuple[int, list[str] | None]]) -> None:
        """Run the deferred stages; those that read nothing report what they said."""
        for index, details in waiting:
            if details is None:
                self.step(index)
            else:
                name = self.governor._pipeline[index][0].name
                self.report.append(ReportEntry(name, False, details, self.tokens, self.tokens))
        waiting.clear()

    def resume(self, view: list[Any], waiting: list[tuple[int, list[str] | None]]) -> list[Any]:
        """The input of the stage that looked at its `Deferred` list: the deferred stages run."""
        self.begin(view)
        self.replay(waiting)
        return self.current

    def step(self, index: int) -> None:
        """Run the stage at `index` of the pipeline on the messages so far."""
        governor = self.governor
        block = governor._local_block
        if index < self._skip:
            return
        if index == 0 and block and self.current is self._whole:
            if self._reuse(block):
                return
            self._block_input = (self.current, self.tokens)
        self._run(index)
        if index == block - 1 and self._block_input is not None:
            given, tokens = self._block_input
            self._block_input = None
            entries = [_shifted(entry, 0) for entry in self.report[-block:]]
            survey = self.ctx.survey(given)
            facts = self.ctx.facts
            facts.aligned(self.current)
            listing = facts.listing(self.current)
            assert listing is not None  # just aligned
            origins = facts.origins().kept()
            governor._block_memo = _Block(
                given, self.current, entries, tokens, survey, listing, origins
            )

    def _reuse(self, block: int) -> bool:
        """Hand on what the local block made of the last history, plus what was appended."""
        governor, ctx = self.governor, self.ctx
        memo, given = governor._block_memo, self.current
        if memo is None or not ctx.facts.starts_with(given, memo.given):
            return False
        known = ctx.facts.aligned(given)
        count = len(memo.given)
        appended = known[count:]
        if any(map(_OWN_DEFECTS, appended)):
            return False
        survey = ctx.survey(given)
        if not _same_work(survey, memo, known, count):
            return False
        output = memo.output + given[count:]
        ctx.facts.note(output, [*memo.output_facts.known, *appended], memo.output_facts)
        ctx.facts.carry(memo.origins)
        shift, tokens = self.tokens - memo.tokens, self.tokens
        entries = [_shifted(entry, shift) for entry in memo.entries]
        self.report += [_shifted(entry, 0) for entry in entries]
        self.current = output
        self.tokens = _sent_tokens(ctx, output)
        self.present = governor._present(output, ctx)
        self._skip = block
        listing = ctx.facts.listing(output)
        assert listing is not None  # just noted
        governor._block_memo = _Block(given, output, entries, tokens, survey, listing, memo.origins)
        return True

    def _run(self, index: int) -> None:
        governor, ctx = self.governor, self.ctx
        (stage, disabled), work = governor._pipeline[index], governor._work[index]
        tokens = self.tokens
        if disabled:
            self.report.append(ReportEntry(stage.name, False, [_DISABLED_NOTE], tokens, tokens))
            return
        if work is not None and not self.present & work:
            self.report.append(ReportEntry(stage.name, False, [], tokens, tokens))
            return
        if stage.per_message:
            current, entry = governor._run_per_message(stage, work, self.current, ctx, tokens)
        else:
            current, entry = governor._run_stage(stage, work, self.current, ctx, tokens)
        self._record(current, entry)

    def take(self, stage: Stage, handed: list[Any], outcome: StageOutcome | str) -> None:
        """Record what a stage already called on `handed` (standing for the messages so far) did."""
        governor = self.governor
        current, entry = governor._taken(
            stage, handed, outcome, self.current, self.ctx, self.tokens
        )
        self._record(current, entry)

    def _record(self, current: list[Any], entry: ReportEntry) -> None:
        self.report.append(entry)
        if entry.changed:
            self.current = current
            self.tokens = entry.tokens_after if entry.tokens_after is not None else self.tokens
            self.present = self.governor._present(current, self.ctx)


@attrs.frozen
class _Block:
    """What the leading local stages made of the history of a governor's last call."""

    given: list[Any]  # their input (the history as given, with earlier decisions applied)
    output: list[Any]
    entries: list[ReportEntry]  # their report entries
    tokens: int  # the request tokens of `given`
    survey: Survey  # of `given`
    output_facts: Listing  # what was known of `output`
    origins: Origins  # what the messages they made were made from (`FactsCache.made_from`)


def _local_block(pipeline: list[tuple[Stage, bool]], work: list[int | None]) -> int:
    """How many stages at the start of the pipeline are local (`Stage.local`) or disabled."""
    count = 0
    for (stage, disabled), bits in zip(pipeline, work, strict=True):
        local = stage.phase != "budget" and stage.local and (bits is not None or stage.per_message)
        if not (disabled or local):
            break
        count += 1
    return count


def _preparing(pipeline: list[tuple[Stage, bool]], work: list[int | None]) -> list[Stage]:
    """The enabled stages before the first one that acts when over budget that may change a
    result's text: every per-message one, and the whole-list ones past the repairs (which
    drop, move and pair results, but leave their text to `sanitize_content`)."""
    stages = []
    for (stage, disabled), bits in zip(pipeline, work, strict=True):
        if disabled:
            continue
        if bits is not None and bits & Defect.OVER_BUDGET:
            break
        if stage.per_message or stage.phase != "repair":
            stages.append(stage)
    return stages


def _same_work(survey: Survey, memo: _Block, known: list[Any], count: int) -> bool:
    """Whether what was appended after ``known[:count]`` (`memo.given`) leaves its work as
    `memo.survey` found it.

    The same defects at the same places (a user message appended right after a
    user message is one more place), no user message appended right after the
    one that ends what the stages made, and no call appended that a stray
    result before names.
    """
    before = memo.survey
    if (
        survey.defects,
        survey.strays,
        survey.open_runs,
        survey.malformed,
        survey.user_turns,
    ) != (
        before.defects,
        before.strays,
        before.open_runs,
        before.malformed,
        before.user_turns,
    ):
        return False
    # Where they meet is the end of what the stages made, not of what they were given: a
    # user message there is merged with one appended, whatever a repair dropped after it.
    made = memo.output_facts.known
    if made and count < len(known) and made[-1][3] == Kind.USER == known[count][3]:
        return False
    if before.strays:
        named = {known[index][4] for index, _ in before.strays}
        for fact in known[count:]:
            if fact[3] == Kind.ASSISTANT and fact[4] and not named.isdisjoint(fact[4]):
                return False
    return True


def _shifted(entry: ReportEntry, shift: int) -> ReportEntry:
    """A copy of `entry` with its token figures moved by `shift`."""
    before = None if entry.tokens_before is None else entry.tokens_before + shift
    after = None if entry.tokens_after is None else entry.tokens_after + shift
    return ReportEntry(entry.stage, entry.changed, [*entry.details], before, after)


#: What a per-message stage made of one message: (the message, what replaces it or None
#: when it is kept, the report lines numbered as if it were messages[0]).
_Remembered = tuple[Any, list[Any] | None, Sequence[str]]
_NO_LINES: tuple[str, ...] = ()  # the report lines of a message a prefilter spared
#: A per-message stage's memo is rebuilt from the history it was last handed once it
#: holds more than this many times as many messages.
_MEMO_SLACK = 2

_OWN_DEFECTS = itemgetter(2)
_REPLACEMENT = itemgetter(1)  # of a `_Remembered`
_LINES = itemgetter(2)  # of a `_Remembered`
_CHARS = itemgetter(5)
_EVERY_KIND = functools.reduce(operator.or_, KIND_BITS.values())


def _check_stage_options(
    stages: Sequence[Stage], config: GovernanceConfig, origins: Mapping[str, str]
) -> None:
    """Refuse, naming the key, a configured options table its stage's declarations do not allow.

    When `load_config` knows which config source set the key, the message starts with it.
    """
    for stage in stages:
        if stage.options is not None and stage.name in config.stages:
            table = config.stages[stage.name]
            origin = origins.get(stage.name)
            try:
                stage.check_options(table, origin=origin)
            except ConfigError as exc:
                source = _bad_option_source(stage, table, origin)
                if source is None:
                    raise
                raise ConfigError(f"{source}: {exc}") from None


def _bad_option_source(stage: Stage, table: Any, origin: str | None) -> str | None:
    """The source that set the first key of `table` that `stage` refuses, when known."""
    if not isinstance(table, Mapping):
        return None
    for key, value in table.items():
        try:
            stage.check_options({key: value}, origin=origin)
        except ConfigError:
            return option_source(table, key)
    return None


def _as_configured(stage: Stage, options: Mapping[str, Any]) -> Stage:
    """`stage` as its options make it: a per-message one runs whole-list with `whole_list_with`.

    Such an option makes its work on a message depend on other messages
    (`offload_results` with ``exclude_tools`` reads the call a result answers
    to learn the tool's name).
    """
    if stage.per_message and any(options.get(name) for name in stage.whole_list_with):
        return attrs.evolve(stage, per_message=False)
    return stage


def _work_bits(stage: Stage, options: Mapping[str, Any]) -> int | None:
    """The `Defect` bits of the kinds of work `stage` declares, or None when it always works."""
    kinds = stage.work(options)
    if kinds is None:
        return None
    bits = 0
    for kind in kinds:
        bits |= KIND_BITS[kind]
    return bits


# The entries whose change means a budget decision that the next call should keep.
_BUDGET_ENTRIES = frozenset({"compact_results", "snip_history", FINAL_STAGE})


def _report_kept(report: GovernanceReport, state: GovernanceState) -> None:
    """Say in the budget entries that decisions of earlier calls were applied again."""
    if state.steps_from is not None or state.start:
        entry = report.entry("snip_history") or report.entry(FINAL_STAGE)
        if entry is not None:
            entry.details.insert(
                0, f"kept the cut sent before: the history from messages[{state.start}]"
            )
            entry.changed = True
    if state.compacted:
        entry = report.entry("compact_results") or report.entry(FINAL_STAGE)
        if entry is not None:
            entry.details.insert(
                0, f"kept the {len(state.compacted)} tool results compacted as sent before"
            )
            entry.changed = True


_FIRST = "messages[0]"


def _renumbered(line: str, index: int) -> str:
    """A per-message stage's report line, which calls its one message messages[0], renumbered."""
    return f"messages[{index}]" + line[len(_FIRST) :] if line.startswith(_FIRST) else line


@attrs.frozen
class _CutPlan:
    """Where the budget-first cut is safe, derived from the stages' declarations.

    The cut's lower bounds assume that every stage after it declares its work
    (`acts_on`): it then changes only messages that have that work, which the
    bounds count as nothing. The cut belongs to the budget phase, whose last
    stage must act on `over_budget` (it drops what does not fit); it is made
    before every stage (`early`) when the stages before the budget phase
    declare their work too, else at the start of the budget phase.
    """

    early: bool
    dropped_early: Callable[[Any], bool]
    snipper: str  # the stage whose report entry tells of the cut
    #: The plan as if the whole-list stages before the budget phase that declare nothing
    #: were not there (they handed their input on unread), or None when another stage
    #: there declares nothing.
    speculative: _CutPlan | None = None
    #: The per-message stages before the budget phase that may change a message with no
    #: defect of its own: the walk that finds the cut counts each message as they leave it.
    mapped: tuple[str, ...] = ()
    #: Whether the last budget stage declares `cuts_to_watermark`: the cut then goes down
    #: to what the cut watermark can hold.
    watermark: bool = False

    @property
    def deferrable(self) -> bool:
        """Whether the cut can still be made before the stages if those that declare nothing
        turn out to read nothing."""
        return self.speculative is not None

    def deferred(self) -> _CutPlan:
        """The plan to use once the stages that declare nothing read nothing."""
        return self.speculative or self

    @classmethod
    def of(cls, pipeline: list[tuple[Stage, bool]], work: list[int | None]) -> _CutPlan | None:
        active = [(s, w) for (s, disabled), w in zip(pipeline, work, strict=True) if not disabled]
        budget = [(s, w) for s, w in active if s.phase == "budget"]
        if not budget or any(w is None for _, w in budget):
            return None
        last, last_work = budget[-1]
        if last_work is None or not last_work & Defect.OVER_BUDGET:
            return None
        before = [(s, w) for s, w in active if s.phase != "budget"]
        mapped = tuple(
            s.name for s, w in before if s.per_message and (w is None or w & ~Defect.OWN)
        )
        # A declared whole-list stage acting on these may shrink a message that has no defect
        # of its own, before a mapped stage sees it: the walk could not know what it sees.
        watermark = last.cuts_to_watermark
        if mapped and any(not s.per_message and w and w & _SHRINKING for s, w in before):
            return cls(False, _never, last.name, watermark=watermark)
        unread = [s for s, w in before if w is None and not s.per_message]
        if unread:
            ids = {id(s) for s in unread}
            rest = [
                (pair, w) for pair, w in zip(pipeline, work, strict=True) if id(pair[0]) not in ids
            ]
            speculative = cls.of([pair for pair, _ in rest], [w for _, w in rest])
            return cls(False, _never, last.name, speculative, watermark=watermark)
        declared = 0
        for _, bits in before:
            declared |= bits or 0
        dropped = early_drops(
            placeholders=bool(declared & Defect.PLACEHOLDERS),
            non_messages=bool(declared & Defect.NON_MESSAGES),
            patterns=(),
        )
        return cls(True, dropped, last.name, mapped=mapped, watermark=watermark)


# Kinds of work that change messages with no defect of their own, possibly making them smaller.
_SHRINKING = Defect.LARGE_RESULTS | Defect.OVER_BUDGET


def _sent_tokens(ctx: StageContext, messages: list[Any]) -> int:
    """The request tokens of `messages` themselves, for the report: without the cut's floor."""
    return ctx.fixed_tokens + ctx.facts.list_tokens(messages)


def _never(_entry: Any) -> bool:
    return False


# Internal: raised and caught within this module only, never public, so outside the tree.
class _StageFailed(Exception):
    """A per-message stage failed on a message the budget walk read."""


def checked_stages(stages: Any, where: str) -> list[Stage]:
    """`stages` as a list, once each is a `Stage`; else a `TypeError` naming `where` and the
    first entry that is not one (a bare function is the likely mistake)."""
    if isinstance(stages, Stage) or not isinstance(stages, Iterable):
        raise TypeError(f"{where}: stages must be a list of Stage, got {type(stages).__name__}")
    listed = list(stages)
    for index, entry in enumerate(listed):
        if not isinstance(entry, Stage):
            hint = (
                " (make one with Stage(name, func) or the @nanobot_core.stage decorator)"
                if callable(entry)
                else ""
            )
            raise TypeError(
                f"{where}: stages[{index}] is a {type(entry).__name__}, not a Stage{hint}"
            )
    return listed


def _checked_request(messages: Any, tools: Any) -> Sequence[Any]:
    """The tools of a call of `Governor.govern` (None: no tools), once `messages` is a sequence
    of messages and `tools` one of tool definitions; else a `TypeError` saying what was given.

    A dict, a string or a registry iterates too (over keys, characters or tools), so each
    would be governed without an error into a request that lost the history or miscounts
    the tools: refused here, at the call, rather than found out from the model's answer.
    Each definition is checked when the governor first counts the list (`_tools_tokens`):
    a session hands the same definitions on every call.
    """
    if type(messages) is not list and (
        isinstance(messages, str | bytes | bytearray | Mapping)
        or not isinstance(messages, Iterable)
    ):
        hint = " (one message? pass [message])" if isinstance(messages, Mapping) else ""
        raise TypeError(
            "Governor.govern: messages must be a list of message dicts, got "
            f"{type(messages).__name__}{hint}"
        )
    if tools is None:
        return ()
    if type(tools) is not list and type(tools) is not tuple:  # the usual kinds need no more
        if callable(getattr(tools, "definitions", None)):  # a ToolRegistry: its tools are no dicts
            raise TypeError(
                f"Governor.govern: tools is a {type(tools).__name__}; pass its definitions() "
                "(the tool definitions sent to the model)"
            )
        if isinstance(tools, str | bytes | bytearray | Mapping) or not isinstance(tools, Iterable):
            raise TypeError(
                "Governor.govern: tools must be a list of tool definitions (dicts), got "
                f"{type(tools).__name__}"
            )
        tools = list(tools)
    return tools  # type: ignore[no-any-return]


def _check_definitions(tools: Sequence[Any]) -> None:
    """A `TypeError` naming the first of `tools` that is no tool definition (a mapping)."""
    for index, definition in enumerate(tools):
        if type(definition) is not dict and not isinstance(definition, Mapping):
            raise TypeError(
                f"Governor.govern: tools[{index}] ({type(definition).__name__}) is not a tool "
                "definition, a dict as ToolRegistry.definitions() gives"
            )


def _busy() -> SessionLockedError:
    """The error of a call on a governor while one of its calls runs."""
    return SessionLockedError(
        "this Governor is governing another history: it runs one call at a time, and "
        "keeps one session's state across calls (wait for it, or use a governor per "
        "session or thread)"
    )


def _same_links(message: Any, other: Any) -> bool:
    """Whether `other` has the role of `message`, and the same call ids or the same result link."""
    if type(message) is not dict or type(other) is not dict:
        return False
    role = message.get("role")
    if other.get("role") != role:
        return False
    if role == "tool":
        return bool(other.get("tool_call_id") == message.get("tool_call_id"))
    if role == "assistant":
        return bool(other.get("tool_calls") == message.get("tool_calls"))
    return True


def _report_stray_blocks(report: GovernanceReport, lines: list[str]) -> None:
    """Say in the final entry which tool blocks the conversion from Anthropic blocks left out
    (not a stage: the final step, which keeps the request legal, is where repairs are told)."""
    entry = report.entry(FINAL_STAGE)
    if lines and entry is not None:
        entry.details[:0] = lines
        entry.changed = True


def _report_cut(report: GovernanceReport, stage: str, line: str) -> None:
    """Say in the entry of the stage that drops history what was left out before it ran."""
    entry = report.entry(stage)
    if entry is not None:
        entry.details.insert(0, line)
        entry.changed = True


def _call(
    stage: Stage, handed: list[Any], ctx: StageContext, origins: Mapping[str, str]
) -> StageOutcome | str:
    """The stage's outcome on `handed`, or why it was skipped or ignored.

    The warning about the stage, and why, name the plugin that contributed it
    (from `origins`, looked up only then).
    """
    try:
        returned = stage.func(handed, ctx)
    except BaseException as exc:  # plugin code called per message, so without `plugin_code`
        said = contained(exc)
        log.warning("governance stage raised; skipped", **_named(stage, origins), error=said)
        return _owned(f"skipped: the stage raised {said}", stage, origins)
    outcome = _as_outcome(returned)
    if isinstance(outcome, str):
        log.warning(
            "governance stage returned garbage; ignored", **_named(stage, origins), why=outcome
        )
        return _owned(outcome, stage, origins)
    return outcome


def _named(stage: Stage, origins: Mapping[str, str]) -> dict[str, str]:
    """The stage's name and, when known, the plugin (name and version) that contributed it."""
    origin = origins.get(stage.name)
    return {"stage": stage.name} if origin is None else {"stage": stage.name, "plugin": origin}


def _owned(why: str, stage: Stage, origins: Mapping[str, str]) -> str:
    """`why` (``skipped: ...``, ``ignored: ...``), for the report, naming the stage's plugin.

    ``skipped (plugin 'shaky' from nanobot-shaky 1.2.3): the stage raised ...``:
    the report entry names only the stage, and the plugin's version tells
    which release of it failed. Unchanged when the plugin is not known.
    """
    origin = origins.get(stage.name)
    if origin is None:
        return why
    verdict, _, rest = why.partition(": ")
    return f"{verdict} ({origin}): {rest}"


def _as_outcome(returned: Any) -> StageOutcome | str:
    """The stage's return value as an outcome, or why it was ignored."""
    if (
        type(returned) is StageOutcome
        and type(returned.messages) is list
        and type(returned.changed) is bool
        and type(returned.details) is list
        and not returned.details
    ):
        return returned  # already what the governor works with, as most outcomes are
    if isinstance(returned, list):  # a bare list: whether it changed is found by looking
        return StageOutcome(returned, changed=True)
    if not isinstance(returned, StageOutcome):
        return (
            f"ignored: the stage returned {_a_value_of(returned)}, "
            "not a StageOutcome or a list of messages"
        )
    if not isinstance(returned.messages, list):
        kind = type(returned.messages).__name__
        return f"ignored: the stage's outcome holds a {kind}, not a list of messages"
    details = returned.details if isinstance(returned.details, list | tuple) else [returned.details]
    return StageOutcome(returned.messages, bool(returned.changed), [str(d) for d in details])


def _a_value_of(value: object) -> str:
    """``None``, ``a dict``, ``an int``: what a stage returned, for its report line."""
    if value is None:
        return "None"
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _first_fault(messages: list[Any]) -> tuple[int, str] | None:
    """The index of the first of `messages` that no JSON can hold, and why (`nesting_fault`)."""
    for index, message in enumerate(messages):
        why = nesting_fault(message)
        if why is not None:
            return index, why
    return None


def _refusal(given: list[Any]) -> HistoryFormatError | None:
    """The error naming the first message of `given` that no JSON can hold (what an error
    raised where a message was read stands for); None when every message can be held."""
    fault = _first_fault(given)
    return None if fault is None else HistoryFormatError(f"messages[{fault[0]}] {fault[1]}")


def _unreadable(messages: list[Any], exc: BaseException, holds: str) -> str:
    """Why a stage's outcome `messages`, which raised `exc` when read, is ignored."""
    fault = _first_fault(messages)
    if fault is not None:
        return f"ignored: {holds} messages[{fault[0]}], which {fault[1]}"
    return f"ignored: {holds} messages that could not be read ({type(exc).__name__})"


def _strays(
    returned: list[Any], given: list[Any], facts: FactsCache | None = None
) -> list[tuple[int, str]]:
    """The entries of a stage's outcome `returned` that are not messages, with their index:
    those it made, not the ones of `given` (what it was handed) it passed on as they were.

    With `facts` (a whole list's: the totals of both lists are known by then, their
    tokens were counted), a list with no such entry, as nearly every one is, costs no
    pass; without, both lists (a per-message stage's few entries) are read.
    """
    if facts is not None and not facts.totals(returned)[1] & Defect.NON_MESSAGES:
        return []
    handed: set[int] = set()
    roles: set[str] = set()  # a copy of a handed dict with an odd role is not the stage's
    if facts is None or facts.totals(given)[1] & Defect.NON_MESSAGES:
        for entry in given:
            if non_message(entry) is not None:
                handed.add(id(entry))
                role = entry.get("role") if isinstance(entry, dict) else None
                if isinstance(role, str):
                    roles.add(role)
    found: list[tuple[int, str]] = []
    for index, entry in enumerate(returned):
        if id(entry) in handed:
            continue
        what = non_message(entry)
        if what is None:
            continue
        role = entry.get("role") if isinstance(entry, dict) else None
        if not (isinstance(role, str) and role in roles):
            found.append((index, what))
    return found


def _same(left: list[Any], right: list[Any]) -> bool:
    try:
        return bool(left == right)
    except Exception:
        return False


def build_governor(
    config: Config | GovernanceConfig | None = None,
    workspace: Path | None = None,
    stages: Sequence[Stage] | None = None,
    *,
    counter: TokenCounter | None = None,
    store: ResultStore | None = None,
    origins: Mapping[str, str] | None = None,
) -> Governor:
    """A governor with the built-in stages (or `stages`), offloading into `workspace`.

    `origins` names, per stage name, the plugin that contributed the stage (for
    the errors about its options).
    """
    settings = config.governance if isinstance(config, Config) else config or GovernanceConfig()
    chosen = builtin_stages() if stages is None else list(stages)
    return Governor(
        chosen,
        config=settings,
        counter=counter,
        store=store,
        workspace=workspace,
        origins=origins,
    )
