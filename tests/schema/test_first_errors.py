"""`SchemaValidator.first_errors` and a refused call's answer: what rendering every error gave."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nanobot_core._clip import clip
from nanobot_core.schema import cast_arguments, compile_schema, format_instance_path
from nanobot_core.schema import validation as validation_module
from nanobot_core.tools import registry as registry_module
from nanobot_core.tools.registry import MAX_LISTED_ERRORS, ToolRegistry, parse_arguments
from tests.helpers import data_dir
from tests.tools.test_registry import SchemaTool

#: Keys that collide in paths once rendered (``"0"`` beside an index) or are long enough to cut.
_KEYS = st.sampled_from(["a", "b", "0", "x y", "k" * 250, "k" * 251])
#: Strings long enough that a message quoting them is cut: the last two differ only in the
#: middle, which a message's cut leaves out, so two messages naming them read the same.
_LONG_TEXTS = ["x" * 300 + "y", "y" + "x" * 300, "x" * 300, "x" * 150 + "y" + "x" * 149]
_TEXTS = st.one_of(st.text(alphabet="ab\"'\\", max_size=4), st.sampled_from(_LONG_TEXTS))
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=5),
    st.floats(allow_nan=True, allow_infinity=True, width=16),
    _TEXTS,
    # Text that casting turns into what a schema asks for: the call may pass, or err elsewhere.
    st.sampled_from(["3", "-2", "2.5", "true", "no", '[1, "a"]', '{"a": 1}']),
)
_INSTANCES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6),
        # The same wrong value many times: errors of one message at many paths.
        st.tuples(_SCALARS, st.integers(min_value=0, max_value=40)).map(lambda p: [p[0]] * p[1]),
        st.dictionaries(_KEYS, inner, max_size=4),
    ),
    max_leaves=40,
)
_LEAF_SCHEMAS = st.one_of(
    st.sampled_from(
        [
            {"type": "integer"},
            {"type": "string"},
            {"type": ["string", "null"]},
            {"type": "number", "minimum": 0},
            {"type": "string", "maxLength": 2},
            {"pattern": "^a"},
            {"multipleOf": 2},
            {"const": "a"},
            {"not": {"type": "string"}},
            {"minItems": 2},
        ]
    ),
    # Long enough lists of values that a message naming them is cut.
    st.lists(_TEXTS, min_size=1, max_size=4).map(lambda values: {"enum": values}),
    st.sampled_from(_LONG_TEXTS).map(lambda value: {"enum": [value]}),
)
_SCHEMAS = st.recursive(
    _LEAF_SCHEMAS,
    lambda inner: st.one_of(
        inner.map(lambda item: {"type": "array", "items": item}),
        st.builds(
            lambda props, required, extra: {
                "type": "object",
                "properties": props,
                "required": required,
                "additionalProperties": extra,
            },
            st.dictionaries(_KEYS, inner, max_size=3),
            st.lists(_KEYS, max_size=2, unique=True),
            st.one_of(st.booleans(), inner),
        ),
        # Branches that give the same message at one path (one text), or several long ones.
        st.lists(inner, min_size=1, max_size=3).map(lambda branches: {"allOf": branches}),
        st.lists(inner, min_size=1, max_size=3).map(lambda branches: {"anyOf": branches}),
        st.lists(inner, min_size=1, max_size=3).map(lambda branches: {"oneOf": branches}),
    ),
    max_leaves=8,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_SCHEMAS, _INSTANCES, st.integers(min_value=0, max_value=12))
# Two messages at one path that differ in their middle only: cut, they are one error.
@example({"allOf": [{"enum": [_LONG_TEXTS[2]]}, {"enum": [_LONG_TEXTS[3]]}]}, 1, 0)
@example({"items": {"allOf": [{"enum": [_LONG_TEXTS[2]]}, {"enum": [_LONG_TEXTS[3]]}]}}, [1, 2], 1)
def test_first_errors_are_the_rendered_errors_cut(schema: Any, instance: Any, limit: int) -> None:
    """The first `limit` errors and the count of the rest are those of every error rendered."""
    validator = compile_schema(schema)
    errors = validator.errors(instance)
    assert validator.first_errors(instance, limit) == (
        errors[:limit],
        max(0, len(errors) - limit),
    )


def _answer_listing_every_error(registry: ToolRegistry, name: str, raw: Any) -> str | None:
    """A refused call's answer as it was made before: every error rendered, then cut."""
    entry = registry._entries[name]
    validator = entry.validator
    parsed = parse_arguments(raw)
    assert parsed.error is None
    arguments = parsed.value
    errors = validator.errors(arguments)
    if errors:
        written = registry_module._written(raw, True, arguments)
        cast, _ = cast_arguments(validator, written)
        errors = validator.errors(cast)
    if not errors:
        return None
    shown = "; ".join(errors[:MAX_LISTED_ERRORS])
    more = len(errors) - MAX_LISTED_ERRORS
    listed = f"{shown}; and {more:,} more" if more > 0 else shown
    return f'Error: invalid arguments for tool "t": {listed}'


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(_KEYS, _SCHEMAS, min_size=1, max_size=3),
    st.dictionaries(_KEYS, _INSTANCES, max_size=3),
    st.booleans(),
)
# A cast that makes the call valid, and one that fixes a value while another stays wrong.
@example({"a": {"type": "integer"}}, {"a": "3"}, True)
@example({"a": {"type": "integer"}, "b": {"type": "string"}}, {"a": "3", "b": None}, False)
def test_a_refused_call_is_answered_as_when_every_error_was_rendered(
    properties: dict[str, Any], arguments: dict[str, Any], as_text: bool
) -> None:
    """The answer to any call, as an object or as JSON text, is the one every error gave."""
    registry = ToolRegistry()
    registry.add(SchemaTool("t", {"type": "object", "properties": properties}))
    raw: Any = arguments
    if as_text:
        try:
            raw = json.dumps(arguments, allow_nan=False)
        except ValueError:  # NaN has no JSON text: the object form covers it
            raw = arguments
    expected = _answer_listing_every_error(registry, "t", raw)
    assert registry.prepare_call("t", raw).error == expected


def _schemastore_cases() -> list[tuple[Any, Any]]:
    folder = data_dir() / "schemastore-subset"
    cases = []
    for line in (folder / "cases.jsonl").read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        if not case["expected_valid"]:
            load = (folder / case[key] for key in ("schema", "instance"))
            cases.append(tuple(json.loads(path.read_text(encoding="utf-8")) for path in load))
    return cases


def test_first_errors_of_real_schemas_are_the_rendered_errors_cut() -> None:
    """SchemaStore's invalid instances: every cut of their errors agrees with rendering all."""
    cases = _schemastore_cases()
    assert len(cases) > 20
    for schema, instance in cases:
        validator = compile_schema(schema)
        errors = validator.errors(instance)
        for limit in range(len(errors) + 2):
            shown, more = validator.first_errors(instance, limit)
            assert (shown, more) == (errors[:limit], max(0, len(errors) - limit))


def test_only_the_listed_errors_are_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    """50,000 wrong items: the answer renders the 8 errors it lists, and counts the others."""
    rendered: list[Any] = []
    render = validation_module._render_error

    def counted_render(error: Any) -> str:
        rendered.append(error)
        return render(error)

    monkeypatch.setattr(validation_module, "_render_error", counted_render)
    items = {"xs": {"type": "array", "items": {"type": "integer"}}}
    registry = ToolRegistry()
    registry.add(SchemaTool("t", {"type": "object", "properties": items}))
    error = registry.prepare_call("t", {"xs": ["x"] * 50_000}).error
    assert error is not None and error.endswith("; and 49,992 more")
    assert len(rendered) == MAX_LISTED_ERRORS


_NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])
_NUMBERS = st.one_of(_NON_FINITE, st.integers(-3, 3), st.floats(allow_nan=False, width=16))
_NUMBER_TREES = st.recursive(
    _NUMBERS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=14),
        st.dictionaries(_KEYS, inner, max_size=4),
    ),
    max_leaves=60,
)


def _non_finite_reference(instance: Any) -> list[str]:
    """One error per NaN or infinity, in the validator's path order (indexes by number)."""
    found: list[tuple[Any, str]] = []

    def walk(value: Any, path: tuple[str | int, ...]) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            where = clip(format_instance_path(path))
            order = tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in path)
            found.append((order, f"{where}: must be a finite number, not {value}"))
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, (*path, key))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, (*path, index))

    walk(instance, ())
    return [text for _, text in sorted(found)]


@settings(max_examples=300, deadline=None)
@given(_NUMBER_TREES, st.integers(min_value=0, max_value=12))
@example([math.nan] * 12, 8)
def test_non_finite_numbers_are_listed_in_path_order_and_the_rest_counted(
    instance: Any, limit: int
) -> None:
    """NaN and the infinities are errors in path order, ``[2]`` before ``[10]`` as every other
    error is, and `first_errors` lists the first `limit` of them and counts the others."""
    expected = _non_finite_reference(instance)
    if not expected:
        return
    validator = compile_schema({})
    assert validator.errors(instance) == expected
    assert validator.first_errors(instance, limit) == (
        expected[:limit],
        max(0, len(expected) - limit),
    )


def test_only_the_listed_non_finite_numbers_are_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    """50,000 NaN arguments: the answer renders the 8 it lists in order, counts the others,
    and stays within the 4,000 characters an Error answer may take."""
    rendered: list[Any] = []
    where = validation_module._where

    def counted_where(parts: Any) -> str:
        rendered.append(parts)
        return where(parts)

    monkeypatch.setattr(validation_module, "_where", counted_where)
    items = {"xs": {"type": "array", "items": {"type": "number"}}}
    registry = ToolRegistry()
    registry.add(SchemaTool("t", {"type": "object", "properties": items}))
    error = registry.prepare_call("t", '{"xs": [' + ",".join(["NaN"] * 50_000) + "]}").error
    listed = "; ".join(f"$.xs[{n}]: must be a finite number, not nan" for n in range(8))
    assert error == f'Error: invalid arguments for tool "t": {listed}; and 49,992 more'
    assert len(error) <= 4_000
    assert len(rendered) == MAX_LISTED_ERRORS
