"""`strip_placeholders` on its own."""

from __future__ import annotations

import pytest

from nanobot_core.governance.stages import strip_placeholders
from tests.governance.builders import call, calls, context, result, run_pure, say, user


@pytest.mark.parametrize(
    "text",
    [
        "[Previous assistant message omitted.]",
        "  [previous message omitted]  ",
        "[Assistant response removed for brevity]",
        "[omitted]",
    ],
)
def test_placeholder_only_assistant_messages_are_dropped(text: str) -> None:
    """An assistant message that only holds a placeholder text is left out."""
    history = [user(), say(text), user("again")]
    outcome = run_pure(strip_placeholders, history)
    assert outcome.changed
    assert outcome.messages == [user(), user("again")]
    assert "dropped placeholder" in outcome.details[0]


def test_placeholder_in_text_parts_is_dropped() -> None:
    """A placeholder sent as a single text part counts as well."""
    parts = {"role": "assistant", "content": [{"type": "text", "text": "[Message omitted.]"}]}
    outcome = run_pure(strip_placeholders, [user(), parts])
    assert outcome.messages == [user()]


def test_message_with_a_named_call_is_kept() -> None:
    """A placeholder text next to a real tool call stays: its call matters."""
    history = [user(), calls(call(), content="[Previous assistant message omitted.]"), result()]
    outcome = run_pure(strip_placeholders, history)
    assert not outcome.changed
    assert outcome.messages is history


def test_message_whose_only_calls_are_nameless_is_dropped() -> None:
    """Calls without a name will be dropped anyway, so they do not save the placeholder."""
    placeholder = calls(call(name=None), content="[Previous assistant message omitted.]")
    outcome = run_pure(strip_placeholders, [user(), placeholder])
    assert outcome.messages == [user()]


def test_ordinary_text_and_other_roles_are_kept() -> None:
    """Text that merely mentions an omission, or a user placeholder, is not touched."""
    history = [
        user("[Previous assistant message omitted.]"),
        say("The previous message was omitted because it was empty."),
        say("[Previous assistant message omitted.] But here is the answer."),
    ]
    outcome = run_pure(strip_placeholders, history)
    assert not outcome.changed
    assert outcome.messages is history


def test_extra_patterns_from_options() -> None:
    """Option `patterns` adds exact texts to treat as placeholders."""
    history = [user(), say("(elided by compactor)")]
    outcome = run_pure(
        strip_placeholders, history, context(options={"patterns": ["(elided by compactor)"]})
    )
    assert outcome.messages == [user()]
