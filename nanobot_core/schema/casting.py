"""Schema-driven casting of tool arguments: fix what a model wrote loosely, never guess.

The registry validates first and casts only an invalid value, then validates again. A cast
happens where a schema node's ``type`` does not admit the value and exactly one conversion
below turns it into a value of a wanted type:

- integer: a decimal string ``"3"``, ``"-3"`` or ``"3.0"`` (integral, no leading zeros).
  ``"3.7"`` stays a string; a float such as ``1.0`` is left alone (JSON Schema since draft 6
  counts it as an integer; under draft 4 it stays invalid rather than being rounded).
- number: a string in JSON number syntax, ``"2.5"`` -> 2.5, ``"3"`` -> 3; never inf or nan.
- boolean: ``"true"``, ``"yes"``, ``"1"`` and ``"false"``, ``"no"``, ``"0"`` (any case, trimmed).
  Numbers are never booleans, and booleans never numbers.
- string: an int or float, as the model wrote it (``3.10`` -> ``"3.10"``, ``1e2`` -> ``"1e2"``,
  ``-0`` -> ``"-0"``), at any length; never inf or nan. The written form is known for numbers
  the JSON boundary decoded with ``written_numbers`` (`WrittenFloat`, `WrittenInt`): the
  registry decodes a call's argument text so when it must cast. A number that arrived
  already decoded (a provider's object, a plugin's Python value), or was written again by
  json-repair while repairing broken JSON, has no written form: it is written as JSON writes
  it (``3.1`` -> ``"3.1"``, ``100.0`` -> ``"100.0"``), as is a written form that is not JSON
  number text (the boundary never makes one).
- array / object: a string holding a JSON array / object, within the JSON boundary's limits
  (nesting, integer digits; see ``docs/limits.md``); its numbers keep their written form.

The result holds plain floats and ints only: written numbers never leave casting, nor reach
the validator (jsonschema-rs refuses subclasses of float and int).

The walk follows ``properties``, ``patternProperties``, ``additionalProperties``, ``items``,
``prefixItems``, local ``$ref`` (``#``, ``#/$defs/..``, ``#/definitions/..``) and ``allOf``.
In ``anyOf`` / ``oneOf`` a value valid against some branch is left alone; otherwise each branch
casts it on its own, and the cast is kept only when every branch that accepts its own result
produced the same one. ``enum`` and ``const`` are never case-folded; ``if``/``then``, ``not``,
remote and dynamic references, and subschemas with their own ``$id`` are not walked.

The walk is bounded: it takes one step per schema node it applies to a value and per
``patternProperties`` pattern it matches a key against, at most `MAX_CAST_STEPS` for one
call. A schema of nested unions (each ``anyOf`` branch cast on its own) would otherwise take
time exponential in its depth, and one of many branches time in their number times the
value's size. A walk that runs out casts nothing: the value comes back as it was, and the
caller reports its validation errors.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from nanobot_core._clip import clip
from nanobot_core._json_boundary import (
    MAX_ARGUMENT_VALUES,
    JSONBoundaryError,
    WrittenFloat,
    WrittenInt,
    loads,
    plain_numbers,
)
from nanobot_core._logging import get_logger
from nanobot_core.schema.validation import (
    InvalidSchemaError,
    SchemaValidator,
    compile_schema,
    format_instance_path,
    json_pointer,
)

__all__ = [
    "MAX_CAST_STEPS",
    "NOTE_VALUE_CHARS",
    "CastNote",
    "cast_arguments",
    "cast_value",
    "cast_value_noted",
]

NOTE_VALUE_CHARS = 60
"""Values in notes are cut to this many characters."""

MAX_CAST_STEPS = 300_000
"""Steps one cast takes at most (a schema node applied to a value, a key matched against a
pattern); a cast that needs more casts nothing. Arguments hold at most 100,000 values
(`MAX_ARGUMENT_VALUES`): a plain schema casts every one of them within it."""

log = get_logger("nanobot_core.schema")

_INTEGER_TEXT = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.0+)?")
_NUMBER_TEXT = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_TRUE_WORDS = frozenset({"true", "yes", "1"})
_FALSE_WORDS = frozenset({"false", "no", "0"})
_LEGACY_REF_DIALECTS = ("draft-03", "draft-04", "draft-06", "draft-07")
_UNION_BRANCH_STEPS = 8  # the steps an anyOf / oneOf branch takes besides its own walk
_MAX_NUMBER_TEXT = 400  # beyond this a "number" is a denial of service, not an argument

Path = tuple[str | int, ...]


def cast_arguments(
    schema: Mapping[str, Any] | bool | SchemaValidator, value: Any
) -> tuple[Any, list[str]]:
    """Cast what the schema plainly means and the model wrote loosely (``"3"`` for an integer).

    Returns the new value (``value`` itself when nothing was cast and it holds no written
    numbers; the input is never mutated) and one note per cast, e.g. ``$.count: "3" -> 3``. The
    rules are below.
    """
    return cast_value(compile_schema(schema), value)


def cast_value(validator: SchemaValidator, value: Any) -> tuple[Any, list[str]]:
    """Cast ``value`` against the schema of ``validator`` by the rules in the module docstring."""
    cast, notes = cast_value_noted(validator, value)
    return cast, [note.text() for note in notes]


@attrs.frozen
class CastNote:
    """One cast, written out only when asked: a cast that leaves the call invalid is not told."""

    path: Path
    before: Any
    after: Any

    def text(self) -> str:
        """``$.count: "3" -> 3``: the path cut by its ends, each value cut to its start."""
        return (
            f"{clip(format_instance_path(self.path))}: {_show(self.before)} -> {_show(self.after)}"
        )


def cast_value_noted(validator: SchemaValidator, value: Any) -> tuple[Any, list[CastNote]]:
    """`cast_value`, with its notes as `CastNote` values rendered by their ``text()``."""
    validator.compile()
    root = validator.schema
    dialect = root.get("$schema") if isinstance(root, Mapping) else None
    legacy = isinstance(dialect, str) and any(d in dialect for d in _LEGACY_REF_DIALECTS)
    walk = _Walk(validator=validator, root=root, ref_hides_siblings=legacy)
    try:
        cast = walk.cast(root, value, (), ())
    except _OutOfSteps:
        # Nothing half-done is kept: the value as it was, its errors for the caller to report.
        log.info(
            "arguments not cast: the cast needs more steps than its limit", limit=MAX_CAST_STEPS
        )
        return plain_numbers(value), []
    return plain_numbers(cast), walk.notes


class _OutOfSteps(Exception):
    """The walk has taken `MAX_CAST_STEPS` steps."""


@attrs.define
class _Steps:
    """The steps a cast has left, shared by the walk and every union branch it tries."""

    left: int = attrs.field(factory=lambda: MAX_CAST_STEPS)

    def take(self, count: int = 1) -> None:
        self.left -= count
        if self.left < 0:
            raise _OutOfSteps


@attrs.define
class _Walk:
    """One casting pass: the root schema, its compiled form (for unions) and the notes so far."""

    validator: SchemaValidator
    root: Any
    ref_hides_siblings: bool  # before 2019-09, keywords beside $ref are ignored: so do we
    notes: list[CastNote] = attrs.field(factory=list)
    following: set[tuple[str, int]] = attrs.field(factory=set)
    steps: _Steps = attrs.field(factory=_Steps)
    # The matchers of each patternProperties met, by the id of its node (alive as long as root).
    patterns: dict[int, list[tuple[SchemaValidator, str, Any]]] = attrs.field(factory=dict)

    def cast(self, node: Any, value: Any, path: Path, where: Path) -> Any:
        """Cast ``value`` (at instance ``path``) against schema ``node`` (at schema ``where``)."""
        self.steps.take()
        if not isinstance(node, Mapping) or (where and _has_own_id(node)):
            return value
        if isinstance(node.get("$ref"), str):
            value = self._cast_ref(node["$ref"], value, path)
            if self.ref_hides_siblings:
                return value
        if "type" in node:
            value = self._cast_type(node["type"], value, path)
        if isinstance(value, Mapping):
            value = self._cast_properties(node, value, path, where)
        elif isinstance(value, list | tuple):
            value = self._cast_items(node, value, path, where)
        for index, branch in enumerate(_schemas(node.get("allOf"))):
            value = self.cast(branch, value, path, (*where, "allOf", index))
        for keyword in ("anyOf", "oneOf"):
            if isinstance(node.get(keyword), list):
                value = self._cast_union(node[keyword], keyword, value, path, where)
        return value

    def _cast_ref(self, ref: str, value: Any, path: Path) -> Any:
        target = _local_target(self.root, ref)
        if target is None:
            return value
        node, where = target
        guard = (json_pointer(where), id(value))
        if guard in self.following:  # a $ref cycle that consumes no input
            return value
        self.following.add(guard)
        try:
            return self.cast(node, value, path, where)
        finally:
            self.following.discard(guard)

    def _cast_type(self, declared: Any, value: Any, path: Path) -> Any:
        wanted = [declared] if isinstance(declared, str) else declared
        if not isinstance(wanted, list) or any(_is_of_type(value, name) for name in wanted):
            return value
        candidates: dict[str, Any] = {}
        for name in wanted:
            converted = _convert(value, name)
            if converted is not _NO_CAST:
                candidates.setdefault(_canonical(converted), converted)
        if len(candidates) != 1:
            return value
        (converted,) = candidates.values()
        self.notes.append(CastNote(path, value, converted))
        return converted

    def _cast_properties(
        self, node: Mapping[str, Any], value: Mapping[str, Any], path: Path, where: Path
    ) -> Any:
        declared = node.get("properties")
        properties: Mapping[str, Any] = declared if isinstance(declared, Mapping) else {}
        patterns = self._patterns(node)
        additional = node.get("additionalProperties")
        cast: dict[str, Any] | None = None
        for key, item in value.items():
            applicable: list[tuple[Any, Path]] = []
            if isinstance(key, str) and key in properties:
                applicable.append((properties[key], (*where, "properties", key)))
            if patterns and isinstance(key, str):
                self.steps.take(len(patterns))
            for matcher, source, schema in patterns:
                if isinstance(key, str) and matcher.is_valid(key):
                    applicable.append((schema, (*where, "patternProperties", source)))
            if not applicable and additional is not None:
                applicable.append((additional, (*where, "additionalProperties")))
            new_item = item
            for schema, schema_where in applicable:
                new_item = self.cast(schema, new_item, (*path, key), schema_where)
            if new_item is not item:
                cast = dict(value) if cast is None else cast
                cast[key] = new_item
        return value if cast is None else cast

    def _patterns(self, node: Mapping[str, Any]) -> list[tuple[SchemaValidator, str, Any]]:
        """The matchers of the node's ``patternProperties``, compiled once per walk."""
        found = self.patterns.get(id(node))
        if found is None:
            found = self.patterns[id(node)] = _pattern_schemas(node.get("patternProperties"))
        return found

    def _cast_items(
        self, node: Mapping[str, Any], value: Sequence[Any], path: Path, where: Path
    ) -> Any:
        prefix_key, rest_key = _array_keywords(node)
        prefix = node.get(prefix_key)
        prefix = prefix if isinstance(prefix, list) else []
        rest = node.get(rest_key)
        cast: list[Any] | None = None
        for index, item in enumerate(value):
            if index < len(prefix):
                schema, schema_where = prefix[index], (*where, prefix_key, index)
            elif rest is not None:
                schema, schema_where = rest, (*where, rest_key)
            else:
                break
            new_item = self.cast(schema, item, (*path, index), schema_where)
            if new_item is not item:
                cast = list(value) if cast is None else cast
                cast[index] = new_item
        if cast is None:
            return value
        return tuple(cast) if isinstance(value, tuple) else cast

    def _cast_union(
        self, branches: list[Any], keyword: str, value: Any, path: Path, where: Path
    ) -> Any:
        pointers = [json_pointer((*where, keyword, index)) for index in range(len(branches))]
        plain = plain_numbers(value)
        # Each branch is checked against the value (jsonschema-rs) and tried on a walk of its
        # own: several steps' worth of work.
        self.steps.take(_UNION_BRANCH_STEPS * len(pointers))
        if any(self.validator.is_valid_at(pointer, plain) for pointer in pointers):
            return value
        accepted: dict[str, tuple[Any, list[CastNote]]] = {}
        for index, (branch, pointer) in enumerate(zip(branches, pointers, strict=True)):
            attempt = attrs.evolve(self, notes=[], following=set(self.following))
            result = attempt.cast(branch, value, path, (*where, keyword, index))
            if result is not value and self.validator.is_valid_at(pointer, plain_numbers(result)):
                accepted.setdefault(_canonical(result), (result, attempt.notes))
        if len(accepted) != 1:
            return value
        ((result, notes),) = accepted.values()
        self.notes.extend(notes)
        return result


class _NoCast:
    """Marks "no conversion applies" (``None`` is a real JSON value)."""


_NO_CAST: Any = _NoCast()


def _convert(value: Any, json_type: str) -> Any:
    if isinstance(value, str):
        return _from_text(value, json_type)
    if json_type == "string" and isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            return _NO_CAST
        written = _written_text(value)
        if written is not None:
            return written
        try:  # an int beyond float range is exact; beyond Python's digit limit it has no text
            return json.dumps(value)
        except ValueError:
            return _NO_CAST
    return _NO_CAST


def _written_text(value: Any) -> str | None:
    """The text a number was written as, when the boundary kept it and it is JSON number text."""
    if isinstance(value, WrittenFloat | WrittenInt) and _NUMBER_TEXT.fullmatch(value.text):
        return value.text
    return None


def _from_text(text: str, json_type: str) -> Any:
    stripped = text.strip()
    if json_type == "integer" and _fits(stripped) and _INTEGER_TEXT.fullmatch(stripped):
        return int(stripped.split(".", 1)[0])
    if json_type == "number" and _fits(stripped) and _NUMBER_TEXT.fullmatch(stripped):
        if re.fullmatch(r"-?[0-9]+", stripped):
            return int(stripped)
        number = float(stripped)
        return number if math.isfinite(number) else _NO_CAST
    if json_type == "boolean":
        word = stripped.lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    if json_type in ("array", "object") and stripped[:1] in ("[", "{"):
        try:  # the boundary's limits: a model's text nested 100,000 deep is refused, not recursed
            parsed = loads(
                stripped, keep_nonfinite=True, written_numbers=True, max_values=MAX_ARGUMENT_VALUES
            ).value
        except JSONBoundaryError:
            return _NO_CAST
        if _is_of_type(parsed, json_type):
            return parsed
    return _NO_CAST


def _fits(text: str) -> bool:
    return len(text) <= _MAX_NUMBER_TEXT


def _is_of_type(value: Any, json_type: Any) -> bool:
    """Whether ``value`` is of the JSON Schema type (draft 6+ semantics: 1.0 is an integer)."""
    if json_type == "null":
        return value is None
    if json_type == "boolean":
        return isinstance(value, bool)
    if json_type == "string":
        return isinstance(value, str)
    if json_type == "array":
        return isinstance(value, list | tuple)
    if json_type == "object":
        return isinstance(value, Mapping)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if json_type == "number":
        return True
    return json_type == "integer" and (isinstance(value, int) or value.is_integer())


def _array_keywords(node: Mapping[str, Any]) -> tuple[str, str]:
    """Keywords for the leading items and for the rest: tuple-form ``items`` before 2020-12."""
    if isinstance(node.get("items"), list):
        return "items", "additionalItems"
    return "prefixItems", "items"


def _schemas(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _pattern_schemas(value: Any) -> list[tuple[SchemaValidator, str, Any]]:
    """Each pattern of ``patternProperties`` as a validator of ``{"pattern": ...}``, and its schema.

    The keys are the model's: they are matched by the validator's own regex engine, which runs
    in time linear in the key (Python's ``re`` backtracks exponentially on patterns such as
    ``^(a|aa)+$``) and reads the pattern as validation does.
    """
    if not isinstance(value, Mapping):
        return []
    compiled = []
    for source, schema in value.items():
        matcher = compile_schema({"pattern": source})
        try:
            matcher.compile()
        except InvalidSchemaError:
            continue
        compiled.append((matcher, source, schema))
    return compiled


def _local_target(root: Any, ref: str) -> tuple[Any, Path] | None:
    """The node a local ``$ref`` (``#`` or ``#/json/pointer``) names, with its path."""
    if ref == "#":
        return root, ()
    if not ref.startswith("#/"):
        return None
    from urllib.parse import unquote

    node = root
    parts: list[str | int] = []
    for raw in ref[2:].split("/"):
        token = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and token in node:
            node = node[token]
            parts.append(token)
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
            parts.append(int(token))
        else:
            return None
    return node, tuple(parts)


def _has_own_id(node: Mapping[str, Any]) -> bool:
    # A nested $id starts a new base URI: our root-relative $ref lookup would be wrong inside it.
    return isinstance(node.get("$id"), str) and not node["$id"].startswith("#")


def _canonical(value: Any) -> str:
    # json.dumps tells true from 1 and 1 from 1.0, which == does not.
    return json.dumps(value, sort_keys=True, default=repr)


def _show(value: Any) -> str:
    written = _written_text(value)
    text = written if written is not None else json.dumps(value, ensure_ascii=False, default=repr)
    if len(text) <= NOTE_VALUE_CHARS:
        return text
    return text[: NOTE_VALUE_CHARS - 3] + "..."
