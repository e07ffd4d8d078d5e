"""A session's governor across calls: the prefix sent stays while it fits, and survives a restart.

One governor governs a history that grows turn by turn, as an agent's does.
Every request must be legal and within budget, mostly extend the previous one
byte for byte, and equal what a fresh governor sends from the same history
and the recorded state.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nanobot_core.config import GovernanceConfig
from nanobot_core.governance import Stage, StageOutcome
from nanobot_core.governance.continuity import GovernanceState, Prefix, latest_state
from nanobot_core.governance.invariants import check_invariants
from nanobot_core.governance.stages.compact import COMPACT_PREFIX
from nanobot_core.governance.stages.snip import left_out_steps
from nanobot_core.governance.tokens import count_message
from tests.governance import builders
from tests.governance.builders import (
    DROPPED_BETWEEN_USER_MESSAGES,
    NAMELESS_NOTICE,
    NAMELESS_REPLY,
    agent_session,
)
from tests.governance.strategies import (
    GOVERNANCE_CONFIGS,
    build_builtin_governor,
    config_indices,
    dirty_requests,
)

SYSTEM = "You are a coding agent."


def _session(turns: int, seed: int = 3, *, one_task: bool = False) -> list[dict[str, Any]]:
    """An agent history: user turns (or one task) of calls with results of mixed sizes."""
    rnd = random.Random(seed)
    history: list[dict[str, Any]] = []
    for index in range(turns):
        if not one_task or index == 0:
            history.append(
                {"role": "user", "content": f"turn {index}: " + "look " * rnd.randint(2, 40)}
            )
        ids = [f"c{index}_{j}" for j in range(rnd.choice([1, 1, 2]))]
        history.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": i, "type": "function", "function": {"name": "grep", "arguments": "{}"}}
                    for i in ids
                ],
            }
        )
        for identifier in ids:
            size = rnd.choice([300, 1_500, 4_000]) if rnd.random() > 0.05 else 30_000
            history.append(
                {"role": "tool", "tool_call_id": identifier, "name": "grep", "content": "x" * size}
            )
        if not one_task:
            history.append({"role": "assistant", "content": "done " * rnd.randint(1, 20)})
    return history


def _ends(history: list[dict[str, Any]], *, one_task: bool) -> list[int]:
    """Where the agent calls the model: before each user message, or after each step's results."""
    if one_task:
        return [
            i + 1
            for i, m in enumerate(history)
            if m["role"] == "tool" and (i + 1 == len(history) or history[i + 1]["role"] != "tool")
        ]
    return [i for i, m in enumerate(history) if m["role"] == "user" and i] + [len(history)]


def _config(window: int) -> GovernanceConfig:
    return GovernanceConfig(context_window=window, max_output=0, safety_margin=0)


@pytest.mark.parametrize("one_task", [False, True], ids=["turns", "one-task"])
def test_a_growing_session_keeps_its_prefix_and_matches_a_fresh_governor(
    tmp_path: Path, one_task: bool
) -> None:
    """Every call is legal; most keep the prefix; a fresh governor with the state agrees."""
    history = _session(160, one_task=one_task)
    config = _config(12_000)
    governor = build_builtin_governor(config, tmp_path)
    state = GovernanceState()
    kept = changed = 0
    for end in _ends(history, one_task=one_task):
        part = history[:end]
        result = governor.govern(part, system=SYSTEM)
        assert result.fits
        assert check_invariants(result.messages, system=SYSTEM, budget=result.budget) == []
        fresh = build_builtin_governor(config, tmp_path)
        fresh.restore(state)
        assert fresh.govern(part, system=SYSTEM).messages == result.messages
        if result.prefix.kept:
            kept += 1
            assert result.prefix.changed_at is None
        else:
            changed += 1
            assert result.prefix.changed_at is not None and result.prefix.reason
        state = GovernanceState.from_record(json.loads(json.dumps(result.state.to_record())))
        assert state == result.state
    assert changed > 0  # the budget was reached: cuts happened
    assert kept >= 3 * changed


@pytest.mark.parametrize("one_task", [False, True], ids=["turns", "one-task"])
def test_the_compacted_copies_kept_are_those_of_the_view(tmp_path: Path, one_task: bool) -> None:
    """Across a long session a governor keeps the compacted copies of the results its view
    compacts, not one for every result compacted since the session began."""
    history = _session(240, one_task=one_task)
    governor = build_builtin_governor(_config(12_000), tmp_path)
    made: set[int] = set()
    for end in _ends(history, one_task=one_task):
        applied = governor.state  # what the call applies before the stages run
        governor.govern(history[:end], system=SYSTEM)
        copies = governor._continuity._compacted
        made |= set(copies)
        assert set(copies) <= {i for i in applied.compacted if i >= applied.start}
    assert len(made) > 2 * len(governor.state.compacted)  # cuts left compacted results behind


@pytest.mark.parametrize("one_task", [False, True], ids=["turns", "one-task"])
def test_after_a_cut_the_prefix_stays_while_the_request_fits(
    tmp_path: Path, one_task: bool
) -> None:
    """A cut goes down to the cut watermark; a later call that fits appended keeps the prefix."""
    history = _session(240, one_task=one_task)
    config = _config(12_000)
    governor = build_builtin_governor(config, tmp_path)
    previous, before, cuts, kept_after_cut = None, 0, 0, 0
    for end in _ends(history, one_task=one_task):
        result = governor.govern(history[:end], system=SYSTEM)
        if previous is not None:
            appended = sum(count_message(m) for m in history[before:end])
            if previous.tokens + appended <= result.budget:
                assert result.prefix.kept, result.prefix.reason
                kept_after_cut += cuts > 0
        if "cut further" in result.prefix.reason:
            cuts += 1
            assert result.tokens <= result.budget * config.low_watermark**2 + 1  # rounding
        previous, before = result, end
    assert cuts >= 2 and kept_after_cut >= 10 * cuts


def test_the_task_and_its_notice_survive_later_cuts(tmp_path: Path) -> None:
    """A single-task session keeps its task first, with one notice counting every step left out."""
    history = _session(200, one_task=True)
    governor = build_builtin_governor(_config(8_000), tmp_path)
    sent = governor.govern(history, system=SYSTEM).messages
    assert sent[0]["content"].startswith(history[0]["content"])
    steps_sent = sum(1 for m in sent if m["role"] == "assistant")
    assert left_out_steps(sent[0]) == 200 - steps_sent


def test_a_restarted_session_makes_the_same_cut(tmp_path: Path) -> None:
    """A new governor restored from the recorded line sends what the old one would have sent."""
    history = _session(120)
    ends = _ends(history, one_task=False)
    config = _config(10_000)
    running = build_builtin_governor(config, tmp_path)
    records: list[dict[str, Any]] = []
    for end in ends[:-10]:
        result = running.govern(history[:end], system=SYSTEM)
        if not records or GovernanceState.from_record(records[-1]) != result.state:
            records.append(result.state.to_record())
    restarted = build_builtin_governor(config, tmp_path)
    restarted.restore(latest_state(records))
    for end in ends[-10:]:
        a = running.govern(history[:end], system=SYSTEM)
        b = restarted.govern(history[:end], system=SYSTEM)
        assert a.messages == b.messages


def test_a_state_that_does_not_fit_the_history_is_ignored(tmp_path: Path) -> None:
    """A state longer than the history, or pointing at the wrong messages, is not applied."""
    history = _session(10)
    config = _config(200_000)
    plain = build_builtin_governor(config, tmp_path).govern(history, system=SYSTEM).messages
    for state in (
        GovernanceState(start=4, length=len(history) + 5),
        GovernanceState(start=1, length=3),  # messages[1] is not a user message
        GovernanceState(compacted=(0,), length=3),
        GovernanceState(start=0, steps_from=len(history) + 3, length=3),
        GovernanceState(start=0, steps_from=0, length=3),  # no step can start at the task
    ):
        governor = build_builtin_governor(config, tmp_path)
        governor.restore(state)
        assert governor.govern(history, system=SYSTEM).messages == plain


def test_another_history_on_the_same_governor_is_governed_afresh(tmp_path: Path) -> None:
    """A governor handed an unrelated history does not carry the old session's cut into it."""
    config = _config(6_000)
    governor = build_builtin_governor(config, tmp_path)
    first = _session(80, seed=1)
    governor.govern(first, system=SYSTEM)
    assert governor.state.start > 0
    other = _session(80, seed=2)
    fresh = build_builtin_governor(config, tmp_path).govern(other, system=SYSTEM)
    assert governor.govern(other, system=SYSTEM).messages == fresh.messages


def _turns_with_fillers(filler: Callable[[int], Any]) -> list[Any]:
    """Thirty user turns, each with `filler(turn)` between the question and the answer."""
    history: list[Any] = []
    for turn in range(30):
        history += [
            {"role": "user", "content": f"turn {turn} " + "w " * 200},
            filler(turn),
            {"role": "assistant", "content": f"answer {turn} " + "a " * 200},
        ]
    return history


def _with_call_without_id(history: list[Any]) -> list[Any]:
    """`history` and a turn whose call has no id: the id the repairs make depends on its index."""
    call = {"type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    return [
        *history,
        {"role": "user", "content": "now read it"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "text"},
    ]


def test_a_new_message_at_a_freed_ones_address_gets_no_stale_view_shift(tmp_path: Path) -> None:
    """What a session's cut leaves out is counted again for a new history whose first message
    left out has the id a freed message of an earlier history had (ids are reused)."""
    config = _config(3_000)
    governor = build_builtin_governor(config, tmp_path)
    # Session A: non-messages (which the repairs drop) in the part its cut leaves out.
    junk = _turns_with_fillers(lambda turn: {"note": turn})
    governor.govern(copy.deepcopy(junk), system=SYSTEM)
    grown = _with_call_without_id(copy.deepcopy(junk))
    governor.govern(grown, system=SYSTEM)  # the cut applied: what it leaves out is counted
    ((start, _),) = governor._continuity.left_out
    freed = id(grown[start])
    del grown
    governor.govern([{"role": "user", "content": "another session"}], system=SYSTEM)
    # Session B: the same shape, assistant notes in place of the non-messages, and its first
    # message made where A's was, if that memory is free (held, a new dict is never there).
    text = "turn 0 " + "w " * 200
    kept = []
    for _ in range(10_000):
        first = {"role": "user", "content": text}
        if id(first) == freed:
            break
        kept.append(first)
    history = _turns_with_fillers(lambda turn: {"role": "assistant", "content": f"note {turn}"})
    history[0] = first
    fresh = build_builtin_governor(config, tmp_path)
    for step in (history, _with_call_without_id(history)):
        sent = governor.govern(step, system=SYSTEM).messages
        assert sent == fresh.govern(copy.deepcopy(step), system=SYSTEM).messages


@pytest.mark.parametrize(
    "record",
    [
        {"role": "user", "content": "hi"},
        {"_meta": {"kind": "usage", "input": 3}},
        {"_meta": {"kind": "governance", "start": -1, "compacted": [], "length": 2}},
        {"_meta": {"kind": "governance", "start": 1, "compacted": ["x"], "length": 2}},
        {"_meta": {"kind": "governance", "start": "1", "compacted": [], "length": 2}},
        {"_meta": "governance"},
        {
            "_meta": {
                "kind": "governance",
                "start": 1,
                "compacted": [],
                "steps_left_out": 3,
                "length": 9,
            }
        },
        {
            "_meta": {
                "kind": "governance",
                "start": 1,
                "steps_from": 4,
                "compacted": [],
                "steps_left_out": 0,
                "length": 9,
            }
        },
        {
            "_meta": {
                "kind": "governance",
                "start": 1,
                "steps_from": 4,
                "compacted": [],
                "steps_left_out": "1",
                "length": 9,
            }
        },
    ],
)
def test_lines_that_are_not_governance_records_give_no_state(record: dict[str, Any]) -> None:
    """Only a well-formed governance record is read as a state."""
    assert GovernanceState.from_record(record) is None


def test_a_record_from_before_the_notice_count_is_read() -> None:
    """A line without ``steps_left_out`` gives a state whose notice counts the history's steps."""
    meta = {"kind": "governance", "start": 1, "steps_from": 6, "compacted": [], "length": 9}
    record = {"_meta": meta}
    state = GovernanceState.from_record(record)
    assert state == GovernanceState(1, 6, (), 9, None)
    assert GovernanceState.from_record(state.to_record()) == state


def test_the_first_call_reports_nothing_sent_before(tmp_path: Path) -> None:
    """A governor's first result says the prefix is kept, with nothing to compare."""
    result = build_builtin_governor(_config(100_000), tmp_path).govern(_session(3))
    assert result.prefix.kept and result.prefix.changed_at is None
    assert result.prefix.to_json() == {
        "kept": True,
        "changed_at": None,
        "reason": "first request: nothing was sent before",
    }


def _chat(words: list[str]) -> list[dict[str, Any]]:
    """A clean chat of `words`, one message each, user and assistant in turn."""
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": word}
        for i, word in enumerate(words)
    ]


@settings(
    max_examples=200,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    before=st.lists(st.sampled_from(["yes", "no", "maybe"]), min_size=1, max_size=6),
    after=st.lists(st.sampled_from(["yes", "no", "maybe"]), min_size=1, max_size=6),
)
def test_the_prefix_names_the_first_message_that_differs_from_what_was_sent(
    tmp_path: Path, before: list[str], after: list[str]
) -> None:
    """After one clean history, another (decoded again) keeps the prefix when it starts with what
    was sent, else the prefix names its first message that differs, or the shorter length."""
    governor = build_builtin_governor(_config(100_000), tmp_path)
    governor.govern(_chat(before))
    prefix = governor.govern(json.loads(json.dumps(_chat(after)))).prefix
    if after[: len(before)] == before:
        assert prefix.kept and prefix.changed_at is None
        return
    differs = [i for i, (old, new) in enumerate(zip(before, after, strict=False)) if old != new]
    changed_at = differs[0] if differs else min(len(before), len(after))
    assert not prefix.kept
    assert prefix.changed_at == changed_at
    assert prefix.reason == f"messages[{changed_at}] differs from what was sent before"


def test_a_governor_handed_one_history_after_another_learns_each_and_continues_the_last(
    tmp_path: Path,
) -> None:
    """Unrelated histories in turn each change the prefix at their first message and are
    learnt at their own length, and the one appended to next keeps its prefix."""
    governor = build_builtin_governor(_config(100_000), tmp_path)
    governor.govern(_chat(["yes", "no", "maybe"]))
    other = _chat(["no", "yes"])
    result = governor.govern(other)
    assert result.prefix == Prefix(False, 0, "messages[0] differs from what was sent before")
    assert result.state == governor.state == GovernanceState(length=2)
    longer = governor.govern([*other, *_chat(["again"])])
    assert longer.prefix.kept and longer.prefix.changed_at is None
    assert longer.state == GovernanceState(length=3)


@pytest.mark.parametrize("extra", [(), ("noop",)], ids=["built-ins", "with-a-plugin-stage"])
def test_a_long_dirty_session_matches_a_fresh_governor_on_every_call(
    tmp_path: Path, extra: tuple[str, ...]
) -> None:
    """What one governor learns across calls never changes what it sends, dirt and all."""
    history = agent_session(260, seed=11)
    ends = [i for i, m in enumerate(history) if isinstance(m, dict) and m.get("role") == "user"]
    stages = [Stage(name, lambda m, c: StageOutcome.unchanged(m)) for name in extra]
    config = _config(24_000)
    governor = build_builtin_governor(config, tmp_path, stages)
    state = GovernanceState()
    checked = 0
    for end in [*ends[1:], len(history)]:
        part = history[:end]
        result = governor.govern(part, system=SYSTEM)
        if (end > 600 and checked < 40) or end == len(history):
            fresh = build_builtin_governor(config, tmp_path, stages)
            fresh.restore(state)
            assert fresh.govern(part, system=SYSTEM).messages == result.messages, end
            checked += 1
        state = result.state
    assert len(history) > 2_000 and checked > 20


def test_a_history_decoded_again_is_governed_as_the_same_session(tmp_path: Path) -> None:
    """Equal copies of what was seen keep the session: the same messages as with the originals."""
    history = agent_session(200, seed=5)
    config = _config(16_000)
    governor = build_builtin_governor(config, tmp_path)
    twin = build_builtin_governor(config, tmp_path)
    ends = [i for i, m in enumerate(history) if isinstance(m, dict) and m.get("role") == "user"]
    for end in [*ends[1:], len(history)][::5]:
        part = history[:end]
        copied = json.loads(json.dumps(part))  # what a store that decodes every load hands out
        sent = governor.govern(part, system=SYSTEM)
        again = twin.govern(copied, system=SYSTEM)
        assert again.messages == sent.messages
        assert again.state == sent.state
    changed = [dict(m) if isinstance(m, dict) else m for m in history]
    changed[3] = {"role": "user", "content": "another history altogether"}
    fresh = build_builtin_governor(config, tmp_path)
    assert (
        twin.govern(changed, system=SYSTEM).messages
        == fresh.govern(changed, system=SYSTEM).messages
    )


def _reused_ids(turns: int, seed: int) -> list[dict[str, Any]]:
    """Turns whose every call is "call_0" (as some servers number them), with repeated users."""
    rnd = random.Random(seed)
    history: list[dict[str, Any]] = []
    for turn in range(turns):
        history.append({"role": "user", "content": f"turn {turn} " + "u" * rnd.randint(1, 200)})
        if rnd.random() < 0.3:
            history.append({"role": "user", "content": "again"})
        for _ in range(rnd.randint(1, 3)):
            call = {"id": "call_0", "type": "function", "function": {"name": "read"}}
            call["function"]["arguments"] = '{"p": 1}' if rnd.random() < 0.8 else "{bad"
            history.append({"role": "assistant", "content": None, "tool_calls": [call]})
            history.append(
                {"role": "tool", "tool_call_id": "call_0", "content": "x" * rnd.randint(100, 3_000)}
            )
        history.append({"role": "assistant", "content": "done " * rnd.randint(1, 20)})
    return history


def _assert_read_back_where_sent(
    history: list[dict[str, Any]], result: Any, *, some_compacted: bool = True
) -> None:
    """The state starts where the request does, and names as compacted the results it sent so."""
    first = result.messages[0]["content"].split("\n\n")[0]
    start = next(i for i, m in enumerate(history) if m.get("content") == first)
    assert result.state.start == start > 0
    sent = [m for m in result.messages if m.get("role") == "tool"]
    compacted = [m for m in sent if m["content"].startswith(COMPACT_PREFIX)]
    assert len(result.state.compacted) == len(compacted)
    assert compacted or not some_compacted
    assert all(history[i]["role"] == "tool" and i > start for i in result.state.compacted)


def test_results_compacted_under_reused_call_ids_are_read_back_where_they_are(
    tmp_path: Path,
) -> None:
    """With one call id in every turn, the state names the results sent, not older namesakes."""
    # This seed merges the user messages the request starts with: nothing before the
    # first compacted result is the very message of the history.
    history = _reused_ids(40, 8)
    governor = build_builtin_governor(GovernanceConfig(input_limit=3_000), tmp_path)
    result = governor.govern(history, system=SYSTEM)
    _assert_read_back_where_sent(history, result)
    # A fresh governor given that state sends the same messages.
    again = build_builtin_governor(GovernanceConfig(input_limit=3_000), tmp_path)
    again.restore(result.state)
    assert again.govern(history, system=SYSTEM).messages == result.messages


def _retold(messages: list[Any], ctx: Any) -> StageOutcome:
    """Per message: a plugin stage that rewrites every tool result (a new dict)."""
    (message,) = messages
    if message.get("role") != "tool":
        return StageOutcome.unchanged(messages)
    return StageOutcome([{**message, "content": message["content"] + "."}], changed=True)


def test_results_a_plugin_stage_rewrote_and_compacted_are_read_back_where_they_are(
    tmp_path: Path,
) -> None:
    """A result made by a per-message plugin stage is read back through it, ids reused or not."""
    history = _reused_ids(40, 8)
    retold = Stage("retold", _retold, per_message=True)
    config = GovernanceConfig(input_limit=3_000)
    result = build_builtin_governor(config, tmp_path, [retold]).govern(history, system=SYSTEM)
    _assert_read_back_where_sent(history, result)


def test_a_stage_that_hands_back_an_earlier_replacement_cannot_hang_the_read_back(
    tmp_path: Path,
) -> None:
    """Replacements that lead back to one another end the walk: the call returns, legal."""
    first: dict[str, dict[str, Any]] = {}
    second: dict[str, dict[str, Any]] = {}

    def stage(name: str, step: Any) -> Stage:
        def run(messages: list[Any], ctx: Any) -> StageOutcome:
            (message,) = messages
            if message.get("role") != "tool":
                return StageOutcome.unchanged(messages)
            return StageOutcome([step(message)], changed=True)

        return Stage(name, run, per_message=True)

    def made(cache: dict[str, dict[str, Any]], message: dict[str, Any], mark: str) -> Any:
        text = message["content"] + mark
        return cache.setdefault(message["tool_call_id"], {**message, "content": text})

    # a: result -> X; b: X -> Y; c: Y -> the very X of a, so X and Y each stand for the other.
    stages = [
        stage("a", lambda m: made(first, m, "x")),
        stage("b", lambda m: made(second, m, "y")),
        stage("c", lambda m: first[m["tool_call_id"]]),
    ]
    config = GovernanceConfig(input_limit=6_000)
    result = build_builtin_governor(config, tmp_path, stages).govern(_session(40), system=SYSTEM)
    assert result.fits and result.report.entry("compact_results").changed
    assert check_invariants(result.messages, system=SYSTEM, budget=6_000) == []


def _retold_all(messages: list[Any], ctx: Any) -> StageOutcome:
    """A whole-list plugin stage that rewrites every tool result (new dicts, no origin told)."""
    out = [{**m, "content": m["content"] + "."} if m.get("role") == "tool" else m for m in messages]
    return StageOutcome(out, changed=True)


@pytest.mark.parametrize("seed", range(40))
def test_results_a_whole_list_stage_rewrote_are_read_back_where_they_are(
    tmp_path: Path, seed: int
) -> None:
    """Under reused ids, results sent before any message found are matched from the next one."""
    history = _reused_ids(40, seed)
    retold = Stage("retold", _retold_all, phase="budget", before="compact_results")
    config = GovernanceConfig(input_limit=3_000)
    result = build_builtin_governor(config, tmp_path, [retold]).govern(history, system=SYSTEM)
    _assert_read_back_where_sent(history, result, some_compacted=False)


def test_a_placeholder_result_is_read_back_as_no_result_of_the_history(tmp_path: Path) -> None:
    """A result backfill_results added is matched to no namesake, so the start stays its turn's."""
    history = _placeholder_history()
    start = len(history) - 4
    config = GovernanceConfig(input_limit=1_000)
    result = build_builtin_governor(config, tmp_path).govern(history, system=SYSTEM)
    assert result.report.entry("backfill_results").changed
    assert result.messages[0]["content"].startswith("one more thing")
    assert result.state.start == start


def _placeholder_history() -> list[dict[str, Any]]:
    """Reused call ids, and a newest turn whose repaired call gets a placeholder result."""
    history = _reused_ids(30, 8)
    broken = {"id": "call_0", "type": "function", "function": {"name": "read", "arguments": "{"}}
    history += [
        {"role": "user", "content": "one more thing"},
        {"role": "user", "content": "and quickly"},  # merged: no user message sent as it was
        {"role": "assistant", "content": None, "tool_calls": [broken]},  # repaired, unanswered
        {"role": "assistant", "content": "done"},
    ]
    return history


@pytest.mark.parametrize("limit", [1_000, 3_000])
def test_a_first_call_state_read_late_is_the_one_read_at_once(tmp_path: Path, limit: int) -> None:
    """A first call's decisions, asked for once the caller and governor moved on, are its own."""
    history = _placeholder_history()
    config = GovernanceConfig(input_limit=limit)
    early = build_builtin_governor(config, tmp_path).govern(history, system=SYSTEM)
    at_once = early.state  # asked for at once
    assert at_once.start > 0
    governor = build_builtin_governor(config, tmp_path)
    late = governor.govern(history, system=SYSTEM)
    # The caller's list grows, and the same governor starts afresh and governs another
    # history (a new run, whose stages make other messages and forget what the first
    # run's were made from) before anyone asks.
    history.extend(_reused_ids(5, 9))
    governor.restore(None)
    governor.govern(_reused_ids(50, 11), system=SYSTEM)
    assert late.state == at_once
    assert late == early  # the results compare by their decisions
    assert late == attrs.evolve(late, state=at_once)  # read back or given: the same
    assert repr(at_once) in repr(late)


def test_a_call_that_keeps_an_earlier_cut_says_it_changed_the_history(tmp_path: Path) -> None:
    """A later call whose history, with the cut and compactions sent before, is clean and
    fits reports them kept, and the result says the messages differ from the input."""
    history = [message for index in range(40) for message in builders.turn(index, "x" * 400)]
    governor = build_builtin_governor(GovernanceConfig(input_limit=3_000), tmp_path)
    assert governor.govern(history).state.start > 0
    history += [builders.user("more"), builders.say("ok")]
    again = governor.govern(history)
    assert again.messages is not history
    kept = [entry.stage for entry in again.report if entry.changed]
    assert kept == ["compact_results", "snip_history"]
    assert again.changed and again.report.changed


def test_the_next_call_continues_from_a_first_call_state_nobody_asked_for(tmp_path: Path) -> None:
    """A session whose first state is never read sends what one that read it at once sends."""
    history = _session(60)
    config = _config(12_000)
    lazy, eager = (build_builtin_governor(config, tmp_path) for _ in range(2))
    first = eager.govern(history[:-4], system=SYSTEM)
    assert first.state == eager.state  # read at once
    lazy.govern(history[:-4], system=SYSTEM)
    assert (
        lazy.govern(history, system=SYSTEM).messages
        == eager.govern(history, system=SYSTEM).messages
    )
    assert lazy.state == eager.state


@settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    seed=st.integers(0, 10_000),
    turns=st.integers(5, 40),
    limit=st.sampled_from([1_000, 3_000]),
    calls=st.integers(2, 5),
)
def test_a_session_is_the_same_whether_its_first_state_is_read_or_not(
    tmp_path: Path, seed: int, turns: int, limit: int, calls: int
) -> None:
    """Reading a first call's state at once or never, every later call sends and decides alike."""
    history = _reused_ids(turns, seed)
    config = GovernanceConfig(input_limit=limit)
    eager, lazy = (build_builtin_governor(config, tmp_path) for _ in range(2))
    ends = sorted({max(1, len(history) * k // calls) for k in range(1, calls + 1)})
    first = eager.govern(history[: ends[0]], system=SYSTEM)
    assert first.state == eager.state  # read at once
    lazy.govern(history[: ends[0]], system=SYSTEM)  # never read
    for end in ends[1:]:
        sent = eager.govern(history[:end], system=SYSTEM)
        again = lazy.govern(history[:end], system=SYSTEM)
        assert again.messages == sent.messages
        assert again.prefix == sent.prefix
        assert again.state == sent.state


def _task_after_a_repair(steps: int, before: dict[str, Any]) -> list[dict[str, Any]]:
    """One task, then `before` (a message a repair drops), then `steps` steps of one call each
    (their arguments long enough that compacting the results cannot make them all fit)."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "fix the build " * 5}, before]
    arguments = json.dumps({"pattern": "y" * 300})
    for index in range(steps):
        function = {"name": "grep", "arguments": arguments}
        call = {"id": f"c{index}", "type": "function", "function": function}
        history.append({"role": "assistant", "content": None, "tool_calls": [call]})
        history.append({"role": "tool", "tool_call_id": f"c{index}", "content": "x" * 900})
    return history


def _assert_sent_again(
    history: list[Any],
    config: GovernanceConfig,
    governor: Any,
    first: Any,
    workspace: Path,
    stages: tuple[Stage, ...] = (),
) -> None:
    """The next call on the same history, and a governor (with the same plugin `stages`)
    restored from the recorded line, send what `first` sent, the prefix kept."""
    again = governor.govern(history, system=SYSTEM)
    assert again.messages == first.messages
    assert again.prefix.kept
    restarted = build_builtin_governor(config, workspace, stages)
    restarted.restore(GovernanceState.from_record(json.loads(json.dumps(first.state.to_record()))))
    assert restarted.govern(history, system=SYSTEM).messages == first.messages


_DROPPED_BEFORE_THE_STEPS = [
    pytest.param({"role": "tool", "tool_call_id": "gone", "content": "stale"}, id="orphan-result"),
    pytest.param(
        {"role": "assistant", "content": "[Previous assistant message omitted.]"}, id="placeholder"
    ),
    pytest.param({"role": "critic", "content": "looks wrong"}, id="unknown-role"),
]


@pytest.mark.parametrize("before", _DROPPED_BEFORE_THE_STEPS)
def test_a_kept_step_cut_sends_the_notice_it_sent_first(
    tmp_path: Path, before: dict[str, Any]
) -> None:
    """The notice counts the steps of the repaired turn, on the call that cut and on the next ones,
    after a restart too: a message a repair drops before the steps is no step."""
    history = _task_after_a_repair(30, before)
    config = _config(3_000)
    governor = build_builtin_governor(config, tmp_path)
    first = governor.govern(history, system=SYSTEM)
    sent_steps = sum(1 for m in first.messages if m["role"] == "assistant")
    assert left_out_steps(first.messages[0]) == 30 - sent_steps > 0
    _assert_sent_again(history, config, governor, first, tmp_path)


def test_a_kept_step_cut_counts_a_reply_left_without_its_nameless_call_as_a_step(
    tmp_path: Path,
) -> None:
    """A reply whose one call had no name stays in the turn as its notice, so it is a step: the
    step-cut notice counts it, and the next call and a restart send the same request."""
    history = _task_after_a_repair(30, NAMELESS_REPLY)
    config = _config(3_000)
    governor = build_builtin_governor(config, tmp_path)
    first = governor.govern(history, system=SYSTEM)
    sent_steps = sum(1 for m in first.messages if m["role"] == "assistant")
    assert left_out_steps(first.messages[0]) == 31 - sent_steps > 0
    _assert_sent_again(history, config, governor, first, tmp_path)


def test_a_reply_left_without_its_nameless_call_is_sent_noticed_on_every_call(
    tmp_path: Path,
) -> None:
    """The notice of a reply whose call had no name is sent on the call that made it and, the
    same bytes, as part of the kept prefix of every later call: no two asks are merged."""
    history = [{"role": "user", "content": "first ask"}, NAMELESS_REPLY]
    history += [{"role": "user", "content": "second ask"}]
    governor = build_builtin_governor(_config(100_000), tmp_path)
    first = governor.govern(history, system=SYSTEM)
    assert first.messages == [
        {"role": "user", "content": "first ask"},
        {"role": "assistant", "content": NAMELESS_NOTICE},
        {"role": "user", "content": "second ask"},
    ]
    function = {"name": "grep", "arguments": "{}"}
    step = [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "function": function}]},
        {"role": "tool", "tool_call_id": "a", "content": "found a"},
    ]
    later = governor.govern([*history, *step], system=SYSTEM)
    assert later.prefix.kept
    assert later.messages[: len(first.messages)] == first.messages
    notices = [m for m in later.messages if NAMELESS_NOTICE in str(m.get("content"))]
    assert len(notices) == 1


@pytest.mark.parametrize("window", [100_000, 3_000], ids=["roomy", "cut-between-steps"])
def test_a_newest_reply_left_without_its_nameless_call_is_sent_before_a_user_message(
    tmp_path: Path, window: int
) -> None:
    """A history ending with a reply whose one call had no name, answered: the request ends
    with a "(continue)" user message after the reply's notice; the same history again and a
    restart send the same, and the next call (the model answered) sends what was sent up to
    that user message, then what the history goes on with, as a fresh governor does."""
    answered = {"role": "tool", "tool_call_id": "nameless", "content": "no tool by that name"}
    orphan = {"role": "tool", "tool_call_id": "gone", "content": "stale"}
    history = [*_task_after_a_repair(30, orphan), NAMELESS_REPLY, answered]
    config = _config(window)
    governor = build_builtin_governor(config, tmp_path)
    first = governor.govern(history, system=SYSTEM)
    assert first.fits
    assert first.messages[-2:] == [
        {"role": "assistant", "content": NAMELESS_NOTICE},
        {"role": "user", "content": "(continue)"},
    ]
    _assert_sent_again(history, config, governor, first, tmp_path)
    function = {"name": "grep", "arguments": "{}"}
    step = [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "function": function}]},
        {"role": "tool", "tool_call_id": "a", "content": "found a"},
    ]
    later = governor.govern([*history, *step], system=SYSTEM)
    end = len(first.messages) - 1
    assert later.messages[:end] == first.messages[:end]
    assert later.messages[end]["role"] == "assistant" and later.messages[-1]["role"] == "tool"
    assert not later.prefix.kept and later.prefix.changed_at == end
    restarted = build_builtin_governor(config, tmp_path)
    restarted.restore(GovernanceState.from_record(json.loads(json.dumps(first.state.to_record()))))
    assert restarted.govern([*history, *step], system=SYSTEM).messages == later.messages


@pytest.mark.parametrize("between", DROPPED_BETWEEN_USER_MESSAGES)
def test_user_messages_merged_across_a_dropped_entry_stay_sent(
    tmp_path: Path, between: Any
) -> None:
    """Two user messages a repair made adjacent are merged and sent on every later call: the
    state starts the history at the first of them, not at the second."""

    def step(name: str) -> list[dict[str, Any]]:
        function = {"name": "grep", "arguments": "{}"}
        call = {"id": name, "type": "function", "function": function}
        return [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": name, "content": f"found {name}"},
        ]

    history = [{"role": "user", "content": "first ask"}, between]
    governor = build_builtin_governor(_config(100_000), tmp_path)
    governor.govern(history, system=SYSTEM)  # the session so far: an ask left unanswered
    history = [*history, {"role": "user", "content": "second ask"}, *step("a")]
    first = governor.govern(history, system=SYSTEM)
    assert first.messages[0]["content"] == "first ask\n\nsecond ask"
    assert governor.state.start == 0
    grown = [*history, {"role": "user", "content": "third ask"}, *step("b")]
    later = governor.govern(grown, system=SYSTEM)
    assert later.prefix.kept
    assert later.messages[: len(first.messages)] == first.messages


def _edit(draw: st.DrawFn, history: list[Any], turn: int) -> None:
    """One change an agent's loop makes to its history list in place, between two calls."""
    kind = draw(st.sampled_from(["step", "step", "user", "replace", "pop"]))
    if kind == "step":
        name = f"edit{turn}"
        function = {"name": "grep", "arguments": json.dumps({"q": "y" * draw(st.integers(0, 400))})}
        history.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": name, "type": "function", "function": function}],
            }
        )
        history.append(
            {"role": "tool", "tool_call_id": name, "content": "r" * draw(st.integers(1, 9_000))}
        )
    elif kind == "user":
        history.append({"role": "user", "content": f"and then {turn}"})
    elif kind == "replace" and history:
        index = draw(st.integers(0, len(history) - 1))
        entry = history[index]
        history[index] = {**entry, "content": f"edited {turn}"} if isinstance(entry, dict) else None
    elif history:
        history.pop()


@st.composite
def _in_place_sessions(draw: st.DrawFn) -> tuple[Any, int, list[list[Any]]]:
    """A dirty real history, a budget, and the lists an agent hands over call after call."""
    request = draw(dirty_requests())
    history = list(request.messages)
    lists = [list(history)]
    for turn in range(draw(st.integers(1, 6))):
        _edit(draw, history, turn)
        lists.append(list(history))
    return request, draw(config_indices()), lists


@settings(
    max_examples=500,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(session=_in_place_sessions())
def test_a_list_edited_in_place_between_calls_is_governed_as_a_new_one(
    tmp_path_factory: pytest.TempPathFactory, session: tuple[Any, int, list[list[Any]]]
) -> None:
    """A governor handed one list the caller changes in place (appends, edits, removals)
    between calls, whose results the caller edits too, sends what one handed new lists sends."""
    request, config_index, lists = session
    workspace = tmp_path_factory.mktemp("in-place")
    config = GOVERNANCE_CONFIGS[config_index]
    in_place = build_builtin_governor(config, workspace)
    fresh_lists = build_builtin_governor(config, workspace)
    edited: list[Any] = []
    for contents in lists:
        edited[:] = contents
        mine = in_place.govern(edited, system=request.system, tools=request.tools)
        theirs = fresh_lists.govern(list(contents), system=request.system, tools=request.tools)
        assert mine.messages == theirs.messages
        assert mine.prefix == theirs.prefix
        assert mine.state == theirs.state
        if mine.messages is not edited:
            mine.messages.append({"role": "user", "content": "noise the caller added"})


@pytest.mark.parametrize("between", DROPPED_BETWEEN_USER_MESSAGES)
def test_a_task_merged_across_a_dropped_entry_keeps_its_notice_and_both_asks(
    tmp_path: Path, between: Any
) -> None:
    """A step cut in a turn whose user messages a repair made adjacent sends the merged task,
    noticed, on the call that cut, on the next one and after a restart."""
    steps = _task_after_a_repair(30, {"role": "user", "content": "second ask"})
    history = [{"role": "user", "content": "first ask " * 5}, between, *steps[1:]]
    config = _config(3_000)
    governor = build_builtin_governor(config, tmp_path)
    first = governor.govern(history, system=SYSTEM)
    task = first.messages[0]["content"]
    assert (
        task.startswith("first ask") and "second ask" in task and left_out_steps(first.messages[0])
    )
    _assert_sent_again(history, config, governor, first, tmp_path)


def test_results_renamed_for_a_repeated_call_id_and_compacted_stay_compacted(
    tmp_path: Path,
) -> None:
    """Two results of one message's calls that share an id (the repair renames the second)
    are both read back as compacted, so the next call sends them compacted again."""
    function = {"name": "grep", "arguments": "{}"}
    calls = [{"id": "twice", "type": "function", "function": function} for _ in range(2)]
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "look twice"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "twice", "content": "a" * 6_000},
        {"role": "tool", "tool_call_id": "twice", "content": "b" * 6_000},
        {"role": "assistant", "content": "done"},
    ]
    for turn in range(4):  # results of their own, newer than the two: those are kept whole
        history.append({"role": "user", "content": f"more {turn}"})
        history += _task_after_a_repair(1, {"role": "assistant", "content": "ok"})[2:]
    governor = build_builtin_governor(_config(3_000), tmp_path)
    first = governor.govern(history, system=SYSTEM)
    assert [m["content"].startswith(COMPACT_PREFIX) for m in first.messages[2:4]] == [True, True]
    assert governor.state.compacted == (2, 3)
    again = governor.govern(history, system=SYSTEM)
    assert again.messages == first.messages
    assert again.prefix.kept


@pytest.mark.parametrize("window", [3_000, 6_000])
def test_an_id_made_for_a_call_without_one_stays_after_the_cut(tmp_path: Path, window: int) -> None:
    """A call with an empty id gets the same made-up id on the call that cuts and on the
    next ones, which start from the cut: it counts the entries the cut left out."""
    history: list[dict[str, Any]] = []
    for turn in range(30):
        history.append({"role": "user", "content": f"turn {turn} " + "words " * 60})
        history.append({"role": "assistant", "content": "answer " * 60})
    call = {"id": "", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
    history.append({"role": "user", "content": "call it"})
    history.append({"role": "assistant", "content": None, "tool_calls": [call]})
    history.append({"role": "tool", "tool_call_id": "", "content": "found"})
    governor = build_builtin_governor(_config(window), tmp_path)
    first = governor.govern(history, system=SYSTEM)
    assert governor.state.start > 0
    again = governor.govern(history, system=SYSTEM)
    assert again.messages == first.messages
    assert again.prefix.kept
    restarted = build_builtin_governor(_config(window), tmp_path)
    restarted.restore(first.state)
    assert restarted.govern(history, system=SYSTEM).messages == first.messages


_SECRET = "sk-live-0123456789abcdef"


def _redacted(messages: list[Any], ctx: Any) -> StageOutcome:
    """Per message: a plugin stage that removes the secret from tool results, as redaction does."""
    (message,) = messages
    content = message.get("content")
    if message.get("role") != "tool" or not isinstance(content, str) or _SECRET not in content:
        return StageOutcome.unchanged(messages)
    return StageOutcome([{**message, "content": content.replace(_SECRET, "[gone]")}], changed=True)


def _files_holding(root: Path, text: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and text in p.read_text(errors="replace")]


def _logs_with_a_secret() -> list[dict[str, Any]]:
    """Thirty steps of one call each; the first result is long and holds the secret."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "look at the logs"}]
    for index in range(30):
        text = f"token={_SECRET}\n" * 200 if index == 0 else "y " * 900
        call = {
            "id": f"c{index}",
            "type": "function",
            "function": {"name": "exec", "arguments": "{}"},
        }
        history += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{index}", "name": "exec", "content": text},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": f"next {index}"},
        ]
    return history


def test_a_redacted_offloaded_result_stays_redacted_once_compacted(tmp_path: Path) -> None:
    """Compacted on a later call, an offloaded result points at what was offloaded, redacted."""
    history = _logs_with_a_secret()
    redact = Stage("redact", _redacted, per_message=True)
    config = GovernanceConfig(input_limit=6_000, max_tool_result_chars=1_000)
    governor = build_builtin_governor(config, tmp_path, [redact])
    first = governor.govern(history, system=SYSTEM)
    compacted = first.messages[2]["content"]
    assert compacted.startswith(COMPACT_PREFIX) and "read_file(path=" in compacted
    grown = [*history, {"role": "assistant", "content": "more"}, {"role": "user", "content": "go"}]
    second = governor.govern(grown, system=SYSTEM)
    assert second.messages[: len(first.messages)] == first.messages
    assert second.prefix.kept
    restarted = build_builtin_governor(config, tmp_path, [redact])
    restarted.restore(GovernanceState.from_record(json.loads(json.dumps(first.state.to_record()))))
    assert restarted.govern(history, system=SYSTEM).messages == first.messages
    assert _SECRET not in json.dumps(second.messages)
    assert _files_holding(tmp_path, _SECRET) == []
    assert _files_holding(tmp_path, "token=[gone]")  # what was offloaded, and pointed at


def test_a_compacted_result_named_with_a_lone_surrogate_is_sent_again_as_it_was(
    tmp_path: Path,
) -> None:
    """The notice names the tool as the repairs leave it, on the call that compacts and after."""
    history = _session(40)
    for message in history:
        if message["role"] == "tool":
            message["name"] = "\ud83dgrep"
    config = _config(6_000)
    governor = build_builtin_governor(config, tmp_path)
    first = governor.govern(history, system=SYSTEM)
    notices = [m["content"] for m in first.messages if m["content"].startswith(COMPACT_PREFIX)]
    assert notices and all("'\ufffdgrep'" in notice for notice in notices)
    assert governor.govern(history, system=SYSTEM).messages == first.messages


def _renamed_bookings(messages: list[Any], ctx: Any) -> StageOutcome:
    """Per message: a plugin stage that rewrites a word wherever a text holds it, notices too."""
    (message,) = messages
    content = message.get("content")
    if not isinstance(content, str) or "reservation" not in content:
        return StageOutcome.unchanged(messages)
    renamed = {**message, "content": content.replace("reservation", "booking")}
    return StageOutcome([renamed], changed=True)


def test_a_per_message_stage_is_not_run_again_on_a_result_it_helped_compact(
    tmp_path: Path,
) -> None:
    """The notice naming the tool "book_reservation" is sent again as the compaction wrote it."""
    history = _session(40)
    for message in history:
        if message["role"] == "tool":
            message["name"] = "book_reservation"
            message["content"] += " reservation"
    rewrite = Stage("rewrite", _renamed_bookings, per_message=True)
    config = _config(6_000)
    governor = build_builtin_governor(config, tmp_path, [rewrite])
    first = governor.govern(history, system=SYSTEM)
    notices = [m["content"] for m in first.messages if m["content"].startswith(COMPACT_PREFIX)]
    assert notices and all("'book_reservation'" in notice for notice in notices)
    assert governor.govern(history, system=SYSTEM).messages == first.messages
    restarted = build_builtin_governor(config, tmp_path, [rewrite])
    restarted.restore(GovernanceState.from_record(json.loads(json.dumps(first.state.to_record()))))
    assert restarted.govern(history, system=SYSTEM).messages == first.messages


def test_a_kept_cut_at_merged_user_messages_is_read_back_after_the_repairs_are_reused(
    tmp_path: Path,
) -> None:
    """The merged first ask, rewritten by a plugin stage, still starts the turn read back."""
    old = [{"role": "user", "content": "old ask"}, {"role": "assistant", "content": "old answer"}]
    history: list[dict[str, Any]] = old * 5
    start = len(history)
    history += [
        {"role": "user", "content": "thanks for the reservation"},
        {"role": "user", "content": "now change my reservation"},
        {"role": "assistant", "content": "which reservation?"},
        {"role": "user", "content": "the reservation from May"},
    ]
    for index in range(12):
        call = {"id": f"c{index}", "type": "function", "function": {"name": "lookup"}}
        call["function"]["arguments"] = "{}"
        history += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{index}", "content": "x" * 2_000},
        ]
    rewrite = Stage("rewrite", _renamed_bookings, per_message=True)
    config = GovernanceConfig(input_limit=5_000)
    governor = build_builtin_governor(config, tmp_path, [rewrite])
    governor.restore(GovernanceState(start=start, length=start + 8))
    first = governor.govern(history[: start + 8], system=SYSTEM)
    assert first.fits and first.messages[0]["content"].startswith("thanks for the booking")
    second = governor.govern(history, system=SYSTEM)  # the repairs' outcome is reused
    assert second.report.entry("compact_results").changed  # type: ignore[union-attr]
    assert second.state.start == start
    assert governor.govern(history, system=SYSTEM).messages == second.messages


def test_a_step_cut_whose_first_step_a_plugin_stage_rewrote_is_kept_on_the_next_call(
    tmp_path: Path,
) -> None:
    """The first step sent starts at its assistant message, rewritten or not, not at its result."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "fix the reservation form"}]
    for index in range(30):
        function = {"name": "grep", "arguments": json.dumps({"pattern": "y" * 300})}
        call = {"id": f"c{index}", "type": "function", "function": function}
        history += [
            {"role": "assistant", "content": "checking the reservation", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{index}", "content": "x" * 900},
        ]
    rewrite = Stage("rewrite", _renamed_bookings, per_message=True)
    config = GovernanceConfig(input_limit=3_000)
    governor = build_builtin_governor(config, tmp_path, [rewrite])
    first = governor.govern(history, system=SYSTEM)
    assert left_out_steps(first.messages[0]) > 0
    assert first.messages[1]["content"] == "checking the booking"
    _assert_sent_again(history, config, governor, first, tmp_path, (rewrite,))


def test_results_offloaded_with_excluded_tools_are_compacted_again_as_sent(tmp_path: Path) -> None:
    """With `exclude_tools`, an offloaded result keeps its file and an excluded one gets none."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "look at the logs"}]
    for index in range(30):
        name = "cat" if index % 2 else "exec"
        call = {"id": f"c{index}", "type": "function", "function": {"name": name}}
        call["function"]["arguments"] = "{}"
        history += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{index}", "content": f"line {index}\n" * 300},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": f"next {index}"},
        ]
    config = GovernanceConfig(
        input_limit=6_000,
        max_tool_result_chars=1_000,
        stages={"offload_results": {"exclude_tools": ["cat"]}},
    )
    governor = build_builtin_governor(config, tmp_path)
    first = governor.govern(history, system=SYSTEM)
    results = [m["content"] for m in first.messages if m["role"] == "tool"]
    notices = [text for text in results if text.startswith(COMPACT_PREFIX)]
    saved = [notice for notice in notices if "read_file(path=" in notice]
    assert saved and all("'exec'" in notice for notice in saved)
    assert any("'cat'" in notice for notice in notices)
    _assert_sent_again(history, config, governor, first, tmp_path)
