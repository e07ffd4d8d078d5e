"""`Session.shared_history`: the session's messages as the same objects, and governing them.

Before each model call the runner governs `Session.shared_history()`, the same message
objects every call, instead of a copy of the whole session (`history`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core.config import GovernanceConfig
from nanobot_core.jsonl_store import JsonlSessionStore
from tests.governance.builders import agent_session
from tests.governance.strategies import build_builtin_governor

# -- the session ------------------------------------------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)
_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool"]), "content": st.text(max_size=20)},
    optional={"tool_calls": st.lists(_JSON, max_size=2), "extra": _JSON},
)
# One append: messages, each with bookkeeping or none, or a record line (only ``_meta``).
_BATCH = st.lists(
    st.one_of(
        st.tuples(_MESSAGE, st.none() | st.fixed_dictionaries({"time": st.text(max_size=5)})),
        st.fixed_dictionaries({"_meta": st.fixed_dictionaries({"kind": st.just("usage")})}),
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(_BATCH, min_size=1, max_size=5))
def test_shared_history_is_the_history_as_the_same_objects(batches: list[list[Any]]) -> None:
    """After each append it equals `history`, holds the earlier objects again, and reloads equal."""
    with tempfile.TemporaryDirectory() as workspace:
        store = JsonlSessionStore(workspace)
        with store.open("s") as session:
            before: list[Mapping[str, Any]] = []
            for batch in batches:
                for item in batch:
                    if isinstance(item, tuple):
                        session.append(*item)
                    else:
                        session.append_records([item])
                shared = session.shared_history()
                assert shared == session.history()
                assert all(a is b for a, b in zip(before, shared, strict=False))
                assert len(shared) >= len(before)
                before = shared
        with store.open("s") as reopened:
            assert reopened.shared_history() == reopened.history() == before


def test_a_shared_message_changed_by_its_reader_leaves_the_stored_lines_alone(
    tmp_path: Path,
) -> None:
    """Breaking the read-only rule reaches neither `history`, `records` nor the file."""
    message = {
        "role": "assistant",
        "content": "calling",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    store = JsonlSessionStore(tmp_path)
    with store.open("s") as session:
        session.append(message, {"time": "t0"})
        (shared,) = session.shared_history()
        assert isinstance(shared, dict)
        shared["content"] = "changed"
        shared["tool_calls"][0]["function"]["arguments"] = '{"x": 1}'
        shared["tool_calls"].append({"id": "c2"})
        shared["added"] = True
        assert session.history() == [message]
        assert session.records == [{**message, "_meta": {"time": "t0"}}]
    with store.open("s") as reopened:
        assert reopened.history() == [message]


def test_a_changed_history_copy_leaves_the_shared_messages_alone(tmp_path: Path) -> None:
    """`history` still gives copies the caller may change: the shared messages stay as stored."""
    message = {"role": "tool", "tool_call_id": "c1", "content": "result", "extra": {"a": [1]}}
    with JsonlSessionStore(tmp_path).open("s") as session:
        session.append(message)
        (copied,) = session.history()
        copied["extra"]["a"].append(2)
        copied["content"] = "changed"
        assert session.shared_history() == [message]
        assert session.history() == [message]


# -- governing them ---------------------------------------------------------------------------

# A window that cuts and compacts a long session, and a wider one that also offloads results.
_WINDOWS = (
    GovernanceConfig(context_window=6_000, max_output=0, safety_margin=0),
    GovernanceConfig(
        context_window=12_000, max_output=0, safety_margin=0, max_tool_result_chars=1_000
    ),
)


@pytest.mark.parametrize("config", _WINDOWS, ids=["cut", "offload"])
def test_governing_the_shared_messages_sends_what_governing_copies_sends(
    tmp_path: Path, config: GovernanceConfig
) -> None:
    """Over a growing session, a governor given the shared objects answers as one given copies."""
    messages = [m for m in agent_session(40) if isinstance(m, dict)]
    shared_governor = build_builtin_governor(config, tmp_path / "a")
    copies_governor = build_builtin_governor(config, tmp_path / "b")
    system = "You are a careful assistant. " * 20
    calls = 0
    with JsonlSessionStore(tmp_path / "ws").open("s") as session:
        for message in messages:
            if message.get("role") == "user" and session.seq:
                shared = shared_governor.govern(session.shared_history(), system=system)
                copied = copies_governor.govern(session.history(), system=system)
                assert shared.messages == copied.messages
                assert (shared.tokens, shared.fits, shared.state, shared.prefix) == (
                    copied.tokens,
                    copied.fits,
                    copied.state,
                    copied.prefix,
                )
                assert [e.to_json() for e in shared.report] == [e.to_json() for e in copied.report]
                calls += 1
            session.append(message, {"time": "t"})
    assert calls == 40
    # The window cut the session and compacted in it: the governors' memos had work.
    assert shared_governor.state.start > 0 and shared_governor.state.compacted


def test_the_shared_messages_copy_containers_and_share_the_strings(tmp_path: Path) -> None:
    """The second copy docs/limits.md measures: dicts and lists apart, every string shared."""
    text = "x" * 2_000
    message = {
        "role": "assistant",
        "content": text,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": text}}
        ],
    }
    with JsonlSessionStore(tmp_path).open("s") as session:
        session.append(message, {"round": 1})
        (record,) = session._records
        (shared,) = session.shared_history()
        assert shared is not record and shared["tool_calls"] is not record["tool_calls"]
        assert shared["content"] is record["content"]
        call, stored = shared["tool_calls"][0], record["tool_calls"][0]
        assert call["function"] is not stored["function"]
        assert call["function"]["arguments"] is stored["function"]["arguments"]
