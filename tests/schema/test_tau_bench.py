"""τ-bench airline: GPT-4o's recorded tool calls validate, and a loosened copy casts back."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest

from nanobot_core.schema import cast_arguments, validate
from tests.helpers import data_dir

Call = tuple[str, dict[str, Any]]


@cache
def _tools() -> dict[str, dict[str, Any]]:
    path = data_dir() / "tau-bench-airline" / "airline_tools.json"
    tools = json.loads(path.read_text(encoding="utf-8"))
    return {tool["function"]["name"]: tool["function"]["parameters"] for tool in tools}


@cache
def _runs() -> tuple[Any, ...]:
    path = data_dir() / "tau-bench-airline" / "gpt-4o-airline.json"
    return tuple(json.loads(path.read_text(encoding="utf-8")))


def _calls(run: dict[str, Any]) -> list[Call]:
    return [
        (call["function"]["name"], json.loads(call["function"]["arguments"]))
        for message in run["traj"]
        for call in message.get("tool_calls") or []
    ]


def _run_params() -> list[Any]:
    return [
        pytest.param(index, id=f"task{run['task_id']}-trial{run['trial']}")
        for index, run in enumerate(_runs())
    ]


@pytest.mark.parametrize("run_index", _run_params())
def test_recorded_calls_validate(run_index: int) -> None:
    """Every tool call GPT-4o made in the conversation has zero errors against its schema."""
    errors = {
        f"{position}:{name}": validate(_tools()[name], arguments)
        for position, (name, arguments) in enumerate(_calls(_runs()[run_index]))
    }
    assert {call: found for call, found in errors.items() if found} == {}


def test_all_recorded_calls_are_checked() -> None:
    """The conversations hold the 1164 calls the data's SOURCE.md counts."""
    assert sum(len(_calls(run)) for run in _runs()) == 1164


def _loosen(value: Any, *, top: bool = True) -> Any:
    """What a sloppy model writes: numbers and booleans as text, top-level containers as JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, dict):
        loosened: Any = {key: _loosen(item, top=False) for key, item in value.items()}
    elif isinstance(value, list):
        loosened = [_loosen(item, top=False) for item in value]
    else:
        return value
    return json.dumps(loosened) if top else loosened


def _exact(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


@pytest.mark.parametrize("run_index", _run_params())
def test_loosened_calls_cast_back_to_the_recording(run_index: int) -> None:
    """Casting loosened arguments restores exactly what GPT-4o sent, noting any change."""
    for name, arguments in _calls(_runs()[run_index]):
        loosened = {key: _loosen(value) for key, value in arguments.items()}
        cast, notes = cast_arguments(_tools()[name], loosened)
        assert _exact(cast) == _exact(arguments)
        assert (notes == []) is (loosened == arguments)
