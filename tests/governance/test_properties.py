"""Properties of the governor over dirty histories built from real conversations.

The four properties over real conversations generate NANOBOT_HYPOTHESIS_EXAMPLES histories
each and the garbage property a quarter of that: 14,450 by default, the figure CI runs.
Set the variable lower for a quick local run.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from nanobot_core.config import GovernanceConfig
from nanobot_core.governance import Stage
from nanobot_core.governance.continuity import GovernanceState
from nanobot_core.governance.invariants import check_invariants
from nanobot_core.governance.stages import strip_malformed_calls
from nanobot_core.governance.tokens import count_request
from tests.governance.builders import context, run_pure
from tests.governance.strategies import (
    GOVERNANCE_CONFIGS,
    NAMELESS_ERROR,
    DirtyRequest,
    GovernorFactory,
    build_builtin_governor,
    config_indices,
    dirty_requests,
    garbage_histories,
    hostile_stages,
    report_changed,
)

# The notice `strip_malformed_calls` leaves in a reply that lost calls: (dropped, count).
_DROPPED_NOTICE = re.compile(
    r"\[(?:None|(\d+)) of the (\d+) tool call\(s\) of this reply could (?:not )?run"
)

EXAMPLES = int(os.environ.get("NANOBOT_HYPOTHESIS_EXAMPLES", "3400"))

# Tokens a truncated newest user message may reasonably need when the budget is hopeless.
UNCUTTABLE_SLACK = 1_024

PROPERTY_SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    # Each example deep-copies a real conversation of up to 62 messages (some with a 6 KB
    # policy) and may add a 60,000-character tool result: generation is slower and bigger
    # than Hypothesis's defaults expect, by design.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module")
def governors(tmp_path_factory: pytest.TempPathFactory) -> GovernorFactory:
    """One governor per budget variant, sharing one offload store in a session temp dir."""
    workspace: Path = tmp_path_factory.mktemp("governance-properties")
    return GovernorFactory(workspace)


def _govern(governors: GovernorFactory, config_index: int, request: DirtyRequest) -> Any:
    governor = governors.get(GOVERNANCE_CONFIGS[config_index])
    return governor.govern(request.messages, system=request.system, tools=request.tools)


@PROPERTY_SETTINGS
@given(request=dirty_requests(), config_index=config_indices())
def test_governed_request_satisfies_every_invariant(
    governors: GovernorFactory, request: DirtyRequest, config_index: int
) -> None:
    """Whatever the dirt, governing never raises and the request it returns is legal."""
    result = _govern(governors, config_index, request)
    violations = check_invariants(
        result.messages,
        system=request.system,
        tools=request.tools,
        budget=result.budget,
        budget_unreachable=not result.fits,
    )
    assert violations == [], f"{request.source} {request.dirt}: {violations}"
    if not result.fits:
        # Giving up on the budget is only honest when the parts that cannot be cut (system
        # prompt, tools, leading system messages) leave no room for a short user message.
        leading = list(itertools.takewhile(lambda m: m["role"] == "system", result.messages))
        fixed = count_request(request.system, leading, request.tools)
        assert fixed > result.budget - UNCUTTABLE_SLACK, f"{request.source} {request.dirt}"


@PROPERTY_SETTINGS
@given(request=dirty_requests(), config_index=config_indices())
def test_governing_leaves_the_input_untouched(
    governors: GovernorFactory, request: DirtyRequest, config_index: int
) -> None:
    """The input list, every entry in it and everything nested stay exactly as they were."""
    snapshot = copy.deepcopy(request.messages)
    entries = [id(entry) for entry in request.messages]
    _govern(governors, config_index, request)
    assert [id(entry) for entry in request.messages] == entries
    assert request.messages == snapshot


@PROPERTY_SETTINGS
@given(request=dirty_requests(), config_index=config_indices())
def test_governing_is_idempotent(
    governors: GovernorFactory, request: DirtyRequest, config_index: int
) -> None:
    """Governing a governed request returns the very same list and reports no change."""
    first = _govern(governors, config_index, request)
    # Deterministic too: no time or random id in what the governor writes (invariant 7).
    assert _govern(governors, config_index, request).messages == first.messages
    governed = DirtyRequest(
        request.source, first.messages, request.tools, request.system, request.dirt
    )
    second = _govern(governors, config_index, governed)
    assert second.messages is first.messages, f"{request.source} {request.dirt}"
    assert not report_changed(second.report), f"{request.source} {request.dirt}"


def _nameless(call: Any) -> bool:
    """Whether a tool call names no tool: not a call, no function, or a blank name."""
    if not isinstance(call, dict):
        return True
    function = call.get("function")
    if not isinstance(function, dict):
        if not isinstance(call.get("name"), str):
            return True
        function = call
    name = function.get("name")
    return not isinstance(name, str) or not name.strip()


def _notices(message: Any) -> list[tuple[int, int]]:
    """The (dropped, count) of each dropped-calls notice in a message's text."""
    content = message.get("content") if isinstance(message, dict) else None
    texts = [content] if isinstance(content, str) else []
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict)]
    found = [m for text in texts if isinstance(text, str) for m in _DROPPED_NOTICE.finditer(text)]
    return [(int(m.group(1) or m.group(2)), int(m.group(2))) for m in found]


@PROPERTY_SETTINGS
@given(request=dirty_requests())
def test_every_reply_that_loses_calls_says_so_once(request: DirtyRequest) -> None:
    """Each reply some of whose calls have no name keeps exactly one notice, giving how many
    of how many were left out, in history order; a reply that loses none gets none, and the
    notices are left as they are when the repair runs again."""
    expected = []
    for message in request.messages:
        if not (isinstance(message, dict) and message.get("role") == "assistant"):
            continue
        calls = message.get("tool_calls")
        dropped = sum(map(_nameless, calls)) if isinstance(calls, list) else 0
        if dropped:
            expected.append((dropped, len(calls)))
    outcome = run_pure(strip_malformed_calls, request.messages, context())
    told = [notice for message in outcome.messages for notice in _notices(message)]
    assert told == expected, f"{request.source} {request.dirt}"
    again = run_pure(strip_malformed_calls, outcome.messages, context())
    assert again.messages is outcome.messages and not again.changed


_CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def _ends_with_own_reply(history: list[Any]) -> bool:
    """Whether the last chat message of a history (other entries passed over) is an assistant
    message that makes no call: a reply the caller may have the model go on with."""
    for entry in reversed(history):
        role = entry.get("role") if isinstance(entry, dict) else None
        if isinstance(role, str) and role in _CHAT_ROLES:
            calls = entry.get("tool_calls") or entry.get("function_call")
            return role == "assistant" and not calls
    return False


@st.composite
def _requests_ending_with_a_lost_reply(draw: st.DrawFn) -> DirtyRequest:
    """A dirty request whose newest reply made only calls without a name, answered by the
    error the runner gives (all, some or none of them), maybe with junk after it."""
    request = draw(dirty_requests())
    count = draw(st.integers(1, 3))
    name = draw(st.sampled_from(["", None, "  "]))
    ids = [f"lost_{k}" for k in range(count)]
    reply = {
        "role": "assistant",
        "content": draw(st.sampled_from([None, "", "Let me look."])),
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": name, "arguments": "{}"}}
            for i in ids
        ],
    }
    answered = [
        {"role": "tool", "tool_call_id": i, "content": NAMELESS_ERROR}
        for i in ids[: draw(st.integers(0, count))]
    ]
    junk = draw(st.sampled_from([[], [42], [{"_meta": {"kind": "governance"}}]]))
    messages = [*request.messages, reply, *answered, *junk]
    dirt = (*request.dirt, "lost_reply_last")
    return DirtyRequest(request.source, messages, request.tools, request.system, dirt)


@PROPERTY_SETTINGS
@given(
    request=st.one_of(dirty_requests(), _requests_ending_with_a_lost_reply()),
    config_index=config_indices(),
)
def test_a_request_ends_with_an_assistant_message_only_where_the_history_does(
    governors: GovernorFactory, request: DirtyRequest, config_index: int
) -> None:
    """No governed request ends with an assistant message (a notice a repair left, say) when
    the history ends with a call or a result for the model to answer, and none gets a user
    message added after the reply the history ends with."""
    result = _govern(governors, config_index, request)
    last = result.messages[-1]
    if _ends_with_own_reply(request.messages):
        added = last == {"role": "user", "content": "(continue)"}
        before = result.messages[-2] if len(result.messages) > 1 else {}
        assert not (added and before.get("role") == "assistant"), request.dirt
    else:
        assert last["role"] != "assistant", f"{request.source} {request.dirt}"


_CONTINUE = {"role": "user", "content": "(continue)"}


@settings(PROPERTY_SETTINGS, max_examples=max(1, EXAMPLES // 10))
@given(request=_requests_ending_with_a_lost_reply(), offset=st.integers(0, 64))
def test_a_request_ending_with_an_added_user_message_fits_where_the_history_alone_just_fits(
    governors: GovernorFactory, request: DirtyRequest, offset: int
) -> None:
    """At a budget the governed history fits without the "(continue)" the final step adds but
    not with it, the request is legal and within the budget, and a fresh governor given its
    state sends the same, before and after the model answers."""
    ask = {"system": request.system, "tools": request.tools}
    roomy = build_builtin_governor(GovernanceConfig(), governors.workspace)
    unbounded = roomy.govern(request.messages, **ask)
    if unbounded.messages[-1] != _CONTINUE:
        return  # the history ends with the assistant's own reply: nothing is added
    without = count_request(request.system, unbounded.messages[:-1], request.tools)
    room = unbounded.tokens - without
    assert room > 0
    config = GovernanceConfig(input_limit=without + offset % room)
    session = build_builtin_governor(config, governors.workspace)
    sent = session.govern(request.messages, **ask)
    where = f"{request.source} {request.dirt} budget {config.input_limit}"
    assert sent.messages[-1]["role"] != "assistant", where
    violations = check_invariants(
        sent.messages, **ask, budget=config.input_limit, budget_unreachable=not sent.fits
    )
    assert violations == [], f"{where}: {violations}"
    state = GovernanceState.from_record(json.loads(json.dumps(sent.state.to_record())))
    fresh = build_builtin_governor(config, governors.workspace)
    fresh.restore(state)
    assert fresh.govern(request.messages, **ask).messages == sent.messages, where
    answered = [*request.messages, {"role": "assistant", "content": "Done."}]
    later = session.govern(answered, **ask)
    fresh = build_builtin_governor(config, governors.workspace)
    fresh.restore(state)
    assert fresh.govern(answered, **ask).messages == later.messages, where


@PROPERTY_SETTINGS
@given(
    request=dirty_requests(),
    config_index=config_indices(),
    hostile=st.sampled_from(hostile_stages()),
)
def test_misbehaving_third_party_stage_cannot_break_the_request(
    governors: GovernorFactory, request: DirtyRequest, config_index: int, hostile: Stage
) -> None:
    """A plugin stage that raises, mutates or breaks the history cannot break the request."""
    snapshot = copy.deepcopy(request.messages)
    governor = governors.get(GOVERNANCE_CONFIGS[config_index], [hostile])
    result = governor.govern(request.messages, system=request.system, tools=request.tools)
    assert request.messages == snapshot
    violations = check_invariants(
        result.messages,
        system=request.system,
        tools=request.tools,
        budget=result.budget,
        budget_unreachable=not result.fits,
    )
    assert violations == [], f"{hostile.name} {request.source} {request.dirt}: {violations}"


# Recursive garbage is slow to generate and quick to cover: a quarter of the examples.
@settings(PROPERTY_SETTINGS, max_examples=max(1, EXAMPLES // 4))
@given(messages=garbage_histories(), config_index=config_indices())
def test_governing_garbage_never_raises_and_is_legal(
    governors: GovernorFactory, messages: list[Any], config_index: int
) -> None:
    """Even a list of arbitrary JSON-like values governs without raising into a legal request."""
    result = governors.get(GOVERNANCE_CONFIGS[config_index]).govern(messages)
    violations = check_invariants(
        result.messages, budget=result.budget, budget_unreachable=not result.fits
    )
    assert violations == []


DEFECTS = {
    "unpaired or orphan results": "answers no call",
    "unanswered calls": "no result among",
    "duplicated results": "expected exactly one",
    "ids repeated within a message": "id repeats",
    "empty ids": "id is ",
    "broken arguments": "arguments is",
    "bad names": "name is ",
    "history not starting at a user": "must start at a user message",
    "lone surrogates": "not encodable",
    "empty tool results": "empty result",
    "non-message entries": "not a message dict",
    "unknown roles": "unknown role",
    "legacy function calls": "legacy function_call",
}


# `find` renders every example it tries; a real conversation makes a long repr, harmlessly.
@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@pytest.mark.parametrize("marker", DEFECTS.values(), ids=DEFECTS.keys())
def test_strategy_produces_each_defect(marker: str) -> None:
    """The generated histories really contain each defect the properties claim to cover."""
    found = find(
        dirty_requests(),
        lambda request: any(
            marker in violation
            for violation in check_invariants(request.messages, tools=request.tools)
        ),
        settings=settings(
            max_examples=2_000,
            derandomize=True,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        ),
    )
    assert any(marker in v for v in check_invariants(found.messages, tools=found.tools))
