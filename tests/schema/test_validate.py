"""`validate` and `SchemaValidator`: error format, drafts, compilation, caching and refusals."""

from __future__ import annotations

from typing import Any

import pytest

from nanobot_core.errors import ToolError
from nanobot_core.schema import (
    MAX_MESSAGE_CHARS,
    InvalidSchemaError,
    SchemaValidator,
    compile_schema,
    format_instance_path,
    validate,
)

DRAFT4 = "http://json-schema.org/draft-04/schema#"
DRAFT7 = "http://json-schema.org/draft-07/schema#"


def test_valid_instance_has_no_errors() -> None:
    """A valid instance gives an empty list."""
    assert validate({"type": "object", "properties": {"a": {"type": "integer"}}}, {"a": 1}) == []


def test_root_error_starts_with_dollar() -> None:
    """An error about the whole value is reported at ``$``."""
    assert validate({"type": "object"}, 3) == ['$: 3 is not of type "object"']


def test_nested_key_error_names_the_key() -> None:
    """A wrong property is reported at ``$.<key>`` with a short reason."""
    schema = {"properties": {"count": {"type": "integer"}}}
    assert validate(schema, {"count": "3.7"}) == ['$.count: "3.7" is not of type "integer"']


def test_array_positions_are_bracketed() -> None:
    """Positions in arrays read ``[i]``, mixed with keys: ``$.items[2].name``."""
    schema = {"properties": {"items": {"items": {"properties": {"name": {"type": "string"}}}}}}
    instance = {"items": [{"name": "a"}, {"name": "b"}, {"name": 5}]}
    assert validate(schema, instance) == ['$.items[2].name: 5 is not of type "string"']


def test_key_that_is_not_an_identifier_is_quoted() -> None:
    """A key with spaces or dots is written ``["like this"]`` so the path stays unambiguous."""
    schema = {"properties": {"user name": {"properties": {"a.b": {"type": "string"}}}}}
    assert validate(schema, {"user name": {"a.b": 1}}) == [
        '$["user name"]["a.b"]: 1 is not of type "string"'
    ]


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        ((), "$"),
        (("a",), "$.a"),
        ((0,), "$[0]"),
        (("a", 1, "b_2"), "$.a[1].b_2"),
        (("2x",), '$["2x"]'),
    ],
)
def test_format_instance_path(parts: tuple[str | int, ...], expected: str) -> None:
    """Paths render as ``$``, ``.key`` and ``[i]``; keys that are not identifiers are quoted."""
    assert format_instance_path(parts) == expected


def test_errors_are_sorted_by_path_with_numeric_indexes() -> None:
    """Errors come sorted by path, ``[2]`` before ``[10]``, root first."""
    schema = {
        "type": "object",
        "required": ["z"],
        "properties": {"xs": {"items": {"type": "integer"}}},
    }
    instance = {"xs": ["a" if i in (2, 10) else i for i in range(11)]}
    assert validate(schema, instance) == [
        '$: "z" is a required property',
        '$.xs[2]: "a" is not of type "integer"',
        '$.xs[10]: "a" is not of type "integer"',
    ]


def test_identical_errors_are_reported_once() -> None:
    """Two subschemas finding the same problem give one line, not two."""
    schema = {"allOf": [{"type": "string"}, {"type": "string"}]}
    assert validate(schema, 1) == ['$: 1 is not of type "string"']


def test_every_error_is_reported_not_just_the_first() -> None:
    """All problems come back together, so the model can fix them in one go."""
    schema = {
        "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}},
        "required": ["c"],
        "additionalProperties": False,
        "patternProperties": {"^x": {}},
    }
    errors = validate(schema, {"a": "1", "b": "no", "d": 0})
    assert len(errors) == 4
    assert all(error.startswith("$") for error in errors)


def test_long_errors_are_shortened() -> None:
    """A message quoting a huge value is cut, but keeps its path and its reason."""
    schema = {"properties": {"x": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}
    [error] = validate(schema, {"x": {"text": "v" * 5000}})
    assert len(error) <= len("$.x: ") + MAX_MESSAGE_CHARS
    assert error.startswith('$.x: {"text":"vvv')
    assert error.endswith("is not valid under any of the schemas listed in the 'anyOf' keyword")


def test_a_huge_key_in_the_path_is_cut_by_its_ends() -> None:
    """An error at a key of 100,000 characters names its path by the ends, 200 at most."""
    schema = {"properties": {"m": {"additionalProperties": {"type": "integer"}}}}
    key = "k" * 100_000 + "END"
    [error] = validate(schema, {"m": {key: "x"}})
    where, _, problem = error.partition(": ")
    assert problem == '"x" is not of type "integer"'
    assert where.startswith("$.m.kkk") and where.endswith("kEND")
    assert "characters omitted" in where and len(where) <= 200
    [finite] = validate({}, {key: {key: float("nan")}})
    assert len(finite) < 300 and finite.endswith("END: must be a finite number, not nan")


def test_boolean_schemas() -> None:
    """``true`` accepts everything and ``false`` nothing."""
    assert validate(True, {"any": "thing"}) == []
    assert validate(False, 1) == ["$: False schema does not allow 1"]


def test_default_dialect_is_2020_12() -> None:
    """Without ``$schema``, ``prefixItems`` applies (2020-12) and list-form ``items`` is invalid."""
    assert validate({"prefixItems": [{"type": "integer"}]}, ["a"]) == [
        '$[0]: "a" is not of type "integer"'
    ]
    with pytest.raises(InvalidSchemaError):
        validate({"items": [{"type": "integer"}]}, ["a"])


def test_declared_draft_7_is_honoured() -> None:
    """With the draft-7 ``$schema``, list-form ``items`` validates positions."""
    schema = {"$schema": DRAFT7, "items": [{"type": "integer"}]}
    assert validate(schema, ["a"]) == ['$[0]: "a" is not of type "integer"']


def test_declared_draft_4_is_honoured() -> None:
    """Draft 4 keeps boolean ``exclusiveMaximum`` and does not count 1.0 as an integer."""
    schema = {"$schema": DRAFT4, "type": "integer", "maximum": 3, "exclusiveMaximum": True}
    assert validate(schema, 2) == []
    assert validate(schema, 3) != []
    assert validate(schema, 1.0) == ['$: 1.0 is not of type "integer"']


@pytest.mark.parametrize("dialect", [None, DRAFT7, DRAFT4])
def test_format_is_never_asserted(dialect: str | None) -> None:
    """``format`` is an annotation in every draft: a malformed date is not an error."""
    schema: dict[str, Any] = {"type": "string", "format": "date"}
    if dialect:
        schema["$schema"] = dialect
    assert validate(schema, "next tuesday") == []


def test_remote_ref_is_never_fetched() -> None:
    """Without a retriever a remote ``$ref`` makes the schema invalid; no request is made."""
    with pytest.raises(InvalidSchemaError, match=r"example\.invalid"):
        validate({"$ref": "https://example.invalid/x.json"}, 1)


def test_retriever_resolves_remote_refs() -> None:
    """A retriever supplies the documents remote references name."""
    asked: list[str] = []

    def retrieve(uri: str) -> Any:
        asked.append(uri)
        return {"type": "integer"}

    schema = {"properties": {"n": {"$ref": "https://example.invalid/int.json"}}}
    assert validate(schema, {"n": "x"}, retriever=retrieve) == ['$.n: "x" is not of type "integer"']
    assert asked == ["https://example.invalid/int.json"]


def test_invalid_schema_is_a_tool_error_and_a_value_error() -> None:
    """`InvalidSchemaError` can be caught as `ToolError` or as `ValueError`."""
    assert issubclass(InvalidSchemaError, ToolError)
    assert issubclass(InvalidSchemaError, ValueError)


def test_invalid_schema_fails_at_compile_not_at_construction() -> None:
    """Building a validator is lazy; `compile` raises, saying where the schema is wrong."""
    validator = SchemaValidator({"type": "object", "properties": {"a": {"minimum": "x"}}})
    with pytest.raises(InvalidSchemaError, match=r"#/properties/a/minimum"):
        validator.compile()


def test_invalid_schema_fails_on_first_use_too() -> None:
    """Validating against an invalid schema raises the same clear error, not a crash."""
    with pytest.raises(InvalidSchemaError, match="invalid JSON Schema"):
        validate({"type": "dict"}, {})


@pytest.mark.parametrize("schema", [[{"type": "string"}], '{"type": "string"}', None, 3])
def test_schema_must_be_an_object_or_boolean(schema: Any) -> None:
    """Lists, JSON text and other values are refused as schemas."""
    with pytest.raises(InvalidSchemaError, match="object or a boolean"):
        validate(schema, "x")


def test_schema_must_be_json_data() -> None:
    """A schema holding a Python set or NaN is refused with a clear error."""
    with pytest.raises(InvalidSchemaError, match="not JSON"):
        validate({"enum": {1, 2}}, 1)
    with pytest.raises(InvalidSchemaError, match="not JSON"):
        validate({"maximum": float("nan")}, 1)


def test_instance_that_is_not_json_is_an_error_not_a_crash() -> None:
    """A Python object with no JSON form is reported at ``$``."""
    [error] = validate({"type": "object"}, {1, 2})
    assert error.startswith("$: value is not JSON")


def test_nan_fails_every_type_check() -> None:
    """NaN and infinity (Python's json parses them) are refused even where null is allowed."""
    assert validate({"type": "number"}, float("nan")) != []
    assert validate({"type": ["number", "null"]}, float("nan")) != []
    assert validate({"type": ["number", "null"]}, float("inf")) != []


def test_is_valid_agrees_with_errors() -> None:
    """`is_valid` is true exactly when `errors` is empty."""
    validator = SchemaValidator({"type": "integer"})
    assert validator.is_valid(3) and validator.errors(3) == []
    assert not validator.is_valid("3") and validator.errors("3") != []


def test_is_valid_at_checks_a_subschema_in_context() -> None:
    """A subschema named by pointer is checked with references resolved from the root."""
    validator = SchemaValidator(
        {"$defs": {"n": {"type": "integer"}}, "anyOf": [{"$ref": "#/$defs/n"}, {"type": "null"}]}
    )
    assert validator.is_valid_at("#/anyOf/0", 3)
    assert not validator.is_valid_at("#/anyOf/0", None)
    assert not validator.is_valid_at("#/nowhere", 3)


def test_validator_keeps_its_own_copy_of_the_schema() -> None:
    """Mutating the caller's dict after building the validator changes nothing."""
    schema: dict[str, Any] = {"type": "integer"}
    validator = SchemaValidator(schema)
    schema["type"] = "string"
    assert validator.errors(1) == []
    assert validator.schema == {"type": "integer"}


def test_compile_schema_shares_validators_between_equal_schemas() -> None:
    """Equal schemas, even with keys in another order, get the same cached validator."""
    first = compile_schema({"type": "object", "required": ["a"]})
    second = compile_schema({"required": ["a"], "type": "object"})
    assert first is second
    assert compile_schema({"type": "object", "required": ["b"]}) is not first


def test_compile_schema_tells_booleans_from_numbers() -> None:
    """``{"const": true}`` and ``{"const": 1}`` are different schemas, not one cache entry."""
    assert compile_schema({"const": True}).errors(1) != []
    assert compile_schema({"const": 1}).errors(True) != []


def test_compile_schema_passes_a_validator_through() -> None:
    """Giving `compile_schema` a `SchemaValidator` returns that validator."""
    validator = SchemaValidator({"type": "string"})
    assert compile_schema(validator) is validator


def test_compile_schema_keys_the_cache_by_retriever() -> None:
    """The same schema with different retrievers resolves through each one."""
    schema = {"$ref": "https://example.invalid/x.json"}
    as_int = compile_schema(schema, retriever=lambda uri: {"type": "integer"})
    as_str = compile_schema(schema, retriever=lambda uri: {"type": "string"})
    assert as_int.errors(1) == []
    assert as_str.errors(1) == ['$: 1 is not of type "string"']


def test_non_finite_numbers_are_refused_with_one_error_each_wherever_they_are() -> None:
    """NaN and infinities get docs/schema-quirks.md's message, one per value, at any depth."""
    schema = {"type": "object", "properties": {"n": {"type": "number"}}}
    assert validate(schema, {"n": float("nan")}) == ["$.n: must be a finite number, not nan"]
    nested = {"a": [1.5, float("inf")], "b": {"c": float("-inf")}, "n": float("nan")}
    assert validate({}, nested) == [
        "$.a[1]: must be a finite number, not inf",
        "$.b.c: must be a finite number, not -inf",
        "$.n: must be a finite number, not nan",
    ]


def test_an_unknown_meta_schema_makes_the_schema_invalid() -> None:
    """A `$schema` URI naming no known draft is an InvalidSchemaError, not a guessed draft."""
    with pytest.raises(InvalidSchemaError, match="Unknown meta-schema"):
        validate({"$schema": "https://example.com/my-draft", "type": "string"}, "x")


def test_messages_quote_objects_with_sorted_keys() -> None:
    """A quoted object value reads with its keys sorted, not in the order they were sent."""
    [error] = validate({"type": "string"}, {"b": 1, "a": 2})
    assert error == '$: {"a":2,"b":1} is not of type "string"'


_BACKTRACKS = r"^((a+)\2?)+!$"  # a backreference: matched by backtracking, with a limit


@pytest.mark.parametrize(
    ("schema", "instance", "where"),
    [
        ({"properties": {"p": {"type": "string", "pattern": _BACKTRACKS}}}, {"p": "a" * 30}, "$.p"),
        ({"patternProperties": {_BACKTRACKS: {"type": "string"}}}, {"a" * 30: 1}, "$"),
        ({"propertyNames": {"pattern": _BACKTRACKS}}, {"a" * 30: 1}, "$"),
    ],
    ids=["pattern", "patternProperties", "propertyNames"],
)
def test_a_value_a_pattern_gives_up_on_is_said_so_with_what_to_try(
    schema: dict[str, Any], instance: Any, where: str
) -> None:
    """A pattern that reaches its backtracking limit on the model's value is said to, with
    what may pass, not as the engine's ``Error executing regex: Max limit for backtracking
    count exceeded``."""
    assert validate({"type": "object", **schema}, instance) == [
        f"{where}: could not be checked against a pattern of the schema (it backtracks past "
        "its limit on this value): a shorter or plainer value may pass"
    ]
