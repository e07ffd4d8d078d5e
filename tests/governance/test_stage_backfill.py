"""`backfill_results` on its own."""

from __future__ import annotations

from nanobot_core.governance.stages import backfill_results
from nanobot_core.governance.stages.backfill import INTERRUPTED
from tests.governance.builders import call, calls, result, run_pure, say, user


def test_unanswered_call_gets_a_placeholder_at_the_end_of_its_run() -> None:
    """A call without a result gets a synthesized one after the existing results."""
    history = [user(), calls(call("a"), call("b")), result("a"), say("done")]
    outcome = run_pure(backfill_results, history)
    synthesized = {"role": "tool", "tool_call_id": "b", "name": "get_user", "content": INTERRUPTED}
    assert outcome.messages == [
        user(),
        calls(call("a"), call("b")),
        result("a"),
        synthesized,
        say("done"),
    ]
    assert "'b'" in outcome.details[0]


def test_trailing_call_is_answered() -> None:
    """A call at the very end of the history (the process died mid-call) is answered."""
    history = [user(), calls(call("last"))]
    messages = run_pure(backfill_results, history).messages
    assert messages[-1] == {
        "role": "tool",
        "tool_call_id": "last",
        "name": "get_user",
        "content": INTERRUPTED,
    }


def test_placeholder_is_the_same_every_time() -> None:
    """No time, no random id: two runs give equal results."""
    history = [user(), calls(call("a"), call("b"))]
    assert (
        run_pure(backfill_results, history).messages == run_pure(backfill_results, history).messages
    )
    assert "20" not in INTERRUPTED and "call_" not in INTERRUPTED


def test_answered_history_is_returned_as_is() -> None:
    """Every call answered: the same list comes back."""
    history = [user(), calls(call("a")), result("a")]
    outcome = run_pure(backfill_results, history)
    assert outcome.messages is history and not outcome.changed
