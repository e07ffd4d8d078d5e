"""Budget first: history that can never fit is left out before the stages, changing nothing else."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest import mock

import attrs
import pytest
from hypothesis import HealthCheck, given, settings

from nanobot_core.config import GovernanceConfig
from nanobot_core.governance import (
    GovernanceResult,
    Governor,
    Stage,
    StageOutcome,
    budget_first,
    build_governor,
    builtin_stages,
)
from nanobot_core.governance.budget_first import MIN_MESSAGES, early_drops, find_cut
from nanobot_core.governance.invariants import check_invariants
from nanobot_core.governance.stage import StageContext
from nanobot_core.governance.tokens import count_request
from nanobot_core.prompt import append_runtime_block, build_runtime_block
from tests.governance.builders import DROPPED_BETWEEN_USER_MESSAGES, NAMELESS_NOTICE
from tests.governance.builders import agent_session as _session
from tests.governance.strategies import (
    GOVERNANCE_CONFIGS,
    DirtyRequest,
    GovernorFactory,
    dirty_requests,
)

Message = dict[str, Any]
SYSTEM = "You are a coding agent. Use the tools."
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {}}}]
LEFT_OUT = "ran: they cannot fit even with every tool result compacted"


def _pair(
    tmp_path: Path, stages: list[Stage] | None = None, **settings: Any
) -> tuple[Governor, Governor]:
    """The same governor twice: leaving out first, and running every stage on everything."""
    config = GovernanceConfig(**settings)
    stages = builtin_stages() if stages is None else stages
    return (
        Governor(stages, config=config, workspace=tmp_path),
        Governor(stages, config=config, workspace=tmp_path, budget_first=False),
    )


def _both(pair: tuple[Governor, Governor], history: list[Any]) -> tuple[Any, Any]:
    fast, full = pair
    return (
        fast.govern(history, system=SYSTEM, tools=TOOLS),
        full.govern(history, system=SYSTEM, tools=TOOLS),
    )


def _left_out(result: GovernanceResult) -> list[str]:
    entry = result.report.entry("snip_history")
    assert entry is not None
    return [line for line in entry.details if LEFT_OUT in line]


@pytest.mark.parametrize(("seed", "limit"), [(1, 30_000), (2, 12_000), (3, 60_000), (4, 4_000)])
def test_huge_history_governs_to_the_same_messages_as_the_full_pipeline(
    tmp_path: Path, seed: int, limit: int
) -> None:
    """Far over budget, leaving out first gives exactly the messages of running every stage."""
    history = _session(400, seed)
    fast, full = _both(_pair(tmp_path, input_limit=limit, max_tool_result_chars=8_000), history)
    assert _left_out(fast) and not _left_out(full)
    assert fast.messages == full.messages
    assert (fast.tokens, fast.fits) == (full.tokens, full.fits)
    assert fast.tokens == count_request(SYSTEM, fast.messages, TOOLS)
    assert check_invariants(fast.messages, system=SYSTEM, tools=TOOLS, budget=limit) == []


def test_report_lists_every_stage_and_what_was_left_out(tmp_path: Path) -> None:
    """Every stage still has its entry; snip_history says how many messages went first."""
    history = _session(300)
    result, _ = _both(_pair(tmp_path, input_limit=20_000), history)
    assert [entry.stage for entry in result.report] == [
        *(stage.name for stage in builtin_stages()),
        "final",
    ]
    (line,) = _left_out(result)
    assert line.startswith("left out the ") and "cannot fit even with every tool result" in line
    snip = result.report.entry("snip_history")
    assert snip is not None and snip.changed


def test_cut_starts_at_a_user_message_so_no_call_loses_its_results() -> None:
    """The first message kept is a user message: a call and its results stay on one side."""
    history = _session(300)
    governor = build_governor(GovernanceConfig(input_limit=20_000))
    ctx = StageContext(budget=governor.budget, config=governor.config)
    dropped = early_drops(placeholders=True, non_messages=True, patterns=())
    cut = find_cut(history, ctx, dropped_early=dropped)
    assert cut is not None and cut.start == 0 and cut.stop > 0
    assert history[cut.stop]["role"] == "user"
    assert cut.kept == history[cut.stop :]


def test_newest_user_message_survives_even_a_hopeless_budget(tmp_path: Path) -> None:
    """With room for almost nothing, the newest user message is what is kept, as without a cut."""
    history = _session(300)
    history[-1] = {"role": "user", "content": "Start of the request. " + "detail " * 3_000}
    fast, full = _both(_pair(tmp_path, input_limit=600), history)
    assert fast.messages == full.messages
    assert [message["role"] for message in fast.messages] == ["user"]
    assert fast.messages[0]["content"].startswith("Start of the request.")


def test_input_is_untouched_and_governing_the_result_again_changes_nothing(
    tmp_path: Path,
) -> None:
    """The caller's history stays as it was, and the governed copy is a fixed point."""
    history = _session(300)
    snapshot = copy.deepcopy(history)
    fast, _ = _pair(tmp_path, input_limit=25_000)
    first = fast.govern(history, system=SYSTEM, tools=TOOLS)
    assert history == snapshot
    again = fast.govern(first.messages, system=SYSTEM, tools=TOOLS)
    assert again.messages is first.messages and not again.report.changed


def test_ids_made_for_calls_without_one_are_those_of_the_full_pipeline(tmp_path: Path) -> None:
    """A call missing its id gets the id the full pipeline gives it, whatever was left out."""
    history = _session(200)
    history[1:1] = [
        {"role": "assistant", "content": "[Previous assistant message omitted.]"},
        7,
        {"role": "critic", "content": "dropped early"},
    ]
    missing = {"type": "function", "function": {"name": "grep", "arguments": '{"q": "x"}'}}
    history[-1:-1] = [
        {"role": "user", "content": "search"},
        {"role": "assistant", "content": None, "tool_calls": [missing]},
        {"role": "tool", "tool_call_id": "", "content": "found"},
    ]
    fast, full = _both(_pair(tmp_path, input_limit=15_000), history)
    assert _left_out(fast)
    assert fast.messages == full.messages
    made = [m for m in fast.messages if m.get("role") == "assistant" and m.get("tool_calls")][-1]
    assert made["tool_calls"][0]["id"].startswith("call_")


def test_a_transform_stage_that_declares_nothing_moves_the_cut_to_the_budget_phase(
    tmp_path: Path,
) -> None:
    """It sees the whole history; the budget stages see only what can fit; same result."""
    seen: list[int] = []

    def keep_all(messages: list[Any], ctx: StageContext) -> StageOutcome:
        seen.append(len(messages))
        return StageOutcome(messages)

    history = _session(300)
    stages = [*builtin_stages(), Stage("keep_all", keep_all)]
    fast, full = _pair(tmp_path, stages, input_limit=20_000)
    result = fast.govern(history, system=SYSTEM, tools=TOOLS)
    assert _left_out(result)
    assert "before the budget stages ran" in _left_out(result)[0]
    assert result.messages == full.govern(history, system=SYSTEM, tools=TOOLS).messages
    # It saw all the repaired history, as it does without the cut.
    assert seen[0] == seen[1] > 5 * len(result.messages)
    assert check_invariants(result.messages, system=SYSTEM, tools=TOOLS, budget=20_000) == []


def test_a_budget_stage_that_declares_nothing_turns_leaving_out_off(tmp_path: Path) -> None:
    """A budget stage could shrink anything: the history reaches it whole."""
    seen: list[int] = []

    def keep_all(messages: list[Any], ctx: StageContext) -> StageOutcome:
        seen.append(len(messages))
        return StageOutcome(messages)

    history = _session(300)
    stages = [
        *builtin_stages(),
        Stage(
            "keep_all",
            keep_all,
            phase="budget",
            before=("offload_results", "compact_results", "snip_history"),
        ),
    ]
    governor = Governor(stages, config=GovernanceConfig(input_limit=20_000), workspace=tmp_path)
    result = governor.govern(history, system=SYSTEM, tools=TOOLS)
    assert not _left_out(result)
    assert seen and seen[0] > len(result.messages)
    assert check_invariants(result.messages, system=SYSTEM, tools=TOOLS, budget=20_000) == []


def _anthropic(history: list[Any]) -> list[Any]:
    """The session with its calls and results as Anthropic tool_use / tool_result blocks."""
    converted: list[Any] = []
    for message in history:
        if not isinstance(message, dict):
            continue
        if message.get("role") == "assistant" and message.get("tool_calls"):
            blocks = [
                {"type": "tool_use", "id": c["id"], "name": c["function"]["name"], "input": {}}
                for c in message["tool_calls"]
                if c.get("id")
            ]
            converted.append({"role": "assistant", "content": blocks})
        elif message.get("role") == "tool":
            block = {"type": "tool_result", "tool_use_id": message["tool_call_id"]}
            converted.append({"role": "user", "content": [{**block, "content": "ok"}]})
        elif message.get("role") in ("user", "assistant"):
            converted.append({"role": message["role"], "content": message["content"] or "..."})
    return converted


def test_anthropic_history_is_governed_whole_and_answered_in_its_shape(tmp_path: Path) -> None:
    """Tool blocks in the part that can fit turn the cut off: same result, same shape."""
    history = _anthropic(_session(300))
    fast, full = _both(_pair(tmp_path, input_limit=20_000), history)
    assert not _left_out(fast)
    assert fast.messages == full.messages
    assert any(
        isinstance(m["content"], list) and m["content"][0].get("type") == "tool_use"
        for m in fast.messages
    )


def test_tool_blocks_only_in_the_part_left_out_give_an_openai_shaped_request(
    tmp_path: Path,
) -> None:
    """Old Anthropic blocks that cannot fit anyway do not decide the shape of the request."""
    history = [*_anthropic(_session(150, seed=5)), *_session(300, seed=6)]
    fast, _ = _both(_pair(tmp_path, input_limit=20_000), history)
    assert _left_out(fast)
    assert any(m.get("role") == "tool" for m in fast.messages)
    assert check_invariants(fast.messages, system=SYSTEM, tools=TOOLS, budget=20_000) == []


def test_long_history_that_fits_is_returned_as_it_is(tmp_path: Path) -> None:
    """Nothing is left out of a long clean history within budget: the same list comes back."""
    history: list[Any] = []
    for number in range(400):
        history += [
            {"role": "user", "content": f"question {number}"},
            {"role": "assistant", "content": f"answer {number}"},
        ]
    result, _ = _both(_pair(tmp_path), history)
    assert result.messages is history and not result.report.changed


def _dirty_budget_configs() -> list[int]:
    """The budgets of the property tests that make a real conversation overflow."""
    return [i for i, config in enumerate(GOVERNANCE_CONFIGS) if config.context_window < 20_000]


@pytest.fixture(scope="module")
def governors(tmp_path_factory: pytest.TempPathFactory) -> GovernorFactory:
    """Governors per budget, sharing one offload store."""
    return GovernorFactory(tmp_path_factory.mktemp("budget-first"))


@settings(
    max_examples=400,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(request=dirty_requests())
def test_any_dirty_history_governs_the_same_with_the_cut_at_every_length(
    governors: GovernorFactory, request: DirtyRequest
) -> None:
    """Cutting even short dirty histories first changes no governed message, token or verdict."""
    for index in _dirty_budget_configs():
        config = GOVERNANCE_CONFIGS[index]
        fast = governors.get(config)
        full = Governor(
            builtin_stages(), config=config, workspace=governors.workspace, budget_first=False
        )
        fast.restore(None)  # one governor serves many unrelated histories here, not a session
        with mock.patch.object(budget_first, "MIN_MESSAGES", 0):
            cut = fast.govern(request.messages, system=request.system, tools=request.tools)
        whole = full.govern(request.messages, system=request.system, tools=request.tools)
        assert cut.messages == whole.messages, f"{request.source} {request.dirt} config {index}"
        assert (cut.tokens, cut.fits) == (whole.tokens, whole.fits)


def _read_nothing(messages: list[Any], ctx: StageContext) -> StageOutcome:
    return StageOutcome.unchanged(messages)


@pytest.mark.parametrize(
    "stage",
    [
        Stage("unchanged", _read_nothing),
        Stage("handed_back", lambda messages, ctx: messages),
        Stage("said_changed", lambda messages, ctx: StageOutcome(messages, changed=True)),
    ],
    ids=lambda stage: stage.name,
)
def test_a_transform_stage_that_reads_nothing_leaves_the_cut_before_the_stages(
    tmp_path: Path, stage: Stage
) -> None:
    """Handing its input on unread, it is called once and the cut is made before every stage."""
    calls: list[int] = []
    func = stage.func

    def counted(messages: list[Any], ctx: StageContext) -> Any:
        calls.append(1)
        return func(messages, ctx)

    history = _session(300)
    stages = [*builtin_stages(), Stage(stage.name, counted)]
    fast, full = _pair(tmp_path, stages, input_limit=20_000)
    result = fast.govern(history, system=SYSTEM, tools=TOOLS)
    assert "before the stages ran" in _left_out(result)[0]
    assert result.messages == full.govern(history, system=SYSTEM, tools=TOOLS).messages
    assert len(calls) == 2  # once per governor
    assert [entry.stage for entry in result.report] == [*fast.stage_names(), "final"]
    assert check_invariants(result.messages, system=SYSTEM, tools=TOOLS, budget=20_000) == []


def test_a_stage_that_only_counts_the_messages_sees_the_repaired_history(tmp_path: Path) -> None:
    """Asking for the length is reading: the repairs before it run on the whole history first."""
    lengths: list[int] = []

    def count_them(messages: list[Any], ctx: StageContext) -> StageOutcome:
        lengths.append(len(messages))
        return StageOutcome.unchanged(messages)

    history = _session(300)
    stages = [*builtin_stages(), Stage("count_them", count_them)]
    fast, full = _pair(tmp_path, stages, input_limit=20_000)
    result = fast.govern(history, system=SYSTEM, tools=TOOLS)
    assert result.messages == full.govern(history, system=SYSTEM, tools=TOOLS).messages
    assert lengths[0] == lengths[1] > 5 * len(result.messages)
    assert "before the budget stages ran" in _left_out(result)[0]


def test_a_stage_that_replaces_the_history_unread_gets_every_stage_reported(
    tmp_path: Path,
) -> None:
    """A new list built without reading replaces the history; the stages before it still report."""
    replacement = [{"role": "user", "content": "start over"}]

    def replace(messages: list[Any], ctx: StageContext) -> StageOutcome:
        return StageOutcome([dict(m) for m in replacement], changed=True)

    history = _session(300)
    stages = [*builtin_stages(), Stage("replace", replace)]
    fast, full = _pair(tmp_path, stages, input_limit=20_000)
    result = fast.govern(history, system=SYSTEM, tools=TOOLS)
    assert result.messages == replacement
    assert result.messages == full.govern(history, system=SYSTEM, tools=TOOLS).messages
    assert [entry.stage for entry in result.report] == [*fast.stage_names(), "final"]
    repaired = result.report.entry("pair_results")
    assert repaired is not None and repaired.changed  # the dirt before it was still repaired


def test_an_undeclared_stage_before_a_declared_transform_stage_keeps_the_order(
    tmp_path: Path,
) -> None:
    """Deferred stages run in pipeline order around the ones that read nothing."""
    order: list[str] = []

    def noted(name: str) -> Stage:
        def func(messages: list[Any], ctx: StageContext) -> StageOutcome:
            order.append(name)
            return StageOutcome.unchanged(messages)

        return Stage(name, func)

    history = _session(300)
    stages = [
        *builtin_stages(),
        noted("first"),
        Stage("declared", _read_nothing, acts_on="large_results", after="first"),
        noted("second"),
    ]
    governor = Governor(stages, config=GovernanceConfig(input_limit=20_000), workspace=tmp_path)
    result = governor.govern(history, system=SYSTEM, tools=TOOLS)
    assert order == ["first", "second"]
    names = [entry.stage for entry in result.report]
    assert names.index("first") < names.index("declared") < names.index("second")
    assert "before the stages ran" in _left_out(result)[0]


def _per_message(name: str, edit: Any, seen: list[int] | None = None) -> Stage:
    """An undeclared per-message stage applying `edit` to the text of each message."""

    def func(messages: list[Any], ctx: StageContext) -> StageOutcome:
        if seen is not None:
            seen.append(1)
        message = messages[0]
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            return StageOutcome.unchanged(messages)
        changed = edit(content)
        if changed == content:
            return StageOutcome.unchanged(messages)
        return StageOutcome([{**message, "content": changed}], changed=True)

    return Stage(name, func, per_message=True)


@pytest.mark.parametrize(
    "edit",
    [
        lambda text: text.replace("file", "F"),  # shrinks
        lambda text: text.replace("test", "a much longer test"),  # grows
        lambda text: "" if len(text) % 5 == 0 else text,  # empties some
    ],
    ids=["shrinks", "grows", "empties"],
)
def test_a_per_message_stage_that_declares_nothing_keeps_the_cut_before_the_stages(
    tmp_path: Path, edit: Any
) -> None:
    """The walk counts each message as the stage leaves it: same result, old messages unread."""
    seen: list[int] = []
    history = _session(300)
    stages = [*builtin_stages(), _per_message("edit", edit, seen)]
    fast, full = _pair(tmp_path, stages, input_limit=20_000)
    result = fast.govern(history, system=SYSTEM, tools=TOOLS)
    assert "before the stages ran" in _left_out(result)[0]
    calls = len(seen)
    assert result.messages == full.govern(history, system=SYSTEM, tools=TOOLS).messages
    assert calls < len(history) / 2  # the messages that cannot fit were never handed to it
    assert check_invariants(result.messages, system=SYSTEM, tools=TOOLS, budget=20_000) == []


def test_a_per_message_stage_failing_on_an_old_message_is_skipped_as_without_the_cut(
    tmp_path: Path,
) -> None:
    """A failure the walk meets gives up the cut: the stage is skipped, as on the whole history."""
    history = _session(300)
    doomed = history[-40]

    def edit(text: str) -> str:
        return text.replace("file", "F")

    stage = _per_message("edit", edit)
    func = stage.func

    def failing(messages: list[Any], ctx: StageContext) -> Any:
        if messages[0] == doomed:
            raise RuntimeError("cannot read this one")
        return func(messages, ctx)

    stages = [*builtin_stages(), Stage("edit", failing, per_message=True)]
    fast, full = _pair(tmp_path, stages, input_limit=20_000)
    result = fast.govern(history, system=SYSTEM, tools=TOOLS)
    assert result.messages == full.govern(history, system=SYSTEM, tools=TOOLS).messages
    entry = result.report.entry("edit")
    assert entry is not None and "RuntimeError" in entry.details[0]


def _without_watermark(stages: list[Stage]) -> list[Stage]:
    """The stages with `snip_history` no longer declaring `cuts_to_watermark`."""
    return [
        attrs.evolve(s, cuts_to_watermark=False) if s.name == "snip_history" else s for s in stages
    ]


def _left_out_count(result: GovernanceResult) -> int:
    (line,) = _left_out(result)
    return int(line.split()[3])


@pytest.mark.parametrize(("seed", "limit"), [(1, 30_000), (2, 12_000), (5, 60_000)])
def test_a_cut_to_the_watermark_leaves_out_more_and_governs_to_the_same_messages(
    tmp_path: Path, seed: int, limit: int
) -> None:
    """With the last budget stage keeping the cut watermark, less is read; the result stays."""
    history = _session(400, seed)
    settings = {"input_limit": limit, "max_tool_result_chars": 8_000}
    deep, full = _pair(tmp_path, **settings)
    shallow, _ = _pair(tmp_path, _without_watermark(builtin_stages()), **settings)
    deep_result, full_result = _both((deep, full), history)
    shallow_result = shallow.govern(history, system=SYSTEM, tools=TOOLS)
    assert deep_result.messages == full_result.messages == shallow_result.messages
    assert (deep_result.tokens, deep_result.fits) == (full_result.tokens, full_result.fits)
    # What is recorded for the next call is read back from what was sent alone.
    assert deep_result.state == full_result.state == shallow_result.state
    assert _left_out_count(deep_result) > _left_out_count(shallow_result)
    assert "into the cut watermark" in _left_out(deep_result)[0]
    assert "into the cut watermark" not in _left_out(shallow_result)[0]


def test_stages_after_a_cut_to_the_watermark_see_the_request_it_stands_for(
    tmp_path: Path,
) -> None:
    """`request_tokens` counts at least what was left out; the report counts the list itself."""
    seen: list[tuple[int, int, int]] = []

    def watch(messages: list[Any], ctx: StageContext) -> StageOutcome:
        own = ctx.fixed_tokens + ctx.facts.list_tokens(messages)
        floor = ctx.cut.floor if ctx.cut is not None else 0
        seen.append((ctx.request_tokens(messages), own, floor))
        return StageOutcome.unchanged(messages)

    watcher = Stage(
        "watch",
        watch,
        phase="budget",
        after="compact_results",
        before="snip_history",
        acts_on="over_budget",
    )
    history = _session(400, 1)
    fast, full = _pair(tmp_path, [*builtin_stages(), watcher], input_limit=30_000)
    result, whole = _both((fast, full), history)
    assert result.messages == whole.messages
    (with_cut, _whole) = seen
    requested, own, floor = with_cut
    assert floor > 0 and requested == own + floor > 30_000
    entry = result.report.entry("watch")
    assert entry is not None and entry.tokens_before == own


def test_cuts_to_watermark_needs_a_budget_stage_acting_on_over_budget() -> None:
    """Declared on any other stage, it is refused with the stage's name."""
    with pytest.raises(ValueError, match="'keep': cuts_to_watermark needs phase='budget'"):
        Stage("keep", lambda m, c: StageOutcome(m), cuts_to_watermark=True)
    with pytest.raises(ValueError, match="'over_budget' in acts_on"):
        Stage("keep", lambda m, c: StageOutcome(m), phase="budget", cuts_to_watermark=True)


def test_past_the_cut_watermark_no_result_or_call_is_handed_to_a_per_message_stage(
    tmp_path: Path,
) -> None:
    """What only shows the request is over budget is read cheaply: results and calls unread."""
    handed: list[Any] = []

    def note(messages: list[Any], ctx: StageContext) -> StageOutcome:
        handed.append(messages[0])
        return StageOutcome.unchanged(messages)

    history = _session(400, 1)
    stages = [*builtin_stages(), Stage("note", note, per_message=True)]
    fast, full = _pair(tmp_path, stages, input_limit=30_000)
    result = fast.govern(history, system=SYSTEM, tools=TOOLS)
    (line,) = _left_out(result)
    first, last = map(int, line.split("messages[")[1].split("]")[0].split(".."))
    # The stage is handed copies: match each one back by equality, among the old ones only.
    old = [m for m in handed if m in history[first : last + 1] and m not in history[last + 1 :]]
    assert old, "the walk past the watermark still reads user and assistant text"
    assert all(m.get("role") in ("user", "assistant") and not m.get("tool_calls") for m in old)
    assert len(handed) < len(history) / 2
    assert result.messages == full.govern(history, system=SYSTEM, tools=TOOLS).messages


def test_a_prefilter_raising_on_a_message_past_the_cut_watermark_skips_its_stage(
    tmp_path: Path,
) -> None:
    """Past the watermark the walk asks prefilters itself; an error there is still the stage's."""
    history = _session(300)
    asked: list[str] = []

    def recording(text: str) -> bool:
        asked.append(text)
        return False

    settings = {"input_limit": 20_000}
    fast, _ = _pair(
        tmp_path,
        [*builtin_stages(), Stage("quiet", _quiet, per_message=True, prefilter=recording)],
        **settings,
    )
    sent = fast.govern(history, system=SYSTEM, tools=TOOLS)
    assert "into the cut watermark" in _left_out(sent)[0]
    # The oldest message asked about: one the walk reads past the watermark, never sent.
    texts = [m.get("content") if isinstance(m, dict) else None for m in history]
    # A text no other message holds, in ASCII: the walk's quickest reading of a plain message.
    once = [t for t in asked if texts.count(t) == 1 and t.isascii()]
    doomed = min(once, key=texts.index)
    assert doomed not in {m.get("content") for m in sent.messages}

    _assert_raising_prefilter_skips_its_stage(tmp_path, history, doomed, settings)


def _quiet(messages: list[Any], ctx: StageContext) -> StageOutcome:
    return StageOutcome.unchanged(messages)


def _assert_raising_prefilter_skips_its_stage(
    tmp_path: Path, history: list[Any], doomed: str, settings: dict[str, Any]
) -> None:
    """A per-message stage whose prefilter raises on `doomed` is skipped, reported, and the
    messages are the full pipeline's."""

    def raising(text: str) -> bool:
        if text == doomed:
            raise RuntimeError("cannot read this one")
        return False

    stages = [*builtin_stages(), Stage("quiet", _quiet, per_message=True, prefilter=raising)]
    fast, full = _pair(tmp_path, stages, **settings)
    result = fast.govern(history, system=SYSTEM, tools=TOOLS)
    assert result.messages == full.govern(history, system=SYSTEM, tools=TOOLS).messages
    entry = result.report.entry("quiet")
    assert entry is not None and not entry.changed
    assert entry.details == [
        "skipped: the stage's prefilter raised RuntimeError: cannot read this one"
    ]


def test_tool_blocks_the_bound_counted_past_the_cut_watermark_turn_the_cut_off(
    tmp_path: Path,
) -> None:
    """A tool_result block counted whole past the watermark proves nothing: governed whole."""
    turns: list[Any] = []
    for i in range(260):
        turns += [
            {"role": "user", "content": f"step {i}: " + "u" * 100},
            {"role": "assistant", "content": f"done {i}: " + "a" * 150},
        ]
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "r" * 100_000}
    history = [
        {"role": "user", "content": "Read the log."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "read_file", "input": {}}],
        },
        {"role": "user", "content": [result]},
        {"role": "assistant", "content": "Read it."},
        *turns,
    ]
    fast, full = _both(_pair(tmp_path, input_limit=30_000), history)
    # Offloaded in the OpenAI shape, the old result is small: everything fits, nothing is cut.
    assert not _left_out(full)
    assert not _left_out(fast)
    assert fast.messages == full.messages
    assert fast.messages[0] == history[0]


def test_a_prefilter_raising_on_a_message_the_cut_keeps_skips_its_stage(tmp_path: Path) -> None:
    """The walk asks prefilters of what it keeps too; an error there is the stage's, reported."""
    history = _session(300)
    last_user = max(
        i for i, m in enumerate(history) if isinstance(m, dict) and m.get("role") == "user"
    )
    texts = [m.get("content") if isinstance(m, dict) else None for m in history]
    quiet = Stage("quiet", _quiet, per_message=True, prefilter=lambda text: False)
    settings = {"input_limit": 20_000}
    fast, _ = _pair(tmp_path, [*builtin_stages(), quiet], **settings)
    sent = fast.govern(history, system=SYSTEM, tools=TOOLS)
    # A text sent as it is, from before the newest user message: one the walk read.
    kept = [
        m["content"]
        for m in sent.messages
        if type(m.get("content")) is str and texts.count(m["content"]) == 1
    ]
    doomed = next(t for t in kept if texts.index(t) < last_user)
    _assert_raising_prefilter_skips_its_stage(tmp_path, history, doomed, settings)


def test_past_the_cut_watermark_a_user_message_next_to_another_counts_nothing() -> None:
    """Past the cut watermark, the shortcut for plain texts counts merged user messages as the
    full walk does: nothing for each of two user messages in a row."""
    history: list[Any] = []
    for turn in range(600):
        history.append({"role": "user", "content": f"question {turn} " + "q" * 200})
        if turn % 3 == 0:
            history.append({"role": "user", "content": f"and also {turn} " + "u" * (300 + turn)})
        history.append({"role": "assistant", "content": f"answer {turn} " + "a" * 150})
    history.append({"role": "user", "content": "The newest question."})
    governor = build_governor(GovernanceConfig(input_limit=20_000))
    ctx = StageContext(budget=governor.budget, config=governor.config)
    dropped = early_drops(placeholders=True, non_messages=True, patterns=())
    # A placeholder pattern no text holds turns the shortcut off: every message is counted
    # through its facts, neighbours looked up both ways.
    full = find_cut(
        history, ctx, patterns=("[no such placeholder]",), dropped_early=dropped, watermark=True
    )
    plain = find_cut(history, ctx, dropped_early=dropped, watermark=True)
    assert full is not None and plain is not None
    assert full.floor > 0, "the walk went past the cut watermark"
    assert (plain.start, plain.stop, plain.floor) == (full.start, full.stop, full.floor)


def _asks_apart(between: Any) -> list[Any]:
    """Many short turns, then two asks with `between` (an entry a repair takes out) between
    them, an answer, and a short newest ask. Each of the two asks ends with its runtime block:
    merged into one message, they keep only the newer block, so they cost less together than
    apart by more than the newest ask costs."""
    block = build_runtime_block(
        now=datetime(2025, 1, 31, 9, 30, tzinfo=UTC), channel="cli", chat_id="1", lines=[]
    )
    history: list[Any] = []
    for turn in range(300):
        history += [
            {"role": "user", "content": f"q {turn}"},
            {"role": "assistant", "content": f"a {turn}"},
        ]
    return [
        *history,
        {"role": "user", "content": append_runtime_block("first ask", block)},
        between,
        {"role": "user", "content": append_runtime_block("second ask", block)},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "go on"},
    ]


@pytest.mark.parametrize("between", DROPPED_BETWEEN_USER_MESSAGES)
@pytest.mark.parametrize("margin", [0, 3])
def test_user_messages_merged_across_a_dropped_entry_leave_nothing_out_that_fits(
    tmp_path: Path, between: Any, margin: int
) -> None:
    """A history that fits within a few tokens is sent whole, as without the cut, although two
    of its user messages merge only once a repair takes out the entry between them: on a
    governor's first call, on a session grown call by call, and on a fresh governor given
    that session's state."""
    history = _asks_apart(between)
    assert len(history) >= MIN_MESSAGES
    settings = {"input_limit": 1_000_000}
    whole = _pair(tmp_path, **settings)[1].govern(history, system=SYSTEM, tools=TOOLS)
    settings["input_limit"] = whole.tokens + margin
    fast, full = _both(_pair(tmp_path, **settings), history)
    assert full.messages == whole.messages, "the full pipeline sends it all"
    assert not _left_out(fast)
    assert fast.messages == whole.messages
    assert (fast.tokens, fast.fits) == (whole.tokens, True)

    session, _ = _pair(tmp_path, **settings)
    for end in range(2, len(history), 2):
        session.govern(history[:end], system=SYSTEM, tools=TOOLS)
    grown = session.govern(history, system=SYSTEM, tools=TOOLS)
    assert not _left_out(grown)
    assert grown.messages == whole.messages and grown.tokens <= grown.budget
    fresh, _ = _pair(tmp_path, **settings)
    fresh.restore(grown.state)
    assert fresh.govern(history, system=SYSTEM, tools=TOOLS).messages == whole.messages


@pytest.mark.parametrize("between", DROPPED_BETWEEN_USER_MESSAGES)
@pytest.mark.parametrize("every", [1, 3])
def test_user_messages_merged_across_a_dropped_entry_count_nothing_in_either_walk(
    between: Any, every: int
) -> None:
    """Both walks (before the cut watermark and past it) count two user messages a repair makes
    adjacent as they count two in a row, and the cut falls before the first of them: the cut
    and its floor are the same as with nothing between them."""

    def history(gap: list[Any]) -> list[Any]:
        messages: list[Any] = []
        for turn in range(600):
            messages.append({"role": "user", "content": f"question {turn} " + "q" * 200})
            if turn % every == 0:
                messages += [*gap, {"role": "user", "content": f"and also {turn} " + "u" * 300}]
            messages.append({"role": "assistant", "content": f"answer {turn} " + "a" * 150})
        messages.append({"role": "user", "content": "The newest question."})
        return messages

    apart, together = history([between]), history([])
    governor = build_governor(GovernanceConfig(input_limit=20_000))
    ctx = StageContext(budget=governor.budget, config=governor.config)
    dropped = early_drops(placeholders=True, non_messages=True, patterns=())
    for patterns in [(), ("[no such placeholder]",)]:  # the shortcut for plain texts, or not
        (cut, low), (cut_together, low_together) = (
            [
                find_cut(messages, ctx, patterns=patterns, dropped_early=dropped, watermark=down)
                for down in (False, True)
            ]
            for messages in (apart, together)
        )
        assert low is not None and low_together is not None
        assert low.floor > 0, "the walk went past the cut watermark"
        for made, other in [(cut, cut_together), (low, low_together)]:
            assert made is not None and other is not None
            assert apart[made.stop] == together[other.stop]
            assert made.floor == other.floor


@pytest.mark.parametrize("limit", [4_000, 20_000])
def test_replies_that_lost_a_nameless_call_govern_as_in_the_full_pipeline(
    tmp_path: Path, limit: int
) -> None:
    """Far over budget, with every third turn holding a reply whose one call had no name (kept
    as its notice, not dropped), leaving out first still gives the full pipeline's messages."""
    history: list[Any] = []
    for turn in range(600):
        history.append({"role": "user", "content": f"question {turn} " + "q" * 200})
        if turn % 3 == 0:
            nameless = {"id": f"n{turn}", "type": "function", "function": {"name": ""}}
            history.append({"role": "assistant", "content": None, "tool_calls": [nameless]})
            history.append({"role": "user", "content": f"and also {turn} " + "u" * 300})
        history.append({"role": "assistant", "content": f"answer {turn} " + "a" * 150})
    history.append({"role": "user", "content": "The newest question."})
    fast, full = _both(_pair(tmp_path, input_limit=limit), history)
    assert _left_out(fast) and not _left_out(full)
    assert fast.messages == full.messages
    assert (fast.tokens, fast.fits) == (full.tokens, full.fits)
    assert any(m["content"] == NAMELESS_NOTICE for m in fast.messages)


def _drop_notes(messages: list[Any], ctx: StageContext) -> StageOutcome:
    """Per message: drops an assistant's note to itself, declaring nothing."""
    if messages[0].get("content") == "note to self":
        return StageOutcome([], changed=True)
    return StageOutcome.unchanged(messages)


def test_user_messages_merged_across_what_a_per_message_stage_drops_leave_nothing_out(
    tmp_path: Path,
) -> None:
    """What a per-message stage before `merge_user_turns` drops between two user messages makes
    them one as well: the walk asks it, and a history that fits merged is sent whole."""
    notes = Stage(
        "drop_notes", _drop_notes, per_message=True, phase="repair", before="merge_user_turns"
    )
    history = _asks_apart({"role": "assistant", "content": "note to self"})
    stages = [*builtin_stages(), notes]
    whole = _pair(tmp_path, stages, input_limit=1_000_000)[1].govern(
        history, system=SYSTEM, tools=TOOLS
    )
    assert whole.messages[-3]["content"].startswith("first ask\n\nsecond ask")
    fast, full = _both(_pair(tmp_path, stages, input_limit=whole.tokens), history)
    assert not _left_out(fast)
    assert fast.messages == full.messages == whole.messages


def _call_heavy_session(turns: int) -> list[Message]:
    """Turns of a short question, three calls, their results and a short answer: what the
    quick bound past the cut watermark counts (the two texts) is a small part of each."""
    history: list[Message] = []
    for turn in range(turns):
        ids = [f"t{turn}c{slot}" for slot in range(3)]
        history.append({"role": "user", "content": f"step {turn}: " + "look " * 8})
        history.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "src/m.py"}'},
                    }
                    for call_id in ids
                ],
            }
        )
        history += [
            {"role": "tool", "tool_call_id": call_id, "content": "x = 1\n" * 200} for call_id in ids
        ]
        history.append({"role": "assistant", "content": "Done. " * 6})
    return history


def test_a_history_of_calls_and_results_a_few_times_the_budget_is_cut_before_the_stages(
    tmp_path: Path,
) -> None:
    """When the quick bound past the cut watermark runs out of history, counting its calls and
    results too still shows it over budget: the cut is made first, the messages are the same."""
    history = _call_heavy_session(150)
    assert len(history) >= MIN_MESSAGES
    fast, full = _both(_pair(tmp_path, input_limit=20_000), history)
    assert _left_out(fast) and not _left_out(full)
    assert fast.messages == full.messages
    assert (fast.tokens, fast.fits) == (full.tokens, full.fits)
    assert check_invariants(fast.messages, system=SYSTEM, tools=TOOLS, budget=20_000) == []


def test_no_cut_falls_between_the_two_user_messages_that_open_the_history() -> None:
    """Two asks in a row at the start merge into one: the bound passing the budget at the
    answer after them leaves nothing out, rather than the first ask without the second."""
    history: list[Any] = [
        {"role": "user", "content": "first ask " + "f" * 400},
        {"role": "user", "content": "second ask " + "s" * 400},
        {"role": "assistant", "content": "a long answer " + "a" * 200_000},
    ]
    for turn in range(300):
        history += [
            {"role": "user", "content": f"q {turn}"},
            {"role": "assistant", "content": f"a {turn}"},
        ]
    history.append({"role": "user", "content": "The newest question."})
    governor = build_governor(GovernanceConfig(input_limit=20_000))
    ctx = StageContext(budget=governor.budget, config=governor.config)
    dropped = early_drops(placeholders=True, non_messages=True, patterns=())
    for down in (False, True):
        assert find_cut(history, ctx, dropped_early=dropped, watermark=down) is None


class _Words:
    """A counter that is not the default estimate, as a plugin's tokenizer is not."""

    def count_text(self, text: str) -> int:
        return len(text.split()) + len(text) // 7


def test_a_session_counted_by_another_counter_walks_only_when_it_may_find_a_cut(
    tmp_path: Path,
) -> None:
    """With a counter other than the estimate, a session whose results fit once compacted is
    not walked call after call to find no cut, and is governed as the walk would govern it."""
    history = _session(400)
    config = GovernanceConfig(
        context_window=32_000, max_output=500, safety_margin=0, max_tool_result_chars=500
    )
    quick = build_governor(config, tmp_path, counter=_Words())
    walking = build_governor(config, tmp_path, counter=_Words())
    users = [i for i, m in enumerate(history) if isinstance(m, dict) and m.get("role") == "user"]
    walks = {"quick": 0, "walking": 0}
    for end in [*users[1:], len(history)]:
        spy = mock.patch.object(budget_first, "_bound_exceeded", wraps=budget_first._bound_exceeded)
        with spy as walked:
            ours = quick.govern(history[:end], system=SYSTEM, tools=TOOLS)
        walks["quick"] += walked.call_count
        never_fits = mock.patch.object(budget_first, "_fits_at_least", return_value=False)
        with spy as walked, never_fits:
            theirs = walking.govern(history[:end], system=SYSTEM, tools=TOOLS)
        walks["walking"] += walked.call_count
        assert ours.messages == theirs.messages and ours.tokens == theirs.tokens
    assert walks["walking"] > 30 and walks["quick"] == 0, walks
