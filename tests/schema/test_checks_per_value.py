"""How many schemas one value of the arguments may be checked against, references followed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core.schema import compile_schema, normalise_schema
from nanobot_core.schema.validation import MAX_CHECKS_PER_VALUE
from tests.helpers import data_dir

_SAME = ("not", "if", "then", "else")
_INNER = ("items", "additionalProperties", "contains", "propertyNames")


def fan_out(levels: int, width: int = 2) -> dict[str, Any]:
    """``anyOf`` of `width` references to the level below, `levels` deep."""
    defs: dict[str, Any] = {"L0": {"type": "integer"}}
    for level in range(1, levels + 1):
        defs[f"L{level}"] = {"anyOf": [{"$ref": f"#/$defs/L{level - 1}"}] * width}
    return {"$defs": defs, "$ref": f"#/$defs/L{levels}"}


def _reference_count(root: Any, node: Any) -> int:
    """The checks of one value under `node`, counted by plain recursion (no cycles here)."""
    if not isinstance(node, dict):
        return 1
    total = 1
    reference = node.get("$ref")
    if isinstance(reference, str) and reference.startswith("#/$defs/"):
        total += _reference_count(root, root["$defs"][reference.removeprefix("#/$defs/")])
    for keyword in _SAME:
        if keyword in node:
            total += _reference_count(root, node[keyword])
    for keyword in ("allOf", "anyOf", "oneOf"):
        total += sum(_reference_count(root, part) for part in node.get(keyword, []))
    for keyword in _INNER:
        if keyword in node:
            total += _reference_count(root, node[keyword])
    properties = node.get("properties", {})
    if properties:
        total += max(_reference_count(root, part) for part in properties.values())
    return total


def test_a_reference_named_twice_is_counted_each_time_it_is_met() -> None:
    """Twenty levels of ``anyOf`` naming the level below twice check a value millions of
    times, as jsonschema-rs does; a chain naming it once, 42 (each level and its ``$ref``)."""
    # Level i: its anyOf and two references, each to level i - 1: C(i) = 3 + 2 C(i - 1).
    assert compile_schema(fan_out(20)).checks_per_value() == 1 + (4 * 2**20 - 3)
    assert compile_schema(fan_out(20, width=1)).checks_per_value() == 42
    assert compile_schema(fan_out(200, width=3)).checks_per_value() == 10**18  # capped


def test_properties_count_as_the_costliest_one_not_their_sum() -> None:
    """A value is reached through one property: 10,000 plain properties check it twice."""
    wide = {"type": "object", "properties": {f"p{n}": {"type": "string"} for n in range(10_000)}}
    assert compile_schema(wide).checks_per_value() == 2


def test_a_recursive_schema_counts_its_reference_back_once() -> None:
    """A schema naming itself (a tree) is checked once per level of the value, no more."""
    tree = {"type": "object", "properties": {"children": {"items": {"$ref": "#"}}}}
    # The tree, its children, their items, and the tree named again: once.
    assert compile_schema(tree).checks_per_value() == 4


def _schemas(draw: st.DrawFn) -> dict[str, Any]:
    """A `$defs` of up to six schemas, each referring to earlier ones only (no cycle)."""
    defs: dict[str, Any] = {}
    for index in range(draw(st.integers(1, 6))):
        refs = st.sampled_from([f"#/$defs/D{n}" for n in range(index)]) if index else st.nothing()
        leaf = st.one_of(
            st.just({"type": "string"}),
            st.just(True),
            refs.map(lambda ref: {"$ref": ref}),
        )
        node = st.recursive(
            leaf,
            lambda inner: st.one_of(
                st.dictionaries(
                    st.sampled_from(["allOf", "anyOf", "oneOf"]),
                    st.lists(inner, min_size=1, max_size=3),
                    min_size=1,
                ),
                st.dictionaries(st.sampled_from([*_SAME, *_INNER]), inner, min_size=1),
                st.dictionaries(st.text(max_size=3), inner, min_size=1).map(
                    lambda properties: {"properties": properties}
                ),
            ),
            max_leaves=4,
        )
        defs[f"D{index}"] = draw(node)
    last = f"#/$defs/D{len(defs) - 1}"
    return {"$defs": defs, "$ref": last}


@settings(max_examples=60, deadline=None)
@given(st.composite(_schemas)())
def test_the_count_is_the_one_plain_recursion_gives(schema: dict[str, Any]) -> None:
    """Whatever schemas refer to one another, and however often, the count is the one a
    recursion that follows every reference each time gives."""
    assert compile_schema(schema).checks_per_value() == _reference_count(schema, schema)


def _real_schemas() -> list[tuple[str, Any]]:
    """The tool and document schemas of the tests' data: SchemaStore, BFCL, tau-bench."""
    found: list[tuple[str, Any]] = []
    store = data_dir() / "schemastore-subset" / "schemas"
    for path in sorted(store.glob("*.json")):
        found.append((path.name, json.loads(path.read_text(encoding="utf-8"))))
    bfcl = data_dir() / "bfcl" / "data"
    for path in sorted([*bfcl.glob("BFCL_*.json"), *bfcl.glob("multi_turn_func_doc/*.json")]):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line) if line.strip() else {}
            for function in row.get("function", [row] if "parameters" in row else []):
                found.append((function["name"], normalise_schema(function["parameters"])[0]))
    airline = data_dir() / "tau-bench-airline" / "airline_tools.json"
    for tool in json.loads(Path(airline).read_text(encoding="utf-8")):
        function = tool.get("function", tool)
        found.append((function["name"], function["parameters"]))
    return found


def test_every_real_schema_is_well_within_the_limit() -> None:
    """No schema of the tests' data comes near the limit: the costliest checks a value 170
    times, against a limit of 10,000."""
    counts = {name: compile_schema(schema).checks_per_value() for name, schema in _real_schemas()}
    assert len(counts) > 1_000
    assert max(counts.values()) == 170 and MAX_CHECKS_PER_VALUE == 10_000
