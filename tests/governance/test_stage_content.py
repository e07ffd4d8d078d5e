"""`sanitize_content` on its own."""

from __future__ import annotations

from typing import Any

import pytest

from nanobot_core.governance.stages import sanitize_content
from nanobot_core.governance.stages.content import without_surrogates
from tests.governance.builders import call, calls, result, run_pure, say, user

LONE = "lone surrogates (not encodable in UTF-8) replaced with U+FFFD"
PAIRS = "surrogate pairs held as two code points joined into the characters they encode"


def test_lone_surrogates_are_replaced_everywhere() -> None:
    """Content, arguments and keys the pipeline does not know all become encodable."""
    message = {
        **calls(call("c", "f", '{"q": "a\ud83d"}'), content="half an emoji \ud83d"),
        "reasoning_content": "\udfff thinking",
    }
    outcome = run_pure(sanitize_content, [user(), message, result("c")])
    fixed = outcome.messages[1]
    assert fixed["content"] == "half an emoji \ufffd"
    assert fixed["tool_calls"][0]["function"]["arguments"] == '{"q": "a\ufffd"}'
    assert fixed["reasoning_content"] == "\ufffd thinking"
    assert "surrogates" in outcome.details[0]


def test_surrogate_pairs_are_joined_not_replaced() -> None:
    """A pair written as two code points becomes the character it encodes."""
    assert without_surrogates("smile \ud83d\ude00") == "smile \U0001f600"


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("smile \ud83d\ude00", [PAIRS]),
        ("half \ud83d", [LONE]),
        ("both \ud83d\ude00 and \udfff", [LONE, PAIRS]),
    ],
    ids=["a pair", "a half alone", "both"],
)
def test_the_report_says_which_surrogates_were_fixed(content: str, said: list[str]) -> None:
    """A pair held as two code points is reported joined, a half alone replaced, both when a
    message held both: never a lone surrogate replaced where there was none."""
    outcome = run_pure(sanitize_content, [user(content)])
    assert outcome.details == [f"messages[0]: {note}" for note in said]


@pytest.mark.parametrize("content", [None, "", [], "<missing>"])
def test_empty_tool_result_reads_no_output(content: Any) -> None:
    """A result with no output gets the text "(no output)"."""
    empty = result("c", content)
    if content == "<missing>":
        del empty["content"]
    outcome = run_pure(sanitize_content, [user(), calls(call("c")), empty])
    assert outcome.messages[2]["content"] == "(no output)"


def test_content_of_a_foreign_type_becomes_text() -> None:
    """A dict or number as content is sent as its JSON text."""
    history = [
        user(),
        {"role": "assistant", "content": {"answer": 42}},
        {"role": "user", "content": 7},
    ]
    messages = run_pure(sanitize_content, history).messages
    assert messages[1]["content"] == '{"answer": 42}'
    assert messages[2]["content"] == "7"


def test_parts_that_are_not_objects_become_text_parts() -> None:
    """Inside a part list, strings become text parts and nulls are dropped."""
    message = {
        "role": "user",
        "content": ["look", None, {"type": "image_url", "image_url": {"url": "u"}}],
    }
    messages = run_pure(sanitize_content, [message]).messages
    assert messages[0]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "u"}},
    ]


def test_clean_history_is_returned_as_is() -> None:
    """Encodable text, non-empty results: the same list comes back, dicts unchanged."""
    history = [user("emoji \U0001f600 ok"), calls(call("c")), result("c", "data"), say()]
    outcome = run_pure(sanitize_content, history)
    assert outcome.messages is history and not outcome.changed


def test_a_list_link_beside_the_same_plain_link_is_removed_and_reported_so() -> None:
    """A result naming its call both ways loses ``tool_call_ids`` only, reported as removed."""
    linked = result("c", "found", tool_call_ids=["c"])
    outcome = run_pure(sanitize_content, [user(), calls(call("c")), linked])
    assert outcome.messages[2] == result("c", "found")
    assert outcome.details == ["messages[2]: tool_call_ids removed (tool_call_id names the call)"]
