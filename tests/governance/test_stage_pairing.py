"""`pair_results` on its own."""

from __future__ import annotations

from nanobot_core.governance.stages import pair_results
from tests.governance.builders import call, calls, result, run_pure, say, user


def test_result_after_a_user_message_moves_back_to_its_call() -> None:
    """A result separated from its call by a user message goes back into the call's run."""
    history = [user(), calls(call("t1")), user("wait"), result("t1")]
    outcome = run_pure(pair_results, history)
    assert outcome.messages == [user(), calls(call("t1")), result("t1"), user("wait")]
    assert "moved the result for 't1'" in outcome.details[0]


def test_result_moves_to_the_nearest_preceding_unanswered_call() -> None:
    """With two candidate calls of the same id, the nearest earlier unanswered one wins."""
    history = [
        user(),
        calls(call("x", "a")),
        say("one"),
        user("b"),
        calls(call("x", "b")),
        say("two"),
        result("x", "late"),
    ]
    messages = run_pure(pair_results, history).messages
    assert messages[4:7] == [calls(call("x", "b")), result("x", "late"), say("two")]
    assert messages[1:3] == [calls(call("x", "a")), say("one")]


def test_orphan_result_without_any_call_is_dropped() -> None:
    """A result no earlier call is waiting for is left out."""
    history = [user(), say(), result("call_9Xn2"), user("next")]
    outcome = run_pure(pair_results, history)
    assert outcome.messages == [user(), say(), user("next")]
    assert "no call awaits it" in outcome.details[0]


def test_result_before_its_call_is_dropped() -> None:
    """Results are only moved backwards: one that comes before its call is an orphan."""
    history = [user(), result("c"), calls(call("c")), result("c")]
    messages = run_pure(pair_results, history).messages
    assert messages == [user(), calls(call("c")), result("c")]


def test_duplicate_result_in_a_run_is_dropped_keeping_the_first() -> None:
    """A call answered twice in its run keeps the first answer."""
    history = [user(), calls(call("c")), result("c", "first"), result("c", "second")]
    outcome = run_pure(pair_results, history)
    assert outcome.messages == [user(), calls(call("c")), result("c", "first")]
    assert "duplicate" in outcome.details[0]


def test_results_of_reused_ids_stay_with_their_own_turn() -> None:
    """The same id in two turns is two legal pairs; nothing moves."""
    history = [
        user(),
        calls(call("c")),
        result("c", "1"),
        user("b"),
        calls(call("c")),
        result("c", "2"),
    ]
    outcome = run_pure(pair_results, history)
    assert not outcome.changed
    assert outcome.messages is history


def test_results_in_any_order_inside_the_run_are_legal() -> None:
    """Results may come in any order inside their run."""
    history = [user(), calls(call("a"), call("b")), result("b"), result("a")]
    assert run_pure(pair_results, history).messages is history


def test_result_in_another_calls_run_moves_to_its_own() -> None:
    """A result that landed in a later call's run goes back to the call that made it."""
    history = [
        user(),
        calls(call("a")),
        say("x"),
        user("y"),
        calls(call("b")),
        result("a"),
        result("b"),
    ]
    messages = run_pure(pair_results, history).messages
    assert messages == [
        user(),
        calls(call("a")),
        result("a"),
        say("x"),
        user("y"),
        calls(call("b")),
        result("b"),
    ]


def test_results_with_unusable_ids_are_dropped() -> None:
    """A tool message with no id, or an id that is not a string, answers nothing."""
    history = [user(), calls(call("a")), result("a"), result(None), result(["a"])]
    messages = run_pure(pair_results, history).messages
    assert messages == [user(), calls(call("a")), result("a")]
