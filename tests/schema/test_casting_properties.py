"""Properties of `cast_arguments` over generated schemas: valid values are sacred, casts settle.

Schemas come from a small grammar (scalar types, nullable type lists, enums, objects with
``required`` and ``additionalProperties``, arrays, ``anyOf`` / ``oneOf``, ``$ref`` into
``$defs``). Values are drawn from the schema itself, with look-alike strings (``"3"``,
``"true"``, ``"[1]"``) mixed in so that a careless cast would have something to break.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from nanobot_core.schema import cast_arguments, validate

PROPERTIES = settings(
    derandomize=True,
    deadline=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)

KEYS = st.sampled_from(["a", "b", "count", "flag", "items"])
LOOK_ALIKES = st.sampled_from(
    [
        "3",
        "-2",
        "2.5",
        "3.0",
        "1e3",
        "true",
        "False",
        "yes",
        "0",
        "1",
        "[1, 2]",
        '{"a": 1}',
        "",
        "x",
    ]
)
SCALAR_TYPES = st.sampled_from(["integer", "number", "string", "boolean", "null"])
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-1000, 1000),
    st.floats(-1e6, 1e6, allow_nan=False),
    st.just(2.0),
    LOOK_ALIKES,
    st.text(max_size=5),
)


def _leaf_schemas() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        SCALAR_TYPES.map(lambda name: {"type": name}),
        st.lists(SCALAR_TYPES, min_size=1, max_size=3, unique=True).map(
            lambda names: {"type": names}
        ),
        st.lists(JSON_SCALARS, min_size=1, max_size=3, unique_by=json.dumps).map(
            lambda values: {"enum": values}
        ),
        st.just({}),
    )


def _extend(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    objects = st.builds(
        _object_schema,
        st.dictionaries(KEYS, children, max_size=3),
        st.sampled_from([None, False, {"type": "integer"}, {"type": "string"}]),
        st.booleans(),
    )
    arrays = children.map(lambda items: {"type": "array", "items": items})
    unions = st.tuples(
        st.sampled_from(["anyOf", "oneOf"]), st.lists(children, min_size=2, max_size=3)
    )
    return st.one_of(objects, arrays, unions.map(lambda pair: {pair[0]: pair[1]}))


def _object_schema(
    properties: dict[str, Any], additional: Any, require_all: bool
) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if additional is not None:
        schema["additionalProperties"] = additional
    if require_all and properties:
        schema["required"] = sorted(properties)
    return schema


SUBSCHEMAS = st.recursive(_leaf_schemas(), _extend, max_leaves=8)


@st.composite
def schemas(draw: st.DrawFn) -> dict[str, Any]:
    """A schema from the grammar; sometimes its body lives in ``$defs`` behind a ``$ref``."""
    body = draw(SUBSCHEMAS)
    if draw(st.booleans()):
        return {"$defs": {"body": body}, "$ref": "#/$defs/body"}
    return body


def _values_for(schema: Any, root: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values shaped by ``schema``: usually of a wanted type, sometimes a look-alike string."""
    if "$ref" in schema:
        return _values_for(root["$defs"]["body"], root)
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    for keyword in ("anyOf", "oneOf"):
        if keyword in schema:
            return st.one_of([_values_for(branch, root) for branch in schema[keyword]])
    declared = schema.get("type")
    if declared is None:
        return JSON_SCALARS
    names = declared if isinstance(declared, list) else [declared]
    return st.one_of([_values_of_type(name, schema, root) for name in names] + [LOOK_ALIKES])


def _values_of_type(
    name: str, schema: dict[str, Any], root: dict[str, Any]
) -> st.SearchStrategy[Any]:
    if name == "object":
        properties = {k: _values_for(sub, root) for k, sub in schema["properties"].items()}
        return st.fixed_dictionaries({}, optional=properties) | st.fixed_dictionaries(properties)
    if name == "array":
        return st.lists(_values_for(schema["items"], root), max_size=3)
    return {
        "integer": st.integers(-50, 50) | st.just(4.0),
        "number": st.integers(-50, 50) | st.floats(-1e3, 1e3, allow_nan=False),
        "string": st.text(max_size=4) | LOOK_ALIKES,
        "boolean": st.booleans(),
        "null": st.none(),
    }[name]


@st.composite
def schema_and_value(draw: st.DrawFn) -> tuple[dict[str, Any], Any]:
    schema = draw(schemas())
    return schema, draw(_values_for(schema, schema))


@st.composite
def schema_and_valid_value(draw: st.DrawFn) -> tuple[dict[str, Any], Any]:
    schema, value = draw(schema_and_value())
    assume(validate(schema, value) == [])
    return schema, value


def _loosen(value: Any) -> Any:
    """Write numbers and booleans as text, as a sloppy model does."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, dict):
        return {key: _loosen(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_loosen(item) for item in value]
    return value


def _exact(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


@PROPERTIES
@given(schema_and_valid_value())
def test_valid_value_is_returned_unchanged(case: tuple[dict[str, Any], Any]) -> None:
    """A value already valid against the schema comes back as the same object, with no notes."""
    schema, value = case
    cast, notes = cast_arguments(schema, value)
    assert cast is value
    assert notes == []


@PROPERTIES
@given(schema_and_valid_value())
def test_casting_a_valid_value_leaves_it_valid(case: tuple[dict[str, Any], Any]) -> None:
    """Validating after casting a valid value still finds no errors."""
    schema, value = case
    cast, _ = cast_arguments(schema, value)
    assert validate(schema, cast) == []


@PROPERTIES
@given(schemas(), st.data())
def test_valid_parts_survive_casting_of_their_siblings(
    schema: dict[str, Any], data: st.DataObject
) -> None:
    """In an object being cast, each property valid on its own is left exactly as it was."""
    properties = {"p": schema, "q": {"type": "integer"}, "r": {"type": "boolean"}}
    wrapper = {"type": "object", "properties": properties, "$defs": schema.get("$defs", {})}
    value = data.draw(
        st.fixed_dictionaries(
            {
                "p": _values_for(schema, schema),
                "q": st.integers() | LOOK_ALIKES,
                "r": st.booleans() | LOOK_ALIKES,
            }
        )
    )
    cast, _ = cast_arguments(wrapper, value)
    for key, sub in properties.items():
        if validate({**sub, "$defs": wrapper["$defs"]}, value[key]) == []:
            assert cast[key] is value[key]


@PROPERTIES
@given(schema_and_value())
def test_casting_is_idempotent(case: tuple[dict[str, Any], Any]) -> None:
    """A second cast of a cast value changes nothing and notes nothing."""
    schema, value = case
    once, _ = cast_arguments(schema, _loosen(value))
    twice, notes = cast_arguments(schema, once)
    assert _exact(twice) == _exact(once)
    assert notes == []
