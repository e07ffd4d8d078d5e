"""Errors of arguments that fail a union (`anyOf`, `oneOf`) and are too large for every
alternative's errors to be built: sought from the root down, bounded, as useful as before."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nanobot_core.schema import compile_schema
from nanobot_core.schema import validation as validation_module
from nanobot_core.tools.registry import MAX_LISTED_ERRORS, ToolRegistry
from tests.schema.test_first_errors import _INSTANCES, _SCHEMAS
from tests.tools.test_registry import SchemaTool

#: Ten alternatives, each an array of another kind of item: ``true`` is an item of none.
_TEN_ARRAYS = {
    "anyOf": [
        {"type": "array", "items": {"type": kind}}
        for kind in ("integer", "null", "number", "array", "object") * 2
    ]
}


def _values(value: Any) -> int:
    """How many values `value` holds, itself included."""
    if isinstance(value, dict):
        return 1 + sum(_values(item) for item in value.values())
    if isinstance(value, list):
        return 1 + sum(_values(item) for item in value)
    return 1


def _union_schemas(schema: Any, inside: bool = False) -> int:
    """How many schemas lie inside an `anyOf` or `oneOf` of `schema` (which has no `$ref`)."""
    if isinstance(schema, dict):
        return inside + sum(
            _union_schemas(item, inside or key in ("anyOf", "oneOf"))
            for key, item in schema.items()
        )
    if isinstance(schema, list):
        return sum(_union_schemas(item, inside) for item in schema)
    return int(inside and isinstance(schema, bool))


def _at(schema: Any, pointer: str) -> Any:
    """The part of `schema` a pointer such as ``#/properties/xs/anyOf/0`` names."""
    for part in pointer.split("/")[1:]:
        schema = schema[int(part)] if isinstance(schema, list) else schema[part]
    return schema


class _Recorded:
    """A jsonschema-rs validator (or map of them) that notes the work each `iter_errors` asks."""

    def __init__(self, real: Any, weight: int, calls: list[int]) -> None:
        self._real = real
        self._weight = weight
        self._calls = calls

    def iter_errors(self, instance: Any) -> Any:
        self._calls.append(self._weight * _values(instance))
        return self._real.iter_errors(instance)

    def get(self, pointer: str) -> Any:
        found = self._real.get(pointer)
        if found is None:
            return None
        return _Recorded(found, 1 + _union_schemas(_at(self._schema, pointer)), self._calls)

    _schema: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@pytest.fixture
def iter_errors_work(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Each `iter_errors` call's values times the union nodes of its schema, as made."""
    calls: list[int] = []
    build = validation_module._build

    def recorded_build(schema: Any, retriever: Any, *, whole_map: bool) -> Any:
        weight = 1 + _union_schemas(schema)
        recorded = _Recorded(build(schema, retriever, whole_map=whole_map), weight, calls)
        recorded._schema = schema
        return recorded

    monkeypatch.setattr(validation_module, "_build", recorded_build)
    validation_module._cached_validator.cache_clear()
    yield calls
    validation_module._cached_validator.cache_clear()


def test_a_large_union_failure_asks_jsonschema_rs_for_bounded_errors_only(
    iter_errors_work: list[int],
) -> None:
    """20,000 wrong items against ten alternatives: no error list is asked of jsonschema-rs
    whose alternatives' errors would pass `MAX_UNION_WORK`, and the answer is the one
    jsonschema-rs's error gave."""
    registry = ToolRegistry()
    registry.add(SchemaTool("t", {"type": "object", "properties": {"xs": _TEN_ARRAYS}}))
    error = registry.prepare_call("t", {"xs": [True] * 20_000}).error
    values = "[" + ",".join(["true"] * 20_000)
    assert error == (
        f'Error: invalid arguments for tool "t": $.xs: {values[:57]}... is not valid under '
        "any of the schemas listed in the 'anyOf' keyword"
    )
    # The limit, MAX_UNION_WORK: the errors of 100,000 values against a schema without unions.
    assert max(iter_errors_work) <= 100_000


@pytest.mark.parametrize(
    ("schema", "instance"),
    [
        # A union under items: each wrong item its own error, the first 8 listed.
        ({"type": "array", "items": _TEN_ARRAYS}, [[True], [1], [False], [None]] * 30),
        # oneOf matched twice, and matched by none.
        (
            {
                "type": "array",
                "items": {"oneOf": [{"type": "integer"}, {"type": "number"}, {"type": "null"}]},
            },
            [1, 2.5, "x", None, 3] * 30,
        ),
        # The object's own keywords fail beside a property's union.
        (
            {
                "type": "object",
                "required": ["q"],
                "properties": {"xs": _TEN_ARRAYS, "n": {"type": "integer"}},
            },
            {"xs": [True] * 60, "n": "x"},
        ),
        # Keys matched by patternProperties, those of digits written as indexes.
        (
            {"type": "object", "patternProperties": {"^[0-9x+]": _TEN_ARRAYS}},
            {"1": [True], "007": [True], "+2": [True], "x": [None], "y": [True]},
        ),
        # Draft 7: the keywords beside a `$ref` are not checked.
        (
            {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "definitions": {"xs": _TEN_ARRAYS},
                "properties": {"xs": {"$ref": "#/definitions/xs", "type": "string"}},
            },
            {"xs": [True] * 5},
        ),
        # Through a reference and an allOf.
        (
            {
                "$defs": {"xs": _TEN_ARRAYS},
                "allOf": [{"properties": {"xs": {"$ref": "#/$defs/xs"}}}],
            },
            {"xs": [True] * 60},
        ),
    ],
)
def test_errors_sought_from_the_root_are_those_jsonschema_rs_gives(
    monkeypatch: pytest.MonkeyPatch, schema: dict[str, Any], instance: Any
) -> None:
    """Past the limit, the errors of a failing union, of a value's own keywords and of its
    items are the ones every error rendered gives, and the failing parts past the first 8
    are counted."""
    validator = compile_schema(schema)
    every = validator.errors(instance)
    monkeypatch.setattr(validation_module, "MAX_UNION_WORK", 50)
    shown, more = validator.first_errors(instance, MAX_LISTED_ERRORS)
    assert shown == every[:MAX_LISTED_ERRORS]
    assert more == len(every) - len(shown)


def test_a_failure_not_looked_into_names_its_path_and_schema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A union reached through `contains`, which the search does not follow, is named by the
    path that fails and the schema it fails."""
    monkeypatch.setattr(validation_module, "MAX_UNION_WORK", 0)
    schema = {"type": "object", "properties": {"xs": {"contains": _TEN_ARRAYS}}}
    validator = compile_schema(schema)
    shown, more = validator.first_errors({"xs": [True] * 3}, MAX_LISTED_ERRORS)
    assert (shown, more) == (
        [
            "$.xs: does not match the schema at #/properties/xs (a value this large is not "
            "checked against each of its alternatives)"
        ],
        0,
    )


def _rendered_paths(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[str]:
    """Every path inside `value`, rendered as an error names it (a key of digits as an index,
    as jsonschema-rs gives it, or as a key)."""
    yield validation_module._where(path)
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _rendered_paths(item, (*path, key))
            if key.isdigit():
                yield from _rendered_paths(item, (*path, int(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _rendered_paths(item, (*path, index))


_RECURSIVE = {
    "$defs": {
        "n": {
            "anyOf": [
                {"type": "integer"},
                {"type": "array", "items": {"$ref": "#/properties/a/$defs/n"}},
            ]
        }
    },
    "$ref": "#/properties/a/$defs/n",
}


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    st.one_of(
        _SCHEMAS,
        # The same schema reached through a reference, which makes every node count as
        # reaching every union of the schema.
        _SCHEMAS.map(lambda schema: {"$defs": {"d": schema}, "$ref": "#/properties/a/$defs/d"}),
    ),
    _INSTANCES,
    st.integers(min_value=0, max_value=300),
)
@example(_RECURSIVE, [1, [2, ["x", [True]]], "y"], 0)
@example({"oneOf": [{"type": "integer"}, {"type": "number"}]}, 3, 0)
@example({"not": {"anyOf": [{"type": "integer"}]}}, 3, 0)
def test_a_refused_call_names_real_paths_within_its_size(
    monkeypatch: pytest.MonkeyPatch, schema: Any, instance: Any, work: int
) -> None:
    """Whatever the limit on union work, invalid arguments get a non-empty answer whose every
    error names a path the arguments hold, at most 8 errors and 4,000 characters."""
    monkeypatch.setattr(validation_module, "MAX_UNION_WORK", work)
    properties = {"a": schema}
    arguments = {"a": instance}
    validator = compile_schema({"type": "object", "properties": properties})
    if validator.is_valid(arguments):
        return
    shown, _ = validator.first_errors(arguments, MAX_LISTED_ERRORS)
    assert 0 < len(shown) <= MAX_LISTED_ERRORS
    paths = set(_rendered_paths(arguments))
    for text in shown:
        assert any(text.startswith(f"{path}: ") for path in paths), text
    registry = ToolRegistry()
    registry.add(SchemaTool("t", {"type": "object", "properties": properties}))
    try:
        raw: Any = json.dumps(arguments, allow_nan=False)
    except ValueError:  # NaN has no JSON text: the object form carries it
        raw = arguments
    error = registry.prepare_call("t", raw).error
    # A cast may make the call valid; when it does not, the answer lists what is wrong.
    assert error is None or (error.startswith('Error: invalid arguments for tool "t": $'))
    assert error is None or len(error) <= 4_000


def _nested_arrays(levels: int) -> dict[str, Any]:
    """An array of values each an ``anyOf`` of two arrays whose items are the level below."""
    defs: dict[str, Any] = {"L0": {"type": "integer"}}
    for level in range(1, levels + 1):
        below = {"type": "array", "items": {"$ref": f"#/$defs/L{level - 1}"}}
        defs[f"L{level}"] = {"anyOf": [below, below]}
    return {
        "type": "object",
        "$defs": defs,
        "properties": {"xs": {"type": "array", "items": {"$ref": f"#/$defs/L{levels}"}}},
    }


def test_unions_reached_by_references_each_time_count_toward_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A union reached through references many ways counts once per way: 200 values nested
    ten deep against ten levels naming the level below twice (6,142 checks a value, within
    the load limit) are not asked of jsonschema-rs in full, which built 2**10 errors per
    item, 22 s, where their union nodes alone (40) let them through."""
    asked: list[Any] = []
    build = validation_module._build

    def recorded_build(schema: Any, retriever: Any, *, whole_map: bool) -> Any:
        built = build(schema, retriever, whole_map=whole_map)
        if whole_map:
            return built  # the parts: reached by `get`, the union walk's is_valid only
        real_iter_errors = built.iter_errors

        class Recorded:
            def iter_errors(self, instance: Any) -> Any:
                asked.append(schema)
                return real_iter_errors(instance)

            def __getattr__(self, name: str) -> Any:
                return getattr(built, name)

        return Recorded()

    monkeypatch.setattr(validation_module, "_build", recorded_build)
    validation_module._cached_validator.cache_clear()
    try:
        schema = _nested_arrays(10)
        registry = ToolRegistry()
        registry.add(SchemaTool("t", schema))
        value: Any = "x"
        for _ in range(10):
            value = [value]
        error = registry.prepare_call("t", {"xs": [value] * 200}).error
    finally:
        validation_module._cached_validator.cache_clear()
    assert error == (
        'Error: invalid arguments for tool "t": '
        + "; ".join(
            f"$.xs[{n}]: {json.dumps(value, separators=(',', ':'))} is not valid under any of "
            "the schemas listed in the 'anyOf' keyword"
            for n in range(MAX_LISTED_ERRORS)
        )
        + "; and 192 more"
    )
    # Errors asked of jsonschema-rs only of schemas without unions (what failed on its own).
    assert asked and not [part for part in asked if "anyOf" in json.dumps(part)]
