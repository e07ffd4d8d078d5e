"""Results that reach the model as their calls' answers, whatever field links them.

Also the small repairs around results: backfilled results carry the tool's name,
blank results are filled like empty ones, and a placeholder hidden among parts that
`sanitize_content` fixes is dropped in the same run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nanobot_core.config import GovernanceConfig
from nanobot_core.governance.checks import NO_OUTPUT
from nanobot_core.governance.invariants import check_invariants
from nanobot_core.governance.messages import result_call_id
from nanobot_core.governance.stages.backfill import INTERRUPTED
from tests.governance.builders import call, calls, result, say, user
from tests.governance.strategies import (
    Conversation,
    build_builtin_governor,
    llamafactory_conversations,
    tau_bench_conversations,
)
from tests.governance.test_data_shapes import swe_agent_histories


@pytest.fixture(scope="module")
def governor(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The built-in governor with the default budget."""
    workspace: Path = tmp_path_factory.mktemp("links")
    return build_builtin_governor(GovernanceConfig(), workspace)


def swe_result(call_id: str, content: str = "ok") -> dict[str, Any]:
    """A tool message as SWE-agent stores it: the call named in a one-item list."""
    return {"role": "tool", "content": content, "tool_call_ids": [call_id], "agent": "main"}


def test_the_classifier_reads_both_links() -> None:
    """`tool_call_id` wins; a one-string `tool_call_ids` list is read; anything else is None."""
    assert result_call_id({"role": "tool", "tool_call_id": "a", "tool_call_ids": ["b"]}) == "a"
    assert result_call_id(swe_result("b")) == "b"
    assert result_call_id({"role": "tool", "tool_call_ids": ["a", "b"]}) is None
    assert result_call_id({"role": "tool", "tool_call_ids": "a"}) is None
    assert result_call_id({"role": "tool", "tool_call_ids": [7]}) is None
    assert result_call_id("not a message") is None


def test_swe_agent_results_answer_their_calls(governor: Any) -> None:
    """Results linked by `tool_call_ids` stay with their calls and get `tool_call_id`."""
    history = [user(), calls(call("c1"), call("c2")), swe_result("c1", "one"), swe_result("c2")]
    history.append(say("done"))
    sent = governor.govern(history).messages
    assert sent[2] == {"role": "tool", "content": "one", "agent": "main", "tool_call_id": "c1"}
    assert sent[3]["tool_call_id"] == "c2" and "tool_call_ids" not in sent[3]
    assert all(m.get("content") != INTERRUPTED for m in sent)
    assert check_invariants(sent) == []
    assert history[2] == swe_result("c1", "one")  # the input is untouched


def test_a_result_naming_two_calls_is_a_stray(governor: Any) -> None:
    """A `tool_call_ids` list of two ids names no one call: dropped, the call backfilled."""
    two = {"role": "tool", "content": "x", "tool_call_ids": ["c1", "c2"]}
    history = [user(), calls(call("c1")), two]
    result_ = governor.govern(history)
    assert result_.messages[2] == {
        "role": "tool",
        "tool_call_id": "c1",
        "name": "get_user",
        "content": INTERRUPTED,
    }
    assert check_invariants(result_.messages) == []


def test_backfilled_results_carry_the_tool_name(governor: Any) -> None:
    """Every synthesized result names the tool its call called."""
    history = [user(), calls(call("a", "lookup"), call("b", "search")), result("a"), say("ok")]
    sent = governor.govern(history).messages
    assert sent[3] == {
        "role": "tool",
        "tool_call_id": "b",
        "name": "search",
        "content": INTERRUPTED,
    }


@pytest.mark.parametrize("blank", [" ", "\n\t  \n", [{"type": "text", "text": "  "}]])
def test_whitespace_only_results_are_filled_like_empty_ones(governor: Any, blank: Any) -> None:
    """A blank result reads "(no output)"; governing the output again changes nothing."""
    history = [user(), calls(call("a")), result("a", blank), say("ok")]
    first = governor.govern(history)
    assert first.messages[2]["content"] == NO_OUTPUT
    entry = first.report.entry("sanitize_content")
    assert entry is not None and any("empty tool result" in line for line in entry.details)
    assert check_invariants(first.messages) == []
    assert not governor.govern(first.messages).report.changed


def test_results_with_text_around_whitespace_are_kept(governor: Any) -> None:
    """A result that says something (spaces around it included) is sent as it is."""
    history = [user(), calls(call("a")), result("a", "  x  "), say("ok")]
    assert governor.govern(history).messages is history


@pytest.mark.parametrize(
    "content",
    [
        [None, {"type": "text", "text": "[Previous assistant message omitted.]"}],
        ["[Previous assistant message omitted.]", None],
        [None, "[omitted]"],
    ],
)
def test_a_placeholder_among_null_parts_goes_in_one_run(governor: Any, content: Any) -> None:
    """The placeholder is dropped at once, so governing the output again changes nothing."""
    history = [user(), {"role": "assistant", "content": content}, user("next")]
    first = governor.govern(history)
    assert all(m.get("role") != "assistant" for m in first.messages)
    assert not governor.govern(first.messages).report.changed


def _answered_results(messages: tuple[dict[str, Any], ...]) -> int:
    """Tool messages that, by any link the data uses, answer a call of the run they are in."""
    count = 0
    ids: set[str] = set()
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            ids = {c.get("id") for c in message.get("tool_calls") or [] if isinstance(c, dict)}
        elif role == "tool":
            links = [message.get("tool_call_id"), *(message.get("tool_call_ids") or [])]
            count += any(link in ids for link in links if isinstance(link, str))
        else:
            ids = set()
    return count


def _every_conversation() -> list[Conversation]:
    swe = [Conversation(f"swe-agent[{name}]", tuple(h), ()) for name, h in swe_agent_histories()]
    return [*tau_bench_conversations(), *llamafactory_conversations(), *swe]


def test_no_result_of_the_real_data_is_lost(governor: Any) -> None:
    """Across every conversation in tests/data, each result that answers its call is sent."""
    lost: list[str] = []
    for conversation in _every_conversation():
        messages = list(conversation.messages)
        sent = governor.govern(messages, tools=list(conversation.tools)).messages
        kept = sum(m.get("role") == "tool" and m.get("content") != INTERRUPTED for m in sent)
        if kept < _answered_results(conversation.messages):
            lost.append(conversation.source)
    assert lost == []
    assert len(_every_conversation()) == 200 + 650 + 5
