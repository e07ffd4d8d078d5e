"""The governor: runs the stages over the history, then its own final guarantees, and reports.

`Governor.govern` never changes what it is given. Stages work copy-on-write:
each returns its input list untouched when it has nothing to do, or a new
list that shares every dict it did not change. A stage that is not built in
gets a copy of the containers (dicts and lists; strings are shared), so even a
stage that mutates what it is handed cannot reach the caller's history. When
no stage and no final check changed anything, the result *is* the input list.

Two shortcuts keep the cost to what matters, without changing any result: a
history that is already clean and fits is recognised in one pass and handed
back at once (`clean.py`), and history that cannot fit however the stages
shrink it is left out before they run (`budget_first.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from nanobot_core._logging import get_logger
from nanobot_core.config import Config, GovernanceConfig
from nanobot_core.governance import budget_first as cutting
from nanobot_core.governance.anthropic import (
    from_openai_shape,
    is_anthropic_shape,
    to_openai_shape,
)
from nanobot_core.governance.budget_first import HistoryCut, early_drops, find_cut
from nanobot_core.governance.clean import clean_tokens
from nanobot_core.governance.context import Budget, StageContext
from nanobot_core.governance.final import FINAL_STAGE, FinalStep, final_step
from nanobot_core.governance.messages import container_copy
from nanobot_core.governance.ordering import BUILTIN_ORDER, place_stages
from nanobot_core.governance.stage import Stage, StageOutcome
from nanobot_core.governance.stages import BUILTIN_FUNCS, builtin_stages, idle_when_clean
from nanobot_core.governance.store import ResultStore, default_store
from nanobot_core.governance.survey import FactsCache
from nanobot_core.governance.tokens import (
    EstimateCounter,
    TokenCounter,
    count_system,
    count_tools,
    is_default_counter,
)

__all__ = [
    "GovernanceReport",
    "GovernanceResult",
    "Governor",
    "ReportEntry",
    "build_governor",
]

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
    report: GovernanceReport
    tokens: int
    budget: int
    fits: bool

    @property
    def changed(self) -> bool:
        """Whether the messages differ from the input."""
        return self.report.changed


_DISABLED_NOTE = "disabled in config (governance.disabled)"
# How many times a history answered in Anthropic blocks is governed again to fit.
_REFITS = 3


class Governor:
    """Runs governance stages in pipeline order, then the final guarantees.

    `stages` are ordered with `place_stages` (problems are logged and kept in
    `placement_problems`); stages named in ``config.disabled`` are skipped and
    reported as disabled. Without a `store`, results are offloaded to the
    default store of `workspace`, or truncated when there is no workspace.

    With `budget_first` (the default), history that cannot fit whatever the
    stages do is left out before they run, when only built-in stages are
    active (see `budget_first.py`); the messages are the same either way.
    """

    def __init__(
        self,
        stages: Sequence[Stage],
        *,
        config: GovernanceConfig,
        counter: TokenCounter | None = None,
        store: ResultStore | None = None,
        workspace: Path | None = None,
        budget_first: bool = True,
    ) -> None:
        placement = place_stages(stages)
        self.config = config
        self.budget = Budget.from_config(config)
        self.counter: TokenCounter = counter if counter is not None else EstimateCounter()
        self.workspace = Path(workspace) if workspace is not None else None
        if store is None and self.workspace is not None:
            store = default_store(self.workspace, config.store)
        self.store = store
        self.placement_problems = placement.problems
        disabled = set(config.disabled)
        self._pipeline = [(s, s.name in disabled) for s in placement.stages]
        self._options: dict[str, Mapping[str, Any]] = dict(config.stages)
        self._tools_memo: tuple[tuple[Any, ...], int] | None = None
        self._system_memo: tuple[str | None, int] = (None, 0)
        self._cut_plan = _cut_plan(self._pipeline, self._options) if budget_first else None
        # What each stage (then the final step) says about a history it leaves alone.
        self._idle_notes = [
            (stage.name, (_DISABLED_NOTE,) if disabled else ())
            for stage, disabled in self._pipeline
        ] + [(FINAL_STAGE, ())]
        # A history `clean_tokens` accepts leaves every stage idle: skip straight to the result.
        self._clean_path = is_default_counter(self.counter) and all(
            disabled or idle_when_clean(stage.func, self._options.get(stage.name, {}))
            for stage, disabled in self._pipeline
        )
        for problem in placement.problems:
            log.warning("governance stage placement", problem=problem)

    @property
    def stages(self) -> list[Stage]:
        """The active stages, in pipeline order."""
        return [stage for stage, disabled in self._pipeline if not disabled]

    def stage_names(self) -> list[str]:
        """The names of the active stages, in pipeline order."""
        return [stage.name for stage in self.stages]

    # -- sizes of the fixed parts, memoised across runs --------------------------------

    def _system_tokens(self, system: str | None) -> int:
        if self._system_memo[0] is not system:
            self._system_memo = (system, count_system(system, self.counter))
        return self._system_memo[1]

    def _tools_tokens(self, tools: Sequence[Any]) -> int:
        definitions = tuple(tools)
        memo = self._tools_memo
        # Compared item by item: the same definitions are the same objects, found at once.
        if memo is None or memo[0] != definitions:
            memo = self._tools_memo = (definitions, count_tools(definitions, self.counter))
        return memo[1]

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
        `budget_first`). Never raises on any content of `messages`.
        """
        given = messages if isinstance(messages, list) else list(messages)
        tools = tools if type(tools) is list or type(tools) is tuple else list(tools)
        result, working_fit = self._govern(given, system, tools, self.budget)
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
            result, working_fit = self._govern(given, system, tools, tighter)
        if result.budget != limit:
            result = attrs.evolve(result, budget=limit, fits=result.tokens <= limit)
        return result

    def _govern(
        self, given: list[Any], system: str | None, tools: Sequence[Any], budget: Budget
    ) -> tuple[GovernanceResult, bool]:
        """One run of the pipeline for `budget`, and whether the working copy fitted it."""
        fixed = self._system_tokens(system), self._tools_tokens(tools)
        if self._clean_path:
            room = budget.limit - fixed[0] - fixed[1]
            tokens = clean_tokens(given, room, self.config.max_tool_result_chars)
            if tokens is not None:
                return self._untouched(given, fixed[0] + fixed[1] + tokens), True
        ctx = StageContext(
            budget=budget,
            counter=self.counter,
            store=self.store,
            workspace=self.workspace,
            config=self.config,
            system_tokens=fixed[0],
            tools_tokens=fixed[1],
            facts=FactsCache(self.counter),
        )
        ctx.cut = self._cut(given, ctx)
        if ctx.cut is not None:
            anthropic, current = False, ctx.cut.kept
        else:
            anthropic = is_anthropic_shape(given)
            current = to_openai_shape(given) if anthropic else given
        report = GovernanceReport()
        current, tokens, clean = self._run_stages(current, ctx, report)
        if ctx.cut is not None:
            _report_cut(report, ctx.cut.describe())
            ctx.cut = None  # the final step works on the snipped history
        current, after = self._finish(current, tokens, clean, ctx, report)
        working_fit = after <= budget.limit
        if not report.changed:
            current = given
        elif anthropic:
            current = from_openai_shape(current)
        if anthropic:
            after = ctx.request_tokens(current)  # the shape returned is the one that must fit
        result = GovernanceResult(current, report, after, budget.limit, after <= budget.limit)
        return result, working_fit

    def _finish(
        self,
        current: list[Any],
        tokens: int,
        clean: bool,
        ctx: StageContext,
        report: GovernanceReport,
    ) -> tuple[list[Any], int]:
        """The final step and its report entry: (the messages, their request tokens)."""
        # On a clean history the final repairs would each find nothing: skip them.
        final = FinalStep(current, False, []) if clean else final_step(current, ctx, self._options)
        after = ctx.request_tokens(final.messages) if final.changed else tokens
        details = list(final.details)
        if after > ctx.budget.limit:
            details.append(
                f"the request takes {after} tokens, over the budget of {ctx.budget.limit}, with "
                "only the newest user message left: the system prompt and tool definitions "
                f"alone take {ctx.fixed_tokens}"
            )
        report.append(ReportEntry(FINAL_STAGE, final.changed, details, tokens, after))
        return final.messages, after

    def _untouched(self, messages: list[Any], tokens: int) -> GovernanceResult:
        """The result for a history that is clean and fits: itself, every stage idle."""
        report = GovernanceReport(
            [ReportEntry(name, False, [*note], tokens, tokens) for name, note in self._idle_notes]
        )
        return GovernanceResult(messages, report, tokens, self.budget.limit, True)

    def _cut(self, messages: list[Any], ctx: StageContext) -> HistoryCut | None:
        """The oldest history that cannot fit, when leaving it out first is safe and worth it."""
        if self._cut_plan is None or len(messages) < cutting.MIN_MESSAGES:
            return None
        patterns, dropped_early = self._cut_plan
        return find_cut(messages, ctx, patterns=patterns, dropped_early=dropped_early)

    def _run_stages(
        self, current: list[Any], ctx: StageContext, report: GovernanceReport
    ) -> tuple[list[Any], int, bool]:
        """Every stage in order: (the messages, their request tokens, whether they are clean)."""
        tokens = ctx.request_tokens(current)
        clean = self._clean(current, ctx)
        for stage, disabled in self._pipeline:
            if disabled:
                report.append(ReportEntry(stage.name, False, [_DISABLED_NOTE], tokens, tokens))
                continue
            if clean and idle_when_clean(stage.func, self._options.get(stage.name, {})):
                report.append(ReportEntry(stage.name, False, [], tokens, tokens))
                continue
            current, entry = self._run_stage(stage, current, ctx, tokens)
            report.append(entry)
            if entry.changed:
                tokens = entry.tokens_after if entry.tokens_after is not None else tokens
                clean = self._clean(current, ctx)
        return current, tokens, clean

    def _clean(self, messages: list[Any], ctx: StageContext) -> bool:
        """No defect, no result to offload, and within budget: the built-ins have nothing to do."""
        if ctx.over_budget(messages):  # first: the total is cheap and often settles it
            return False
        survey = ctx.survey(messages)
        return survey.defects == 0 and survey.largest_result <= self.config.max_tool_result_chars

    def _run_stage(
        self, stage: Stage, messages: list[Any], ctx: StageContext, tokens: int
    ) -> tuple[list[Any], ReportEntry]:
        options = self._options.get(stage.name)
        context = attrs.evolve(ctx, options=options) if options else ctx
        trusted = stage.func in BUILTIN_FUNCS
        handed = messages if trusted else container_copy(messages)
        try:
            returned = stage.func(handed, context)
        except Exception as exc:
            log.warning("governance stage raised; skipped", stage=stage.name, error=repr(exc))
            why = f"skipped: the stage raised {type(exc).__name__}: {exc}"
            return messages, ReportEntry(stage.name, False, [why], tokens, tokens)
        outcome = _as_outcome(returned)
        if isinstance(outcome, str):
            log.warning("governance stage returned garbage; ignored", stage=stage.name)
            return messages, ReportEntry(stage.name, False, [outcome], tokens, tokens)
        # A built-in changed the history iff it returned another list; anyone else was
        # handed a copy (which it may have edited in place), so compare the contents.
        if trusted:
            changed = outcome.changed and outcome.messages is not messages
        else:
            changed = outcome.changed and not _same(outcome.messages, messages)
        if not changed:
            return messages, ReportEntry(stage.name, False, outcome.details, tokens, tokens)
        after = ctx.request_tokens(outcome.messages)
        log.info(
            "governance stage changed the history", stage=stage.name, changes=len(outcome.details)
        )
        return outcome.messages, ReportEntry(stage.name, True, outcome.details, tokens, after)


def _cut_plan(
    pipeline: list[tuple[Stage, bool]], options: Mapping[str, Mapping[str, Any]]
) -> tuple[tuple[str, ...], Callable[[Any], bool]] | None:
    """What `find_cut` needs to know of the pipeline, or None when a cut would not be safe.

    Safe when the active stages are built-ins in their default order and phase
    (nothing else can shrink or drop messages in ways the lower bounds ignore)
    and `snip_history` is one of them.
    """
    defaults = {stage.name: stage for stage in builtin_stages()}
    active = [stage for stage, disabled in pipeline if not disabled]
    names = [stage.name for stage in active]
    for stage in active:
        default = defaults.get(stage.name)
        if default is None or stage.func is not default.func or stage.phase != default.phase:
            return None
    if names != [name for name in BUILTIN_ORDER if name in names] or "snip_history" not in names:
        return None
    placeholders = "strip_placeholders" in names
    raw_patterns = options.get("strip_placeholders", {}).get("patterns", ()) if placeholders else ()
    patterns = tuple(str(pattern) for pattern in raw_patterns)
    dropped = early_drops(
        placeholders=placeholders, non_messages="drop_non_messages" in names, patterns=patterns
    )
    return patterns, dropped


def _report_cut(report: GovernanceReport, line: str) -> None:
    """Say in the `snip_history` entry what was left out before the stages."""
    entry = report.entry("snip_history")
    if entry is not None:
        entry.details.insert(0, line)
        entry.changed = True


def _as_outcome(returned: Any) -> StageOutcome | str:
    """The stage's return value as an outcome, or why it was ignored."""
    if isinstance(returned, list):  # a bare list: whether it changed is found by looking
        return StageOutcome(returned, changed=True)
    if not isinstance(returned, StageOutcome):
        return f"ignored: the stage returned a {type(returned).__name__}, not a StageOutcome"
    if not isinstance(returned.messages, list):
        kind = type(returned.messages).__name__
        return f"ignored: the stage's outcome holds a {kind}, not a list of messages"
    details = returned.details if isinstance(returned.details, list | tuple) else [returned.details]
    return StageOutcome(returned.messages, bool(returned.changed), [str(d) for d in details])


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
) -> Governor:
    """A governor with the built-in stages (or `stages`), offloading into `workspace`."""
    settings = config.governance if isinstance(config, Config) else config or GovernanceConfig()
    chosen = builtin_stages() if stages is None else list(stages)
    return Governor(chosen, config=settings, counter=counter, store=store, workspace=workspace)
