"""Messages no JSON can hold (a dict or list containing itself, nesting past the limit)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core._json_boundary import MAX_DEPTH
from nanobot_core.config import GovernanceConfig
from nanobot_core.errors import NanobotError, SessionError
from nanobot_core.governance import Governor, Stage, StageOutcome, build_governor, builtin_stages
from nanobot_core.governance.history_file import HistoryFormatError
from nanobot_core.governance.invariants import check_invariants
from nanobot_core.governance.messages import nesting_fault
from nanobot_core.governance.ordering import BUILTIN_ORDER
from nanobot_core.governance.tokens import count_message, scan_text
from tests.governance.builders import call, calls, result, turn, user
from tests.governance.strategies import DirtyRequest, dirty_requests

# Roomy enough that no history drawn here is cut: every message is read.
_ROOMY = GovernanceConfig(context_window=2_000_000, max_output=1_024)


def _nested(levels: int) -> dict[str, Any]:
    """A dict whose dicts nest `levels` levels deep, itself the first."""
    inner: dict[str, Any] = {}
    for _ in range(levels - 1):
        inner = {"k": inner}
    return inner


def _holding_itself() -> dict[str, Any]:
    message: dict[str, Any] = {"role": "user", "content": "x"}
    message["self"] = message
    return message


def _content_holding_itself() -> dict[str, Any]:
    content: list[Any] = [{"type": "text", "text": "a"}]
    content.append(content)
    return {"role": "user", "content": content}


def _too_deep(levels: int = 100_000) -> dict[str, Any]:
    return {"role": "user", "content": "y", "k": _nested(levels - 1)}


_BAD: dict[str, Callable[[], Any]] = {
    "dict holding itself": _holding_itself,
    "list holding itself": _content_holding_itself,
    "100,000 levels deep": _too_deep,
    "one level too deep": lambda: _too_deep(MAX_DEPTH + 1),
    "a result's parts too deep": lambda: result(
        "a", [{"type": "text", "text": "t", "x": _nested(200)}]
    ),
    "a call's arguments holding itself": lambda: _call_holding_itself(),
}


def _call_holding_itself() -> dict[str, Any]:
    message = calls(call("a"))
    function = message["tool_calls"][0]["function"]
    function["extra"] = function
    return message


def _history(bad: Any, at: int) -> list[Any]:
    history: list[Any] = [*turn(1), *turn(2)]
    history.insert(at, bad)
    return history


@pytest.mark.parametrize("kind", sorted(_BAD))
@pytest.mark.parametrize("at", [0, 2, 4])
def test_a_message_no_json_can_hold_is_refused_naming_its_index(kind: str, at: int) -> None:
    """Such a message raises HistoryFormatError naming its index, never RecursionError."""
    with pytest.raises(HistoryFormatError, match=rf"^messages\[{at}\] (holds|nests)"):
        build_governor().govern(_history(_BAD[kind](), at))


def test_the_error_is_the_history_error_of_the_tree() -> None:
    """The refusal is a NanobotError, a SessionError and a ValueError, as a bad history file's."""
    with pytest.raises(HistoryFormatError) as raised:
        build_governor().govern([_holding_itself()])
    assert isinstance(raised.value, NanobotError | SessionError | ValueError)
    assert "contains itself" in str(raised.value)


def test_nesting_up_to_the_limit_is_governed() -> None:
    """A message nested exactly as deep as a session line may is governed like any other."""
    message = {"role": "user", "content": "deep", "k": _nested(MAX_DEPTH - 1)}
    governed = build_governor().govern([message])
    assert governed.messages == [message]


def test_refused_with_the_recursion_limit_near() -> None:
    """Called with little of the stack left, the refusal is still the error naming the index."""

    def at_depth(left: int) -> None:
        if left:
            at_depth(left - 1)
            return
        with pytest.raises(HistoryFormatError, match=r"^messages\[1\] holds"):
            build_governor().govern([user("hi"), _holding_itself()])

    depth = len(_frames())
    at_depth(sys.getrecursionlimit() - depth - 120)


def _frames() -> list[Any]:
    frames = []
    frame = sys._getframe()
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back  # type: ignore[assignment]
    return frames


def test_after_a_refusal_the_governor_answers_as_a_fresh_one() -> None:
    """A refused call leaves no trace: the next history is governed as a fresh governor does."""
    config = GovernanceConfig(context_window=3_000, max_output=256, safety_margin=0)
    clean = [*turn(1), *turn(2), user("x" * 4_000), *turn(3)]
    governor = build_governor(config)
    for kind in sorted(_BAD):
        with pytest.raises(HistoryFormatError):
            governor.govern([*clean[:3], _BAD[kind](), *clean[3:]])
    assert governor.govern(clean) == build_governor(config).govern(clean)


def test_a_refusal_keeps_the_session_the_governor_was_in() -> None:
    """Between two calls of a session, a refused one changes neither what is sent nor the state."""
    config = GovernanceConfig(context_window=3_000, max_output=256, safety_margin=0)
    first = [*turn(1), user("y" * 6_000), *turn(2)]
    second = [*first, *turn(3)]
    control = build_governor(config)
    expected = [control.govern(first), control.govern(second)]
    governor = build_governor(config)
    governor.govern(first)
    with pytest.raises(HistoryFormatError):
        governor.govern([user("other"), _holding_itself()])  # not an extension of `first`
    with pytest.raises(HistoryFormatError):
        governor.govern([*first, _too_deep()])
    got = governor.govern(second)
    assert got == expected[1]
    assert got.state == expected[1].state and got.prefix == expected[1].prefix


def test_scan_text_and_count_message_refuse_rather_than_recurse() -> None:
    """The token walks raise HistoryFormatError for such values, with either counter."""

    class Words:
        def count_text(self, text: str) -> int:
            return len(text.split())

    for make in _BAD.values():
        with pytest.raises(HistoryFormatError):
            scan_text(make())
        with pytest.raises(HistoryFormatError):
            count_message(make(), Words())
    assert scan_text(_nested(MAX_DEPTH)) == (0, False)


def test_nesting_fault_tells_a_loop_from_depth_and_reads_shared_parts_once() -> None:
    """A loop is named as one, depth by its levels; a value shared a million ways is quick."""
    assert (
        nesting_fault(_holding_itself())
        == "holds a dict or list that contains itself (no JSON can)"
    )
    assert (
        nesting_fault(_nested(MAX_DEPTH + 1))
        == "nests 101 levels deep (a session line may nest 100)"
    )
    assert nesting_fault(_nested(MAX_DEPTH)) is None
    shared: list[Any] = []
    for _ in range(60):
        shared = [shared, shared]  # 2**60 paths, 60 lists
    assert nesting_fault(shared) is None
    assert nesting_fault("text") is None


# -- stages whose outcome holds such a message -----------------------------------------


def _inserting(bad: Callable[[], Any], at: int) -> Callable[[list[Any], Any], StageOutcome]:
    def stage(messages: list[Any], ctx: Any) -> StageOutcome:
        made = list(messages)
        made.insert(at, bad())
        return StageOutcome(made, changed=True)

    return stage


@pytest.mark.parametrize("kind", sorted(_BAD))
@pytest.mark.parametrize("declared", [False, True])
def test_a_stage_whose_outcome_holds_such_a_message_is_ignored(kind: str, declared: bool) -> None:
    """The outcome is ignored and the report names the index; the request stays legal."""
    func = _inserting(_BAD[kind], 2)
    # First of all, with a non-message in the history: the declared stage has work.
    first = {"phase": "repair", "before": (BUILTIN_ORDER[0],)}
    stage = (
        Stage("loops", func, acts_on=("non_messages",), **first)
        if declared
        else Stage("loops", func)
    )
    history = [*turn(1), 42, *turn(2)]
    governed = Governor([*builtin_stages(), stage], config=GovernanceConfig()).govern(history)
    plain = build_governor().govern(history)
    entry = governed.report.entry("loops")
    assert entry is not None and not entry.changed
    assert entry.details[0].startswith("ignored: the stage's outcome holds messages[2], which ")
    assert governed.messages == plain.messages
    check_invariants(governed.messages)


@pytest.mark.parametrize("kind", sorted(_BAD))
def test_a_per_message_stage_whose_outcome_holds_such_a_message_is_ignored(kind: str) -> None:
    """A per-message stage's outcome holding one is ignored, naming the message it was for."""

    def func(messages: list[Any], ctx: Any) -> StageOutcome:
        if messages[0].get("role") != "tool":
            return StageOutcome(messages, changed=False)
        return StageOutcome([messages[0], _BAD[kind]()], changed=True)

    stage = Stage("loops", func, per_message=True)
    history = [*turn(1), *turn(2)]
    governed = Governor([*builtin_stages(), stage], config=GovernanceConfig()).govern(history)
    entry = governed.report.entry("loops")
    assert entry is not None and not entry.changed
    assert entry.details == [
        f"ignored: the stage's outcome for messages[2] holds messages[1], "
        f"which {nesting_fault(_BAD[kind]())}"
    ]
    assert governed.messages is history


# -- properties ----------------------------------------------------------------------------


def _bad_values() -> st.SearchStrategy[Any]:
    """A dict or list holding itself, or dicts and lists nested past the limit."""

    def loop(as_list: bool) -> Any:
        if as_list:
            inner: list[Any] = ["text"]
            inner.append(inner)
            return inner
        made: dict[str, Any] = {"text": "t"}
        made["again"] = made
        return made

    def deep(levels: int, as_list: bool) -> Any:
        value: Any = "bottom"
        for _ in range(levels):
            value = [value] if as_list else {"k": value}
        return value

    return st.one_of(
        st.builds(loop, st.booleans()),
        st.builds(deep, st.sampled_from([MAX_DEPTH, 150, 1_000, 20_000]), st.booleans()),
    )


@settings(max_examples=150, deadline=None, database=None, derandomize=True)
@given(request=dirty_requests(), data=st.data())
def test_a_message_no_json_can_hold_anywhere_is_refused_by_its_index(
    request: DirtyRequest, data: st.DataObject
) -> None:
    """A loop or deep nesting put anywhere in any history: HistoryFormatError naming its index."""
    messages = list(request.messages)
    at = data.draw(st.integers(0, len(messages)), label="at")
    bad = data.draw(_bad_values(), label="bad")
    target = messages[at] if at < len(messages) else None
    if isinstance(target, dict) and data.draw(st.booleans(), label="inside"):
        messages[at] = {**target, "extra": bad}  # inside a message of the history
    else:
        messages.insert(at, {"role": "user", "content": "c", "extra": bad})
    governor = Governor(builtin_stages(), config=_ROOMY)
    with pytest.raises(HistoryFormatError, match=rf"^messages\[{at}\] (holds|nests)"):
        governor.govern(messages, system=request.system, tools=request.tools)
    clean = list(request.messages)
    fresh = Governor(builtin_stages(), config=_ROOMY)
    assert governor.govern(clean, system=request.system, tools=request.tools) == fresh.govern(
        clean, system=request.system, tools=request.tools
    )


@settings(max_examples=100, deadline=None, database=None, derandomize=True)
@given(request=dirty_requests(), data=st.data())
def test_a_stage_outcome_holding_one_anywhere_is_ignored_by_its_index(
    request: DirtyRequest, data: st.DataObject
) -> None:
    """A stage putting one anywhere in its outcome is ignored, the index named, the rest legal."""
    wanted = data.draw(st.integers(0, len(request.messages)), label="at")
    bad = data.draw(_bad_values(), label="bad")
    placed: list[int] = []

    def inserting(messages: list[Any], ctx: Any) -> StageOutcome:
        placed.append(min(wanted, len(messages)))  # where `insert` puts it
        made = list(messages)
        made.insert(wanted, {"role": "user", "content": "c", "x": bad})
        return StageOutcome(made, changed=True)

    stage = Stage("loops", inserting)
    governed = Governor([*builtin_stages(), stage], config=_ROOMY).govern(
        request.messages, system=request.system, tools=request.tools
    )
    entry = governed.report.entry("loops")
    assert entry is not None and not entry.changed
    assert entry.details[0].startswith(
        f"ignored: the stage's outcome holds messages[{placed[0]}], "
    )
    check_invariants(governed.messages)
