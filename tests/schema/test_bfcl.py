"""BFCL v4 tool schemas normalise into valid JSON Schema, and their expected calls validate.

Instances are built from the answer files: each parameter maps to a list of acceptable values;
the first one is used, and ``""`` as the first one means "left out". Nested dicts recurse (their
values are lists of alternatives again). Multi-turn answers are Python call strings, read with
`ast`; positional arguments take the parameters in the order the schema lists them.

Calls that stay invalid are data quirks, listed in KNOWN_QUIRKS with the reason (and in
``docs/schema-quirks.md``), never skipped.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from nanobot_core.schema import compile_schema, normalise_schema, validate
from tests.helpers import data_dir

_SOURCE_STRINGS = (
    "Java/JavaScript answer is a variable name or source expression where the schema declares "
    "an array, object or integer"
)
_REQUIRED_LEFT_OUT = (
    'the first acceptable value is "" (left out) for a parameter the schema requires'
)
_NOT_IN_ENUM = "the answer is not one of the schema's enum values"
_BOOLEAN_FOR_STRING_ENUM = (
    'the answer is a JSON boolean where the schema wants one of the strings "True", "False", '
    '"dontcare"'
)

KNOWN_QUIRKS: dict[str, str] = {
    "live_multiple_87-38-4#0": _NOT_IN_ENUM + ' ("openai" for a server type)',
    "live_multiple_144-56-0#0": _REQUIRED_LEFT_OUT,
    "live_multiple_507-149-4#0": _REQUIRED_LEFT_OUT,
    "live_multiple_552-153-1#0": _BOOLEAN_FOR_STRING_ENUM,
    "live_multiple_735-167-6#0": _BOOLEAN_FOR_STRING_ENUM,
    "live_multiple_750-169-5#0": _NOT_IN_ENUM + ' ("Any" for a genre)',
    "live_multiple_756-169-11#0": _NOT_IN_ENUM + ' ("horror"; the enum has "Horror")',
    "live_multiple_834-178-9#0": _REQUIRED_LEFT_OUT,
    "live_parallel_multiple_2-2-0#1": _NOT_IN_ENUM + " (a Korean command the enum lacks)",
    "live_simple_106-63-0#0": _REQUIRED_LEFT_OUT,
    "live_simple_112-68-0#0": _REQUIRED_LEFT_OUT,
    "parallel_multiple_21#1": "Python expressions (\"data['sales']\") given for array parameters",
    "parallel_multiple_94#0": "the schema declares integer items; the answer sorts fruit names",
    "simple_python_200#0": _REQUIRED_LEFT_OUT,
    "simple_java_26#0": _SOURCE_STRINGS,
    "simple_java_35#0": _SOURCE_STRINGS,
    "simple_java_38#0": _SOURCE_STRINGS,
    "simple_java_45#0": _SOURCE_STRINGS,
    "simple_java_58#0": _SOURCE_STRINGS,
    "simple_java_69#0": _SOURCE_STRINGS,
    "simple_java_72#0": _SOURCE_STRINGS,
    "simple_java_82#0": _SOURCE_STRINGS,
    "simple_java_87#0": _SOURCE_STRINGS,
    "simple_java_88#0": _SOURCE_STRINGS,
    "simple_javascript_5#0": _SOURCE_STRINGS,
    "simple_javascript_9#0": _SOURCE_STRINGS,
    "simple_javascript_11#0": _SOURCE_STRINGS,
    "simple_javascript_15#0": _SOURCE_STRINGS,
    "simple_javascript_19#0": _SOURCE_STRINGS,
    "simple_javascript_32#0": _SOURCE_STRINGS,
    "simple_javascript_37#0": _SOURCE_STRINGS,
    "simple_javascript_39#0": _SOURCE_STRINGS,
    "multi_turn_base_173#3.0": 'ticket_id is declared integer; the answer passes "ticket_001"',
}

MULTI_TURN = "BFCL_v4_multi_turn_base.json"
CLASS_DOCS = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "TwitterAPI": "posting_api.json",
    "VehicleControlAPI": "vehicle_control.json",
}
"""BFCL's multi-turn rows name classes; these files hold each class's function docs."""


def _data() -> Path:
    return data_dir() / "bfcl" / "data"


@cache
def _rows(path: Path) -> tuple[dict[str, Any], ...]:
    """A BFCL file: JSON Lines despite the ``.json`` suffix."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return tuple(json.loads(line) for line in lines if line.strip())


def _function_files() -> list[Path]:
    """Every file that offers functions; multi-turn rows take theirs from the func docs."""
    single_turn = [path for path in sorted(_data().glob("BFCL_*.json")) if path.name != MULTI_TURN]
    return single_turn + sorted(_data().glob("multi_turn_func_doc/*.json"))


def _functions(path: Path) -> list[dict[str, Any]]:
    rows = _rows(path)
    if path.parent.name == "multi_turn_func_doc":
        return list(rows)
    return [function for row in rows for function in row.get("function", [])]


@cache
def _metaschema() -> dict[str, Any]:
    path = data_dir() / "json-schema-test-suite/metaschemas/draft202012/metaschema.json"
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


@pytest.mark.parametrize("path", _function_files(), ids=lambda path: path.name)
def test_every_function_schema_normalises_into_valid_json_schema(path: Path) -> None:
    """Each function's parameters, normalised, pass the 2020-12 metaschema and compile."""
    functions = _functions(path)
    assert functions
    broken = {}
    for function in functions:
        schema, _ = normalise_schema(function["parameters"])
        errors = validate(_metaschema(), schema)
        if errors:
            broken[function["name"]] = errors
        compile_schema(schema).compile()
    assert broken == {}


def test_raw_bfcl_schemas_are_not_json_schema() -> None:
    """The metaschema check can fail: raw BFCL ``"type": "dict"`` is rejected before normalising."""
    raw = _functions(_data() / "BFCL_v4_simple_python.json")[0]["parameters"]
    assert raw["type"] == "dict"
    assert validate(_metaschema(), raw) != []


def _first_acceptable(alternatives: Any) -> Any:
    """The value a call would send: the first alternative, recursing into nested dict answers."""
    if isinstance(alternatives, dict):
        return {
            key: _first_acceptable(options[0])
            for key, options in alternatives.items()
            if options and options[0] != ""
        }
    if isinstance(alternatives, list):
        return [_first_acceptable(item) for item in alternatives]
    return alternatives


def _instance(params: dict[str, list[Any]]) -> dict[str, Any]:
    return {
        name: _first_acceptable(options[0])
        for name, options in params.items()
        if options and options[0] != ""
    }


def _single_call_cases() -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    for answers in sorted((_data() / "possible_answer").glob("*.json")):
        if answers.name == MULTI_TURN:
            continue
        questions = {row["id"]: row for row in _rows(_data() / answers.name)}
        for answer in _rows(answers):
            functions = {f["name"]: f for f in questions[answer["id"]]["function"]}
            for index, call in enumerate(answer["ground_truth"]):
                ((name, params),) = call.items()
                yield f"{answer['id']}#{index}", functions[name]["parameters"], _instance(params)


def _multi_turn_cases() -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    docs = {
        cls: {f["name"]: f for f in _rows(_data() / "multi_turn_func_doc" / file)}
        for cls, file in CLASS_DOCS.items()
    }
    questions = {row["id"]: row for row in _rows(_data() / MULTI_TURN)}
    for answer in _rows(_data() / "possible_answer" / MULTI_TURN):
        functions: dict[str, dict[str, Any]] = {}
        for cls in questions[answer["id"]]["involved_classes"]:
            functions.update(docs[cls])
        for turn, calls in enumerate(answer["ground_truth"]):
            for index, source in enumerate(calls):
                call = ast.parse(source, mode="eval").body
                assert isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                schema = functions[call.func.id]["parameters"]
                names = list(schema.get("properties", {}))
                arguments = {names[i]: ast.literal_eval(arg) for i, arg in enumerate(call.args)}
                arguments |= {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}
                yield f"{answer['id']}#{turn}.{index}", schema, arguments


def _answer_params() -> list[Any]:
    params = []
    for case_id, schema, instance in [*_single_call_cases(), *_multi_turn_cases()]:
        marks = []
        if case_id in KNOWN_QUIRKS:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_QUIRKS[case_id]))
        params.append(pytest.param(schema, instance, id=case_id, marks=marks))
    return params


@pytest.mark.parametrize(("schema", "instance"), _answer_params())
def test_expected_call_validates_after_normalisation(
    schema: dict[str, Any], instance: dict[str, Any]
) -> None:
    """The arguments BFCL expects are valid against the normalised function schema."""
    normalised, _ = normalise_schema(schema)
    assert validate(normalised, instance) == []


def test_known_quirks_name_real_calls() -> None:
    """Every quirk id is a call in the answer files: a mistyped id would mark nothing."""
    ids = {param.id for param in _answer_params()}
    assert set(KNOWN_QUIRKS) <= ids
    assert len(ids) == 2600 + 1142
