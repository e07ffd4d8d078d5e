"""Governance reads a call's arguments by one depth rule, the same on every Python version.

The standard library's parser gives up at a depth that depends on the version (about
1,000 levels on 3.11, 1,500 on 3.12, 10,000 on 3.13); governance holds arguments to the
JSON boundary's `MAX_ENCODED_DEPTH` instead, so a history heals the same way everywhere.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nanobot_core._json_boundary import MAX_ENCODED_DEPTH, JSONLimitError, nests_past
from nanobot_core.config import GovernanceConfig
from nanobot_core.governance import Governor, builtin_stages, checks, to_messages_api
from nanobot_core.governance.checks import arguments_ok, decode_arguments
from nanobot_core.governance.invariants import check_tool_pairing
from nanobot_core.governance.stages.arguments import normalise_arguments

TOO_DEEP = f"arrays or objects nested deeper than {MAX_ENCODED_DEPTH} levels"


def _arguments(depth: int, opener: str = "[") -> str:
    """An object of `depth` levels: ``{"a": ...}`` around `depth` - 1 arrays or objects."""
    inner = depth - 1
    closer = "]" if opener == "[" else "}"
    opened = "[" if opener == "[" else '{"a":'
    return '{"a":' + opened * inner + "0" + closer * inner + "}"


def _cut(text: str) -> str:
    """`text` cut short before its last three characters, as an output limit leaves it."""
    return text[:-3]


def _history(arguments: str) -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": "get", "arguments": arguments}}
    return [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "name": "get", "content": "done"},
    ]


def _reference_depth(text: str) -> int:
    """How deep `text` nests outside strings at its deepest, read one character at a time."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


@given(text=st.text(alphabet='[]{}"\\a, ', max_size=60), limit=st.integers(0, 8))
@example(text='"[[[["[[', limit=1)
@example(text='["\\"[[[', limit=1)
def test_nests_past_counts_the_levels_outside_strings(text: str, limit: int) -> None:
    """`nests_past` says whether a text, JSON or not, opens more than `limit` levels outside
    its strings (an escaped quote does not close one), as a character-by-character reading does."""
    assert nests_past(text, limit) == (_reference_depth(text) > limit)


@settings(max_examples=40, deadline=None)
@given(
    depth=st.integers(1, 20_000) | st.sampled_from([MAX_ENCODED_DEPTH, MAX_ENCODED_DEPTH + 1]),
    opener=st.sampled_from(["[", "{"]),
)
@example(depth=3_000, opener="[")
@example(depth=1_200, opener="{")
def test_whole_arguments_are_refused_past_the_encoded_depth_on_every_version(
    depth: int, opener: str
) -> None:
    """Arguments nested up to MAX_ENCODED_DEPTH are fine as they are; deeper, every reader in
    governance refuses them for depth, whatever depth Python's parser reaches."""
    text = _arguments(depth, opener)
    if depth <= MAX_ENCODED_DEPTH:
        assert arguments_ok(text)
        assert normalise_arguments(text) == (text, None)
        assert check_tool_pairing(_history(text)) == []
        return
    assert not arguments_ok(text)
    with pytest.raises(JSONLimitError, match=TOO_DEEP):
        decode_arguments(text)
    fixed, note = normalise_arguments(text)
    assert fixed == "{}"
    assert note is not None and note.endswith(f"hold {TOO_DEEP}: replaced with {{}}")
    [problem] = check_tool_pairing(_history(text))
    assert f"arguments cannot be used (they hold {TOO_DEEP})" in problem


@settings(max_examples=40, deadline=None)
@given(depth=st.integers(MAX_ENCODED_DEPTH + 1, 20_000))
@example(depth=3_000)
def test_arguments_cut_off_past_the_encoded_depth_are_refused_for_depth(depth: int) -> None:
    """Text cut short after nesting past MAX_ENCODED_DEPTH is refused for depth, not taken for
    broken JSON on one version and too deep on another."""
    text = _cut(_arguments(depth))
    with pytest.raises(JSONLimitError, match=TOO_DEEP):
        decode_arguments(text)
    assert not arguments_ok(text)
    fixed, note = normalise_arguments(text)
    assert fixed == "{}"
    assert note is not None and note.endswith(f"hold {TOO_DEEP}: replaced with {{}}")


def test_arguments_cut_off_within_the_depth_are_broken_json() -> None:
    """Text cut short at 400 levels is not JSON (a ValueError, never a JSONLimitError): the
    arguments stage tries to repair it."""
    text = _cut(_arguments(400))
    with pytest.raises(ValueError) as raised:
        decode_arguments(text)
    assert not isinstance(raised.value, JSONLimitError)
    assert "are not a JSON object" in str(normalise_arguments(text)[1])


def test_a_history_with_arguments_nested_3000_deep_heals_the_same_on_every_version() -> None:
    """The governor replaces arguments 3,000 levels deep by ``{}`` and says why (3.13's parser
    decodes them, 3.11's gives up), and sends arguments 500 levels deep as they are."""
    governor = Governor(builtin_stages(), config=GovernanceConfig())
    deep = governor.govern(_history(_arguments(3_000)))
    assert deep.messages[1]["tool_calls"][0]["function"]["arguments"] == "{}"
    said = [line for entry in deep.report for line in entry.details]
    assert any(TOO_DEEP in line for line in said), said
    kept = _history(_arguments(MAX_ENCODED_DEPTH))
    assert governor.govern(kept).messages == kept


def test_the_messages_api_names_arguments_past_the_encoded_depth() -> None:
    """At the provider's edge, arguments 3,000 levels deep are a ValueError naming the message
    and the call and the depth, on every version; 500 levels deep they are the call's input."""
    with pytest.raises(ValueError, match=rf"messages\[1\]: .* call 'c1' hold {TOO_DEEP}"):
        to_messages_api(_history(_arguments(3_000)))
    request = to_messages_api(_history(_arguments(MAX_ENCODED_DEPTH)))
    [block] = request.messages[1]["content"]
    assert json.dumps(block["input"], separators=(",", ":")) == _arguments(MAX_ENCODED_DEPTH)


def test_short_arguments_cost_no_depth_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Arguments no longer than MAX_ENCODED_DEPTH characters cannot nest past it: their
    brackets are neither counted nor walked."""

    def counted(text: str, value: Any) -> bool:
        raise AssertionError(f"depth checked for {text!r}")

    monkeypatch.setattr(checks, "past_encoded_depth", counted)
    assert arguments_ok(json.dumps({"path": "src/app.py", "rows": [[1, [2]], {"a": {}}]}))
    with pytest.raises(AssertionError, match="depth checked"):
        arguments_ok(_arguments(MAX_ENCODED_DEPTH))
