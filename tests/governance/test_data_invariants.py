"""The invariant checker itself, on real and catalogued histories.

The property and data tests trust `check_invariants` to see every defect; these tests
pin that it does, naming the message index and call id, and that it stays silent on
real traffic that providers accepted.
"""

from __future__ import annotations

from typing import Any

import pytest

from nanobot_core.governance.invariants import (
    assert_invariants,
    check_budget,
    check_history_start,
    check_invariants,
    check_message_shapes,
    check_text,
    check_tool_pairing,
)
from nanobot_core.governance.tokens import count_request
from tests.governance.strategies import tau_bench_runs, tau_bench_tools
from tests.governance.test_data_error_catalog import (
    HISTORIES,
    _in_scope_entries,
    call,
    calls,
    result,
    say,
    system,
    user,
)


@pytest.mark.parametrize("entry", _in_scope_entries(), ids=lambda entry: entry["id"])
def test_checker_flags_every_catalogued_history(entry: dict[str, Any]) -> None:
    """Each history a provider rejected (in scope for governance) has at least one violation."""
    assert check_invariants(HISTORIES[entry["id"]]()) != []


def test_unanswered_call_is_named_by_index_and_id() -> None:
    """A call without a result is reported with its message index, position and id."""
    history = [user(), calls(call("call_RTlWVuE5MqEb3WZJgTIl7Rsb")), user("Hello?")]
    assert check_tool_pairing(history) == [
        "messages[1].tool_calls[0] (id 'call_RTlWVuE5MqEb3WZJgTIl7Rsb'): no result among the "
        "tool messages directly after it (none follow)"
    ]


def test_orphan_result_is_named_with_what_it_follows() -> None:
    """A tool message after a user message is reported with its id and its neighbour."""
    history = [user(), result("toolu_vrtx_01"), user("Test")]
    assert check_tool_pairing(history) == [
        "messages[1] (tool, tool_call_id 'toolu_vrtx_01'): not in the run of tool messages "
        "right after an assistant tool call (it follows messages[0] (user))"
    ]


def test_result_for_another_call_in_the_run_is_flagged() -> None:
    """A tool message in a run that answers an id the assistant did not call is a violation."""
    history = [user(), calls(call("a")), result("a"), result("b")]
    assert check_tool_pairing(history) == [
        "messages[3] (tool, tool_call_id 'b'): answers no call of the assistant message messages[1]"
    ]


def test_second_result_for_one_call_is_flagged() -> None:
    """Two results for one call in its run are reported with both positions."""
    history = [user(), calls(call("a")), result("a"), result("a")]
    assert check_tool_pairing(history) == [
        "messages[1].tool_calls[0] (id 'a'): 2 results (messages[2], messages[3]); "
        "expected exactly one"
    ]


def test_results_in_any_order_inside_the_run_are_legal() -> None:
    """Parallel calls may be answered in any order, as long as the answers follow directly."""
    history = [user(), calls(call("a"), call("b")), result("b"), result("a"), say()]
    assert check_invariants(history) == []


def test_id_reused_in_a_later_turn_is_legal() -> None:
    """An id that repeats in a later turn (as GPT-4o does in τ-bench) is not a violation."""
    history = [user(), calls(call("x")), result("x"), calls(call("x", "calculate")), result("x")]
    assert check_invariants(history) == []


def test_id_repeated_within_a_message_is_flagged() -> None:
    """Two calls of one message sharing an id are reported at the second one."""
    history = [user(), calls(call("x"), call("x")), result("x")]
    assert check_tool_pairing(history) == [
        "messages[1].tool_calls[1] (id 'x'): id repeats tool_calls[0] of the same message"
    ]


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"a": 1}, "arguments is a dict, not a JSON string"),
        ('{"a": 1', "arguments is not valid JSON"),
        ("[1, 2]", "arguments is JSON list, not an object"),
        ('{"a": NaN}', "arguments is not valid JSON"),
    ],
)
def test_arguments_must_be_an_encoded_json_object(arguments: Any, expected: str) -> None:
    """Arguments that are not a strict JSON object in a string are reported, with why."""
    history = [user(), calls(call("c", arguments=arguments)), result("c")]
    violations = check_tool_pairing(history)
    assert len(violations) == 1
    assert violations[0].startswith(f"messages[1].tool_calls[0] (id 'c'): {expected}")


@pytest.mark.parametrize("name", [None, "", "  ", 123])
def test_call_names_must_be_non_blank_strings(name: Any) -> None:
    """A call whose name is missing, blank or not a string is reported."""
    broken = call("c")
    broken["function"]["name"] = name
    assert check_tool_pairing([user(), calls(broken), result("c")]) == [
        f"messages[1].tool_calls[0] (id 'c'): name is {name!r}; expected a non-blank string"
    ]


def test_empty_tool_calls_list_is_flagged() -> None:
    """An assistant message with an empty tool_calls list is reported (providers reject it)."""
    assert check_tool_pairing([user(), {"role": "assistant", "tool_calls": []}]) == [
        "messages[1] (assistant): tool_calls is an empty list"
    ]


def test_history_must_start_at_a_user_message() -> None:
    """After the system messages the first message must be a user message."""
    assert check_history_start([system(), user()]) == []
    assert check_history_start([system(), say(), user()]) == [
        "messages[1] (assistant): the history after the system messages must start at a user "
        "message"
    ]


def test_lone_surrogate_in_a_nested_part_is_located() -> None:
    """A lone surrogate deep inside content parts is reported with its path."""
    history = [{"role": "user", "content": [{"type": "text", "text": "ok \ud83d"}]}]
    assert check_text(history) == [
        "messages[0].content[0].text: not encodable as UTF-8 "
        "(surrogates not allowed at character 3)"
    ]


@pytest.mark.parametrize("content", [None, "", []])
def test_empty_tool_result_is_flagged(content: Any) -> None:
    """A tool result that is null, empty or an empty part list is reported."""
    history = [user(), calls(call("c")), result("c", content)]
    assert check_text(history) == [
        f"messages[2] (tool, tool_call_id 'c'): empty result (content {content!r})"
    ]


def test_non_messages_and_unknown_roles_are_flagged() -> None:
    """Entries that are not dicts, and roles no provider knows, are reported."""
    assert check_message_shapes([user(), None, {"role": "critic", "content": "x"}]) == [
        "messages[1] is a NoneType, not a message dict",
        "messages[2] has unknown role 'critic'",
    ]


def test_real_conversation_over_budget_is_flagged() -> None:
    """A real conversation that does not fit the budget is reported with its size."""
    messages = tau_bench_runs()[0]["traj"]
    tools = tau_bench_tools()
    tokens = count_request(None, messages, tools)
    assert check_budget(messages, system=None, tools=tools, budget=tokens) == []
    assert check_budget(messages, system=None, tools=tools, budget=tokens - 1) == [
        f"the request counts {tokens} tokens, over the budget of {tokens - 1}"
    ]


def test_unreachable_budget_allows_only_the_newest_user_message() -> None:
    """When the budget cannot be met, a lone user message passes and a longer history fails."""
    tools = tau_bench_tools()
    alone = [user("Please change my flight.")]
    assert check_budget(alone, system=None, tools=tools, budget=10, budget_unreachable=True) == []
    longer = [user(), say(), user("Please change my flight.")]
    violations = check_budget(longer, system=None, tools=tools, budget=10, budget_unreachable=True)
    assert len(violations) == 1
    assert "keeps 3 non-system messages" in violations[0]


def test_assert_invariants_lists_every_violation() -> None:
    """assert_invariants raises with all violations, one per line."""
    with pytest.raises(AssertionError) as raised:
        assert_invariants([say(), result("ghost", "")])
    message = str(raised.value)
    assert message.startswith("3 governance invariant violation(s):")
    assert "must start at a user message" in message
    assert "'ghost'" in message
    assert "empty result" in message


def test_real_accepted_conversations_have_only_their_known_defect() -> None:
    """On all 200 τ-bench conversations the checker reports only the 92 empty tool results."""
    violations = [
        violation
        for run in tau_bench_runs()
        for violation in check_invariants(run["traj"], tools=tau_bench_tools())
    ]
    assert len(violations) == 92
    assert all("empty result (content '')" in violation for violation in violations)
