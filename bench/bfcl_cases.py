"""BFCL's real tool schemas and expected calls, as tool definitions and raw model arguments.

Stdlib-only: nanobot-ai's environment imports it too, so both sides get identical
inputs. Schemas are converted the way BFCL itself converts them for OpenAI-style
APIs (gorilla ``GORILLA_TO_OPENAPI``: ``dict``->object, ``float``->number with
``format: float``, ``any``->string, Java/JS types mapped, unknown types->string,
``.`` in names -> ``_``), so that neither side is judged on the BFCL dialect.
Arguments are the first acceptable value of each expected parameter (``""``
means "may be omitted"), JSON-encoded as a model would send them. Some are
invalid against their schema (a real quirk of the data): those calls exercise
the error path on both sides.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple.subset_every3rd",
    "live_parallel",
    "live_parallel_multiple",
    "simple_java",
    "simple_javascript",
)

GORILLA_TO_OPENAPI = {
    "integer": "integer",
    "number": "number",
    "float": "number",
    "string": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "tuple": "array",
    "dict": "object",
    "object": "object",
    "any": "string",
    "byte": "integer",
    "short": "integer",
    "long": "integer",
    "Bigint": "integer",
    "double": "number",
    "char": "string",
    "ArrayList": "array",
    "Array": "array",
    "Queue": "array",
    "Stack": "array",
    "HashMap": "object",
    "Hashtable": "object",
    "Any": "string",
    "String": "string",
    "Boolean": "boolean",
}


@dataclass(frozen=True)
class Call:
    """One expected tool call: the (converted) tool name and the raw arguments string."""

    name: str
    arguments: str


@dataclass(frozen=True)
class Case:
    """One BFCL question: the functions offered and the calls expected."""

    id: str
    functions: tuple[dict[str, Any], ...]
    calls: tuple[Call, ...]


def openai_name(name: str) -> str:
    return name.replace(".", "_")


def _convert_property(schema: dict[str, Any]) -> dict[str, Any]:
    declared = schema.get("type")
    mapped = GORILLA_TO_OPENAPI.get(declared, "string") if isinstance(declared, str) else "string"
    schema["type"] = mapped
    if declared == "float":
        schema["format"] = "float"
        schema["description"] = f"{schema.get('description', '')} This is a float type value."
    if isinstance(schema.get("properties"), dict):
        schema["properties"] = {
            key: _convert_property(value) if isinstance(value, dict) else value
            for key, value in schema["properties"].items()
        }
    if isinstance(schema.get("items"), dict):
        schema["items"] = _convert_property(schema["items"])
    return schema


def openai_function(function: dict[str, Any]) -> dict[str, Any]:
    """A BFCL function as an OpenAI function definition (name, description, parameters)."""
    parameters = _convert_property(copy.deepcopy(function.get("parameters") or {}))
    parameters["type"] = "object"
    return {
        "name": openai_name(function["name"]),
        "description": function.get("description", ""),
        "parameters": parameters,
    }


def _first_value(alternatives: Any) -> tuple[bool, Any]:
    """(present, value): the first acceptable alternative that is not the "omit" marker."""
    if not isinstance(alternatives, list):
        return True, alternatives
    for alternative in alternatives:
        if alternative == "":
            continue
        if isinstance(alternative, dict) and all(isinstance(v, list) for v in alternative.values()):
            return True, _arguments(alternative)
        return True, alternative
    return False, None


def _arguments(expected: dict[str, Any]) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    for parameter, alternatives in expected.items():
        present, value = _first_value(alternatives)
        if present:
            arguments[parameter] = value
    return arguments


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def load_cases(bfcl_dir: Path) -> list[Case]:
    """Every single-turn BFCL case that has an answer file, in file order."""
    data = bfcl_dir / "data"
    cases: list[Case] = []
    for category in CATEGORIES:
        filename = f"BFCL_v4_{category}.json"
        answers = {
            row["id"]: row["ground_truth"]
            for row in _read_jsonl(data / "possible_answer" / filename)
        }
        for row in _read_jsonl(data / filename):
            expected = answers.get(row["id"])
            if expected is None:
                continue
            calls = tuple(
                Call(openai_name(name), json.dumps(_arguments(parameters)))
                for entry in expected
                for name, parameters in entry.items()
            )
            functions = tuple(openai_function(f) for f in row["function"])
            cases.append(Case(row["id"], functions, calls))
    return cases
