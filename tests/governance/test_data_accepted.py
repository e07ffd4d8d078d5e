"""Histories that providers really accepted go through governance untouched.

The accepted requests are the 50 OpenAI-shaped requests that providers answered with
HTTP 200 in pydantic-ai's cassettes and the 200 τ-bench conversations GPT-4o took part in.
The one repair the governor may make to them is to fill τ-bench's empty tool results.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from nanobot_core.config import GovernanceConfig
from nanobot_core.governance.checks import is_empty_result
from nanobot_core.governance.invariants import check_invariants
from tests.governance.strategies import (
    build_builtin_governor,
    llamafactory_rows,
    report_changed,
    tau_bench_runs,
    tau_bench_tools,
)
from tests.helpers import data_dir

# What an empty tool result must read as (pinned here, not imported from the code).
NO_OUTPUT = "(no output)"


@cache
def accepted_interactions() -> tuple[dict[str, Any], ...]:
    """Recorded chat-completions requests with a tool history that the provider answered 200."""
    path = data_dir() / "pydantic-ai-cassettes" / "interactions.jsonl"
    with path.open(encoding="utf-8") as lines:
        interactions = [json.loads(line) for line in lines if line.strip()]
    return tuple(
        interaction
        for interaction in interactions
        if interaction["response_status"] == 200 and interaction["request_format"] == "openai_chat"
    )


def _interaction_id(interaction: dict[str, Any]) -> str:
    return f"{Path(interaction['source_path']).stem}#{interaction['interaction_index']}"


@cache
def duplicate_id_report() -> dict[str, Any]:
    """The importer's list of tool-call ids τ-bench reuses inside one conversation."""
    path = data_dir() / "tau-bench-airline" / "duplicate_tool_call_ids.json"
    report: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return report


def call_result_pairs(messages: Sequence[Any]) -> list[tuple[int, str, str, int]]:
    """(call message index, call id, tool name, result index) for every call answered in its run."""
    pairs = []
    for index, message in enumerate(messages):
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            continue
        run_end = index + 1
        while run_end < len(messages) and messages[run_end].get("role") == "tool":
            run_end += 1
        for call in message["tool_calls"]:
            for result_index in range(index + 1, run_end):
                if messages[result_index].get("tool_call_id") == call["id"]:
                    pairs.append((index, call["id"], call["function"]["name"], result_index))
    return pairs


def with_empty_results_filled(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with every empty tool result reading "(no output)", as the governor must."""
    return [
        {**message, "content": NO_OUTPUT}
        if message.get("role") == "tool" and is_empty_result(message)
        else message
        for message in messages
    ]


@pytest.fixture(scope="module")
def governor(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The built-in governor with the default budget."""
    return build_builtin_governor(GovernanceConfig(), tmp_path_factory.mktemp("accepted"))


def test_the_accepted_set_is_the_documented_one() -> None:
    """The cassettes hold the 50 accepted tool-history requests SOURCE.md describes."""
    assert len(accepted_interactions()) == 50


@pytest.mark.parametrize("interaction", accepted_interactions(), ids=_interaction_id)
def test_provider_accepted_request_is_already_legal(interaction: dict[str, Any]) -> None:
    """The invariant checker finds nothing wrong in a request a real provider accepted."""
    body = interaction["request_body"]
    assert check_invariants(body["messages"], tools=body.get("tools", ())) == []


@pytest.mark.parametrize("interaction", accepted_interactions(), ids=_interaction_id)
def test_provider_accepted_request_is_sent_as_is(
    governor: Any, interaction: dict[str, Any]
) -> None:
    """A request a provider accepted comes out as the very same list, with nothing reported."""
    body = interaction["request_body"]
    messages = body["messages"]
    result = governor.govern(messages, tools=body.get("tools", ()))
    assert result.fits
    assert result.messages is messages
    assert not report_changed(result.report)


def _reply(interaction: dict[str, Any]) -> dict[str, Any] | None:
    """The message a recorded answer holds, if its body is a chat completion."""
    body = interaction["response_body"]
    choices = body.get("choices") if isinstance(body, dict) else None
    message = choices[0].get("message") if isinstance(choices, list) and choices else None
    return message if isinstance(message, dict) else None


def _replies_calling_nothing() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The recorded (interaction, answer) pairs whose legacy ``function_call`` names no
    function (Snowflake's ``{"name": ""}`` placeholder beside ``"tool_calls": null``): no call
    the model made."""
    pairs = []
    for interaction in accepted_interactions():
        reply = _reply(interaction)
        legacy = reply.get("function_call") if reply else None
        if reply and isinstance(legacy, dict) and legacy.get("name") == "":
            pairs.append((interaction, reply))
    return pairs


def test_a_recorded_reply_that_calls_nothing_gets_no_dropped_calls_notice(governor: Any) -> None:
    """A real reply stored as the server sent it, its empty legacy call included, loses that
    call and keeps its text as it was: it dropped no call of the model's, so it says none."""
    pairs = _replies_calling_nothing()
    assert len(pairs) == 2
    for interaction, reply in pairs:
        body = interaction["request_body"]
        history = [*body["messages"], reply, {"role": "user", "content": "Thanks."}]
        result = governor.govern(history, tools=body.get("tools", ()))
        sent = result.messages[len(body["messages"])]
        assert sent["role"] == "assistant" and sent["content"] == reply["content"]
        assert "function_call" not in sent
        assert "tool call(s) of this reply" not in json.dumps(result.messages)


@pytest.mark.parametrize("index", range(200), ids=lambda index: f"tau-bench[{index}]")
def test_tau_bench_conversation_is_sent_as_is(governor: Any, index: int) -> None:
    """A real GPT-4o conversation comes out unchanged, except empty results read "(no output)"."""
    messages = tau_bench_runs()[index]["traj"]
    expected = with_empty_results_filled(messages)
    result = governor.govern(messages, tools=tau_bench_tools())
    assert result.fits
    if expected == messages:
        assert result.messages is messages
    else:
        assert result.messages == expected


def test_tau_bench_has_the_empty_results_the_exception_is_for() -> None:
    """The exception above is exercised: τ-bench really holds 92 empty tool results."""
    empty = [
        message
        for run in tau_bench_runs()
        for message in run["traj"]
        if message["role"] == "tool" and is_empty_result(message)
    ]
    assert len(empty) == 92


def _conversations_with_reused_ids() -> list[int]:
    return sorted({item["conversation_index"] for item in duplicate_id_report()["items"]})


@pytest.mark.parametrize("index", _conversations_with_reused_ids(), ids=lambda i: f"tau-bench[{i}]")
def test_reused_ids_stay_separate_legal_pairs(governor: Any, index: int) -> None:
    """An id GPT-4o reused for two calls still pairs each call with its own result."""
    messages = tau_bench_runs()[index]["traj"]
    before = call_result_pairs(messages)
    result = governor.govern(messages, tools=tau_bench_tools())
    assert call_result_pairs(result.messages) == before
    for item in duplicate_id_report()["items"]:
        if item["conversation_index"] != index:
            continue
        reused = [pair for pair in before if pair[1] == item["tool_call_id"]]
        assert [(pair[0], pair[2], pair[3]) for pair in reused] == [
            (call["assistant_msg_index"], call["tool"], result_index)
            for call, result_index in zip(
                item["calls"], item["tool_result_msg_indices"], strict=True
            )
        ]


def test_reused_ids_cover_the_documented_count() -> None:
    """The reused-id test above covers all 71 ids in 49 conversations the importer found."""
    report = duplicate_id_report()
    assert (report["count"], len(_conversations_with_reused_ids())) == (71, 49)


def _clean_llamafactory_rows() -> list[dict[str, Any]]:
    return [row for row in llamafactory_rows() if not row["anomalies"]]


@pytest.mark.parametrize("row", _clean_llamafactory_rows(), ids=lambda row: row["id"])
def test_clean_llamafactory_conversation_is_sent_as_is(governor: Any, row: dict[str, Any]) -> None:
    """A well-formed real conversation (Glaive, reasoning tool-use) is not touched at all."""
    messages = row["messages"]
    result = governor.govern(messages, tools=row["tools"])
    assert result.messages is messages
    assert not report_changed(result.report)
