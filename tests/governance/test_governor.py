"""The governor's guarantees: copy-on-write, the report, and the final checks against bad stages."""

from __future__ import annotations

import asyncio
import copy
import gc
import json
import threading
from pathlib import Path
from typing import Any

import pytest

import nanobot_core.governance.governor as governor_module
from nanobot_core.config import Config, GovernanceConfig
from nanobot_core.errors import SessionLockedError
from nanobot_core.governance import Governor, Stage, StageOutcome, build_governor, builtin_stages
from nanobot_core.governance.continuity import GovernanceState
from nanobot_core.governance.history_file import HistoryFormatError
from nanobot_core.governance.invariants import check_invariants
from nanobot_core.governance.ordering import BUILTIN_ORDER
from nanobot_core.governance.tokens import count_request
from tests.governance.builders import call, calls, result, say, system, turn, user

Message = dict[str, Any]


def _dirty() -> list[Any]:
    """A history with one of most defects: placeholder, junk, bad call, orphan, missing result."""
    return [
        {"role": "user", "content": "go", "_meta": {"time": "t"}},
        say("[Previous assistant message omitted.]"),
        42,
        calls(call("a"), call("b", None)),
        result("a"),
        result("b"),
        result("ghost"),
        calls(call("", "f", {"x": 1})),
        user("still there \ud83d"),
    ]


def _governor(*extra: Stage, **settings: Any) -> Governor:
    return Governor([*builtin_stages(), *extra], config=GovernanceConfig(**settings))


def _legal(result: Any, **request: Any) -> None:
    assert check_invariants(result.messages, **request) == []


def test_clean_history_comes_back_as_the_same_list() -> None:
    """Nothing to change: the input list itself is returned and no stage reports a change."""
    history = [system(), *turn(1), *turn(2)]
    result = _governor().govern(history)
    assert result.messages is history
    assert not result.report.changed
    assert [e.stage for e in result.report] == [*BUILTIN_ORDER, "final"]


def test_a_system_prompt_equal_to_the_last_one_is_not_counted_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An equal system prompt decoded again (another object) keeps its count; another is counted."""
    counted: list[Any] = []
    count = governor_module.count_system

    def counting(prompt: Any, counter: Any = None) -> int:
        counted.append(prompt)
        return count(prompt, counter)

    monkeypatch.setattr(governor_module, "count_system", counting)
    governor = _governor()
    prompt = "You are a careful assistant. " * 20
    history = [*turn(1)]
    first = governor.govern(history, system=prompt)
    decoded = json.loads(json.dumps(prompt))
    assert decoded is not prompt
    again = governor.govern(history, system=decoded)
    assert len(counted) == 1
    assert again.tokens == first.tokens == count_request(prompt, history)
    other = governor.govern(history, system=prompt + "Be brief, please.")
    assert len(counted) == 2
    assert other.tokens == count_request(prompt + "Be brief, please.", history)
    assert governor.govern(history).tokens == count_request(None, history)


def test_input_is_never_modified() -> None:
    """The caller's list and every dict in it stay exactly as they were."""
    history = _dirty()
    snapshot = copy.deepcopy(history)
    identities = [id(m) for m in history]
    result = _governor().govern(history)
    assert history == snapshot and [id(m) for m in history] == identities
    assert result.messages is not history
    _legal(result)


def test_dirty_history_is_healed_and_every_stage_is_reported() -> None:
    """The report says, stage by stage, what changed; the output is a legal request."""
    result = _governor().govern(_dirty())
    _legal(result)
    changed = {e.stage for e in result.report if e.changed}
    assert {
        "strip_placeholders",
        "drop_non_messages",
        "strip_malformed_calls",
        "pair_results",
        "backfill_results",
        "sanitize_content",
    } <= changed
    assert all(e.details for e in result.report if e.changed)
    assert all("_meta" not in m for m in result.messages)


def test_governing_the_output_again_changes_nothing() -> None:
    """Idempotent: the governed output comes back as the same list, nothing reported."""
    governor = _governor(context_window=3_000, max_output=500, safety_margin=100)
    first = governor.govern([*_dirty(), *[m for i in range(30) for m in turn(i, "r" * 800)]])
    second = governor.govern(first.messages)
    assert second.messages is first.messages
    assert not second.report.changed


def test_output_is_deterministic() -> None:
    """Placeholders and generated ids hold no time and no randomness."""
    assert _governor().govern(_dirty()).messages == _governor().govern(_dirty()).messages


def test_tokens_budget_and_fits_describe_the_whole_request() -> None:
    """`tokens` counts system prompt, tools and messages; the system prompt is not in messages."""
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    history = turn(1)
    result = _governor(input_limit=50_000).govern(history, system="Be brief.", tools=tools)
    assert result.tokens == count_request("Be brief.", result.messages, tools)
    assert (result.budget, result.fits) == (50_000, True)
    assert all(m.get("content") != "Be brief." for m in result.messages)


def test_tool_definitions_count_toward_the_budget() -> None:
    """The same history fits alone but must be shrunk once big tool definitions come along."""
    history = [m for i in range(20) for m in turn(i, "r" * 400)]
    tools = [
        {"type": "function", "function": {"name": f"t{i}", "description": "d" * 400}}
        for i in range(20)
    ]
    governor = _governor(input_limit=5_000)
    without = governor.govern(history)
    with_tools = governor.govern(history, tools=tools)
    assert without.messages is history
    assert with_tools.report.changed
    assert with_tools.fits and with_tools.tokens <= 5_000


def test_report_entries_serialise_as_the_cli_prints_them() -> None:
    """Every entry has stage, changed, details and the token figures, as JSON."""
    entries = _governor().govern(_dirty()).report.to_json()
    assert all(
        set(e) == {"stage", "changed", "details", "tokens_before", "tokens_after"} for e in entries
    )
    json.dumps(entries)
    assert entries[-1]["stage"] == "final"


# -- broken stages -----------------------------------------------------------------------


def _raising(messages: list[Any], ctx: Any) -> StageOutcome:
    raise RuntimeError("boom")


def test_stage_that_raises_is_skipped_and_reported() -> None:
    """A raising stage is skipped for the run, its error is in the report, the request is legal."""
    result = _governor(Stage("explodes", _raising)).govern(_dirty())
    entry = result.report.entry("explodes")
    assert entry is not None and not entry.changed
    assert "RuntimeError: boom" in entry.details[0]
    _legal(result)


_NOT_A_LIST: Any = "x"


@pytest.mark.parametrize(
    "garbage", [None, 42, "messages", {"messages": []}, StageOutcome(_NOT_A_LIST, changed=True)]
)
def test_stage_that_returns_garbage_is_ignored(garbage: Any) -> None:
    """Anything but a list or an outcome holding a list is ignored and reported."""
    history = [*turn(1)]
    result = _governor(Stage("garbage", lambda messages, ctx: garbage)).govern(history)
    entry = result.report.entry("garbage")
    assert entry is not None and "ignored" in entry.details[0]
    assert result.messages is history


def test_stage_that_returns_junk_entries_and_breaks_pairing_is_caught_by_the_final_checks() -> None:
    """Junk entries, dropped results and a stray result from a stage are repaired at the end."""

    def wreck(messages: list[Any], ctx: Any) -> list[Any]:
        kept = [m for m in messages if m.get("role") != "tool"]  # drops every result
        return [None, {"role": "tool", "tool_call_id": "zzz", "content": ""}, *kept, "junk"]

    result = _governor(Stage("wreck", wreck)).govern([*turn(1), *turn(2)])
    final = result.report.entry("final")
    assert final is not None and final.changed and final.details
    _legal(result)


def test_stage_that_mutates_what_it_is_handed_cannot_reach_the_caller() -> None:
    """A stage editing its input in place works on a copy: the caller's history is untouched."""

    def vandal(messages: list[Any], ctx: Any) -> list[Any]:
        for message in messages:
            message["content"] = "overwritten"
            message.pop("tool_calls", None)
        messages.append({"role": "tool", "tool_call_id": "nope", "content": "x"})
        return messages

    history = [*turn(1), *turn(2)]
    snapshot = copy.deepcopy(history)
    result = _governor(Stage("vandal", vandal)).govern(history)
    assert history == snapshot
    assert result.report.entry("vandal").changed  # type: ignore[union-attr]
    assert all(m["content"] == "overwritten" for m in result.messages)
    _legal(result)


def test_stage_claiming_no_change_is_taken_at_its_word() -> None:
    """With changed=False the stage's messages are ignored and its input is handed on."""
    history = turn(1)
    lying = Stage("lying", lambda messages, ctx: StageOutcome([user("other")], changed=False))
    assert _governor(lying).govern(history).messages is history


def test_stage_returning_an_equal_copy_changes_nothing() -> None:
    """A third-party stage that rebuilds equal messages does not count as a change."""
    history = turn(1)
    rebuild = Stage("rebuild", lambda messages, ctx: [dict(m) for m in messages])
    result = _governor(rebuild).govern(history)
    assert result.messages is history and not result.report.changed


def test_final_checks_hold_with_every_stage_disabled() -> None:
    """Disabled stages are reported as such; the governor still pairs, sanitizes and budgets."""
    governor = Governor(
        builtin_stages(), config=GovernanceConfig(disabled=list(BUILTIN_ORDER), input_limit=3_000)
    )
    history = [*_dirty(), *[m for i in range(20) for m in turn(i, "r" * 1_000)]]
    result = governor.govern(history)
    assert governor.stage_names() == []
    assert all("disabled" in e.details[0] for e in result.report[:-1])
    assert result.fits
    _legal(result)
    assert all("_meta" not in m for m in result.messages)


def test_stage_options_come_from_config() -> None:
    """`config.stages[name]` reaches the stage as `ctx.options`."""
    seen: list[Any] = []

    def spy(messages: list[Any], ctx: Any) -> StageOutcome:
        seen.append(dict(ctx.options))
        return StageOutcome(messages)

    _governor(Stage("spy", spy), stages={"spy": {"level": 3}}).govern(turn(1))
    assert seen == [{"level": 3}]


def test_empty_history_becomes_a_minimal_user_message() -> None:
    """A request is never empty: with nothing to send, a "(continue)" user message is sent."""
    result = _governor().govern([])
    assert result.messages == [{"role": "user", "content": "(continue)"}]
    final = result.report.entry("final")
    assert final is not None and final.changed
    assert any("(continue)" in line for line in final.details)


def test_history_starting_with_an_assistant_gets_a_user_message_first() -> None:
    """After the system messages the history starts at a user message."""
    result = _governor().govern([system(), say("Hello! How can I help?"), user("Book a flight.")])
    assert [m["role"] for m in result.messages] == ["system", "user", "assistant", "user"]
    assert result.messages[1]["content"] == "(continue)"


#: What the runner answers a call without a name, its hint included.
_NAMELESS_ERROR = (
    "Error: the tool call has no tool name: call a tool by its name.\n\n"
    "[Analyze the error above and try a different approach.]"
)


def _lost_every_call_last() -> list[Message]:
    """A task whose newest reply made one call without a name, answered by the runner."""
    return [
        user("Read notes.txt."),
        calls(call("c1", "")),
        result("c1", _NAMELESS_ERROR),
    ]


def test_a_reply_that_lost_every_call_last_is_followed_by_a_user_message() -> None:
    """The notice left of a newest reply whose calls all had no name is not the request's last
    message (strict providers refuse that): a "(continue)" user message follows it."""
    result = _governor().govern(_lost_every_call_last())
    assert [m["role"] for m in result.messages] == ["user", "assistant", "user"]
    assert result.messages[1]["content"].startswith("[None of the 1 tool call(s)")
    assert result.messages[2] == {"role": "user", "content": "(continue)"}
    final = result.report.entry("final")
    assert final is not None and final.changed
    assert final.details == [
        "end_at_user: messages[1] is an assistant message left last, where the history ends "
        "with no reply of the assistant's to go on with: added a user message after it "
        "('(continue)')"
    ]
    _legal(result)
    again = _governor().govern(result.messages)
    assert again.messages is result.messages and not again.report.changed


@pytest.mark.parametrize(
    "history",
    [
        pytest.param(_lost_every_call_last()[:2], id="unanswered"),
        pytest.param([*_lost_every_call_last(), 42, {"_meta": {"kind": "x"}}], id="junk-after"),
        pytest.param(
            [user("Go."), {"role": "assistant", "content": "Hm.", "function_call": {"name": ""}}],
            id="legacy-call-naming-nothing",
        ),
        pytest.param([user("Go."), say("Sure."), result("ghost")], id="stray-result"),
    ],
)
def test_a_history_the_model_is_to_answer_never_governs_into_an_assistant_message_last(
    history: list[Any],
) -> None:
    """Whatever a repair drops from a history that ends with a call or a result (junk after it
    passed over), the request does not end with an assistant message."""
    result = _governor().govern(history)
    assert result.messages[-1] == {"role": "user", "content": "(continue)"}
    assert result.messages[-2]["role"] == "assistant"
    _legal(result)


def test_the_repairs_in_the_final_step_end_at_a_user_message_too() -> None:
    """With `strip_malformed_calls` disabled the final step drops the nameless call, and the
    request still ends with a user message."""
    result = _governor(disabled=["strip_malformed_calls"]).govern(_lost_every_call_last())
    assert [m["role"] for m in result.messages] == ["user", "assistant", "user"]
    assert result.messages[-1]["content"] == "(continue)"


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(say("Sure, the answer is"), id="text"),
        pytest.param(say("Sure \ud800"), id="rewritten-by-a-repair"),
        pytest.param(calls(content="Done."), id="empty-list-of-calls"),
    ],
)
def test_a_history_ending_with_the_assistants_own_reply_still_ends_with_it(
    reply: Message,
) -> None:
    """A reply that makes no call, last in the history (a prefill the caller chose), is last
    in the request too, even when a repair rewrote it: no user message is added."""
    result = _governor().govern([user("Go."), reply])
    assert [m["role"] for m in result.messages] == ["user", "assistant"]


def test_the_user_message_after_a_reply_left_last_fits_the_budget() -> None:
    """When the request would fit without the added user message but not with it, the final
    step leaves room for it: the request sent fits, and still ends with a user message."""
    history = [*[m for i in range(30) for m in turn(i, "r" * 400)], *_lost_every_call_last()]
    unbounded = _governor().govern(history)
    without = count_request(None, unbounded.messages[:-1], ())
    result = _governor(input_limit=without).govern(history)
    assert result.fits and result.tokens <= without
    assert result.messages[-1] == {"role": "user", "content": "(continue)"}
    assert result.messages[-2]["content"].startswith("[None of the 1 tool call(s)")
    _legal(result, budget=without)


def _without_and_with_the_user_message(history: list[Any]) -> tuple[int, int]:
    """The request tokens of `history` governed with no budget, without the "(continue)" the
    final step ends it with, and with it."""
    unbounded = _governor().govern(history)
    assert unbounded.messages[-1] == {"role": "user", "content": "(continue)"}
    return count_request(None, unbounded.messages[:-1], ()), unbounded.tokens


def _session_state(result: Any) -> GovernanceState:
    """The state `result` hands on, as a session line writes and reads it back."""
    state = GovernanceState.from_record(json.loads(json.dumps(result.state.to_record())))
    assert state is not None
    return state


def test_room_for_the_user_message_after_a_reply_left_last_is_made_by_the_budget_stages() -> None:
    """At every budget the history fits without the "(continue)" but not with it, the budget
    stages make the room (compacting older results, as one token less would), not the final
    step's snip: the request is the one governed for that much less, it fits, and a fresh
    governor given the state sends it too, then the same after the model answers."""
    history = [*[m for i in range(6) for m in turn(i, "r" * 3_000)], *_lost_every_call_last()]
    without, full = _without_and_with_the_user_message(history)
    room = full - without
    assert room > 0
    smaller = _governor(input_limit=without - 1).govern(history)
    assert smaller.report.entry("compact_results").changed  # type: ignore[union-attr]
    answered = [*history, say("It reads: two lines.")]
    for limit in range(without, full):
        session = _governor(input_limit=limit)
        sent = session.govern(history)
        assert sent.fits and sent.tokens <= limit, limit
        assert sent.messages[-1] == {"role": "user", "content": "(continue)"}
        assert sent.messages == _governor(input_limit=limit - room).govern(history).messages
        assert sent.messages == smaller.messages, limit
        final = sent.report.entry("final")
        assert final is not None and not any("snip_history" in d for d in final.details)
        _legal(sent, budget=limit)
        fresh = _governor(input_limit=limit)
        fresh.restore(_session_state(sent))
        assert fresh.govern(history).messages == sent.messages, limit
        later = session.govern(answered)
        fresh = _governor(input_limit=limit)
        fresh.restore(_session_state(sent))
        assert fresh.govern(answered).messages == later.messages, limit
        end = len(sent.messages) - 1
        assert later.messages[:end] == sent.messages[:end] and later.fits, limit


def test_a_history_that_fits_with_the_user_message_after_a_reply_left_last_is_not_cut() -> None:
    """With exactly the room for the "(continue)", nothing is compacted or cut."""
    history = [*[m for i in range(6) for m in turn(i, "r" * 3_000)], *_lost_every_call_last()]
    _, full = _without_and_with_the_user_message(history)
    sent = _governor(input_limit=full).govern(history)
    assert sent.tokens == full and sent.messages == _governor().govern(history).messages


def test_any_sequence_is_accepted() -> None:
    """A tuple of messages is governed like a list."""
    result = _governor().govern(tuple(turn(1)))
    assert result.messages == turn(1)


def test_build_governor_uses_the_builtins_and_the_workspace_store(tmp_path: Path) -> None:
    """`build_governor` offloads into the workspace cache with the config's limits."""
    governor = build_governor(
        Config(governance=GovernanceConfig(max_tool_result_chars=500)), tmp_path
    )
    result = governor.govern([user(), calls(call("c")), result_message("c", "x" * 5_000)])
    assert governor.stage_names() == list(BUILTIN_ORDER)
    assert list((tmp_path / ".nanobot" / "cache" / "tool-results").iterdir())
    _legal(result)


def result_message(call_id: str, content: str) -> Message:
    return result(call_id, content)


@pytest.fixture
def collecting() -> Any:
    """The garbage collector on, as a process starts, and on again after the test."""
    gc.enable()
    yield
    gc.enable()


def _watching(seen: list[bool]) -> Stage:
    def watch(messages: list[Any], ctx: Any) -> StageOutcome:
        seen.append(gc.isenabled())
        return StageOutcome.unchanged(messages)

    return Stage("watch_collector", watch)


def test_the_collector_is_paused_while_governing_and_on_again_after(collecting: None) -> None:
    """Stages run with the cyclic garbage collector paused; govern turns it back on."""
    seen: list[bool] = []
    _governor(_watching(seen)).govern(_dirty())
    assert seen == [False]
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off(collecting: None) -> None:
    """Govern never turns on a collector the caller had turned off."""
    gc.disable()
    _governor().govern(_dirty())
    assert not gc.isenabled()


def test_the_collector_is_on_again_when_a_history_is_refused(collecting: None) -> None:
    """A history govern refuses (a message holding itself) leaves the collector on."""
    looped: dict[str, Any] = {"role": "user", "content": "hi"}
    looped["extra"] = looped
    with pytest.raises(HistoryFormatError):
        _governor().govern([looped])
    assert gc.isenabled()


def test_the_collector_is_on_again_when_a_cancellation_ends_a_stage(collecting: None) -> None:
    """A cancellation raised in a stage passes through govern and leaves the collector on."""

    def interrupted(messages: list[Any], ctx: Any) -> StageOutcome:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        _governor(Stage("interrupted", interrupted)).govern(_dirty())
    assert gc.isenabled()


def test_a_second_call_while_one_runs_is_refused_at_once() -> None:
    """Two threads sharing one governor: the call made while another runs raises
    SessionLockedError at once, and the governor goes on as if it had not been made."""
    entered, release = threading.Event(), threading.Event()

    def hold(messages: list[Any], ctx: Any) -> StageOutcome:
        if threading.current_thread() is not threading.main_thread():
            entered.set()
            release.wait(10)
        return StageOutcome.unchanged(messages)

    governor = _governor(Stage("hold", hold))
    history = _dirty()
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(governor.govern(history)))
    worker.start()
    try:
        assert entered.wait(10)
        with pytest.raises(SessionLockedError, match="one call at a time"):
            governor.govern([user("another session")])
        with pytest.raises(SessionLockedError, match="one call at a time"):
            governor.restore(None)
    finally:
        release.set()
        worker.join(10)
    expected = _governor(Stage("hold", hold)).govern(history)
    assert results[0].messages == expected.messages
    assert results[0].state == expected.state
    assert governor.govern(history).messages == expected.messages


def test_a_stage_that_calls_its_own_governor_is_skipped() -> None:
    """A stage calling govern on the governor running it gets SessionLockedError: the stage is
    skipped as any stage that raises, and the call's result is that of the other stages."""
    governors: list[Governor] = []

    def again(messages: list[Any], ctx: Any) -> StageOutcome:
        governors[0].govern([user("nested")])
        return StageOutcome.unchanged(messages)

    governors.append(_governor(Stage("again", again)))
    history = _dirty()
    got = governors[0].govern(history)
    entry = got.report.entry("again")
    assert entry is not None and "SessionLockedError" in " ".join(entry.details)
    assert got.messages == _governor().govern(history).messages
    assert governors[0].govern(history).prefix.kept


def test_the_governor_is_free_again_however_a_call_ends() -> None:
    """A refused history, a cancellation and an unreadable argument all release the governor."""
    looped: dict[str, Any] = {"role": "user", "content": "hi"}
    looped["extra"] = looped

    def interrupted(messages: list[Any], ctx: Any) -> StageOutcome:
        if len(messages) > 1:
            raise asyncio.CancelledError
        return StageOutcome.unchanged(messages)

    governor = _governor(Stage("interrupted", interrupted))
    with pytest.raises(HistoryFormatError):
        governor.govern([looped])
    with pytest.raises(asyncio.CancelledError):
        governor.govern(_dirty())
    with pytest.raises(TypeError):
        governor.govern(42)  # type: ignore[arg-type]
    assert governor.govern([user()]).messages == [user()]


def test_a_stage_governing_with_another_governor_leaves_the_collector_paused(
    collecting: None,
) -> None:
    """A call inside another (a stage calling another governor) leaves the collector as the
    outer call paused it, even when the inner history is refused."""
    seen: list[bool] = []
    inner = _governor()
    looped: dict[str, Any] = {"role": "user", "content": "hi"}
    looped["extra"] = looped

    def nested(messages: list[Any], ctx: Any) -> StageOutcome:
        inner.govern(_dirty())
        seen.append(gc.isenabled())
        with pytest.raises(HistoryFormatError):
            inner.govern([looped])
        seen.append(gc.isenabled())
        return StageOutcome.unchanged(messages)

    _governor(Stage("nested", nested)).govern(_dirty())
    assert seen == [False, False]
    assert gc.isenabled()


@pytest.mark.parametrize("ending", ["raises", "refused"])
def test_a_collector_the_caller_turned_off_stays_off_however_a_call_ends(
    collecting: None, ending: str
) -> None:
    """A stage that raises, or a refused history, never turns on a collector left off."""

    def raising(messages: list[Any], ctx: Any) -> StageOutcome:
        raise ValueError("boom")

    looped: dict[str, Any] = {"role": "user", "content": "hi"}
    looped["extra"] = looped
    gc.disable()
    if ending == "raises":
        _governor(Stage("raising", raising)).govern(_dirty())
    else:
        with pytest.raises(HistoryFormatError):
            _governor().govern([looped])
    assert not gc.isenabled()
