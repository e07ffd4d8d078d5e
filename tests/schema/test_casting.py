"""`cast_arguments`: one table per rule, the never-lossy refusals, and the walk through schemas."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core._json_boundary import MAX_ARGUMENT_VALUES, WrittenFloat, check_depth, loads
from nanobot_core.schema import (
    InvalidSchemaError,
    SchemaValidator,
    cast_arguments,
    casting,
    compile_schema,
    validate,
)
from tests.helpers import run_python

DRAFT7 = "http://json-schema.org/draft-07/schema#"


def _cast_one(schema: dict[str, Any], value: Any) -> Any:
    """Cast ``value`` as the property ``x`` of an object, and return what ``x`` became."""
    wrapper = {"type": "object", "properties": {"x": schema}}
    cast, _ = cast_arguments(wrapper, {"x": value})
    return cast["x"]


def _same(left: Any, right: Any) -> bool:
    """Equal and of the same JSON type (``==`` alone says ``True == 1 == 1.0``)."""
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_same(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(_same, left, right))
    return type(left) is type(right) and left == right


CASTS = [
    ("integer", "3", 3),
    ("integer", "-12", -12),
    ("integer", " 7 ", 7),
    ("integer", "0", 0),
    ("integer", "3.0", 3),
    ("number", "2.5", 2.5),
    ("number", "3", 3),
    ("number", "-0.5", -0.5),
    ("number", "1e3", 1000.0),
    ("boolean", "true", True),
    ("boolean", "True", True),
    ("boolean", "YES", True),
    ("boolean", "1", True),
    ("boolean", "false", False),
    ("boolean", "No", False),
    ("boolean", "0", False),
    ("string", 3, "3"),
    ("string", -2.5, "-2.5"),
    ("array", "[1, 2]", [1, 2]),
    ("array", " [] ", []),
    ("object", '{"a": 1}', {"a": 1}),
]


@pytest.mark.parametrize(("json_type", "value", "expected"), CASTS, ids=repr)
def test_cast_rule(json_type: str, value: Any, expected: Any) -> None:
    """Each documented conversion turns the loose value into the wanted JSON type."""
    assert _same(_cast_one({"type": json_type}, value), expected)


REFUSALS = [
    ("integer", "3.7"),  # the fraction would be lost
    ("integer", "1e3"),  # exponent: not how anyone writes an integer
    ("integer", "007"),  # leading zeros may be an identifier
    ("integer", "3 apples"),
    ("integer", ""),
    ("integer", True),  # a boolean is never an integer
    ("integer", "9" * 500),  # too long to be an argument
    ("number", "nan"),
    ("number", "inf"),
    ("number", "1e999"),  # overflows to infinity
    ("number", "0x10"),
    ("number", False),
    ("boolean", 1),  # no int -> bool
    ("boolean", 0),
    ("boolean", "maybe"),
    ("boolean", "y"),
    ("string", True),  # booleans are not numbers, so they are not written out either
    ("string", None),
    ("string", [1]),
    ("array", "a, b"),
    ("array", '{"a": 1}'),  # JSON, but not an array
    ("array", "[1, 2"),
    ("object", "[1]"),
    ("object", "a=1"),
    ("array", "[" * 101 + "]" * 101),  # deeper than the JSON boundary allows
    ("array", "[" * 100_000 + "]" * 100_000),  # deeper than Python's recursion limit
    ("object", '{"a":' * 100_000 + "1" + "}" * 100_000),
    ("array", "[" + "1" * 5_000 + "]"),  # more integer digits than the boundary allows
    ("null", "null"),
    ("null", ""),
]


@pytest.mark.parametrize(("json_type", "value"), REFUSALS, ids=lambda v: repr(v)[:40])
def test_lossy_or_unclear_values_are_left_alone(json_type: str, value: Any) -> None:
    """A value no rule converts without loss or guessing is returned as it was."""
    assert _same(_cast_one({"type": json_type}, value), value)


def test_int_beyond_float_range_is_written_exactly() -> None:
    """An int too large for a float is written out digit for digit, not refused with a raise."""
    assert _cast_one({"type": "string"}, 10**400) == "1" + "0" * 400


def test_written_number_is_cast_to_its_text() -> None:
    """A number decoded with its text becomes that text, and the note shows it as written."""
    value = loads('{"x": 3.10, "y": [1E+2, -0]}', written_numbers=True).value
    schema = {"properties": {"x": {"type": "string"}, "y": {"items": {"type": "string"}}}}
    cast, notes = cast_arguments(schema, value)
    assert cast == {"x": "3.10", "y": ["1E+2", "-0"]}
    assert notes == ['$.x: 3.10 -> "3.10"', '$.y[0]: 1E+2 -> "1E+2"', '$.y[1]: -0 -> "-0"']


def test_written_text_that_is_not_a_json_number_is_not_used() -> None:
    """A written form that is not JSON number text is ignored: JSON writes the number."""
    assert _cast_one({"type": "string"}, WrittenFloat(" 2.50")) == "2.5"


def test_cast_result_holds_no_written_number() -> None:
    """Numbers left alone, in unions, or parsed from a JSON string come back as plain numbers."""
    value = loads('{"x": 3.10, "n": 2.50, "u": 1.50, "a": "[0.50]"}', written_numbers=True).value
    schema = {
        "properties": {
            "x": {"type": "string"},
            "u": {"anyOf": [{"type": "number", "maximum": 1}, {"type": "boolean"}]},
            "a": {"type": "array", "items": {"type": "number"}},
        }
    }
    cast, _ = cast_arguments(schema, value)
    assert cast == {"x": "3.10", "n": 2.5, "u": 1.5, "a": [0.5]}
    assert [type(cast["n"]), type(cast["u"]), type(cast["a"][0])] == [float, float, float]


def test_union_branch_sees_the_written_text() -> None:
    """In anyOf, a branch's string keywords judge the text as written (3.10 is four characters)."""
    value = loads('{"x": 3.10}', written_numbers=True).value

    def schema(longest: int) -> dict[str, Any]:
        branches = [{"type": "string", "maxLength": longest}, {"type": "null"}]
        return {"properties": {"x": {"anyOf": branches}}}

    assert cast_arguments(schema(3), value)[0] == {"x": 3.1}
    assert cast_arguments(schema(4), value)[0] == {"x": "3.10"}


def test_int_beyond_the_digit_limit_is_left_alone() -> None:
    """An int with more digits than Python writes as text stays an int instead of raising."""
    value = 10**5_000
    assert _cast_one({"type": "string"}, value) is value


@settings(derandomize=True, deadline=None, max_examples=60)
@given(
    depth=st.integers(min_value=1, max_value=3_000),
    opener=st.sampled_from(["[", '{"a":']),
    closed=st.booleans(),
)
def test_json_text_cast_stays_within_the_boundary(depth: int, opener: str, closed: bool) -> None:
    """Text cast to an array or object never raises and never nests deeper than the boundary."""
    closer = "]" if opener == "[" else "}"
    text = opener * depth + ("1" if opener != "[" else "") + (closer * depth if closed else "")
    cast = _cast_one({"type": ["array", "object"]}, text)
    if isinstance(cast, str):
        assert cast == text
    else:
        check_depth(cast)


def test_enum_values_are_never_case_folded() -> None:
    """``"red"`` stays ``"red"`` even if the enum only has ``"Red"``."""
    schema = {"type": "string", "enum": ["Red", "Green"]}
    assert _cast_one(schema, "red") == "red"


def test_integral_float_for_an_integer_is_left_alone() -> None:
    """``1.0`` is already an integer to JSON Schema (draft 6+): neither changed nor noted."""
    value = {"x": 1.0}
    assert cast_arguments({"properties": {"x": {"type": "integer"}}}, value) == (value, [])


def test_integral_float_stays_invalid_under_draft_4() -> None:
    """Draft 4 does not count ``1.0`` as an integer, and casting does not round it either."""
    schema = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "properties": {"x": {"type": "integer"}},
    }
    cast, notes = cast_arguments(schema, {"x": 1.0})
    assert (cast, notes) == ({"x": 1.0}, [])
    assert validate(schema, cast) == ['$.x: 1.0 is not of type "integer"']


def test_value_of_a_wanted_type_is_never_converted() -> None:
    """A string for a string parameter stays a string, however numeric it looks."""
    assert _cast_one({"type": "string"}, "3") == "3"
    assert _cast_one({"type": ["string", "integer"]}, "3") == "3"


def test_ambiguous_type_list_is_left_alone() -> None:
    """``"1"`` could be integer 1 or boolean true: with both types allowed, nothing is guessed."""
    assert _cast_one({"type": ["integer", "boolean"]}, "1") == "1"


def test_type_list_whose_casts_agree_casts() -> None:
    """``"3"`` for integer-or-number is 3 either way, so it is cast."""
    assert _same(_cast_one({"type": ["integer", "number"]}, "3"), 3)


def test_nullable_type_casts_to_the_non_null_type() -> None:
    """``type: ["integer", "null"]`` casts ``"4"`` to 4 and leaves ``null`` alone."""
    schema = {"type": ["integer", "null"]}
    assert _same(_cast_one(schema, "4"), 4)
    assert _cast_one(schema, None) is None


def test_notes_name_each_cast_with_its_path() -> None:
    """Each cast adds one note ``<path>: <old> -> <new>``, with ``[i]`` for array positions."""
    schema = {
        "type": "object",
        "properties": {
            "count": {"type": "integer"},
            "rows": {"type": "array", "items": {"properties": {"ok": {"type": "boolean"}}}},
        },
    }
    cast, notes = cast_arguments(schema, {"count": "3", "rows": [{"ok": "yes"}, {"ok": False}]})
    assert cast == {"count": 3, "rows": [{"ok": True}, {"ok": False}]}
    assert notes == ['$.count: "3" -> 3', '$.rows[0].ok: "yes" -> true']


def test_json_string_is_parsed_then_walked() -> None:
    """An array sent as JSON text is parsed, and its items are cast too (two notes)."""
    schema = {"properties": {"ids": {"type": "array", "items": {"type": "integer"}}}}
    cast, notes = cast_arguments(schema, {"ids": '["1", 2]'})
    assert cast == {"ids": [1, 2]}
    assert notes == ['$.ids: "[\\"1\\", 2]" -> ["1", 2]', '$.ids[0]: "1" -> 1']


def test_root_value_is_cast_with_root_path() -> None:
    """The root itself can be cast; its note starts with ``$:``."""
    assert cast_arguments({"type": "object"}, '{"a": 1}') == (
        {"a": 1},
        ['$: "{\\"a\\": 1}" -> {"a": 1}'],
    )


def test_nothing_to_cast_returns_the_same_object() -> None:
    """When no cast applies, the very same object comes back with no notes."""
    value = {"a": [1, {"b": "x"}]}
    cast, notes = cast_arguments({"properties": {"a": {"type": "array"}}}, value)
    assert cast is value
    assert notes == []


def test_input_is_never_mutated() -> None:
    """Casting builds new containers; the caller's nested dicts and lists are untouched."""
    schema = {"properties": {"a": {"items": {"properties": {"n": {"type": "integer"}}}}}}
    value: dict[str, Any] = {"a": [{"n": "1"}, {"n": 2}], "other": {"k": [1]}}
    before = copy.deepcopy(value)
    cast, _ = cast_arguments(schema, value)
    assert value == before
    assert cast["a"][0] == {"n": 1}
    assert cast["other"] is value["other"]
    assert cast["a"][1] is value["a"][1]


def test_additional_and_pattern_properties_are_followed() -> None:
    """Keys matched by ``patternProperties`` or left to ``additionalProperties`` are cast too."""
    schema = {
        "properties": {"name": {"type": "string"}},
        "patternProperties": {"^n_": {"type": "integer"}},
        "additionalProperties": {"type": "boolean"},
    }
    cast, _ = cast_arguments(schema, {"name": 5, "n_total": "7", "verbose": "no"})
    assert cast == {"name": "5", "n_total": 7, "verbose": False}


def test_pattern_properties_match_keys_as_validation_does() -> None:
    """A key is cast under a pattern exactly when validation applies that pattern to it."""
    schema = {"type": "object", "patternProperties": {"^\\p{Lu}": {"type": "integer"}}}
    assert validate(schema, {"Count": "3"}) == ['$.Count: "3" is not of type "integer"']
    assert cast_arguments(schema, {"Count": "3", "count": "4"})[0] == {"Count": 3, "count": "4"}


def test_pattern_properties_match_a_hostile_key_in_linear_time() -> None:
    """A pattern that backtracks exponentially in Python's ``re`` does not stall on a long key."""
    code = (
        "from nanobot_core.schema import cast_arguments\n"
        "schema = {'properties': {'n': {'type': 'integer'}},\n"
        "          'patternProperties': {'^(a|aa)+$': {'type': 'integer'}}}\n"
        "cast, _ = cast_arguments(schema, {'n': '1', 'a' * 5000 + '!': '2', 'aaaa': '3'})\n"
        "assert cast == {'n': 1, 'a' * 5000 + '!': '2', 'aaaa': 3}, cast\n"
    )
    done = run_python(code, timeout=120)
    assert done.returncode == 0, done.stderr


def test_prefix_items_then_items() -> None:
    """2020-12 ``prefixItems`` casts the leading positions and ``items`` the rest."""
    schema = {"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": {"type": "number"}}
    cast, _ = cast_arguments(schema, [1, "2", "3.5", "4"])
    assert cast == ["1", 2, 3.5, 4]


def test_draft7_tuple_items_then_additional_items() -> None:
    """Draft 7's list form of ``items`` and its ``additionalItems`` are followed the same way."""
    schema = {
        "$schema": DRAFT7,
        "items": [{"type": "integer"}],
        "additionalItems": {"type": "boolean"},
    }
    cast, _ = cast_arguments(schema, ["1", "yes"])
    assert cast == [1, True]


def test_tuple_input_stays_a_tuple() -> None:
    """A tuple given for an array comes back as a tuple when its items are cast."""
    cast, _ = cast_arguments({"items": {"type": "integer"}}, ("1", 2))
    assert cast == (1, 2)


@pytest.mark.parametrize("container", ["$defs", "definitions"])
def test_local_refs_are_followed(container: str) -> None:
    """``$ref`` to ``#/$defs/..`` and ``#/definitions/..`` is resolved and cast through."""
    schema = {
        container: {"count": {"type": "integer"}},
        "properties": {"n": {"$ref": f"#/{container}/count"}},
    }
    assert cast_arguments(schema, {"n": "5"})[0] == {"n": 5}


def test_recursive_ref_casts_at_every_depth() -> None:
    """A tree schema that refers to itself casts each level of the value."""
    schema = {
        "$ref": "#/$defs/node",
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "value": {"type": "integer"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
            }
        },
    }
    value = {"value": "1", "children": [{"value": "2", "children": [{"value": "3"}]}]}
    cast, notes = cast_arguments(schema, value)
    assert cast == {"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}]}
    assert len(notes) == 3


def test_ref_cycle_that_consumes_nothing_terminates() -> None:
    """``{"$ref": "#"}`` at the root would loop forever if followed blindly; it returns instead."""
    schema = {"$ref": "#", "type": "integer"}
    assert cast_arguments(schema, "2") == (2, ['$: "2" -> 2'])


def test_draft7_ref_hides_its_siblings() -> None:
    """Before 2019-09, keywords beside ``$ref`` are ignored: only the referenced type counts."""
    schema = {
        "$schema": DRAFT7,
        "definitions": {"n": {"type": "integer"}},
        "properties": {"x": {"$ref": "#/definitions/n", "type": "string"}},
    }
    assert cast_arguments(schema, {"x": "3"})[0] == {"x": 3}


def test_unresolvable_remote_ref_is_refused_not_fetched() -> None:
    """A remote ``$ref`` with no retriever makes the schema invalid (nothing is fetched)."""
    schema = {"properties": {"x": {"$ref": "https://example.invalid/n.json"}}}
    with pytest.raises(InvalidSchemaError, match=r"example\.invalid"):
        cast_arguments(schema, {"x": "3"})


def test_remote_ref_is_not_walked() -> None:
    """Casting follows only local references, even when a retriever resolves remote ones."""
    validator = compile_schema(
        {"properties": {"x": {"$ref": "https://example.invalid/n.json"}}},
        retriever=lambda uri: {"type": "integer"},
    )
    assert cast_arguments(validator, {"x": "3"}) == ({"x": "3"}, [])
    assert validator.errors({"x": "3"}) == ['$.x: "3" is not of type "integer"']


def test_all_of_branches_are_each_applied() -> None:
    """Every ``allOf`` branch applies to the value, so each one's casts are made."""
    schema = {
        "allOf": [
            {"properties": {"a": {"type": "integer"}}},
            {"properties": {"b": {"type": "boolean"}}},
        ]
    }
    assert cast_arguments(schema, {"a": "1", "b": "no"})[0] == {"a": 1, "b": False}


def test_union_casts_when_one_branch_accepts() -> None:
    """``anyOf: [integer, null]`` casts ``"5"`` to 5: only the integer branch accepts a cast."""
    schema = {"properties": {"x": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}
    assert cast_arguments(schema, {"x": "5"}) == ({"x": 5}, ['$.x: "5" -> 5'])


def test_union_value_valid_against_a_branch_is_left_alone() -> None:
    """``"5"`` is already valid against the string branch, so it is not turned into a number."""
    schema = {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert cast_arguments(schema, "5") == ("5", [])


def test_union_with_two_accepting_branches_is_left_alone() -> None:
    """``"1"`` is integer 1 for one branch and true for another: ambiguous, so nothing is cast."""
    schema = {"oneOf": [{"type": "integer"}, {"type": "boolean"}]}
    assert cast_arguments(schema, "1") == ("1", [])


def test_union_branch_must_accept_the_whole_cast_result() -> None:
    """Only the branch whose other constraints (here ``const``) also hold takes the cast."""
    schema = {
        "oneOf": [
            {
                "properties": {"kind": {"const": "count"}, "n": {"type": "integer"}},
                "required": ["kind"],
            },
            {
                "properties": {"kind": {"const": "flag"}, "n": {"type": "boolean"}},
                "required": ["kind"],
            },
        ]
    }
    assert cast_arguments(schema, {"kind": "count", "n": "1"})[0] == {"kind": "count", "n": 1}
    assert cast_arguments(schema, {"kind": "flag", "n": "1"})[0] == {"kind": "flag", "n": True}


def test_union_inside_ref_uses_the_ref_target_branches() -> None:
    """A union reached through ``$ref`` is judged against the branches where they really live."""
    schema = {
        "$defs": {"maybe_int": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
        "properties": {"x": {"$ref": "#/$defs/maybe_int"}},
    }
    assert cast_arguments(schema, {"x": "8"})[0] == {"x": 8}


def test_cast_accepts_a_compiled_validator() -> None:
    """A `SchemaValidator` can be passed instead of the schema."""
    validator = compile_schema({"properties": {"n": {"type": "integer"}}})
    assert cast_arguments(validator, {"n": "2"})[0] == {"n": 2}


def test_invalid_schema_raises_a_clear_error() -> None:
    """Casting against a schema that is not JSON Schema raises `InvalidSchemaError`."""
    with pytest.raises(InvalidSchemaError, match="dict"):
        cast_arguments({"type": "dict"}, {})


def test_cast_then_validate_fixes_a_loose_call() -> None:
    """The registry's sequence (validate, cast, validate) turns a loose call into a valid one."""
    schema = {
        "type": "object",
        "properties": {
            "count": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["count"],
    }
    loose = {"count": "3", "tags": '[1, "a"]'}
    assert validate(schema, loose) != []
    cast, _ = cast_arguments(schema, loose)
    assert validate(schema, cast) == []
    assert cast == {"count": 3, "tags": ["1", "a"]}


def _union_chain(depth: int) -> dict[str, Any]:
    """A small schema whose cast tries 2**depth branches: each level an anyOf of two refs down."""
    defs: dict[str, Any] = {"n0": {"type": "integer"}}
    for level in range(1, depth + 1):
        below = {"$ref": f"#/$defs/n{level - 1}"}
        defs[f"n{level}"] = {"anyOf": [below, {"allOf": [below]}]}
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": f"#/$defs/n{depth}"}}}


def test_a_cast_of_nested_unions_stops_at_its_step_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cast that would try 2**14 union branches stops at the limit and casts nothing."""
    monkeypatch.setattr(casting, "MAX_CAST_STEPS", 2_000, raising=False)
    checked: list[str] = []
    is_valid_at = SchemaValidator.is_valid_at

    def counted(self: SchemaValidator, pointer: str, instance: Any) -> bool:
        checked.append(pointer)
        return is_valid_at(self, pointer, instance)

    monkeypatch.setattr(SchemaValidator, "is_valid_at", counted)
    value = {"x": "text"}
    cast, notes = cast_arguments(_union_chain(14), value)
    assert (cast, notes) == (value, [])
    # Without the limit the walk checks each of the 2**15 branches it meets.
    assert 0 < len(checked) <= 2_000


def test_a_cast_that_runs_out_of_steps_keeps_nothing_it_cast(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Values cast before the limit was reached are given back as they were, with no notes."""
    monkeypatch.setattr(casting, "MAX_CAST_STEPS", 100, raising=False)
    schema = {
        "type": "object",
        "properties": {"xs": {"type": "array", "items": {"type": "integer"}}},
    }
    cast, notes = cast_arguments(schema, {"xs": ["1"] * 500})
    assert cast == {"xs": ["1"] * 500} and notes == []
    assert cast_arguments(schema, {"xs": ["1"] * 50})[0] == {"xs": [1] * 50}


def test_the_step_limit_casts_every_value_arguments_may_hold() -> None:
    """A plain schema casts arguments of as many values as the boundary lets in."""
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    count = MAX_ARGUMENT_VALUES - 1
    cast, notes = cast_arguments(schema, {f"k{n}": str(n) for n in range(count)})
    assert len(notes) == count and cast["k7"] == 7
    assert casting.MAX_CAST_STEPS >= 2 * MAX_ARGUMENT_VALUES


def test_patterns_are_compiled_once_per_cast(monkeypatch: pytest.MonkeyPatch) -> None:
    """Objects of one patternProperties schema share its matchers: compiled once, not per object."""
    built: list[Any] = []
    pattern_schemas = casting._pattern_schemas

    def counted(value: Any) -> Any:
        built.append(value)
        return pattern_schemas(value)

    monkeypatch.setattr(casting, "_pattern_schemas", counted)
    item = {"type": "object", "patternProperties": {"^n_": {"type": "integer"}}}
    schema = {"type": "object", "properties": {"xs": {"type": "array", "items": item}}}
    cast, _ = cast_arguments(schema, {"xs": [{"n_1": "1"}] * 300})
    assert cast == {"xs": [{"n_1": 1}] * 300}
    assert built.count(item["patternProperties"]) == 1
