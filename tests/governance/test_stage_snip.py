"""`snip_history` on its own: the oldest history goes, whole turns, tail from a user message."""

from __future__ import annotations

from typing import Any

from nanobot_core.governance.invariants import check_history_start, check_tool_pairing
from nanobot_core.governance.stages import snip_history
from nanobot_core.governance.stages.snip import MIN_USER_TOKENS, left_out_steps, step_starts
from nanobot_core.governance.stages.start import CONTINUE, ensure_user_start
from nanobot_core.governance.tokens import count_request
from tests.governance.builders import (
    call,
    calls,
    context,
    result,
    run_pure,
    say,
    system,
    turn,
    user,
)


def _turns(count: int, result_size: int = 2_000) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [system()]
    for index in range(count):
        history += turn(index, "r" * result_size)
    return history


def test_within_budget_nothing_is_dropped() -> None:
    """Under budget, the same list comes back."""
    history = _turns(5)
    assert run_pure(snip_history, history).messages is history


def test_oldest_turns_go_and_the_tail_starts_at_a_user_message() -> None:
    """Over budget, whole old turns are dropped; the system message stays; pairs stay whole."""
    history = _turns(10)
    budget = count_request(None, history) // 2
    outcome = run_pure(snip_history, history, context(budget=budget))
    kept = outcome.messages
    assert kept[0] is history[0]
    assert kept[1]["role"] == "user"
    assert kept[-4:] == history[-4:]
    assert count_request(None, kept) <= budget
    assert check_tool_pairing(kept) == [] and check_history_start(kept) == []
    assert "dropped the" in outcome.details[0]


def test_the_longest_fitting_tail_is_kept() -> None:
    """Exactly the turns that fit are kept: one more turn would not."""
    history = _turns(10)
    budget = count_request(None, [history[0], *history[-12:]])  # the system message + 3 turns
    kept = run_pure(snip_history, history, context(budget=budget, low_watermark=1.0)).messages
    assert kept == [history[0], *history[-12:]]


def test_newest_user_message_alone_too_big_is_cut_head_and_tail() -> None:
    """When the newest user message cannot fit whole, it alone is kept, cut head and tail."""
    huge = "BEGIN " + "lorem ipsum " * 20_000 + " END"
    history = [*_turns(3), user(huge)]
    budget = 2_000
    outcome = run_pure(snip_history, history, context(budget=budget))
    kept = outcome.messages
    assert [m["role"] for m in kept] == ["system", "user"]
    assert kept[1]["content"].startswith("BEGIN") and kept[1]["content"].endswith("END")
    assert count_request(None, kept) <= budget
    assert any("newest user message alone does not fit" in d for d in outcome.details)


def test_when_nothing_can_fit_the_newest_user_message_is_kept_at_a_minimum() -> None:
    """Even a budget the system prompt alone exceeds leaves a non-empty request."""
    history = [system("s" * 10_000), user("u" * 10_000)]
    outcome = run_pure(snip_history, history, context(budget=100))
    kept = outcome.messages
    assert [m["role"] for m in kept] == ["system", "user"]
    assert 0 < len(kept[1]["content"]) < 10_000
    again = run_pure(snip_history, kept, context(budget=100))
    assert again.messages is kept and not again.changed
    assert MIN_USER_TOKENS * 4 - 8 <= len(kept[1]["content"]) <= MIN_USER_TOKENS * 4


def test_in_flight_turn_keeps_its_newest_step_with_its_result_cut() -> None:
    """After the newest user message, the older step goes and the newest one's result is cut."""
    history = [
        *_turns(2),
        user("now"),
        calls(call("a")),
        result("a", "A" * 30_000),
        calls(call("b")),
        result("b", "B" * 30_000),
    ]
    budget = 6_000
    outcome = run_pure(snip_history, history, context(budget=budget))
    kept = outcome.messages
    assert [m["role"] for m in kept] == ["system", "user", "assistant", "tool"]
    assert (
        kept[1]["content"].startswith("now") and "1 earlier step of this task" in kept[1]["content"]
    )
    assert kept[2] is history[-2]
    assert "cut to fit the context budget" in kept[3]["content"]
    assert len(kept[3]["content"]) < 30_000 and kept[3]["content"].startswith("B")
    assert count_request(None, kept) <= budget
    assert any("cut head and tail" in d for d in outcome.details)
    assert check_tool_pairing(kept) == []


def test_history_without_a_user_message_gets_one() -> None:
    """Over budget with no user message at all, a minimal one is put first; never empty."""
    history = [say("a" * 8_000), say("b" * 8_000)]
    outcome = run_pure(snip_history, history, context(budget=500))
    assert [m["role"] for m in outcome.messages] == ["user"]
    assert outcome.messages[0]["content"].startswith("(continue)\n\n[2 steps of this task were")
    assert left_out_steps(outcome.messages[0]) == 2
    assert count_request(None, outcome.messages) <= 500


def test_snipping_its_own_output_changes_nothing() -> None:
    """The snipped history fits, so a second run returns it as it is."""
    history = _turns(10)
    ctx = context(budget=count_request(None, history) // 3)
    first = run_pure(snip_history, history, ctx)
    second = run_pure(snip_history, first.messages, context(budget=ctx.budget.limit))
    assert second.messages is first.messages


def test_newest_user_message_without_text_becomes_a_minimal_one() -> None:
    """An image-only newest message too big to send is replaced by "(continue)", never empty."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 40_000}}
    history = [system(), {"role": "user", "content": [image]}]
    kept = run_pure(snip_history, history, context(budget=1_000)).messages
    assert kept == [system(), {"role": "user", "content": "(continue)"}]


def test_a_result_right_after_the_task_is_a_step_of_its_own() -> None:
    """A tool message first after the user message starts a step, so no step ever loses it."""
    history = [user(), result("a"), calls(call("b")), result("b"), say()]
    assert step_starts(history, 1) == [1, 2, 4]
    assert step_starts(history, 1, stop=2) == [1]


def test_a_history_opening_with_a_result_gets_a_user_message_first() -> None:
    """After the system messages, a tool result is no start: a user message is put before it."""
    history = [system(), result("a"), say()]
    fixed, what = ensure_user_start(history)
    assert fixed == [system(), {"role": "user", "content": CONTINUE}, result("a"), say()]
    assert what == (
        "messages[1] is a 'tool' message, not a user message: inserted a user message before it "
        f"({CONTINUE!r})"
    )
