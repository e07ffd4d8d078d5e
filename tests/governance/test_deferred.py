"""The list handed to a stage that declares nothing while the stages before it wait."""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Callable
from typing import Any

import pytest

from nanobot_core.governance._handed import Deferred

MESSAGES = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]

#: Every way a stage might touch its list, reading or writing.
USES: dict[str, Callable[[list[Any]], Any]] = {
    "len": len,
    "bool": bool,
    "index": lambda m: m[0],
    "slice": lambda m: m[:1],
    "iterate": list,
    "reversed": lambda m: list(reversed(m)),
    "contains": lambda m: MESSAGES[0] in m,
    "equal": lambda m: m == MESSAGES,
    "not equal": lambda m: m != MESSAGES,
    "less": lambda m: m < [],
    "repr": repr,
    "json": json.dumps,
    "add": lambda m: m + [],  # noqa: RUF005 - the operator is what is tested
    "multiply": lambda m: m * 1,
    "copy": lambda m: m.copy(),
    "count": lambda m: m.count(MESSAGES[0]),
    "list index": lambda m: m.index(MESSAGES[0]),
    "append": lambda m: m.append({"role": "user", "content": "c"}),
    "extend": lambda m: m.extend([]),
    "insert": lambda m: m.insert(0, {"role": "user", "content": "c"}),
    "pop": lambda m: m.pop(),
    "clear": lambda m: m.clear(),
    "reverse": lambda m: m.reverse(),
    "sort": lambda m: m.sort(key=str),
    "set item": lambda m: m.__setitem__(0, {}),
    "delete item": lambda m: m.__delitem__(0),
    "in-place add": lambda m: m.__iadd__([]),
    "deep copy": copy.deepcopy,
    "pickle": pickle.dumps,
}


def _deferred(calls: list[int]) -> Deferred:
    def produce() -> list[Any]:
        calls.append(1)
        return [dict(m) for m in MESSAGES]

    return Deferred(produce)


@pytest.mark.parametrize("use", list(USES.values()), ids=list(USES))
def test_any_use_fills_the_list_first_and_only_once(use: Callable[[list[Any]], Any]) -> None:
    """Whatever the stage does with the list, it sees the messages the stages before it made."""
    calls: list[int] = []
    deferred = _deferred(calls)
    assert not deferred.forced
    use(deferred)
    len(deferred)
    assert deferred.forced
    assert calls == [1]


def test_an_unused_list_is_never_filled() -> None:
    """Handed on untouched, the stages before it never run."""
    calls: list[int] = []
    deferred = _deferred(calls)
    assert deferred is not None
    assert not deferred.forced and calls == []


def test_what_a_filled_list_hands_out_are_copies() -> None:
    """Once filled it is a `Handed` list: editing what it gives out leaves the originals alone."""
    originals = [dict(m) for m in MESSAGES]
    deferred = Deferred(lambda: originals)
    deferred[0]["content"] = "edited"
    assert originals[0]["content"] == "a"
    assert deferred.originals(list.copy(deferred))[1] is originals[1]
