"""`strip_malformed_calls` on its own."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core.config import GovernanceConfig
from nanobot_core.governance import Governor, builtin_stages
from nanobot_core.governance.invariants import check_invariants
from nanobot_core.governance.stages import strip_malformed_calls
from nanobot_core.governance.stages.calls import dropped_calls_notice, generated_call_id
from nanobot_core.governance.tokens import count_request
from nanobot_core.tools.executor import ERROR_HINT
from tests.governance.builders import call, calls, result, run_pure, say, user

#: The notice of a reply one of whose two calls was dropped, no ``Error...`` result saying why.
ONE_OF_TWO_LEFT_OUT = (
    "[1 of the 2 tool call(s) of this reply could not run: it was left out. "
    "A tool call needs the name of the tool to run: call tools by their names.]"
)


@pytest.mark.parametrize("name", [None, "", "   ", 123, "<missing>"])
def test_call_without_a_usable_name_is_dropped_with_its_result(name: Any) -> None:
    """A nameless call is dropped, and so is its result in the run after it; its reply says so."""
    bad = call("call_bad", name)
    if name == "<missing>":
        del bad["function"]["name"]
    history = [user(), calls(call("call_ok"), bad), result("call_ok"), result("call_bad", "x")]
    outcome = run_pure(strip_malformed_calls, history)
    noted = calls(call("call_ok"), content=ONE_OF_TWO_LEFT_OUT)
    assert outcome.messages == [user(), noted, result("call_ok")]
    assert any("no name" in line for line in outcome.details)
    assert any("1 call(s) left out" in line for line in outcome.details)


def test_a_call_left_out_beside_kept_ones_is_told_with_the_error_its_result_gave() -> None:
    """The kept calls go on; the reply's text ends with how many were left out and the first
    ``Error...`` result of one, once, whether the text is a string or a list of parts."""
    error = "Error: the tool call has no tool name. Available tools: get_user."
    notice = f"[2 of the 3 tool call(s) of this reply could not run: they were left out. {error}]"
    parts = [{"type": "text", "text": "Looking."}]
    for content, expected in [
        (None, notice),
        ("Looking.", f"Looking.\n\n{notice}"),
        (parts, [*parts, {"type": "text", "text": notice}]),
    ]:
        message = calls(call("a", ""), call("ok"), call("b", None), content=content)
        history = [user(), message, result("a", error), result("ok"), result("b", error)]
        outcome = run_pure(strip_malformed_calls, history)
        assert outcome.messages == [user(), calls(call("ok"), content=expected), result("ok")]
        again = run_pure(strip_malformed_calls, outcome.messages)
        assert again.messages is outcome.messages and not again.changed


def test_a_reply_already_ending_with_its_notice_does_not_get_it_twice() -> None:
    """Text that ends with the very notice the repair would add keeps it once, not twice."""
    for content in [
        ONE_OF_TWO_LEFT_OUT,
        f"Looking.\n\n{ONE_OF_TWO_LEFT_OUT}",
        [{"type": "text", "text": ONE_OF_TWO_LEFT_OUT}],
    ]:
        history = [user(), calls(call("ok"), call("bad", ""), content=content), result("ok")]
        (_, message, _) = run_pure(strip_malformed_calls, history).messages
        assert message == calls(call("ok"), content=content)


def test_the_token_estimate_counts_the_notice() -> None:
    """The tokens a governed request is said to cost are those of the messages sent, notice
    included: more than the same messages without it."""
    history = [user(), calls(call("ok"), call("bad", "")), result("ok"), result("bad", "x")]
    governed = Governor(builtin_stages(), config=GovernanceConfig()).govern(history)
    assert governed.messages[1]["content"] == ONE_OF_TWO_LEFT_OUT
    assert governed.tokens == count_request(None, governed.messages)
    bare = [user(), calls(call("ok")), result("ok")]
    assert governed.tokens > count_request(None, bare)


def test_message_left_without_calls_or_content_keeps_the_notice() -> None:
    """An assistant message whose only call was dropped, with no text, is kept as the notice
    alone: the model sees its reply and why it did nothing, and no two user messages meet."""
    history = [user(), calls(call("c", None)), result("c"), user("next")]
    outcome = run_pure(strip_malformed_calls, history)
    notice = (
        "[None of the 1 tool call(s) of this reply could run. "
        "A tool call needs the name of the tool to run: call tools by their names.]"
    )
    assert outcome.messages == [user(), say(notice), user("next")]


def test_a_message_that_loses_only_an_empty_tool_calls_list_gets_no_notice() -> None:
    """No call was dropped (an empty `tool_calls`, or one that is no list): a message without
    text is left out."""
    for value in [[], {}]:
        message = {"role": "assistant", "content": None, "tool_calls": value}
        outcome = run_pure(strip_malformed_calls, [user(), message, user("next")])
        assert outcome.messages == [user(), user("next")]


def test_every_call_dropped_keeps_the_error_as_one_note() -> None:
    """When every call is nameless, the first Error result is kept once, as the message's text."""
    error = "Error: the tool call has no tool name. Available tools: read_file."
    history = [
        user(),
        calls(call("a", None), call("b", ""), content="Checking."),
        result("a", error),
        result("b", "Error: a later error, not the one kept."),
    ]
    outcome = run_pure(strip_malformed_calls, history)
    note = f"[None of the 2 tool call(s) of this reply could run. {error}]"
    assert outcome.messages == [user(), say(f"Checking.\n\n{note}")]
    assert any("no call could run" in line for line in outcome.details)
    again = run_pure(strip_malformed_calls, outcome.messages)
    assert again.messages == outcome.messages and not again.changed


def test_the_runners_hint_is_left_out_of_the_note() -> None:
    """The error the runner answered a nameless call with ends with its bracketed hint: the
    note keeps the error without it, so its brackets do not nest (``...]]``)."""
    error = "Error: the tool call has no tool name. Available tools: read_file."
    history = [user(), calls(call("a", None)), result("a", error + ERROR_HINT)]
    outcome = run_pure(strip_malformed_calls, history)
    note = f"[None of the 1 tool call(s) of this reply could run. {error}]"
    assert outcome.messages == [user(), say(note)]


@settings(derandomize=True, deadline=None, max_examples=300)
@given(st.text(st.characters(blacklist_characters="[]"), max_size=700), st.integers(1, 3))
def test_a_note_made_from_any_error_with_the_hint_holds_one_pair_of_brackets(
    text: str, count: int
) -> None:
    """Whatever the error (no brackets of its own) a dropped call's result gave before the
    runner's hint, the note opens with its only bracket and closes with its only one."""
    note = dropped_calls_notice(count, count, "Error: " + text + ERROR_HINT)
    assert note.count("[") == note.count("]") == 1
    assert note.startswith("[None of the") and note.endswith("]")
    assert "Analyze the error above" not in note


def test_the_note_is_a_text_part_after_content_parts_and_is_bounded() -> None:
    """List content gets the note as one more text part; a huge error is cut."""
    parts = [{"type": "text", "text": "Let me see."}]
    history = [user(), calls(call("a", None), content=parts), result("a", "Error: " + "x" * 5000)]
    (_, message) = run_pure(strip_malformed_calls, history).messages
    assert message["content"][0] == parts[0]
    note = message["content"][1]["text"]
    assert note.startswith("[None of the 1 tool call(s)") and len(note) < 700


@pytest.mark.parametrize(("length", "cut"), [(600, False), (601, True)])
def test_the_reason_in_the_note_is_cut_only_past_600_characters(length: int, cut: bool) -> None:
    """An Error result of up to 600 characters is kept whole in the note; a longer one is cut."""
    error = "Error: " + "x" * (length - len("Error: "))
    history = [user(), calls(call("a", None)), result("a", error)]
    (_, message) = run_pure(strip_malformed_calls, history).messages
    kept = error[:600] + ("..." if cut else "")
    assert message["content"] == f"[None of the 1 tool call(s) of this reply could run. {kept}]"


def test_message_left_without_calls_keeps_its_text() -> None:
    """An assistant message with text loses its `tool_calls` and keeps its text, the notice
    after it."""
    history = [user(), calls(call("c", None), content="I will check.")]
    outcome = run_pure(strip_malformed_calls, history)
    notice = (
        "[None of the 1 tool call(s) of this reply could run. "
        "A tool call needs the name of the tool to run: call tools by their names.]"
    )
    assert outcome.messages == [user(), say(f"I will check.\n\n{notice}")]


@pytest.mark.parametrize("value", ["", None, "<missing>", 7])
def test_missing_id_gets_a_deterministic_id_shared_with_its_result(value: Any) -> None:
    """An empty id becomes call_<hash of position, name, arguments>; its empty-id result follows."""
    bad = call(value)
    if value == "<missing>":
        del bad["id"]
    history = [user(), calls(bad), result("")]
    first = run_pure(strip_malformed_calls, history)
    again = run_pure(strip_malformed_calls, history)
    expected = generated_call_id(1, 0, "get_user", '{"id": 1}')
    assert first.messages == again.messages
    assert first.messages[1]["tool_calls"][0]["id"] == expected
    assert first.messages[2]["tool_call_id"] == expected
    assert expected.startswith("call_") and len(expected) == len("call_") + 24


def test_empty_ids_pair_in_order() -> None:
    """The k-th call with an empty id pairs with the k-th result with an empty id."""
    history = [user(), calls(call("", "a"), call("", "b")), result("", "A"), result("", "B")]
    messages = run_pure(strip_malformed_calls, history).messages
    ids = [c["id"] for c in messages[1]["tool_calls"]]
    assert len(set(ids)) == 2
    assert [messages[2]["tool_call_id"], messages[3]["tool_call_id"]] == ids


def test_ids_repeated_in_one_message_are_made_unique_with_their_results() -> None:
    """A repeated id gets a positional suffix, and the second result with it follows."""
    history = [
        user(),
        calls(call("dup", "a"), call("dup", "b")),
        result("dup", "A"),
        result("dup", "B"),
    ]
    messages = run_pure(strip_malformed_calls, history).messages
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["dup", "dup_1"]
    assert [m["tool_call_id"] for m in messages[2:]] == ["dup", "dup_1"]


def test_id_reused_in_a_later_turn_is_left_alone() -> None:
    """The same id in two different assistant messages is legal and not renamed."""
    history = [
        user(),
        calls(call("c1")),
        result("c1"),
        user("again"),
        calls(call("c1")),
        result("c1"),
    ]
    outcome = run_pure(strip_malformed_calls, history)
    assert not outcome.changed
    assert outcome.messages is history


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"path": "a.txt"}, {"path": "a.txt"}),
        ('{"path": "a.tx', {"path": "a.tx"}),
        ("", {}),
        (None, {}),
        ("[1, 2]", {}),
        ("null", {}),
        ("42", {}),
        ("not json at all", {}),
        ("NaN", {}),
        (["a", 1], {}),
        ('"{\\"q\\": 1}"', {"q": 1}),
        ('"just text"', {}),
    ],
)
def test_arguments_become_a_json_object_string(arguments: Any, expected: dict[str, Any]) -> None:
    """Objects are encoded, broken JSON is repaired, anything else becomes {} (and is reported)."""
    history = [user(), calls(call("c", "f", arguments)), result("c")]
    outcome = run_pure(strip_malformed_calls, history)
    encoded = outcome.messages[1]["tool_calls"][0]["function"]["arguments"]
    assert isinstance(encoded, str)
    assert json.loads(encoded) == expected
    assert outcome.changed and outcome.details


def test_missing_type_and_flat_calls_are_completed() -> None:
    """A call without `type`, or with name and arguments at its top level, is made standard."""
    no_type = {"id": "a", "function": {"name": "f", "arguments": "{}"}}
    flat = {"id": "b", "name": "g", "arguments": '{"x": 1}'}
    history = [user(), calls(no_type, flat), result("a"), result("b")]
    new_calls = run_pure(strip_malformed_calls, history).messages[1]["tool_calls"]
    assert new_calls == [
        {"id": "a", "function": {"name": "f", "arguments": "{}"}, "type": "function"},
        {"id": "b", "type": "function", "function": {"name": "g", "arguments": '{"x": 1}'}},
    ]


@pytest.mark.parametrize("value", [[], {}, "calls", 3])
def test_tool_calls_that_are_not_a_list_of_calls_are_removed(value: Any) -> None:
    """An empty or non-list `tool_calls` is removed; the message stays if it has text."""
    message = {"role": "assistant", "content": "hi", "tool_calls": value}
    outcome = run_pure(strip_malformed_calls, [user(), message])
    assert outcome.messages == [user(), say("hi")]


def test_unknown_keys_and_untouched_calls_are_shared() -> None:
    """Repairs copy only what they change; a good call in the same message is the same object."""
    good = call("good")
    message = {**calls(good, call("bad", None)), "reasoning_content": "thinking"}
    outcome = run_pure(strip_malformed_calls, [user(), message, result("good"), result("bad")])
    repaired = outcome.messages[1]
    assert repaired["reasoning_content"] == "thinking"
    assert repaired["tool_calls"][0] is good


def test_well_formed_history_is_returned_as_is() -> None:
    """No malformed call: the very same list comes back."""
    history = [user(), calls(call("a"), call("b")), result("b"), result("a")]
    outcome = run_pure(strip_malformed_calls, history)
    assert outcome.messages is history and not outcome.changed


def test_a_legacy_function_call_becomes_a_tool_call_and_is_answered() -> None:
    """A stored `function_call` nobody answered is sent as a tool call with a placeholder result."""
    legacy = {
        "role": "assistant",
        "content": "",
        "function_call": {"name": "get_user", "arguments": '{"id": 1}'},
    }
    history = [user(), legacy, user("still there?")]
    governed = Governor(builtin_stages(), config=GovernanceConfig()).govern(history)
    expected = generated_call_id(1, 0, "get_user", '{"id": 1}')
    assert governed.messages[1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "type": "function",
                "function": {"name": "get_user", "arguments": '{"id": 1}'},
                "id": expected,
            }
        ],
    }
    assert governed.messages[2]["role"] == "tool"
    assert governed.messages[2]["tool_call_id"] == expected
    assert check_invariants(governed.messages) == []
    again = Governor(builtin_stages(), config=GovernanceConfig()).govern(governed.messages)
    assert again.messages == governed.messages


def test_a_legacy_function_call_gets_the_result_its_function_message_holds() -> None:
    """The legacy `function` message answering a `function_call` is sent as that call's result."""
    legacy = {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    answer = {"role": "function", "name": "get_weather", "content": "sunny, 21C"}
    stray = {"role": "function", "name": "get_time", "content": "noon"}
    history = [user(), legacy, answer, say("It is sunny."), stray, user("thanks")]
    governed = Governor(builtin_stages(), config=GovernanceConfig()).govern(history)
    expected = generated_call_id(1, 0, "get_weather", '{"city": "Paris"}')
    assert governed.messages[1]["tool_calls"][0]["id"] == expected
    assert governed.messages[2] == {
        "role": "tool",
        "tool_call_id": expected,
        "name": "get_weather",
        "content": "sunny, 21C",
    }
    assert governed.messages[3:] == [say("It is sunny."), user("thanks")]  # the stray is dropped
    assert check_invariants(governed.messages) == []
    again = Governor(builtin_stages(), config=GovernanceConfig()).govern(governed.messages)
    assert again.messages == governed.messages


@pytest.mark.parametrize("value", [None, {"name": ""}, {"name": "  "}, "get_user", [], {"x": 1}])
def test_a_legacy_function_call_that_names_nothing_is_removed(value: Any) -> None:
    """A `function_call` without a function name is not sent: the message keeps only its text."""
    history = [user(), {"role": "assistant", "content": "Hello.", "function_call": value}]
    outcome = run_pure(strip_malformed_calls, history)
    assert outcome.messages == [user(), say("Hello.")]
    assert any("function_call" in line for line in outcome.details)


def test_a_legacy_function_call_beside_tool_calls_is_removed() -> None:
    """When the message also holds `tool_calls`, those are sent and `function_call` is not."""
    message = calls(call("c1"))
    message["function_call"] = {"name": "get_user", "arguments": '{"id": 1}'}
    history = [user(), message, result("c1")]
    outcome = run_pure(strip_malformed_calls, history)
    assert outcome.messages == [user(), calls(call("c1")), result("c1")]
