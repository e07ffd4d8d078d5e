"""The checks of a session after crashes (`nanobot_core.testing_sessions`), on sessions by hand.

Each rule is shown kept by a session that keeps it and broken by one that breaks
it; the crash tests (``test_crash_fuzz.py`` here and in ``plugins/postgres``) run
the same checks on sessions real runs left behind.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core import GovernanceState, PluginManager, latest_state
from nanobot_core.testing import make_config
from nanobot_core.testing_sessions import Turn, check_appended, check_calls_once, check_request

# A window that four turns with long answers outgrow (the governor cuts), and results
# long enough to be offloaded.
GOVERNANCE = {
    "context_window": 7000,
    "max_output": 500,
    "safety_margin": 100,
    "max_tool_result_chars": 1500,
}
SYSTEM = "You are a test."


def _call(call_id: str) -> dict[str, Any]:
    function = {"name": "read_file", "arguments": json.dumps({"path": "a.txt"})}
    return {"id": call_id, "type": "function", "function": function}


def _round(number: int, calls: int) -> dict[str, Any]:
    """A reply that calls a tool `calls` times."""
    ids = [_call(f"r{number}c{index}") for index in range(calls)]
    return {"role": "assistant", "content": f"step {number}", "tool_calls": ids}


def _results(reply: dict[str, Any]) -> list[dict[str, Any]]:
    """The results of a reply's calls, in order."""
    return [
        {"role": "tool", "tool_call_id": call["id"], "content": f"result of {call['id']}"}
        for call in reply.get("tool_calls", [])
    ]


ANSWER = {"role": "assistant", "content": "the answer"}
REPLIES = [_round(0, 2), _round(1, 1), ANSWER]


def _stored(prompt: str, replies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a run stores for `replies`: its user message, then each reply and its results."""
    lines: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    for reply in replies:
        lines += [reply, *_results(reply)]
    return lines


EARLIER = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "done"}]


def _step(*parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The session after a step that appended `parts` to the earlier lines."""
    return [*EARLIER, *(line for part in parts for line in part)]


def _finished(prompt: str = "go") -> Turn:
    return Turn(prompt, REPLIES, finished=True, reported=_stored(prompt, REPLIES))


def test_a_finished_turn_stored_whole_has_no_problems() -> None:
    """A turn that stored its user message, every reply and every result, once, passes."""
    assert check_appended(EARLIER, _step(_stored("go", REPLIES)), [_finished()]) == []


def test_records_among_the_lines_are_not_messages() -> None:
    """Usage and governance records between a turn's messages are left out of its check."""
    lines = _stored("go", REPLIES)
    lines.insert(2, {"_meta": {"kind": "usage", "input": 3}})
    assert check_appended(EARLIER, _step(lines), [_finished()]) == []


@pytest.mark.parametrize("requests", [1, 2, 3])
def test_a_killed_turn_cut_between_rounds_has_no_problems(requests: int) -> None:
    """A killed turn's lines may end after any reply or round of results it was sent."""
    turn = Turn("go", REPLIES[:requests])
    for replies in range(requests + 1):
        lines = _stored("go", REPLIES[:replies])
        assert check_appended(EARLIER, _step(lines), [turn]) == [], replies
        if replies and REPLIES[replies - 1].get("tool_calls"):
            # Killed after the reply was stored, before its results were.
            cut = lines[: -len(_results(REPLIES[replies - 1]))]
            assert check_appended(EARLIER, _step(cut), [turn]) == [], replies


def test_a_line_stored_before_that_changed_is_named() -> None:
    """A line stored before the step that is not the same after it is a problem, by number."""
    after = _step(_stored("go", REPLIES))
    after[1] = {"role": "assistant", "content": "rewritten"}
    assert check_appended(EARLIER, after, [_finished()]) == [
        'line 1, stored before the step, was changed: {"role": "assistant", "content": "rewritten"}'
    ]


def test_lines_stored_before_that_are_gone_are_named() -> None:
    """A session shorter than it was before the step has lost lines."""
    problems = check_appended(EARLIER, EARLIER[:1], [Turn("go")])
    assert problems == ["lines 1 to 1, stored before the step, are gone"]


def test_a_round_stored_in_part_is_a_problem() -> None:
    """A round's results are one batch: one of two stored is a problem."""
    lines = _stored("go", REPLIES)
    del lines[3]  # the second result of round 0
    problems = check_appended(EARLIER, _step(lines[:3]), [Turn("go", REPLIES[:2])])
    assert problems == [
        "turn 'go': round 0 stored the results ['r0c0'] of the calls ['r0c0', 'r0c1']"
    ]


def test_a_round_that_went_on_without_its_results_is_a_problem() -> None:
    """The next reply stored where a round's results belong is a problem."""
    lines = [{"role": "user", "content": "go"}, REPLIES[0], REPLIES[1]]
    problems = check_appended(EARLIER, _step(lines), [Turn("go", REPLIES[:2])])
    assert problems == [
        "turn 'go': round 0 stored the results [None] of the calls ['r0c0', 'r0c1']"
    ]


def test_more_after_a_reply_that_called_no_tool_is_a_problem() -> None:
    """A reply that called no tool ends the turn: a line after it is a problem."""
    replies = [{"role": "assistant", "content": "thinking"}, ANSWER]
    lines = [{"role": "user", "content": "go"}, *replies]
    problems = check_appended(EARLIER, _step(lines), [Turn("go", replies)])
    assert problems == ["turn 'go': reply 0 called no tool, yet more was stored after it"]


def test_a_reply_stored_otherwise_than_sent_is_a_problem() -> None:
    """A reply whose content or calls differ from what the server sent is a problem."""
    lines = _stored("go", REPLIES)
    lines[1] = {**lines[1], "content": "not what was sent"}
    problems = check_appended(EARLIER, _step(lines), [_finished()])
    assert problems[0].startswith("turn 'go': reply 0 is not stored as sent: ")


def test_more_than_was_sent_is_a_problem() -> None:
    """A turn that stored a reply it was never sent (stored twice, say) has a problem."""
    lines = [*_stored("go", REPLIES[:1]), REPLIES[0]]
    problems = check_appended(EARLIER, _step(lines), [Turn("go", REPLIES[:1])])
    assert problems[0].startswith("turn 'go': stored more than it was sent: ")


def test_a_finished_turn_without_its_answer_is_a_problem() -> None:
    """A turn that ended well stored its last reply last."""
    lines = _stored("go", REPLIES[:2])
    problems = check_appended(EARLIER, _step(lines), [_finished()])
    assert problems == ["turn 'go': finished, but its last reply is not stored last"]


def test_a_finished_turn_that_reported_otherwise_is_a_problem() -> None:
    """What `run --json` reported must be what was stored."""
    turn = Turn("go", REPLIES, finished=True, reported=_stored("go", REPLIES)[:-1])
    problems = check_appended(EARLIER, _step(_stored("go", REPLIES)), [turn])
    assert problems == ["turn 'go': what `run --json` reported is not what was stored"]


def test_a_turn_that_stored_nothing_made_no_request() -> None:
    """Nothing stored is fine for a turn that asked nothing, a problem for one that did."""
    assert check_appended(EARLIER, EARLIER, [Turn("go")]) == []
    problems = check_appended(EARLIER, EARLIER, [Turn("go", REPLIES[:1])])
    assert problems == ["turn 'go': stored nothing, though it made requests or finished"]


def test_a_user_message_with_more_than_the_prompt_passes() -> None:
    """The runner may add to the prompt (its runtime block): the stored message begins with it."""
    lines = _stored("go", REPLIES)
    lines[0] = {"role": "user", "content": "go\n\n[Runtime: now]"}
    turn = Turn("go", REPLIES, finished=True, reported=lines)
    assert check_appended(EARLIER, _step(lines), [turn]) == []


def test_two_turns_of_a_step_in_order_pass() -> None:
    """Two turns of one step, one after the other, each whole, pass."""
    turns = [_finished("first"), _finished("second")]
    after = _step(_stored("first", REPLIES), _stored("second", REPLIES))
    assert check_appended(EARLIER, after, turns) == []


def test_interleaved_turns_are_a_problem() -> None:
    """A turn whose lines another turn's lines interrupt fails."""
    first, second = _stored("first", REPLIES), _stored("second", REPLIES)
    after = _step(first[:2], second, first[2:])
    problems = check_appended(EARLIER, after, [_finished("first"), _finished("second")])
    assert problems and problems[0].startswith("turn 'first': ")
    assert any(problem.startswith("turn 'second': ") for problem in problems)


def test_turns_out_of_order_or_twice_are_a_problem() -> None:
    """A turn stored after a later one, or begun twice, is named."""
    turns = [_finished("first"), _finished("second")]
    after = _step(_stored("second", REPLIES), _stored("first", REPLIES))
    assert check_appended(EARLIER, after, turns) == ["turn 'first': stored twice or out of order"]
    after = _step(_stored("first", REPLIES), _stored("first", REPLIES))
    assert check_appended(EARLIER, after, turns) == ["turn 'first': stored twice or out of order"]


def test_lines_of_no_turn_are_a_problem() -> None:
    """A message before any turn's user message, or a user message of no turn, is named."""
    problems = check_appended(EARLIER, _step([ANSWER]), [Turn("go")])
    assert problems == [
        'a message before any turn\'s user message: {"role": "assistant", "content": "the answer"}'
    ]
    problems = check_appended(EARLIER, _step(_stored("stop", [])), [Turn("go")])
    assert problems == ['a user message that begins no turn: {"role": "user", "content": "stop"}']
    turns = [Turn("go"), Turn("go on")]
    problems = check_appended(EARLIER, _step(_stored("go on", [])), turns)
    assert problems == [
        'a user message that begins several turns: {"role": "user", "content": "go on"}'
    ]


_CALL_IDS = st.text("abc", min_size=1, max_size=2)
_REPLIES = st.lists(
    st.lists(_CALL_IDS, min_size=1, max_size=3, unique=True).map(
        lambda ids: {"role": "assistant", "content": "", "tool_calls": [_call(i) for i in ids]}
    ),
    max_size=4,
).map(lambda rounds: [*rounds, ANSWER])


@settings(max_examples=200, deadline=None)
@given(_REPLIES, st.data())
def test_any_turn_cut_at_a_line_boundary_outside_a_round_passes(
    replies: list[dict[str, Any]], data: st.DataObject
) -> None:
    """However a killed turn was cut (after any reply or whole round) its lines pass, and
    a round's results cut inside the batch always fail."""
    lines = _stored("go", replies)
    # Where a run may be cut: after its user message, after a reply, after its round.
    boundaries = [1]
    for reply in replies:
        boundaries += [boundaries[-1] + 1, boundaries[-1] + 1 + len(reply.get("tool_calls", []))]
    cut = data.draw(st.integers(1, len(lines)))
    requested = data.draw(st.integers(1, len(replies)))
    stored_replies = sum(1 for line in lines[1:cut] if line["role"] == "assistant")
    turn = Turn("go", replies[: max(requested, stored_replies)])
    problems = check_appended(EARLIER, _step(lines[:cut]), [turn])
    assert (problems == []) == (cut in boundaries), (cut, boundaries, problems)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["role", "content", "tool_calls", "tool_call_id", "_meta"]),
            st.none() | st.text(max_size=4) | st.sampled_from(["user", "assistant", "tool"]),
            max_size=4,
        ),
        max_size=8,
    )
)
def test_any_appended_lines_give_problems_not_an_exception(lines: list[dict[str, Any]]) -> None:
    """Whatever lines a store gives back, the check answers with a list of problems."""
    problems = check_appended(EARLIER, [*EARLIER, *lines], [Turn("go", REPLIES)])
    problems += check_calls_once([*EARLIER, *lines])
    assert all(isinstance(problem, str) and problem for problem in problems)


def test_each_call_once() -> None:
    """A call made twice, or answered twice, is named; records are not messages."""
    lines = _stored("go", REPLIES)
    assert check_calls_once([*lines, {"_meta": {"kind": "usage"}}]) == []
    assert check_calls_once([*lines, REPLIES[1]]) == ["call 'r1c0' made 2 times"]
    assert check_calls_once([*lines, lines[2]]) == ["call 'r0c0' answered 2 times"]


# check_request: requests made as the runner makes them, from sessions built by hand.


@pytest.fixture
def pm(tmp_path: Path) -> PluginManager:
    """The plugin manager of the runs: built-ins only, a small window."""
    config = make_config({"governance": GOVERNANCE})
    manager = PluginManager(config, workspace=tmp_path, autoload=False)
    manager.load()
    return manager


def _turns(count: int) -> list[dict[str, Any]]:
    """`count` turns, each with one large result (offloaded) and a long answer."""
    lines: list[dict[str, Any]] = []
    for number in range(count):
        reply = {"role": "assistant", "content": "", "tool_calls": [_call(f"c{number}")]}
        lines += [
            {"role": "user", "content": f"turn {number}"},
            reply,
            {"role": "tool", "tool_call_id": f"c{number}", "content": "word " * 800},
            {"role": "assistant", "content": f"answer {number} " + "gamma " * 900},
        ]
    return lines


def _request(pm: PluginManager, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request a run makes of `records`, appending a governance record when it must."""
    governor = pm.governor()
    recorded = latest_state(records)
    governor.restore(recorded)
    history = [r for r in records if "_meta" not in r]
    result = governor.govern(history, system=SYSTEM, tools=pm.tool_registry().definitions())
    if result.state.to_be_recorded(recorded):
        records.append(result.state.to_record())
    return [{"role": "system", "content": SYSTEM}, *copy.deepcopy(result.messages)]


@pytest.fixture
def read(tmp_path: Path) -> Callable[[str], str | None]:
    """Where the built-in result store keeps offloaded results: files in the workspace."""

    def read_offloaded(path: str) -> str | None:
        saved = tmp_path / path
        return saved.read_text(encoding="utf-8") if saved.is_file() else None

    return read_offloaded


def test_a_request_as_the_runner_makes_it_has_no_problems(
    pm: PluginManager, read: Callable[[str], str | None]
) -> None:
    """Requests made as a resumed governor makes them, records where decisions moved, pass."""
    records = _turns(3)
    request = _request(pm, records)
    assert GovernanceState.from_record(records[-1]) is None  # nothing decided yet
    assert check_request(records, request, pm, read) == []
    records += _turns(4)[12:]
    request = _request(pm, records)
    assert GovernanceState.from_record(records[-1]) is not None  # the window cut
    assert check_request(records, request, pm, read) == []


def test_a_request_not_as_governed_is_a_problem(
    pm: PluginManager, read: Callable[[str], str | None]
) -> None:
    """A request whose messages are not what the resumed governor sends names the first."""
    records = _turns(2)
    request = _request(pm, records)
    request[3] = {**request[3], "content": "changed"}
    problems = check_request(records, request, pm, read)
    assert problems == ["not what a resumed governor sends: message 2 differs (8 sent, 8 governed)"]


def test_a_request_without_its_governance_record_is_a_problem(
    pm: PluginManager, read: Callable[[str], str | None]
) -> None:
    """Decisions that moved, with no record appended before the request, are a problem."""
    records = _turns(4)
    request = _request(pm, records)
    problems = check_request(records[:-1], request, pm, read)
    assert problems == ["the decisions moved, but no governance record was appended"]


def test_a_governance_record_when_nothing_moved_is_a_problem(
    pm: PluginManager, read: Callable[[str], str | None]
) -> None:
    """A record appended when the decisions did not move is a problem."""
    records = _turns(2)
    request = _request(pm, records)
    records.append(GovernanceState(length=len(records)).to_record())
    problems = check_request(records, request, pm, read)
    assert problems == ["a governance record was appended, but the decisions did not move"]


def test_a_governance_record_of_other_decisions_is_a_problem(
    pm: PluginManager, read: Callable[[str], str | None]
) -> None:
    """A record appended that is not what the governor decided is a problem."""
    records = _turns(4)
    request = _request(pm, records)
    records[-1]["_meta"]["start"] = 4
    problems = check_request(records, request, pm, read)
    assert any(p.startswith("the governance record appended is not the") for p in problems)


def test_offloaded_results_missing_or_foreign_are_problems(
    pm: PluginManager, read: Callable[[str], str | None]
) -> None:
    """An offload notice whose file is missing, or holds no result of the session, fails."""
    records = _turns(1)
    request = _request(pm, records)
    assert check_request(records, request, pm, lambda path: None) == [
        f"message 2: nothing is stored for {_offloaded(request)}"
    ]
    assert check_request(records, request, pm, lambda path: "other") == [
        f"message 2: {_offloaded(request)} holds no tool result of the session"
    ]


def test_an_offload_notice_without_its_path_is_a_problem(
    pm: PluginManager, read: Callable[[str], str | None]
) -> None:
    """A notice that names no file cannot be followed: a problem of its own."""
    records = _turns(1)
    request = _request(pm, records)
    request[3] = {**request[3], "content": "[Tool result saved to a file, somewhere]"}
    problems = check_request(records, request, pm, read)
    assert "message 2: an offload notice without its path" in problems


def _offloaded(request: list[dict[str, Any]]) -> str:
    content = request[3]["content"]
    assert content.startswith("[Tool result saved to a file")
    return str(content.split('read_file(path="', 1)[1].split('"', 1)[0])
