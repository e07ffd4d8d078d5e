"""The runner records the governor's decisions in the session and restores them on resume."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from tests.headless.fake_server import FakeChatServer, text_reply
from tests.headless.test_runner import Harness, _session_records


@pytest.fixture
def runs(tmp_path: Path, server: FakeChatServer) -> Harness:
    """A runner factory over real parts, aimed at the fake server."""
    return Harness(tmp_path, server)


def _records(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The governance record lines (other records, such as usage, left out)."""
    return [
        line
        for line in lines
        if "role" not in line and line.get("_meta", {}).get("kind") == "governance"
    ]


def test_cuts_are_recorded_and_each_new_runner_keeps_the_prefix_sent_before(
    runs: Harness, server: FakeChatServer
) -> None:
    """Every turn builds a new runner: restored from the record, it keeps the cut it made."""
    server.add(text_reply("ok"))
    base = runs.turn("hello").governance[0].tokens
    runs.config.governance.input_limit = base + 1_500
    for index in range(12):
        server.add(text_reply(f"answer {index} " + "a" * 900))
        runs.turn(f"question {index} " + "q" * 900)
    records = _records(_session_records(runs.workspace, "default"))
    assert records, "a cut was needed, so it was recorded"
    assert all(set(r) == {"_meta"} for r in records)
    bodies = server.bodies()
    for body in bodies:
        assert all(m.get("role") for m in body["messages"])
        assert "_meta" not in json.dumps(body["messages"])
    pairs = list(itertools.pairwise(bodies[1:]))  # after the first turn, which had no limit
    kept = [b["messages"][: len(a["messages"])] == a["messages"] for a, b in pairs]
    assert sum(kept) >= len(kept) // 2, kept
    assert not all(kept)  # the budget forced a new cut now and then


def test_a_session_without_cuts_gets_no_record(runs: Harness, server: FakeChatServer) -> None:
    """While everything fits, nothing but messages is appended to the session."""
    server.add(text_reply("one"), text_reply("two"))
    runs.turn("first")
    runs.turn("second")
    assert _records(_session_records(runs.workspace, "default")) == []
