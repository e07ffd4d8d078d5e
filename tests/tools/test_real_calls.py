"""prepare_call on real model calls: τ-bench airline (GPT-4o) and BFCL simple_python schemas."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nanobot_core.tools.registry import ToolRegistry
from tests.tools.test_registry import SchemaTool


def _airline(data_folder: Path) -> tuple[ToolRegistry, list[tuple[str, str]]]:
    folder = data_folder / "tau-bench-airline"
    registry = ToolRegistry()
    for definition in json.loads((folder / "airline_tools.json").read_text(encoding="utf-8")):
        function = definition["function"]
        registry.add(SchemaTool(function["name"], function["parameters"]))
    runs = json.loads((folder / "gpt-4o-airline.json").read_text(encoding="utf-8"))
    calls = [
        (call["function"]["name"], call["function"]["arguments"])
        for conversation in runs
        for message in conversation["traj"]
        for call in message.get("tool_calls") or []
    ]
    return registry, calls


def test_real_gpt4o_calls_prepare_untouched(data_folder: Path) -> None:
    """All 1164 τ-bench calls are valid as sent, so they come through unchanged and unrepaired."""
    registry, calls = _airline(data_folder)
    assert len(calls) == 1164
    for name, raw in calls:
        prepared = registry.prepare_call(name, raw)
        assert (prepared.error, prepared.repairs) == (None, []), (name, raw)
        assert prepared.arguments == json.loads(raw)


def test_real_calls_cut_short_are_repaired(data_folder: Path) -> None:
    """Each real argument text with its closing brace lost is repaired to the intended object."""
    registry, calls = _airline(data_folder)
    for name, raw in calls:
        truncated = raw.rstrip()[:-1]
        prepared = registry.prepare_call(name, truncated)
        assert prepared.arguments == json.loads(raw), (name, truncated, prepared.error)
        assert "repaired malformed JSON" in prepared.repairs


def _first_alternative(alternatives: list[Any]) -> Any:
    """BFCL lists acceptable values per parameter; "" means the parameter may be omitted."""
    chosen = [value for value in alternatives if value != ""]
    if not chosen:
        return None
    if isinstance(chosen[0], dict):  # a nested object: its values are alternatives again
        picked = {key: _first_alternative(value) for key, value in chosen[0].items()}
        return {key: value for key, value in picked.items() if value is not None}
    return chosen[0]


def _bfcl_simple(data_folder: Path) -> list[tuple[SchemaTool, dict[str, Any]]]:
    folder = data_folder / "bfcl" / "data"
    questions = folder / "BFCL_v4_simple_python.json"
    answers = folder / "possible_answer" / "BFCL_v4_simple_python.json"
    truth = {row["id"]: row for row in map(json.loads, answers.read_text("utf-8").splitlines())}
    cases = []
    for row in map(json.loads, questions.read_text("utf-8").splitlines()):
        function = row["function"][0]
        ((_, expected),) = truth[row["id"]]["ground_truth"][0].items()
        # BFCL itself replaces "." in names for the OpenAI API, whose names allow no dots.
        tool = SchemaTool(function["name"].replace(".", "_"), function["parameters"])
        arguments = {key: _first_alternative(value) for key, value in expected.items()}
        cases.append((tool, {key: value for key, value in arguments.items() if value is not None}))
    return cases


def _stringify_numbers(arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        k: str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v
        for k, v in arguments.items()
    }


def test_bfcl_schemas_are_normalised_and_expected_calls_prepare(data_folder: Path) -> None:
    """BFCL's "dict"/"float" schemas load; nearly all ground-truth calls prepare unchanged."""
    cases = _bfcl_simple(data_folder)
    clean = 0
    for tool, expected in cases:
        registry = ToolRegistry()
        registry.add(tool)
        assert registry.definitions()[0]["function"]["parameters"]["type"] == "object"
        prepared = registry.prepare_call(tool.name, json.dumps(expected))
        clean += prepared.error is None and prepared.arguments == expected
    # The importer's own check found 399 of 400 expected calls valid (see bfcl/SOURCE.md).
    assert clean >= 395


@pytest.mark.parametrize("encoding", ["stringified numbers", "double-encoded"])
def test_bfcl_calls_sent_loosely_come_back_exact(data_folder: Path, encoding: str) -> None:
    """Numbers sent as strings are cast back, and double-encoded JSON decoded, to the truth."""
    checked = 0
    for tool, expected in _bfcl_simple(data_folder):
        registry = ToolRegistry()
        registry.add(tool)
        if registry.prepare_call(tool.name, expected).error is not None:
            continue  # the few ground truths that do not fit their own schema
        if encoding == "stringified numbers":
            loose: Any = _stringify_numbers(expected)
            if loose == expected:
                continue
        else:
            loose = json.dumps(json.dumps(expected))
        prepared = registry.prepare_call(tool.name, loose)
        assert prepared.error is None, (tool.name, loose, prepared.error)
        assert prepared.arguments == expected
        checked += 1
    assert checked >= 200
