"""`merge_user_turns`, and the alternation it guarantees in every governed request."""

from __future__ import annotations

from datetime import UTC, datetime

from nanobot_core.config import GovernanceConfig
from nanobot_core.governance import build_governor
from nanobot_core.governance.invariants import check_alternation, check_invariants
from nanobot_core.governance.stages import merge_user_turns
from nanobot_core.prompt import append_runtime_block, build_runtime_block
from tests.governance.builders import call, calls, result, run_pure, say, system, user

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


def _with_block(text: str, channel: str) -> dict[str, str]:
    block = build_runtime_block(now=NOW, channel=channel, chat_id="1", lines=[])
    return {"role": "user", "content": append_runtime_block(text, block)}


def test_two_user_messages_become_one_with_the_newest_runtime_block_last() -> None:
    """The texts stay in order; only the newest runtime block is kept, at the end."""
    history = [system(), _with_block("first try", "old"), _with_block("second try", "new")]
    outcome = run_pure(merge_user_turns, history)
    assert outcome.changed
    (merged,) = outcome.messages[1:]
    text = merged["content"]
    assert text.startswith("first try\n\nsecond try\n\n[Runtime Context")
    assert text.count("[Runtime Context") == 1 and '"new"' in text and '"old"' not in text
    assert text.endswith("[/Runtime Context]")
    assert outcome.details == ["messages[1..2]: merged 2 user messages in a row into one"]


def test_content_parts_are_kept_in_order() -> None:
    """With parts anywhere, the merged content is the parts in order, the block last."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    history = [
        {"role": "user", "content": [{"type": "text", "text": "look"}, image]},
        _with_block("and this", "web"),
        user("third"),
    ]
    (merged,) = run_pure(merge_user_turns, history).messages
    parts = merged["content"]
    assert parts[:4] == [
        {"type": "text", "text": "look"},
        image,
        {"type": "text", "text": "and this"},
        {"type": "text", "text": "third"},
    ]
    assert parts[4]["text"].startswith("[Runtime Context") and len(parts) == 5


def test_alternating_history_is_handed_on_as_is() -> None:
    """Without two user messages in a row the very same list comes back."""
    history = [user(), say(), user("again"), calls(call("a")), result("a"), user("more")]
    outcome = run_pure(merge_user_turns, history)
    assert not outcome.changed
    assert outcome.messages is history


def test_the_governor_reports_it_and_the_output_alternates() -> None:
    """Its own report line, a legal request, and governing it again changes nothing."""
    history = [user("a"), say("b"), user("c"), user("d"), user("e"), say("f"), user("g"), user("h")]
    governor = build_governor()
    governed = governor.govern(history)
    entry = governed.report.entry("merge_user_turns")
    assert entry is not None and entry.changed
    assert entry.details == [
        "messages[2..4]: merged 3 user messages in a row into one",
        "messages[6..7]: merged 2 user messages in a row into one",
    ]
    assert [m["content"] for m in governed.messages] == ["a", "b", "c\n\nd\n\ne", "f", "g\n\nh"]
    assert check_invariants(governed.messages) == []
    assert not governor.govern(governed.messages).report.changed


def test_the_final_step_merges_when_the_stage_is_disabled() -> None:
    """Disabled, the stage is reported so, and the final step still merges."""
    governor = build_governor(GovernanceConfig(disabled=["merge_user_turns"]))
    governed = governor.govern([user("a"), user("b")])
    assert [m["content"] for m in governed.messages] == ["a\n\nb"]
    final = governed.report.entry("final")
    assert final is not None and final.changed
    assert any(line.startswith("merge_user_turns: ") for line in final.details)


def test_a_removed_message_between_two_users_still_leaves_one() -> None:
    """A non-message between two user messages is dropped; the two then merge."""
    governed = build_governor().govern([user("a"), 42, user("b")])
    assert [m["content"] for m in governed.messages] == ["a\n\nb"]


def test_the_checker_names_both_messages() -> None:
    """check_alternation says which user message follows which."""
    assert check_alternation([system(), user(), user()]) == [
        "messages[2] (user) follows messages[1] (user): two user messages in a row"
    ]
    assert check_alternation([user(), say(), user()]) == []


def test_a_message_that_is_only_a_runtime_block_adds_no_text_and_no_old_block() -> None:
    """A user turn with no text but its runtime block merges as nothing: one block, the newest."""
    history = [system(), _with_block("", "old"), _with_block("second try", "new")]
    (merged,) = run_pure(merge_user_turns, history).messages[1:]
    text = merged["content"]
    assert text.startswith("second try\n\n[Runtime Context")
    assert text.count("[Runtime Context") == 1 and '"new"' in text and '"old"' not in text
