"""The clean path: one pass recognises a clean history that fits, agreeing with the survey."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings

from nanobot_core.config import GovernanceConfig
from nanobot_core.governance import GovernanceReport, build_governor
from nanobot_core.governance.clean import clean_tokens
from nanobot_core.governance.ordering import BUILTIN_ORDER
from nanobot_core.governance.survey import FactsCache
from nanobot_core.governance.tokens import count_request
from tests.governance.builders import call, calls, result, say, system, turn, user
from tests.governance.strategies import (
    DirtyRequest,
    dirty_requests,
    garbage_histories,
    tau_bench_conversations,
)

ROOMY = 10**9
LIMIT = 16_000


def test_clean_history_counts_what_the_survey_counts() -> None:
    """Text, calls, results and reasoning are counted as the survey counts them."""
    history = [
        system(),
        *turn(1, "x" * 500),
        {**calls(call("c", "grep", '{"q": "naïve"}')), "reasoning_content": "because"},
        result("c", "数据 found", name="grep"),
        say("done"),
        user("thanks ✓"),
    ]
    survey = FactsCache().survey(history)
    assert survey.defects == 0
    assert clean_tokens(history, ROOMY, LIMIT) == survey.tokens


def test_a_result_of_exactly_the_offload_limit_is_clean() -> None:
    """A result as long as ``max_tool_result_chars`` is not offloaded, so it takes the fast path."""
    history = [user(), calls(call()), result(content="x" * LIMIT), say()]
    survey = FactsCache().survey(history)
    assert survey.defects == 0
    assert clean_tokens(history, ROOMY, LIMIT) == survey.tokens


@pytest.mark.parametrize(
    "history",
    [
        [user(), 3],
        [user(), {"role": "critic", "content": "x"}],
        [{**user(), "_meta": {}}],
        [user(), say("[Previous assistant message omitted.]")],
        [user(), calls(call(name=None)), result()],
        [user(), calls(call(arguments="{")), result()],
        [user(), calls(call("a"), call("a")), result("a")],
        [user(), say(), result()],
        [user(), calls(call()), result(), result()],
        [user(), calls(call())],
        [user("\ud83d")],
        [user(), {"role": "assistant", "content": 5}],
        [user(), calls(call()), result(content="")],
        [system(), say()],
        [],
        [user(), calls(call()), result(content="x" * (LIMIT + 1))],
        [user(), {"role": "assistant", "content": None, "tool_calls": []}],
        [user(), {"role": "assistant", "content": None, "tool_calls": "call_1"}],
        [user(), {"role": "assistant", "content": "hi", "tool_calls": None}],
    ],
)
def test_every_defect_sends_the_history_to_the_survey(history: list[Any]) -> None:
    """Whatever a stage would repair (or a result to offload) means: not clean, survey it."""
    assert clean_tokens(history, ROOMY, LIMIT) is None


def test_history_over_the_room_is_not_clean() -> None:
    """A history that does not fit is left to the stages, even when it has no defect."""
    history = [*turn(1), *turn(2)]
    tokens = clean_tokens(history, ROOMY, LIMIT)
    assert tokens is not None
    assert clean_tokens(history, tokens, LIMIT) == tokens
    assert clean_tokens(history, tokens - 1, LIMIT) is None


def test_history_over_the_room_before_its_end_is_not_clean() -> None:
    """A history that passes the room part way is not clean, whatever follows."""
    history = [*turn(1, "x" * 4_000), *turn(2)]
    tokens = clean_tokens(history, ROOMY, LIMIT)
    assert tokens is not None
    first = clean_tokens(history[:4], ROOMY, LIMIT)
    assert first is not None
    assert clean_tokens(history, first - 1, LIMIT) is None
    assert clean_tokens(history, tokens - 1, LIMIT) is None


def test_every_clean_tau_bench_conversation_takes_the_clean_path() -> None:
    """The real conversations the survey finds clean are recognised, with the same count."""
    recognised = 0
    for conversation in tau_bench_conversations():
        history = list(conversation.messages[1:])
        survey = FactsCache().survey(history)
        tokens = clean_tokens(history, ROOMY, LIMIT)
        if survey.defects == 0:
            assert tokens == survey.tokens, conversation.source
            recognised += 1
        else:
            assert tokens is None, conversation.source
    assert recognised > 100


def test_governor_reports_every_stage_idle_on_the_clean_path(tmp_path: Path) -> None:
    """A clean history that fits comes back as itself, every stage listed and unchanged."""
    history = [system(), *turn(1), *turn(2)]
    tools = [{"type": "function", "function": {"name": "lookup"}}]
    governor = build_governor(GovernanceConfig(disabled=["sanitize_content"]), tmp_path)
    governed = governor.govern(history, system="Be brief.", tools=tools)
    assert governed.messages is history and governed.fits
    assert governed.tokens == count_request("Be brief.", history, tools)
    assert [entry.stage for entry in governed.report] == [*BUILTIN_ORDER, "final"]
    assert not governed.report.changed
    disabled = governed.report.entry("sanitize_content")
    assert disabled is not None and "disabled" in disabled.details[0]


def test_clean_path_report_is_built_once_and_equal_to_one_built_at_once(tmp_path: Path) -> None:
    """The clean path's report, built when first read, is one object, equal in value and repr
    to the report of an equal result whose entries were built at once."""
    history = [system(), *turn(1), *turn(2)]
    governed = build_governor(GovernanceConfig(), tmp_path).govern(history)
    assert not governed.changed
    first = governed.report
    assert governed.report is first
    first[0].details.append("noted by the caller")
    assert governed.report[0].details == ["noted by the caller"]
    built = attrs.evolve(governed, report=GovernanceReport(copy.deepcopy(list(first))))
    assert built == governed and repr(built) == repr(governed)
    assert built != attrs.evolve(governed, report=GovernanceReport(first[1:]))


@settings(
    max_examples=1_500,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(request=dirty_requests())
def test_clean_path_only_answers_for_histories_the_survey_finds_clean(
    request: DirtyRequest,
) -> None:
    """Whenever the one pass answers, the survey agrees: no defect, same tokens, no big result."""
    tokens = clean_tokens(request.messages, ROOMY, 2_000)
    if tokens is not None:
        survey = FactsCache().survey(request.messages)
        assert survey.defects == 0, request.dirt
        assert survey.tokens == tokens
        assert survey.largest_result <= 2_000


@settings(max_examples=500, derandomize=True, deadline=None, database=None)
@given(history=garbage_histories())
def test_clean_path_never_answers_for_garbage_the_survey_rejects(history: list[Any]) -> None:
    """On arbitrary entries, an answer from the one pass always matches a clean survey."""
    tokens = clean_tokens(history, ROOMY, LIMIT)
    if tokens is not None:
        survey = FactsCache().survey(history)
        assert survey.defects == 0 and survey.tokens == tokens
