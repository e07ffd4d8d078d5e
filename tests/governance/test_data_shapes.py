"""Coding-agent histories of another real shape: SWE-agent's function-calling trajectories.

SWE-agent (GPT-4o) stores extra keys on every message (`agent`, `message_type`,
`thought`, `action`) and links a tool message to its call with a LIST field
`tool_call_ids` instead of OpenAI's `tool_call_id` string.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from nanobot_core.config import GovernanceConfig
from nanobot_core.governance.invariants import check_invariants
from tests.governance.strategies import build_builtin_governor, report_changed
from tests.helpers import data_dir

SWE_AGENT_KEYS = ("agent", "message_type", "thought", "action")


@cache
def swe_agent_histories() -> tuple[tuple[str, list[dict[str, Any]]], ...]:
    """(trajectory name, history) of the five SWE-agent function-calling trajectories."""
    folder = data_dir() / "swe-agent-trajectories"
    paths = sorted(folder.rglob("*.traj"))
    return tuple(
        (f"{path.parent.name[:40]}/{path.stem}", json.loads(path.read_text("utf-8"))["history"])
        for path in paths
    )


def in_openai_shape(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history with each `tool_call_ids: [id]` given as OpenAI's `tool_call_id` instead."""
    return [
        {
            **{k: v for k, v in message.items() if k != "tool_call_ids"},
            "tool_call_id": message["tool_call_ids"][0],
        }
        if message["role"] == "tool"
        else message
        for message in history
    ]


def _name(item: tuple[str, Any]) -> str:
    return item[0]


@pytest.fixture(scope="module")
def governor(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The built-in governor with the default budget."""
    workspace: Path = tmp_path_factory.mktemp("shapes")
    return build_builtin_governor(GovernanceConfig(), workspace)


def test_all_five_trajectories_are_found() -> None:
    """The five SWE-agent trajectories of the shared data are all exercised."""
    assert len(swe_agent_histories()) == 5


@pytest.mark.parametrize("trajectory", swe_agent_histories(), ids=_name)
def test_swe_agent_history_in_openai_shape_is_sent_as_is(
    governor: Any, trajectory: tuple[str, list[dict[str, Any]]]
) -> None:
    """A real coding-agent history, once linked by `tool_call_id`, is sent untouched."""
    messages = in_openai_shape(trajectory[1])
    assert check_invariants(messages) == []
    result = governor.govern(messages)
    assert result.messages is messages
    assert not report_changed(result.report)


@pytest.mark.parametrize("trajectory", swe_agent_histories(), ids=_name)
def test_swe_agent_history_as_stored_becomes_legal_keeping_its_keys(
    governor: Any, trajectory: tuple[str, list[dict[str, Any]]]
) -> None:
    """The stored shape is made legal, and SWE-agent's own keys reach the model untouched."""
    history = trajectory[1]
    sent = governor.govern(history).messages
    assert check_invariants(sent) == []
    # Every result is read through `tool_call_ids`: none is dropped, none backfilled.
    assert sent == in_openai_shape(history)
    kept = [m for m in sent if m.get("role") in {"system", "user", "assistant"}]
    originals = [m for m in history if m["role"] in {"system", "user", "assistant"}]
    assert [{k: m.get(k) for k in SWE_AGENT_KEYS} for m in kept] == [
        {k: m.get(k) for k in SWE_AGENT_KEYS} for m in originals
    ]
