"""Properties of one governor across the calls of a growing session, over real conversations.

A session is several real conversations (τ-bench, LLaMA-Factory) one after the other,
dirtied the ways real histories break, and governed at a series of call points by one
governor, as the runner does. Whatever it remembers between calls must never change what it
sends: a fresh governor handed the state recorded after the call before sends the same.
The number of sessions is NANOBOT_SESSION_EXAMPLES (150 by default, the figure CI runs).
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nanobot_core.config import GovernanceConfig
from nanobot_core.governance import Stage, StageOutcome
from nanobot_core.governance.continuity import GovernanceState
from nanobot_core.governance.invariants import check_invariants
from tests.governance.strategies import (
    NAMELESS_ERROR,
    OPERATIONS,
    build_builtin_governor,
    llamafactory_conversations,
    tau_bench_conversations,
)

EXAMPLES = int(os.environ.get("NANOBOT_SESSION_EXAMPLES", "150"))

SYSTEM = "You are a careful assistant. " * 20

# Windows in which these sessions compact, cut whole turns and cut between steps; one keeps
# offloading busy, one cuts near the budget (a high watermark), two change the pipeline.
SESSION_CONFIGS: tuple[GovernanceConfig, ...] = (
    GovernanceConfig(context_window=6_000, max_output=0, safety_margin=0),
    GovernanceConfig(
        context_window=6_000, max_output=0, safety_margin=0, max_tool_result_chars=2_000
    ),
    GovernanceConfig(context_window=12_000, max_output=0, safety_margin=0),
    GovernanceConfig(context_window=20_000, max_output=0, safety_margin=0, low_watermark=0.9),
    GovernanceConfig(context_window=9_000, max_output=1_024, safety_margin=256),
    # Offloading made a whole-list stage by its options; two built-ins turned off.
    GovernanceConfig(
        context_window=8_000,
        max_output=0,
        safety_margin=0,
        max_tool_result_chars=1_000,
        stages={"offload_results": {"exclude_tools": ["get_user_details"]}},
    ),
    GovernanceConfig(
        context_window=8_000,
        max_output=0,
        safety_margin=0,
        max_tool_result_chars=800,
        disabled=["merge_user_turns", "sanitize_content"],
    ),
)


def _unchanged(messages: list[Any], ctx: Any) -> StageOutcome:
    return StageOutcome.unchanged(messages)


def _renamed(messages: list[Any], ctx: Any) -> StageOutcome:
    (message,) = messages
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str) or "reservation" not in content:
        return StageOutcome.unchanged(messages)
    renamed = {**message, "content": content.replace("reservation", "booking")}
    return StageOutcome([renamed], changed=True)


# A plugin stage that declares nothing, one that works message by message, and one that
# rewrites a word τ-bench's texts (user, assistant and tool alike) are full of.
PLUGIN_STAGES: tuple[tuple[Stage, ...], ...] = (
    (),
    (Stage("noop_plugin", _unchanged),),
    (Stage("noop_per_message", _unchanged, per_message=True),),
    (Stage("renames", _renamed, per_message=True, prefilter=lambda text: "reservation" in text),),
)

Draw = Callable[[st.SearchStrategy[Any]], Any]


@attrs.frozen
class Session:
    """A grown history, the points at which the model is called, and the governor's set-up."""

    messages: list[Any] = attrs.field(repr=lambda m: f"<{len(m)} entries>")
    ends: tuple[int, ...]
    config: int
    plugin: int
    dirt: tuple[str, ...]


def _is(message: Any, role: str) -> bool:
    return isinstance(message, dict) and message.get("role") == role


def _call_points(draw: Draw, messages: list[Any]) -> list[int]:
    """Before each user message, after each run of results, or anywhere: how agents call."""
    size = len(messages)
    kind = draw(st.sampled_from(["turns", "steps", "anywhere"]))
    if kind == "turns":
        points = [i for i, m in enumerate(messages) if i and _is(m, "user")]
    elif kind == "steps":
        points = [
            i + 1
            for i, m in enumerate(messages)
            if _is(m, "tool") and (i + 1 == size or not _is(messages[i + 1], "tool"))
        ]
    else:
        points = draw(st.lists(st.integers(1, max(1, size)), min_size=1, max_size=12))
    points = sorted({*points, size})
    # Enough calls to grow across cuts, few enough to keep an example quick.
    step = len(points) // 40 + 1
    return sorted({*points[::step], size})


@st.composite
def sessions(draw: Draw) -> Session:
    """Real conversations in a row, dirtied, with where the model is called."""
    pool = draw(st.sampled_from([tau_bench_conversations(), llamafactory_conversations()]))
    messages: list[Any] = []
    for _ in range(draw(st.sampled_from([3, 12, 30, 60]))):
        conversation = draw(st.sampled_from(pool))
        messages += copy.deepcopy([m for m in conversation.messages if not _is(m, "system")])
    applied = []
    for _ in range(draw(st.integers(0, 10))):
        operation = draw(st.sampled_from(OPERATIONS))
        operation(draw, messages)
        applied.append(operation.__name__)
    return Session(
        messages,
        tuple(_call_points(draw, messages)),
        draw(st.integers(0, len(SESSION_CONFIGS) - 1)),
        draw(st.integers(0, len(PLUGIN_STAGES) - 1)),
        tuple(applied),
    )


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(session=sessions())
def test_a_session_sends_what_a_fresh_governor_with_its_state_sends(
    tmp_path_factory: pytest.TempPathFactory, session: Session
) -> None:
    """Every call is legal, repeatable, and what a fresh governor sends from the recorded state."""
    _check_session(tmp_path_factory, session)


@st.composite
def sessions_with_a_lost_reply(draw: Draw) -> Session:
    """A session in which one reply made only calls without a name, each answered by the error
    the runner gives, and the model is called right after them (then again, later)."""
    session = draw(sessions())
    messages = session.messages
    replies = [i for i, m in enumerate(messages) if _is(m, "assistant") and m.get("tool_calls")]
    if not replies:
        return session
    index = draw(st.sampled_from(replies))
    calls = messages[index]["tool_calls"]
    ids = {c.get("id") for c in calls if isinstance(c, dict)}
    lost = [{"id": c.get("id"), "function": {"name": ""}} for c in calls if isinstance(c, dict)]
    messages[index] = {**messages[index], "tool_calls": lost or [{"function": {"name": ""}}]}
    end = index + 1
    while end < len(messages) and _is(messages[end], "tool"):
        if messages[end].get("tool_call_id") in ids:
            messages[end] = {**messages[end], "content": NAMELESS_ERROR}
        end += 1
    ends = tuple(sorted({*session.ends, end}))
    return attrs.evolve(session, ends=ends, dirt=(*session.dirt, "lost_reply"))


@settings(
    max_examples=max(1, EXAMPLES // 3),
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(session=sessions_with_a_lost_reply())
def test_a_session_with_a_reply_that_lost_every_call_sends_what_a_fresh_governor_sends(
    tmp_path_factory: pytest.TempPathFactory, session: Session
) -> None:
    """Called right after a reply whose calls all had no name, and later on, a session sends
    no assistant message last, and what a fresh governor sends from the recorded state."""
    _check_session(tmp_path_factory, session)


def _check_session(tmp_path_factory: pytest.TempPathFactory, session: Session) -> None:
    """Govern `session` at each of its ends with one governor, checking every call."""
    workspace = tmp_path_factory.mktemp("session")
    config, plugin = SESSION_CONFIGS[session.config], PLUGIN_STAGES[session.plugin]
    governor = build_builtin_governor(config, workspace, plugin)
    state = GovernanceState()
    for end in session.ends:
        history = session.messages[:end]
        where = f"{session.dirt} config {session.config} plugin {session.plugin} at {end}"
        snapshot = copy.deepcopy(history)
        sent = governor.govern(history, system=SYSTEM)
        assert history == snapshot, where
        violations = check_invariants(
            sent.messages, system=SYSTEM, budget=sent.budget, budget_unreachable=not sent.fits
        )
        assert violations == [], f"{where}: {violations}"
        if _is(history[-1], "tool"):  # the model is to answer: never an assistant message last
            assert sent.messages[-1]["role"] != "assistant", where
        fresh = build_builtin_governor(config, workspace, plugin)
        fresh.restore(state)
        assert fresh.govern(history, system=SYSTEM).messages == sent.messages, where
        again = governor.govern(history, system=SYSTEM)
        assert again.messages == sent.messages, where
        assert again.prefix.kept, where
        state = GovernanceState.from_record(json.loads(json.dumps(sent.state.to_record())))


@settings(
    max_examples=max(1, EXAMPLES // 3),
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(first=sessions(), second=sessions(), order=st.lists(st.booleans(), min_size=2, max_size=30))
def test_a_governor_used_for_two_sessions_in_turn_sends_what_a_fresh_one_sends(
    tmp_path_factory: pytest.TempPathFactory, first: Session, second: Session, order: list[bool]
) -> None:
    """One governor used alternately for two sessions: a call whose history does not extend
    the one governed last sends what a fresh governor sends for it (no state of the other
    session leaks in), and each call is legal."""
    workspace = tmp_path_factory.mktemp("sessions")
    config, plugin = SESSION_CONFIGS[first.config], PLUGIN_STAGES[first.plugin]
    governor = build_builtin_governor(config, workspace, plugin)
    both, calls = (first, second), [0, 0]
    previous: list[Any] = []
    for which in map(int, order):
        session = both[which]
        if calls[which] == len(session.ends):
            continue
        end = session.ends[calls[which]]
        calls[which] += 1
        history = session.messages[:end]
        sent = governor.govern(history, system=SYSTEM)
        where = f"session {which} at {end}: {first.dirt} / {second.dirt}"
        violations = check_invariants(
            sent.messages, system=SYSTEM, budget=sent.budget, budget_unreachable=not sent.fits
        )
        assert violations == [], f"{where}: {violations}"
        # Equal to the start of the last history, it is taken as its continuation.
        if history[: len(previous)] != previous:
            fresh = build_builtin_governor(config, workspace, plugin)
            assert fresh.govern(history, system=SYSTEM).messages == sent.messages, where
        previous = history
