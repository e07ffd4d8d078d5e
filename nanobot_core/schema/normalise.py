"""Repair tool schemas written in the dialects found in the wild into valid JSON Schema.

Function-calling datasets and hand-written tools describe parameters with type names from
Python (``dict``, ``float``, ``tuple``, ``any``), Java (``String``, ``long``, ``HashMap``) or
JavaScript (``Array``, ``Boolean``), and with keywords from older drafts or from Swagger
(``"required": true`` on a property). `normalise_schema` returns a valid copy plus one warning
per change, each naming the place (``#/properties/x``) and what happened there;
`normalise_schema_changes` gives them as `SchemaChange`, which says whether something the
author wrote was lost (a type name nobody knows, a ``required`` that names nothing): the
model is then told less than the author meant, which is the author's to fix. The other
changes say the same thing in JSON Schema (``dict`` is ``object``, ``"nullable": true`` is
``null`` among the types) or drop what constrained nothing.

Type names map as BFCL's own conversion does, except that ``any``, the empty name and names
nobody knows lose their ``type`` (no constraint) instead of becoming ``string``: an unknown
type says nothing about the value, and refusing a good call is worse than passing it through.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Protocol

import attrs

from nanobot_core._clip import clip
from nanobot_core.schema.validation import InvalidSchemaError

__all__ = [
    "TYPE_ALIASES",
    "UNCONSTRAINED_TYPES",
    "SchemaChange",
    "normalise_schema",
    "normalise_schema_changes",
]

JSON_TYPES = frozenset({"null", "boolean", "object", "array", "number", "string", "integer"})

_ALIAS_GROUPS: dict[str, tuple[str, ...]] = {
    "object": ("dict", "map", "hashmap", "hashtable", "treemap", "linkedhashmap", "record"),
    "array": ("list", "tuple", "set", "arraylist", "linkedlist", "queue", "stack", "vector"),
    "number": ("float", "double", "decimal", "bigdecimal", "real"),
    "integer": ("int", "long", "short", "byte", "bigint", "biginteger"),
    "boolean": ("bool",),
    "string": ("str", "char", "character", "text"),
    "null": ("none", "nonetype", "nil", "void"),
}

TYPE_ALIASES: Mapping[str, str] = {
    alias: json_type for json_type, aliases in _ALIAS_GROUPS.items() for alias in aliases
} | {json_type: json_type for json_type in JSON_TYPES}
"""Lower-cased type name in the wild -> JSON Schema type. Lookups are case-insensitive."""

UNCONSTRAINED_TYPES = frozenset({"any", "anytype", "mixed", "unknown", ""})
"""Type names that mean "any value": the ``type`` keyword is dropped."""

_SCHEMA_KEYWORDS = (
    "items", "additionalItems", "additionalProperties", "contains", "propertyNames", "not",
    "if", "then", "else", "unevaluatedItems", "unevaluatedProperties", "contentSchema",
)  # fmt: skip
_SCHEMA_LIST_KEYWORDS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_SCHEMA_MAP_KEYWORDS = (
    "properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies",
)  # fmt: skip


class Warn(Protocol):
    """Told of each change: where, what, whether something the author wrote was lost, and
    whether the schema was changed at all (a finding kept as written is not)."""

    def __call__(
        self, pointer: str, what: str, *, lost: bool = False, changed: bool = True
    ) -> None: ...


@attrs.frozen
class SchemaChange:
    """One change `normalise_schema_changes` made to a schema.

    ``lost``: something the author wrote to constrain a value could not be read and
    is gone (an unknown type name, a ``required`` that is not a list of names, a
    property that is not a schema), so the model is told less than was meant.
    Otherwise the change says the same in JSON Schema, or drops what meant nothing.

    ``changed`` is False for what is kept as written but almost surely not what the
    author meant (a ``pattern`` written as a JavaScript regex literal, ``/^a+$/i``): a
    problem of the plugin's too, like ``lost``, which it then is.
    """

    pointer: str  # where, as a JSON pointer fragment: ``#/properties/x``
    what: str
    lost: bool = False
    changed: bool = True

    def __str__(self) -> str:
        return f"{self.pointer}: {self.what}"

    def problem(self, tool: str) -> str:
        """The change as a problem of the plugin offering `tool` (which is kept)."""
        if not self.changed:
            return f"tool {tool!r} kept, its parameters schema is likely wrong: {self}"
        return f"tool {tool!r} kept, its parameters schema changed: {self}"


@attrs.frozen
class _Dialect:
    """Which older spellings the schema's own ``$schema`` makes valid, so they are kept."""

    tuple_items: bool  # "items": [...] (drafts 4 to 2019-09)
    boolean_limits: bool  # "exclusiveMinimum": true (draft 4)

    @classmethod
    def of(cls, declared: Any) -> _Dialect:
        name = declared if isinstance(declared, str) else ""
        draft4 = any(old in name for old in ("draft-03", "draft-04"))
        legacy = draft4 or any(old in name for old in ("draft-06", "draft-07", "2019-09"))
        return cls(tuple_items=legacy, boolean_limits=draft4)


def normalise_schema(schema: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Return a valid JSON Schema for ``schema`` and one warning per change made.

    A schema that needs no change comes back as the same object with no warnings; otherwise
    the input is left untouched and a repaired copy is returned. Raises `TypeError` for a
    schema that is not an object (a tool's parameters always are), and `InvalidSchemaError`
    for one no repair makes a schema: a keyword or a property name that is not a string
    (``{1: ...}``), or nesting too deep to walk (thousands of levels).
    """
    normalised, changes = normalise_schema_changes(schema)
    return normalised, [str(change) for change in changes]


def normalise_schema_changes(
    schema: Mapping[str, Any],
) -> tuple[dict[str, Any], list[SchemaChange]]:
    """`normalise_schema`, with each change as a `SchemaChange` (``str()`` is its warning).

    Raises as `normalise_schema` does.
    """
    if not isinstance(schema, Mapping):
        raise TypeError(f"a tool schema must be a JSON object, not {type(schema).__name__}")
    changes: list[SchemaChange] = []

    def warn(pointer: str, what: str, *, lost: bool = False, changed: bool = True) -> None:
        changes.append(SchemaChange(pointer, what, lost or not changed, changed))

    try:
        normalised = _normalise_node(schema, "#", warn, _Dialect.of(schema.get("$schema")))
    except RecursionError:
        # The walk recurses once a level; a schema this deep (thousands of levels, which
        # the validator would refuse as well) is no schema a tool needs.
        raise InvalidSchemaError("invalid JSON Schema: nested too deep to be read") from None
    if not changes:
        return schema if isinstance(schema, dict) else dict(schema), []
    return normalised, changes


def _normalise_node(node: Any, pointer: str, warn: Warn, dialect: _Dialect) -> Any:
    """Normalise one schema node; returns ``node`` itself when nothing changed."""
    if isinstance(node, bool) or not isinstance(node, Mapping):
        return node
    _check_names(node, pointer)
    fixed: dict[str, Any] = dict(node)
    _fix_type(fixed, pointer, warn)
    _fix_nullable(fixed, pointer, warn)
    _fix_null_default(fixed, pointer, warn)
    _fix_array_enum(fixed, pointer, warn)
    _fix_enum_outside_type(fixed, pointer, warn)
    _fix_property_required_flags(fixed, pointer, warn)
    _fix_required_list(fixed, pointer, warn)
    _fix_annotations(fixed, pointer, warn)
    _check_pattern(fixed, pointer, warn)
    if not dialect.tuple_items:
        _fix_tuple_items(fixed, pointer, warn)
    if not dialect.boolean_limits:
        _fix_boolean_exclusive_limits(fixed, pointer, warn)
    _fix_properties_container(fixed, pointer, warn)
    for keyword in _SCHEMA_KEYWORDS:
        if keyword in fixed and not isinstance(fixed[keyword], list):
            where = f"{pointer}/{_escape(keyword)}"
            fixed[keyword] = _normalise_node(fixed[keyword], where, warn, dialect)
    for keyword in _SCHEMA_LIST_KEYWORDS:
        if isinstance(fixed.get(keyword), list):
            where = f"{pointer}/{_escape(keyword)}"
            fixed[keyword] = _normalise_each(fixed[keyword], where, warn, dialect)
    for keyword in _SCHEMA_MAP_KEYWORDS:
        if isinstance(fixed.get(keyword), Mapping):
            where = f"{pointer}/{_escape(keyword)}"
            fixed[keyword] = _normalise_map(fixed[keyword], where, warn, dialect)
    return node if _same(fixed, node) else fixed


def _check_names(node: Mapping[Any, Any], pointer: str) -> None:
    """Raise `InvalidSchemaError` for a keyword, or a name under ``properties`` and the other
    maps of schemas, that is not a string (a Python plugin's ``{1: ...}``), saying where."""
    for key in node:
        if not isinstance(key, str):
            raise InvalidSchemaError(
                f"invalid JSON Schema at {pointer}: the keyword {_no_string(key)}"
            )
    for keyword in _SCHEMA_MAP_KEYWORDS:
        names = node.get(keyword)
        if not isinstance(names, Mapping):
            continue
        for name in names:
            if not isinstance(name, str):
                where = f"{pointer}/{_escape(keyword)}"
                raise InvalidSchemaError(
                    f"invalid JSON Schema at {where}: the name {_no_string(name)}"
                )


def _no_string(key: object) -> str:
    """``1 is an int, not a string``: plain values by their repr, others by their type alone."""
    name = type(key).__name__
    kind = f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"
    if _plain(key) or (type(key) is tuple and len(key) <= 8 and all(map(_plain, key))):
        return f"{clip(repr(key))} is {kind}, not a string"
    return f"is {kind}, not a string"


def _plain(value: object) -> bool:
    """Whether `value`'s repr is the core's own and short: no plugin code, no page of digits."""
    if type(value) is int:
        return value.bit_length() <= 64
    return type(value) in (str, float, bool, type(None))


def _normalise_each(nodes: list[Any], pointer: str, warn: Warn, dialect: _Dialect) -> list[Any]:
    fixed = [
        _normalise_node(item, f"{pointer}/{index}", warn, dialect)
        for index, item in enumerate(nodes)
    ]
    return nodes if all(a is b for a, b in zip(fixed, nodes, strict=True)) else fixed


def _normalise_map(
    nodes: Mapping[str, Any], pointer: str, warn: Warn, dialect: _Dialect
) -> Mapping[str, Any]:
    fixed = {
        key: _normalise_node(value, f"{pointer}/{_escape(key)}", warn, dialect)
        for key, value in nodes.items()
    }
    return nodes if all(fixed[key] is nodes[key] for key in nodes) else fixed


def _fix_type(node: dict[str, Any], pointer: str, warn: Warn) -> None:
    if "type" not in node:
        return
    declared = node["type"]
    names = declared if isinstance(declared, list) else [declared]
    if not names:
        del node["type"]
        warn(pointer, "empty type list dropped", lost=True)  # it admitted nothing: a mistake
        return
    mapped: list[str] = []
    for name in names:
        json_type = _json_type(name)
        if json_type is None:
            del node["type"]
            unconstrained = _unconstrained(name)
            reason = "means any value" if unconstrained else "is not a type we know"
            warn(
                pointer,
                f"type {json.dumps(name)} {reason}: type constraint dropped",
                lost=not unconstrained,  # "any" meant no constraint; "strng" meant one
            )
            return
        if json_type not in mapped:
            mapped.append(json_type)
    normalised: str | list[str] = mapped if isinstance(declared, list) else mapped[0]
    if normalised != declared:
        node["type"] = normalised
        warn(pointer, f"type {json.dumps(declared)} -> {json.dumps(normalised)}")


def _fix_nullable(node: dict[str, Any], pointer: str, warn: Warn) -> None:
    """OpenAPI 3.0's ``"nullable": true`` is JSON Schema's ``null`` among the types."""
    flag = node.get("nullable")
    if not isinstance(flag, bool):
        return  # absent, or an odd value: an unknown keyword, which constrains nothing
    del node["nullable"]
    if not flag:
        warn(pointer, '"nullable": false dropped (null is refused anyway)')
        return
    declared = node.get("type")
    enum = node.get("enum")
    if declared is not None:
        types = declared if isinstance(declared, list) else [declared]
        if "null" not in types:
            node["type"] = [*types, "null"]
        what = f"type {json.dumps(declared)} -> {json.dumps(node['type'])}"
    elif isinstance(enum, list) or any(k in node for k in ("$ref", "anyOf", "oneOf", "allOf")):
        rest = dict(node)
        node.clear()
        node["anyOf"] = [rest, {"type": "null"}]
        what = 'the schema becomes "anyOf": [it, {"type": "null"}]'
    else:
        warn(pointer, '"nullable": true dropped (no type: null is accepted anyway)')
        return
    if isinstance(enum, list) and None not in enum and "enum" in node:
        node["enum"] = [*enum, None]
        what += " and null added to enum"
    warn(pointer, f'"nullable": true: {what}')


def _fix_null_default(node: dict[str, Any], pointer: str, warn: Warn) -> None:
    """``"default": null`` on a typed parameter is Python's ``x: str = None``: null is accepted."""
    if "default" not in node or node["default"] is not None or "type" not in node:
        return
    declared = node["type"]
    types = declared if isinstance(declared, list) else [declared]
    if "null" in types:
        return
    node["type"] = [*types, "null"]
    what = f"type {json.dumps(declared)} -> {json.dumps(node['type'])}"
    if isinstance(node.get("enum"), list) and None not in node["enum"]:
        node["enum"] = [*node["enum"], None]
        what += " and null added to enum"
    warn(pointer, f'"default" is null: {what}')


def _fix_array_enum(node: dict[str, Any], pointer: str, warn: Warn) -> None:
    """An ``enum`` of scalars on an array lists what its items may be, not what the array may be."""
    enum = node.get("enum")
    if node.get("type") != "array" or not isinstance(enum, list) or not enum:
        return
    items = node.get("items", {})
    if any(isinstance(value, list) for value in enum) or not isinstance(items, Mapping):
        return
    if "enum" in items:
        return
    node["items"] = {**items, "enum": node.pop("enum")}
    warn(pointer, '"enum" of scalars on an array moved into "items"')


def _fix_enum_outside_type(node: dict[str, Any], pointer: str, warn: Warn) -> None:
    """``"type": "boolean", "enum": ["True", "False"]`` admits nothing: widen the type."""
    enum, declared = node.get("enum"), node.get("type")
    if not isinstance(enum, list) or not isinstance(declared, str | list):
        return
    types = list(declared) if isinstance(declared, list) else [declared]
    missing = [_type_of(value) for value in enum if not _admits(types, value)]
    if not missing:
        return
    widened = types + [name for name in dict.fromkeys(missing) if name not in types]
    node["type"] = widened
    outside = f'"enum" values outside type {json.dumps(declared)}'
    warn(pointer, f"{outside}: type -> {json.dumps(widened)}")


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _admits(types: list[Any], value: Any) -> bool:
    kind = _type_of(value)
    if kind in types or (kind == "integer" and "number" in types):
        return True
    return kind == "number" and "integer" in types and float(value).is_integer()


def _json_type(name: Any) -> str | None:
    if not isinstance(name, str):
        return None
    return TYPE_ALIASES.get(name.strip().lower())


def _unconstrained(name: Any) -> bool:
    return isinstance(name, str) and name.strip().lower() in UNCONSTRAINED_TYPES


def _fix_property_required_flags(node: dict[str, Any], pointer: str, warn: Warn) -> None:
    """Swagger 2 and draft 3 mark a property ``"required": true``; JSON Schema lists it above."""
    properties = node.get("properties")
    if not isinstance(properties, Mapping):
        return
    flagged = {
        name: sub["required"]
        for name, sub in properties.items()
        if isinstance(sub, Mapping) and isinstance(sub.get("required"), bool)
    }
    if not flagged:
        return
    new_properties = dict(properties)
    required = list(node["required"]) if isinstance(node.get("required"), list) else []
    for name, flag in flagged.items():
        new_properties[name] = {k: v for k, v in properties[name].items() if k != "required"}
        where = f"{pointer}/properties/{_escape(name)}"
        if flag and name not in required:
            required.append(name)
            warn(where, '"required": true moved into the parent\'s "required" list')
        else:
            warn(where, f'"required": {json.dumps(flag)} removed (not a JSON Schema keyword here)')
    node["properties"] = new_properties
    if required or "required" in node:
        node["required"] = required


def _fix_required_list(node: dict[str, Any], pointer: str, warn: Warn) -> None:
    if "required" not in node:
        return
    required = node["required"]
    if isinstance(required, str):
        node["required"] = [required]
        warn(pointer, f'"required": {json.dumps(required)} -> [{json.dumps(required)}]')
        return
    if not isinstance(required, list):
        del node["required"]
        warn(
            pointer,
            f'"required": {json.dumps(required)} is not a list of names: removed',
            lost=True,
        )
        return
    names: list[str] = []
    for name in required:
        if isinstance(name, str) and name not in names:
            names.append(name)
    if names != required:
        node["required"] = names
        # Duplicates say nothing more; an entry that is no name required something unknown.
        lost = any(not isinstance(name, str) for name in required)
        warn(pointer, f'"required" list {json.dumps(required)} -> {json.dumps(names)}', lost=lost)


def _fix_annotations(node: dict[str, Any], pointer: str, warn: Warn) -> None:
    for keyword in ("title", "description"):
        if keyword not in node or isinstance(node[keyword], str):
            continue
        value = node.pop(keyword)
        if value is None:
            warn(pointer, f'"{keyword}": null removed')
        else:
            node[keyword] = json.dumps(value, ensure_ascii=False)
            warn(pointer, f'"{keyword}" made a string')
    if "format" in node and not isinstance(node["format"], str):
        warn(pointer, f'"format": {json.dumps(node.pop("format"))} removed (not a string)')


#: A JavaScript regex literal: the source between slashes, then one flag or more, or a
#: source anchored just inside its slashes (``/^a+$/``), which as JSON Schema reads it
#: (a slash, then the start of the text) matches nothing. Plain slashes (``/api/``, a
#: part of a path) are left alone: they may well be meant.
_REGEX_LITERAL = re.compile(
    r"/(?P<source>.+)/(?P<flags>[dgimsuvy]+)|/(?P<anchored>\^.*|.*\$)/", re.DOTALL
)


def _check_pattern(node: dict[str, Any], pointer: str, warn: Warn) -> None:
    """Say so when ``pattern`` is written as a JavaScript regex literal, slashes and flags."""
    pattern = node.get("pattern")
    if not isinstance(pattern, str):
        return
    literal = _REGEX_LITERAL.fullmatch(pattern)
    if literal is None or len(set(literal["flags"] or "")) < len(literal["flags"] or ""):
        return  # JavaScript takes each flag once: `/x/ii` is no literal of its
    source = literal["source"] if literal["source"] is not None else literal["anchored"]
    flags = (
        f" and its flags ({literal['flags']}) are letters to match: a pattern has none"
        if literal["flags"]
        else ""
    )
    warn(
        f"{pointer}/pattern",
        f"{clip(json.dumps(pattern, ensure_ascii=False))} is written as a JavaScript regex "
        f"literal: JSON Schema matches its slashes as characters{flags}; "
        f"{clip(json.dumps(source, ensure_ascii=False))} was likely meant (kept as written)",
        changed=False,
    )


def _fix_tuple_items(node: dict[str, Any], pointer: str, warn: Warn) -> None:
    """Before 2020-12 a list under ``items`` was a tuple; 2020-12 spells that ``prefixItems``."""
    if not isinstance(node.get("items"), list) or "prefixItems" in node:
        return
    node["prefixItems"] = node.pop("items")
    warn(pointer, '"items" list -> "prefixItems" (2020-12 tuple form)')
    if "additionalItems" in node:
        node["items"] = node.pop("additionalItems")
        warn(pointer, '"additionalItems" -> "items"')


def _fix_boolean_exclusive_limits(node: dict[str, Any], pointer: str, warn: Warn) -> None:
    """Draft 4 / OpenAPI 3.0 write ``"exclusiveMinimum": true`` beside ``minimum``."""
    for exclusive, inclusive in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        flag = node.get(exclusive)
        if not isinstance(flag, bool):
            continue
        del node[exclusive]
        if flag and isinstance(node.get(inclusive), int | float):
            node[exclusive] = node.pop(inclusive)
            warn(pointer, f'"{exclusive}": true with "{inclusive}" -> numeric "{exclusive}"')
        else:
            warn(pointer, f'"{exclusive}": {json.dumps(flag)} removed (no limit to apply it to)')


def _fix_properties_container(node: dict[str, Any], pointer: str, warn: Warn) -> None:
    properties = node.get("properties")
    if "properties" in node and not isinstance(properties, Mapping):
        del node["properties"]
        warn(pointer, '"properties" is not an object: removed', lost=True)
        return
    if not isinstance(properties, Mapping):
        return
    broken = [name for name, sub in properties.items() if not isinstance(sub, Mapping | bool)]
    if broken:
        node["properties"] = {
            name: ({} if name in broken else sub) for name, sub in properties.items()
        }
        for name in broken:
            warn(f"{pointer}/properties/{_escape(name)}", "not a schema: replaced by {}", lost=True)


def _same(fixed: dict[str, Any], node: Mapping[str, Any]) -> bool:
    return fixed.keys() == node.keys() and all(fixed[key] is node[key] for key in node)


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
