"""Ids and tool names of a history quoted in governance notes and checks: cut by their ends."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core.governance.invariants import check_invariants
from nanobot_core.governance.stages import compact_results, pair_results, strip_malformed_calls
from tests.governance.builders import call, calls, context, result, run_pure, user

HUGE = "id" + "x" * 100_000 + "END"


def _bounded(line: str) -> None:
    """A line quoting `HUGE` shows both its ends and says what it left out, in few characters."""
    assert len(line) < 600, line[:300]
    assert "'idxxx" in line and "xxxEND" in line
    assert "characters omitted" in line


def test_a_result_moved_back_names_a_huge_id_by_its_ends() -> None:
    """Pairing's note of a result moved back to its call quotes its id cut."""
    outcome = run_pure(pair_results, [user(), calls(call(HUGE)), user("wait"), result(HUGE)])
    [detail] = outcome.details
    assert detail.startswith("messages[3]: moved the result for 'idxxx")
    _bounded(detail)


def test_a_repeated_huge_id_and_a_legacy_call_of_a_huge_name_are_noted_by_their_ends() -> None:
    """The calls stage's notes of a renamed id and of a legacy function call are bounded."""
    repeated = calls(call(HUGE), call(HUGE))
    legacy = {"role": "assistant", "content": None, "function_call": {"name": HUGE}}
    history = [user(), repeated, result(HUGE), result(HUGE), user("more"), legacy]
    details = run_pure(strip_malformed_calls, history).details
    renamed = [line for line in details if "repeats in this message" in line]
    made = [line for line in details if "legacy function_call of" in line]
    assert len(renamed) == 1 and len(made) == 1
    for line in (*renamed, *made):
        _bounded(line)


def test_the_notice_of_a_compacted_result_names_a_huge_tool_by_its_ends() -> None:
    """The text that replaces a compacted result, and the note saying so, quote the name cut."""
    history = [user(), calls(call("c", HUGE)), result("c", "y" * 6_000)]
    outcome = run_pure(compact_results, history, context(budget=100, options={"keep": 0}))
    notice = outcome.messages[2]["content"]
    assert "returned 6000 characters" in notice
    _bounded(notice)
    [detail] = outcome.details
    assert len(detail) < 300 and "xxxEND" in detail and "characters omitted" in detail


_ODD = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=5),
    st.text(min_size=1, max_size=8).map(lambda piece: piece * 20_000),
)


@settings(max_examples=60, deadline=None)
@given(call_id=_ODD, name=_ODD, kind=_ODD, result_id=_ODD, content=_ODD)
def test_every_violation_of_a_history_with_huge_values_is_bounded(
    call_id: Any, name: Any, kind: Any, result_id: Any, content: Any
) -> None:
    """Whatever ids, names, types and contents of any size a history holds, each check is short."""
    broken = {"id": call_id, "type": kind, "function": {"name": name, "arguments": "{}"}}
    stray = {"role": "tool", "tool_call_id": result_id, "content": content}
    history = [user(), calls(broken), result(call_id, content), stray]
    for line in check_invariants(history):
        assert len(line) <= 800, line[:300]
