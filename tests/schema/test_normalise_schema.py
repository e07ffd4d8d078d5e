"""`normalise_schema` turns wild tool schemas into valid JSON Schema and says what it changed."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core import clip
from nanobot_core.schema import normalise_schema, normalise_schema_changes, validate
from nanobot_core.schema.normalise import TYPE_ALIASES, UNCONSTRAINED_TYPES


@pytest.fixture(scope="module")
def metaschema(data_folder: Path) -> dict[str, Any]:
    path = data_folder / "json-schema-test-suite/metaschemas/draft202012/metaschema.json"
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


TYPE_NAMES = [
    ("dict", "object"),
    ("HashMap", "object"),
    ("Map", "object"),
    ("Hashtable", "object"),
    ("float", "number"),
    ("double", "number"),
    ("Float", "number"),
    ("tuple", "array"),
    ("list", "array"),
    ("Array", "array"),
    ("ArrayList", "array"),
    ("Queue", "array"),
    ("int", "integer"),
    ("Integer", "integer"),
    ("long", "integer"),
    ("short", "integer"),
    ("byte", "integer"),
    ("bool", "boolean"),
    ("Boolean", "boolean"),
    ("str", "string"),
    ("String", "string"),
    ("char", "string"),
    ("None", "null"),
    ("NUMBER", "number"),
]


@pytest.mark.parametrize(("name", "json_type"), TYPE_NAMES)
def test_type_name_maps_to_json_type(name: str, json_type: str) -> None:
    """Python, Java and JavaScript type names become the JSON Schema type, with a warning."""
    schema, warnings = normalise_schema({"type": name})
    assert schema == {"type": json_type}
    assert warnings == [f'#: type "{name}" -> "{json_type}"']


@pytest.mark.parametrize("name", ["integer", "number", "string", "boolean", "object", "array"])
def test_json_types_are_untouched(name: str) -> None:
    """A standard type name is neither changed nor warned about."""
    schema = {"type": name}
    assert normalise_schema(schema) == (schema, [])


@pytest.mark.parametrize("name", ["any", "Any", ""])
def test_any_drops_the_type(name: str) -> None:
    """``any`` (and BFCL's one empty type name) means no constraint: ``type`` is removed."""
    schema, warnings = normalise_schema({"type": name, "description": "d"})
    assert schema == {"description": "d"}
    assert warnings == [f'#: type "{name}" means any value: type constraint dropped']


def test_unknown_type_name_drops_the_type() -> None:
    """A type nobody knows constrains nothing we can check: it is dropped and reported."""
    schema, warnings = normalise_schema({"type": "IResultSetController"})
    assert schema == {}
    assert warnings == [
        '#: type "IResultSetController" is not a type we know: type constraint dropped'
    ]


def test_type_lists_map_each_member_and_dedupe() -> None:
    """``["int", "long", "None"]`` becomes ``["integer", "null"]``."""
    schema, _ = normalise_schema({"type": ["int", "long", "None"]})
    assert schema == {"type": ["integer", "null"]}


def test_type_list_with_any_drops_the_type() -> None:
    """Any member meaning "any value" makes the whole list unconstrained."""
    assert normalise_schema({"type": ["string", "any"]})[0] == {}


def test_changes_deep_in_the_schema_carry_their_path() -> None:
    """Nested schemas are reached through every keyword and warnings name their location."""
    schema = {
        "type": "dict",
        "properties": {"params": {"type": "HashMap", "additionalProperties": {"type": "str"}}},
        "$defs": {"point": {"type": "tuple", "items": {"type": "float"}}},
        "anyOf": [{"type": "bool"}],
    }
    fixed, warnings = normalise_schema(schema)
    assert fixed == {
        "type": "object",
        "properties": {"params": {"type": "object", "additionalProperties": {"type": "string"}}},
        "$defs": {"point": {"type": "array", "items": {"type": "number"}}},
        "anyOf": [{"type": "boolean"}],
    }
    assert sorted(warnings) == [
        '#/$defs/point/items: type "float" -> "number"',
        '#/$defs/point: type "tuple" -> "array"',
        '#/anyOf/0: type "bool" -> "boolean"',
        '#/properties/params/additionalProperties: type "str" -> "string"',
        '#/properties/params: type "HashMap" -> "object"',
        '#: type "dict" -> "object"',
    ]


def test_valid_schema_comes_back_as_the_same_object() -> None:
    """A schema needing no change is returned as is, with no warnings."""
    schema = {"type": "object", "properties": {"a": {"type": "string", "optional": True}}}
    fixed, warnings = normalise_schema(schema)
    assert fixed is schema
    assert warnings == []


def test_input_is_never_mutated() -> None:
    """Normalising builds a copy; the caller's schema is untouched."""
    schema = {"type": "dict", "properties": {"a": {"type": "float", "required": True}}}
    before = copy.deepcopy(schema)
    normalise_schema(schema)
    assert schema == before


def test_required_flag_on_a_property_moves_to_the_parent() -> None:
    """Swagger's ``"required": true`` on a property becomes an entry in the parent's list."""
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string", "required": True}, "b": {"required": False}},
        "required": ["c"],
    }
    fixed, warnings = normalise_schema(schema)
    assert fixed["required"] == ["c", "a"]
    assert fixed["properties"] == {"a": {"type": "string"}, "b": {}}
    assert len(warnings) == 2


@pytest.mark.parametrize(
    ("required", "expected"),
    [("a", ["a"]), (["a", "a", "b"], ["a", "b"]), (["a", 3], ["a"])],
)
def test_required_list_is_repaired(required: Any, expected: list[str]) -> None:
    """A single name, duplicates and non-names in ``required`` become a clean list of names."""
    fixed, warnings = normalise_schema({"required": required})
    assert fixed == {"required": expected}
    assert len(warnings) == 1


def test_null_default_makes_the_type_nullable() -> None:
    """``"default": null`` (Python's ``= None``) adds ``null`` to the type, and to an enum."""
    fixed, warnings = normalise_schema({"type": "integer", "enum": [1, 2], "default": None})
    assert fixed == {"type": ["integer", "null"], "enum": [1, 2, None], "default": None}
    assert warnings == [
        '#: "default" is null: type "integer" -> ["integer", "null"] and null added to enum'
    ]


def test_scalar_enum_on_an_array_moves_into_items() -> None:
    """An enum of strings on an array describes its items, as the author meant."""
    fixed, _ = normalise_schema(
        {"type": "array", "items": {"type": "string"}, "enum": ["trust", "view"]}
    )
    assert fixed == {"type": "array", "items": {"type": "string", "enum": ["trust", "view"]}}


def test_enum_outside_its_type_widens_the_type() -> None:
    """``boolean`` with enum ``["True", "False", "dontcare"]`` admits nothing until widened."""
    fixed, warnings = normalise_schema({"type": "boolean", "enum": ["True", "False", "dontcare"]})
    assert fixed["type"] == ["boolean", "string"]
    assert warnings == ['#: "enum" values outside type "boolean": type -> ["boolean", "string"]']


def test_tuple_items_become_prefix_items_in_2020_12() -> None:
    """The list form of ``items`` is 2020-12's ``prefixItems``; ``additionalItems`` is ``items``."""
    fixed, _ = normalise_schema({"items": [{"type": "number"}], "additionalItems": False})
    assert fixed == {"prefixItems": [{"type": "number"}], "items": False}


def test_tuple_items_stay_under_draft_7() -> None:
    """A draft-7 schema keeps its list-form ``items``: that is valid there."""
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "items": [{"type": "integer"}]}
    assert normalise_schema(schema) == (schema, [])


def test_boolean_exclusive_limits_become_numbers() -> None:
    """Draft 4's ``exclusiveMinimum: true`` beside ``minimum`` becomes the numeric form."""
    fixed, _ = normalise_schema({"minimum": 0, "exclusiveMinimum": True, "exclusiveMaximum": False})
    assert fixed == {"exclusiveMinimum": 0}


def test_boolean_exclusive_limits_are_repaired_under_draft_7() -> None:
    """Draft 7 wants numeric exclusive limits too, so the draft-4 form is repaired there."""
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "maximum": 5}
    fixed, _ = normalise_schema({**schema, "exclusiveMaximum": True})
    assert fixed == {"$schema": schema["$schema"], "exclusiveMaximum": 5}


def test_boolean_exclusive_limits_stay_under_draft_4() -> None:
    """A draft-4 schema keeps ``exclusiveMinimum: true``: that is how draft 4 spells it."""
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "minimum": 0}
    schema["exclusiveMinimum"] = True
    assert normalise_schema(schema) == (schema, [])


def test_empty_type_list_is_dropped() -> None:
    """``"type": []`` is invalid JSON Schema; it is removed and reported."""
    assert normalise_schema({"type": []}) == ({}, ["#: empty type list dropped"])


def test_schema_that_is_not_an_object_is_refused() -> None:
    """Tool parameters are always a JSON object; anything else raises `TypeError`."""
    with pytest.raises(TypeError, match="JSON object"):
        normalise_schema([{"type": "string"}])  # type: ignore[arg-type]


def test_property_that_is_not_a_schema_becomes_unconstrained() -> None:
    """A property described by a bare string is replaced by ``{}`` and reported."""
    fixed, warnings = normalise_schema({"properties": {"a": "the a value"}})
    assert fixed == {"properties": {"a": {}}}
    assert warnings == ["#/properties/a: not a schema: replaced by {}"]


def test_non_string_annotations_are_repaired() -> None:
    """A null description is removed, a numeric title becomes text, a non-string format goes."""
    fixed, _ = normalise_schema({"description": None, "title": 3, "format": 1})
    assert fixed == {"title": "3"}


BROKEN = [
    {"type": "dict", "properties": {"x": {"type": "float"}}},
    {"type": ["int", "None"]},
    {"type": "HashMap", "required": "a"},
    {"properties": {"a": {"type": "String", "required": True}}},
    {"items": [{"type": "tuple"}]},
    {"minimum": 1, "exclusiveMinimum": True},
    {"properties": {"a": 3}, "description": 5},
    {"required": ["a", "a"]},
    {"type": []},
    {"$schema": "http://json-schema.org/draft-07/schema#", "maximum": 1, "exclusiveMaximum": True},
]


@pytest.mark.parametrize("schema", BROKEN, ids=json.dumps)
def test_repairs_turn_invalid_schemas_valid(
    schema: dict[str, Any], metaschema: dict[str, Any]
) -> None:
    """Each broken schema fails the 2020-12 metaschema before normalising and passes after."""
    assert validate(metaschema, schema) != []
    fixed, warnings = normalise_schema(schema)
    assert warnings
    assert validate(metaschema, fixed) == []


@pytest.mark.parametrize("schema", BROKEN, ids=json.dumps)
def test_normalising_is_idempotent(schema: dict[str, Any]) -> None:
    """A normalised schema needs no further change."""
    fixed, _ = normalise_schema(schema)
    assert normalise_schema(fixed) == (fixed, [])


def _bfcl_type_names(data: Path) -> set[str]:
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("type"), str):
                names.add(node["type"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in [*data.glob("BFCL_*.json"), *data.glob("multi_turn_func_doc/*.json")]:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                for function in row.get("function", [row] if "parameters" in row else []):
                    walk(function["parameters"])
    return names


def test_every_bfcl_type_name_is_known(data_folder: Path) -> None:
    """Each type name BFCL uses maps to a JSON type or is one of the "any value" names."""
    names = _bfcl_type_names(data_folder / "bfcl" / "data")
    assert {"dict", "float", "tuple", "any", "String", "HashMap", "char", ""} <= names
    unknown = {name for name in names if name.lower() not in {*TYPE_ALIASES, *UNCONSTRAINED_TYPES}}
    assert unknown == set()


@pytest.mark.parametrize(
    ("schema", "lost"),
    [
        ({"type": "strng"}, True),
        ({"type": []}, True),
        ({"type": "object", "required": 5}, True),
        ({"type": "object", "required": ["a", 3]}, True),
        ({"type": "object", "properties": 3}, True),
        ({"type": "object", "properties": {"a": 3}}, True),
        ({"type": "dict"}, False),
        ({"type": "any"}, False),
        ({"type": "object", "required": ["a", "a"]}, False),
        ({"type": "string", "nullable": True}, False),
        ({"type": "boolean", "enum": ["True", "False"]}, False),
        ({"type": "object", "properties": {"a": {"type": "str", "required": True}}}, False),
        ({"type": "string", "description": None}, False),
    ],
)
def test_a_change_says_whether_it_lost_what_the_author_wrote(
    schema: dict[str, Any], lost: bool
) -> None:
    """A constraint that could not be read and is dropped is a loss; a translation is not."""
    normalised, changes = normalise_schema_changes(schema)
    assert changes and {change.lost for change in changes} == {lost}
    assert [str(change) for change in changes] == normalise_schema(schema)[1]
    assert normalised == normalise_schema(schema)[0]


@pytest.mark.parametrize(
    ("schema", "said"),
    [
        (
            {"type": "object", "properties": {1: {"type": "string"}}},
            "invalid JSON Schema at #/properties: the name 1 is an int, not a string",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "object", "$defs": {("x",): {}}}}},
            "invalid JSON Schema at #/properties/a/$defs: the name ('x',) is a tuple, not a string",
        ),
        (
            {"type": "object", None: "x"},
            "invalid JSON Schema at #: the keyword None is a NoneType, not a string",
        ),
    ],
)
def test_a_name_that_is_no_string_is_refused_where_it_is(schema: dict[Any, Any], said: str) -> None:
    """A key a Python plugin wrote as an int or a tuple is an invalid schema naming its place;
    normalising raised AttributeError ('int' object has no attribute 'replace')."""
    from nanobot_core.schema import InvalidSchemaError

    with pytest.raises(InvalidSchemaError) as raised:
        normalise_schema_changes(schema)
    assert str(raised.value) == said


def test_a_schema_nested_past_what_can_be_read_is_refused_saying_so() -> None:
    """A schema thousands of levels deep (an MCP server's, say) is an invalid schema, where
    normalising it raised RecursionError."""
    from nanobot_core.schema import InvalidSchemaError

    deep: dict[str, Any] = {"type": "object"}
    for _ in range(3_000):
        deep = {"type": "object", "properties": {"a": deep}}
    with pytest.raises(InvalidSchemaError) as raised:
        normalise_schema_changes(deep)
    assert str(raised.value) == "invalid JSON Schema: nested too deep to be read"


def _with_pattern(pattern: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"name": {"type": "string", "pattern": pattern}}}


def test_a_pattern_written_as_a_javascript_regex_literal_is_found_and_kept() -> None:
    """``/^[a-z]+$/i`` matches only text holding its slashes and an ``i``: the author is told,
    naming the place, and the schema is kept as written."""
    schema = _with_pattern("/^[a-z]+$/i")
    normalised, changes = normalise_schema_changes(schema)
    assert normalised is schema
    [change] = changes
    assert (change.pointer, change.lost, change.changed) == (
        "#/properties/name/pattern",
        True,
        False,
    )
    assert change.problem("who") == (
        "tool 'who' kept, its parameters schema is likely wrong: #/properties/name/pattern: "
        '"/^[a-z]+$/i" is written as a JavaScript regex literal: JSON Schema matches its '
        "slashes as characters and its flags (i) are letters to match: a pattern has none; "
        '"^[a-z]+$" was likely meant (kept as written)'
    )
    # What the finding says: the literal refuses the text its source accepts.
    assert (
        validate(schema, {"name": "abc"}) != []
        and validate(_with_pattern("^[a-z]+$"), {"name": "abc"}) == []
    )


@pytest.mark.parametrize("pattern", ["/api/", "^/abc/$", "/$", "a/b/i", "/x/ii", "/usr/bin", "^a$"])
def test_slashes_that_may_be_meant_are_no_finding(pattern: str) -> None:
    """A pattern of a path (``/api/``), one anchored outside its slashes, or flags JavaScript
    would refuse (``ii``) is left alone: it may well be meant."""
    assert normalise_schema_changes(_with_pattern(pattern))[1] == []


@settings(max_examples=200, deadline=None)
@given(
    source=st.text(min_size=1, max_size=20),
    flags=st.lists(st.sampled_from("dgimsuvy"), min_size=1, max_size=4, unique=True).map("".join),
)
def test_any_regex_literal_with_flags_is_found_naming_its_source(source: str, flags: str) -> None:
    """Whatever the source between the slashes, a literal with flags is found, its source
    given as what was likely meant, and the schema is never changed."""
    pattern = f"/{source}/{flags}"
    schema = _with_pattern(pattern)
    normalised, changes = normalise_schema_changes(schema)
    assert normalised is schema and len(changes) == 1 and not changes[0].changed
    assert f"its flags ({flags}) are letters to match" in changes[0].what
    assert clip(json.dumps(source, ensure_ascii=False)) in changes[0].what


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30).filter(lambda text: not text.startswith("/")))
def test_a_pattern_not_opening_with_a_slash_is_no_finding(pattern: str) -> None:
    """A pattern that does not open with a slash is never read as a JavaScript literal."""
    assert normalise_schema_changes(_with_pattern(pattern))[1] == []
