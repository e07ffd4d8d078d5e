"""JSON Schema for tool arguments: validation with short path-prefixed errors, casting, repair.

Validation is jsonschema-rs: 2020-12 by default, or the draft a schema's ``$schema`` declares
(4, 6, 7, 2019-09). Two choices differ from the library defaults, for every draft alike:

- ``format`` is an annotation, never asserted: tools check the meaning of their own strings, and a
  model should not be refused over a date written without a time zone.
- Remote references are never fetched over the network; pass a ``retriever`` to resolve them.

A schema that is not a valid JSON Schema raises `InvalidSchemaError` (a `ToolError` and a
`ValueError`) when it is compiled: at `SchemaValidator.compile`, or on first use.

jsonschema-rs reports a failed ``anyOf`` or ``oneOf`` with every error of every alternative,
each built as a Python object before the first is returned. `SchemaValidator.first_errors`, which
answers a call, asks for them only when that work is bounded (`MAX_UNION_WORK`); beyond it, it
looks for the failing values itself, alternative by alternative, with ``is_valid``.
"""

from __future__ import annotations

import heapq
import json
import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from nanobot_core._clip import clip
from nanobot_core.errors import ToolError

if TYPE_CHECKING:
    import jsonschema_rs

__all__ = [
    "MAX_CHECKS_PER_VALUE",
    "MAX_MESSAGE_CHARS",
    "MAX_UNION_WORK",
    "InvalidSchemaError",
    "Retriever",
    "SchemaValidator",
    "compile_schema",
    "format_instance_path",
    "json_pointer",
    "more_values_than",
    "validate",
]

Retriever = Callable[[str], Any]
"""Returns the JSON document for an absolute URI that a ``$ref`` names (raise if unknown)."""

MAX_MESSAGE_CHARS = 240
"""An error longer than this is cut: its instance is what makes it long, and the model has that."""

MAX_VALUE_CHARS = 60
"""A value quoted in a long error is cut to this many characters."""

MAX_CHECKS_PER_VALUE = 10_000
"""The most schemas one value of a tool's arguments may be checked against (`checks_per_value`).

A tool whose schema passes it is left out when it is loaded: ``anyOf: [{$ref: S}, {$ref:
S}]`` at each of 30 levels has jsonschema-rs check a value 2**30 times, some 12 s for
``is_valid`` and hours for its errors. The costliest real schema in the tests' data
(SchemaStore's, BFCL's, tau-bench's) checks a value against 170.
"""

MAX_UNION_WORK = 100_000
"""The most a call's errors are sought in full for: its values times the schema's union nodes.

A union node is a schema inside an ``anyOf`` or ``oneOf`` (at any depth): jsonschema-rs
reports a failed union with every alternative's errors, one Python object each, so that
99,000 wrong items against 10 alternatives took 23 s. Beyond the limit, the errors are sought
value by value (see `SchemaValidator.first_errors`).
"""

#: The keywords that name schemas for a union's alternatives.
_UNION_KEYWORDS = ("anyOf", "oneOf")
#: Keywords that reach another schema by reference: with one, any node may reach any union.
_REFERENCE_KEYWORDS = frozenset({"$ref", "$dynamicRef", "$recursiveRef"})
#: Keywords checked on a value itself, whose errors a schema of them alone gives as they are.
_OWN_KEYWORDS = (
    "type",
    "enum",
    "const",
    "required",
    "dependentRequired",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
)

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_COMPILED_CACHE_SIZE = 512


class InvalidSchemaError(ToolError, ValueError):
    """A schema is not a valid JSON Schema (or names a `$ref` that cannot be resolved)."""


def _non_finite_numbers(instance: Any) -> _NonFinite:
    """The NaN and infinite floats inside `instance`, with their paths (walked once)."""
    found: list[tuple[_Path, float]] = []
    stack: list[tuple[Any, _Path]] = [(instance, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, float):
            if not math.isfinite(value):
                found.append((path, value))
        elif isinstance(value, dict):
            stack.extend((item, (*path, str(key))) for key, item in value.items())
        elif isinstance(value, list | tuple):
            stack.extend((item, (*path, index)) for index, item in enumerate(value))
    return _NonFinite(found)


def format_instance_path(parts: Sequence[str | int]) -> str:
    """Render a path inside an instance: ``$`` for the root, then ``.key`` or ``[i]`` per step.

    Keys that are not identifiers are written ``["like this"]`` so the path stays unambiguous.
    """
    rendered = ["$"]
    for part in parts:
        if isinstance(part, int):
            rendered.append(f"[{part}]")
        elif _IDENTIFIER.fullmatch(part):
            rendered.append(f".{part}")
        else:
            rendered.append(f"[{json.dumps(part, ensure_ascii=False)}]")
    return "".join(rendered)


def json_pointer(parts: Sequence[str | int]) -> str:
    """The URI-fragment JSON pointer (``#/a/0``) that jsonschema-rs uses to name a subschema."""
    escaped = (str(part).replace("~", "~0").replace("/", "~1") for part in parts)
    return "#" + "".join("/" + part for part in escaped)


class SchemaValidator:
    """One schema, compiled on first use; reports every error as ``<instance path>: <problem>``.

    The schema is snapshotted (deep-copied through JSON) when the validator is built, so later
    changes to the caller's dict do not reach it.
    """

    __slots__ = (
        "_compiled",
        "_expansion",
        "_own",
        "_retriever",
        "_schema",
        "_subschemas",
        "_weights",
    )

    def __init__(
        self, schema: Mapping[str, Any] | bool, *, retriever: Retriever | None = None
    ) -> None:
        self._schema: dict[str, Any] | bool = _snapshot(schema)
        self._retriever = retriever
        self._compiled: jsonschema_rs.Validator | None = None
        self._subschemas: jsonschema_rs.ValidatorMap | None = None
        # Per schema pointer: its union nodes plus one, and the validator of its own keywords.
        self._weights: dict[str, int] = {}
        self._own: dict[str, jsonschema_rs.Validator | None] = {}
        # By a node's id: the schemas one value may be checked against under it (`_expanded`).
        self._expansion: dict[int, tuple[int, int]] = {}

    @property
    def schema(self) -> dict[str, Any] | bool:
        """The schema this validator checks against (its own copy: do not mutate it)."""
        return self._schema

    def compile(self) -> None:
        """Compile now (it happens anyway on first use); raises `InvalidSchemaError` if invalid."""
        self._validator()

    def errors(self, instance: Any) -> list[str]:
        """Every problem with ``instance``, sorted by path then text; empty when it is valid.

        Not bounded: a failed ``anyOf`` or ``oneOf`` brings every error of every alternative,
        each reference reached once per way there. Arguments a model wrote are answered with
        `first_errors`, which is.
        """
        found = self._found(instance)
        return found if isinstance(found, list) else found.rendered()

    def first_errors(self, instance: Any, limit: int) -> tuple[list[str], int]:
        """The first `limit` of ``errors(instance)``, and how many more there are.

        Only the errors shown are rendered: the others are counted. Arguments that break the
        schema at each of 50,000 items are answered with a few errors, not 50,000 texts built.

        When the schema has unions (``anyOf``, ``oneOf``) and the arguments times its union
        nodes pass `MAX_UNION_WORK`, the errors are sought from the root down instead: a value
        whose schema fails is looked into by its properties and items, checked with
        ``is_valid``, until a failing part is small enough for its errors in full (then they
        are the same as above), or a union fails as a whole: ``<value> is not valid under any
        of the schemas listed in the 'anyOf' keyword``, as jsonschema-rs words it. The failing
        parts past the first `limit` errors are counted one each, not looked into.
        """
        # A schema without unions pays nothing for the check; NaN is said as ever, below.
        if self._over_union_work("#", instance) and not _non_finite_numbers(instance).count():
            try:
                return _Descent(self, limit).errors(instance)
            except (ValueError, TypeError, OverflowError):
                pass  # a value JSON cannot carry: said below, as ever (model arguments never are)
        found = self._found(instance)
        if isinstance(found, list):
            return found[:limit], max(0, len(found) - limit)
        return found.first(limit), max(0, found.count() - limit)

    def checks_per_value(self) -> int:
        """The most schemas one value of an instance may be checked against, each local
        ``$ref`` followed each time it is met (capped at 10**18).

        A schema whose ``anyOf`` names the same ``$ref`` twice, a few levels deep, makes
        this grow as a power of the levels, and so does the time jsonschema-rs takes to say
        whether arguments are valid. A tool's schema over `MAX_CHECKS_PER_VALUE` is left out
        when it is loaded. A remote or anchor ``$ref`` is not followed (counted as none).
        """
        return _expanded(self._schema, self._schema, self._expansion)[0]

    def _over_union_work(self, pointer: str, instance: Any) -> bool:
        """Whether `instance` times the union nodes of the schema at `pointer` passes the limit."""
        weight = self._weight(pointer)
        if weight <= 1:
            return False  # no union: each value's errors are few and built once
        return more_values_than(instance, MAX_UNION_WORK // weight)

    def _weight(self, pointer: str) -> int:
        """One plus the union nodes the schema at `pointer` may reach (all, if it refers, or
        as many as its references reach when they reach more: each time they are met)."""
        known = self._weights.get(pointer)
        if known is None:
            node = _resolve(self._schema, pointer)
            count, references = _union_nodes(node)
            if references:
                count, _ = _union_nodes(self._schema)
                count = max(count, _expanded(self._schema, node, self._expansion)[1])
            known = self._weights[pointer] = 1 + count
        return known

    def _subschema(self, pointer: str) -> jsonschema_rs.Validator | None:
        """The validator of the subschema at `pointer`, references resolved from the root."""
        if self._subschemas is None:
            self._validator()
            self._subschemas = _build(self._schema, self._retriever, whole_map=True)
        found: jsonschema_rs.Validator | None = self._subschemas.get(pointer)
        return found

    def _ref_stands_alone(self) -> bool:
        """Whether the schema's draft (4, 6 or 7) ignores the keywords beside a ``$ref``."""
        declared = self._schema.get("$schema") if isinstance(self._schema, dict) else None
        return isinstance(declared, str) and any(
            f"draft-0{number}/" in declared for number in (3, 4, 6, 7)
        )

    def _own_keywords(self, pointer: str) -> jsonschema_rs.Validator | None:
        """A validator of the `_OWN_KEYWORDS` of the schema at `pointer` alone (None: none)."""
        if pointer not in self._own:
            node = _resolve(self._schema, pointer)
            own: dict[str, Any] = {}
            if isinstance(node, dict):
                own = {key: node[key] for key in _OWN_KEYWORDS if key in node}
                refused = node.get("not")
                if refused is not None and not _union_nodes(refused)[1]:
                    own["not"] = refused  # a schema without references stands alone
                if node.get("additionalProperties") is False:
                    # Which keys it refuses depends on the others, not on their schemas.
                    own["additionalProperties"] = False
                    for keyword in ("properties", "patternProperties"):
                        if isinstance(node.get(keyword), dict):
                            own[keyword] = dict.fromkeys(node[keyword], True)
            if own and isinstance(self._schema, dict) and "$schema" in self._schema:
                own["$schema"] = self._schema["$schema"]  # the draft decides what `1.0` is
            self._own[pointer] = _build(own, None, whole_map=False) if own else None
        return self._own[pointer]

    def _found(self, instance: Any) -> list[str] | _Problems | _NonFinite:
        """The problems with ``instance``: rendered when they are few by nature, else grouped."""
        validator = self._validator()
        # NaN and the infinities are no JSON numbers, whatever a lenient parser made of
        # "NaN" or 1e999; the validator would see them as null and say so, wrongly.
        not_finite = _non_finite_numbers(instance)
        if not_finite.count():
            return not_finite
        try:
            return _Problems(validator.iter_errors(instance))
        except (ValueError, TypeError, OverflowError) as exc:
            # Only a value that JSON cannot carry gets here; model arguments never do.
            return [f"$: value is not JSON ({exc})"]

    def is_valid(self, instance: Any) -> bool:
        """Whether ``instance`` is valid against the schema."""
        try:
            return bool(self._validator().is_valid(instance))
        except (ValueError, TypeError, OverflowError):
            return False

    def is_valid_at(self, pointer: str, instance: Any) -> bool:
        """Whether ``instance`` is valid against the subschema at ``pointer`` (``#/$defs/x``).

        False when no subschema lives there. References inside the subschema resolve as they do
        from the root, which is why this beats compiling the subschema on its own.
        """
        subschema = self._subschema(pointer)
        if subschema is None:
            return False
        try:
            return bool(subschema.is_valid(instance))
        except (ValueError, TypeError, OverflowError):
            return False

    def _validator(self) -> jsonschema_rs.Validator:
        if self._compiled is None:
            self._compiled = _build(self._schema, self._retriever, whole_map=False)
        return self._compiled

    def __repr__(self) -> str:
        state = "compiled" if self._compiled is not None else "not compiled"
        return f"SchemaValidator({_shorten(json.dumps(self._schema), 60)}, {state})"


def compile_schema(
    schema: Mapping[str, Any] | bool | SchemaValidator, *, retriever: Retriever | None = None
) -> SchemaValidator:
    """A `SchemaValidator` for ``schema``, shared between equal schemas (cached by content).

    Compilation itself stays lazy; call `SchemaValidator.compile` to surface an invalid schema now.
    """
    if isinstance(schema, SchemaValidator):
        return schema
    return _cached_validator(_cache_key(schema), retriever)


def validate(
    schema: Mapping[str, Any] | bool, instance: Any, *, retriever: Retriever | None = None
) -> list[str]:
    """Errors of ``instance`` against ``schema``, e.g. ``$.count: "3.7" is not of type "integer"``.

    Empty when valid. Raises `InvalidSchemaError` when the schema itself is invalid.
    """
    return compile_schema(schema, retriever=retriever).errors(instance)


def _snapshot(schema: Mapping[str, Any] | bool) -> dict[str, Any] | bool:
    copied: dict[str, Any] | bool = json.loads(_cache_key(schema))
    return copied


def _cache_key(schema: Mapping[str, Any] | bool) -> str:
    if not isinstance(schema, Mapping | bool):
        raise InvalidSchemaError(
            f"invalid JSON Schema: expected an object or a boolean, got {type(schema).__name__}"
        )
    try:
        return json.dumps(schema, sort_keys=True, allow_nan=False, default=_not_json)
    except RecursionError:
        # The encoder recurses once a level: thousands of levels (in an enum, say).
        raise InvalidSchemaError("invalid JSON Schema: nested too deep to be read") from None
    except (TypeError, ValueError) as exc:
        where = _unwritable_int(schema)
        if where is not None:
            # Python's words name its own setting (sys.set_int_max_str_digits), not the place.
            raise InvalidSchemaError(
                f"invalid JSON Schema at {clip(json_pointer(where))}: an integer of more than "
                f"{sys.get_int_max_str_digits():,} digits"
            ) from None
        raise InvalidSchemaError(f"invalid JSON Schema: not JSON data ({exc})") from exc


def _unwritable_int(schema: Mapping[str, Any] | bool) -> tuple[str | int, ...] | None:
    """Where `schema` holds an int too long to write in decimal, walked without recursion."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(schema, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, int) and not isinstance(value, bool):
            try:
                str(value)
            except ValueError:
                return path
        elif isinstance(value, Mapping):
            stack.extend((item, (*path, str(key))) for key, item in value.items())
        elif isinstance(value, list | tuple):
            stack.extend((item, (*path, index)) for index, item in enumerate(value))
    return None


def _not_json(value: object) -> Any:
    if isinstance(value, Mapping):  # e.g. a MappingProxyType the tool author froze
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not a JSON type")


@lru_cache(maxsize=_COMPILED_CACHE_SIZE)
def _cached_validator(key: str, retriever: Retriever | None) -> SchemaValidator:
    return SchemaValidator(json.loads(key), retriever=retriever)


def _build(schema: dict[str, Any] | bool, retriever: Retriever | None, *, whole_map: bool) -> Any:
    import jsonschema_rs

    # `offline` and `retriever` are mutually exclusive in jsonschema-rs: a retriever replaces HTTP.
    options: dict[str, Any] = (
        {"retriever": retriever} if retriever is not None else {"offline": True}
    )
    build = jsonschema_rs.validator_map_for if whole_map else jsonschema_rs.validator_for
    try:
        return build(schema, validate_formats=False, **options)
    except jsonschema_rs.ValidationError as exc:
        where = json_pointer(exc.instance_path)
        raise InvalidSchemaError(f"invalid JSON Schema at {where}: {exc.message}") from exc
    except (jsonschema_rs.ReferencingError, ValueError, TypeError) as exc:
        if str(exc) == "Recursion limit reached":
            # jsonschema-rs's words for a schema of a few hundred levels, deeper ones' ours.
            raise InvalidSchemaError("invalid JSON Schema: nested too deep to be read") from None
        raise InvalidSchemaError(f"invalid JSON Schema: {exc}") from exc


_Path = tuple[str | int, ...]


class _Problems:
    """The validator's errors of one instance, each rendered only when it is shown.

    The rendered list is sorted by path, then text, without repeats: one error per distinct
    ``(path, rendered text)``. Errors of one path and one message render to one text, so they
    are counted without rendering; only a path with several messages, one of them long enough
    to be cut (two long messages may be cut to the same text), renders them to count.
    """

    __slots__ = ("_by_path_and_message", "_prefix")

    def __init__(self, found: Iterable[jsonschema_rs.ValidationError], prefix: _Path = ()) -> None:
        # The path of the value validated, when it is a part of the arguments (errors' are
        # relative to it).
        self._prefix = prefix
        self._by_path_and_message: dict[tuple[_Path, str], jsonschema_rs.ValidationError] = {}
        for error in found:
            key = (tuple(error.instance_path), error.message)
            self._by_path_and_message.setdefault(key, error)

    def count(self) -> int:
        """How many errors `rendered` gives."""
        seen = self._by_path_and_message
        cut = {path for path, message in seen if len(message) > MAX_MESSAGE_CHARS}
        if not cut:
            return len(seen)
        # A path with a cut message and others: they count once per text they render to.
        at_cut_paths: dict[_Path, list[jsonschema_rs.ValidationError]] = {p: [] for p in cut}
        for (path, _), error in seen.items():
            if path in at_cut_paths:
                at_cut_paths[path].append(error)
        merged = sum(
            len(errors) - len({_render_message(error) for error in errors})
            for errors in at_cut_paths.values()
            if len(errors) > 1
        )
        return len(seen) - merged

    def first(self, limit: int) -> list[str]:
        """``rendered()[:limit]``, rendering the errors of the first `limit` paths only."""
        return [text for _, text in self.first_keyed(limit)]

    def first_keyed(self, limit: int) -> list[tuple[_SortKey, str]]:
        """`first`, each error with the key it sorts by."""
        paths = {path for path, _ in self._by_path_and_message}
        # Each path gives one error at least, and its errors all sort before any of a later path.
        shown = set(heapq.nsmallest(max(0, limit), paths, key=_path_sort_key))
        return _keyed_errors(
            (error for (path, _), error in self._by_path_and_message.items() if path in shown),
            self._prefix,
        )[: max(0, limit)]

    def rendered(self) -> list[str]:
        """Every error rendered, sorted by path then text, without repeats."""
        keyed = _keyed_errors(self._by_path_and_message.values(), self._prefix)
        return [text for _, text in keyed]


class _NonFinite:
    """The NaN and infinite floats of one instance, each rendered only when it is shown.

    One error each, at its own path, so they are counted without rendering; sorted by
    path as the validator's errors are (indexes numerically: ``[2]`` before ``[10]``).
    """

    __slots__ = ("_found",)

    def __init__(self, found: list[tuple[_Path, float]]) -> None:
        self._found = found

    def count(self) -> int:
        """How many errors `rendered` gives."""
        return len(self._found)

    def first(self, limit: int) -> list[str]:
        """``rendered()[:limit]``, rendering those only."""
        shown = heapq.nsmallest(max(0, limit), self._found, key=_non_finite_sort_key)
        return [f"{_where(path)}: must be a finite number, not {value}" for path, value in shown]

    def rendered(self) -> list[str]:
        """Every error rendered, sorted by path."""
        return self.first(len(self._found))


class _Descent:
    """The first errors of arguments too large for their unions' errors to be built in full.

    The schema's parts are checked with ``is_valid`` from the root down, along the values they
    apply to; a failing part within `MAX_UNION_WORK` gives its errors in full, one beyond it is
    looked into: its own keywords checked alone, a failing union reported as jsonschema-rs
    reports it, then its failing parts. Once `limit` errors are found, each further failing
    part is counted as one, not looked into; those found are listed in path order.
    """

    __slots__ = ("_found", "_limit", "_more", "_validator")

    def __init__(self, validator: SchemaValidator, limit: int) -> None:
        self._validator = validator
        self._limit = max(0, limit)
        self._found: dict[str, _SortKey] = {}
        self._more = 0

    def errors(self, instance: Any) -> tuple[list[str], int]:
        """The first `limit` errors of `instance` and how many more failing parts there are."""
        if not self._validator.is_valid(instance):
            self._walk("#", instance, (), frozenset({"#"}))
        shown = sorted(self._found, key=self._found.__getitem__)
        return shown, self._more

    def _full(self) -> bool:
        return len(self._found) >= self._limit

    def _add(self, keyed: Iterable[tuple[_SortKey, str]]) -> None:
        for key, text in keyed:
            if text in self._found:
                continue  # a reference and its target may say it twice
            if self._full():
                self._more += 1
            else:
                self._found[text] = key

    def _fails(self, pointer: str, value: Any) -> bool:
        subschema = self._validator._subschema(pointer)
        return subschema is not None and not subschema.is_valid(value)

    def _walk(self, pointer: str, value: Any, path: _Path, seen: frozenset[str]) -> None:
        """Errors of `value`, at `path`, which the schema at `pointer` (known to fail) refuses."""
        if self._full():
            self._more += 1
            return
        validator = self._validator
        subschema = validator._subschema(pointer)
        if subschema is not None and not validator._over_union_work(pointer, value):
            problems = _Problems(subschema.iter_errors(value), prefix=path)
            shown = problems.first_keyed(self._limit - len(self._found))
            self._add(shown)
            self._more += problems.count() - len(shown)
            return
        before = (len(self._found), self._more)
        node = _resolve(validator.schema, pointer)
        own = validator._own_keywords(pointer)
        if isinstance(node, dict) and "$ref" in node and validator._ref_stands_alone():
            # Before 2019-09, the keywords beside a `$ref` are not checked: only its target is.
            node, own = {"$ref": node["$ref"]}, None
        if own is not None:
            self._add(_Problems(own.iter_errors(value), prefix=path).first_keyed(self._limit))
        if isinstance(node, dict):
            self._add(_union_failures(validator, pointer, node, value, path))
            # Parts that apply to the same value, then those of its properties and items.
            for part in _same_value_parts(validator, node, pointer, value):
                if part not in seen and self._fails(part, value):
                    self._walk(part, value, path, seen | {part})
            for part, item, at in _inner_parts(node, pointer, value):
                if self._fails(part, item):
                    self._walk(part, item, (*path, at), frozenset({part}))
        if (len(self._found), self._more) == before:
            # The failing keyword is one not looked into (`not`, `contains`, a `$dynamicRef`..).
            text = (
                f"{_where(path)}: does not match the schema at {clip(pointer)} (a value this "
                "large is not checked against each of its alternatives)"
            )
            self._add([((_path_sort_key(path), text), text)])


def _same_value_parts(
    validator: SchemaValidator, node: dict[str, Any], pointer: str, value: Any
) -> list[str]:
    """The schemas `node` applies to `value` itself: its local ``$ref``, ``allOf``, and the
    ``then`` or ``else`` its ``if`` picks."""
    parts: list[str] = []
    if "if" in node:
        picked = "then" if validator.is_valid_at(f"{pointer}/if", value) else "else"
        if picked in node:
            parts.append(f"{pointer}/{picked}")
    reference = node.get("$ref")
    if isinstance(reference, str) and (reference == "#" or reference.startswith("#/")):
        parts.append(reference)
    all_of = node.get("allOf")
    if isinstance(all_of, list):
        parts.extend(f"{pointer}/allOf/{index}" for index in range(len(all_of)))
    return parts


def _inner_parts(
    node: dict[str, Any], pointer: str, value: Any
) -> Iterable[tuple[str, Any, str | int]]:
    """``(pointer, item, key or index)`` for each property or item of `value` `node` checks."""
    if isinstance(value, dict):
        properties = node.get("properties")
        known = properties if isinstance(properties, dict) else {}
        patterns = node.get("patternProperties")
        sources = list(patterns) if isinstance(patterns, dict) else []
        extra = isinstance(node.get("additionalProperties"), dict | bool)
        for key in sorted(value):
            at = _path_part(key)
            matched = False
            if key in known:
                matched = True
                yield _pointer_under(pointer, "properties", key), value[key], at
            for source in sources:
                # Matched by jsonschema-rs's regex engine, in time linear in the model's key.
                if compile_schema({"pattern": source}).is_valid(key):
                    matched = True
                    yield _pointer_under(pointer, "patternProperties", source), value[key], at
            # A key `additionalProperties: false` refuses is said by the object's own errors.
            if not matched and extra and node["additionalProperties"] is not False:
                yield f"{pointer}/additionalProperties", value[key], at
    elif isinstance(value, list):
        prefix = node.get("prefixItems")
        before = len(prefix) if isinstance(prefix, list) else 0
        items = node.get("items")
        for index, item in enumerate(value):
            if index < before:
                yield f"{pointer}/prefixItems/{index}", item, index
            elif isinstance(items, dict | bool):
                yield f"{pointer}/items", item, index


_MAX_INDEX = 2**64 - 1


def _path_part(key: str) -> str | int:
    """`key` as jsonschema-rs writes it in an error's path: one it reads as an index (a Rust
    ``usize``: ASCII digits, a ``+`` and leading zeros allowed), as one."""
    digits = key[1:] if key.startswith("+") else key
    if digits.isascii() and digits.isdigit():
        significant = digits.lstrip("0") or "0"
        if len(significant) <= 20 and int(significant) <= _MAX_INDEX:
            return int(significant)
    return key


def _pointer_under(pointer: str, *parts: str | int) -> str:
    """`pointer` (``#/a``) extended by `parts`, escaped as `json_pointer` escapes them."""
    return pointer + json_pointer(parts)[1:]


#: Schemas that fail as a failed union does, so that jsonschema-rs words the error.
_FAILED_UNIONS = {
    ("anyOf", False): {"anyOf": [False]},
    ("oneOf", False): {"oneOf": [False]},
    ("oneOf", True): {"oneOf": [True, True]},
}


def _union_failures(
    validator: SchemaValidator, pointer: str, node: dict[str, Any], value: Any, path: _Path
) -> list[tuple[_SortKey, str]]:
    """The error of each union of `node` that `value` fails, as jsonschema-rs gives it."""
    failures: list[tuple[_SortKey, str]] = []
    for keyword in _UNION_KEYWORDS:
        branches = node.get(keyword)
        if not isinstance(branches, list) or not branches:
            continue
        matched = 0
        for index in range(len(branches)):
            subschema = validator._subschema(f"{pointer}/{keyword}/{index}")
            # A branch not found is taken as matched: better no error than a wrong one.
            if subschema is None or subschema.is_valid(value):
                matched += 1
                if keyword == "anyOf" or matched > 1:
                    break
        if matched == 1 or (matched and keyword == "anyOf"):
            continue
        # One alternative (none, or two valid) against the value: one error, one branch's.
        failed = compile_schema(_FAILED_UNIONS[keyword, matched > 1])
        failures.extend(
            _Problems(failed._validator().iter_errors(value), prefix=path).first_keyed(1)
        )
    return failures


#: Keywords whose schemas apply to the value their schema does: one schema, or a list.
_SAME_VALUE_KEYWORDS = ("not", "if", "then", "else", "allOf")
#: Keywords whose schemas (a map of them) each may apply to the value their schema does.
_SAME_VALUE_MAPS = ("dependentSchemas", "dependencies")
#: Keywords whose schemas apply to the properties or items of the value: one of each group
#: at most applies to a given property or item (`properties`, or `additionalProperties`).
_INNER_KEYWORDS = (
    "items",
    "additionalItems",
    "prefixItems",
    "contains",
    "additionalProperties",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
)
_INNER_MAPS = ("properties", "patternProperties")
#: Where the expansion's counts stop growing: far past any limit, and small integers.
_EXPANSION_CAP = 10**18


#: Every keyword `_expansion_parts` looks at: a schema without one checks a value once.
_EXPANDING_KEYWORDS = frozenset(
    {"$ref", *_SAME_VALUE_KEYWORDS, *_SAME_VALUE_MAPS, *_UNION_KEYWORDS, *_INNER_KEYWORDS}
    | set(_INNER_MAPS)
)

_Parts = tuple[list[Any], list[Any], list[list[Any]]]
_NO_PARTS: _Parts = ([], [], [])


def _expansion_parts(node: Any, root: Any) -> _Parts:
    """The schemas `node` applies to the same value (its local ``$ref`` among them), its union
    alternatives, and its groups of schemas for the value's properties and items."""
    if not isinstance(node, dict) or not _EXPANDING_KEYWORDS.intersection(node):
        return _NO_PARTS  # most schemas of a large one: a property's type and description
    same: list[Any] = []
    alternatives: list[Any] = []
    groups: list[list[Any]] = []
    reference = node.get("$ref")
    if isinstance(reference, str):
        target = _local_reference(root, reference)
        if target is not None:
            same.append(target)
    for keyword in _SAME_VALUE_KEYWORDS:
        value = node.get(keyword)
        same.extend(value if isinstance(value, list) else [value] if value is not None else [])
    for keyword in _SAME_VALUE_MAPS:
        value = node.get(keyword)
        if isinstance(value, dict):
            same.extend(value.values())
    for keyword in _UNION_KEYWORDS:
        value = node.get(keyword)
        if isinstance(value, list):
            alternatives.extend(value)
    for keyword in _INNER_KEYWORDS:
        value = node.get(keyword)
        if isinstance(value, list):
            groups.append(value)
        elif value is not None:
            groups.append([value])
    for keyword in _INNER_MAPS:
        value = node.get(keyword)
        if isinstance(value, dict) and value:
            groups.append(list(value.values()))
    # Only schemas count: an array of names (`dependencies`) or a stray value is no check.
    return (
        [part for part in same if isinstance(part, dict | bool)],
        [part for part in alternatives if isinstance(part, dict | bool)],
        [kept for group in groups if (kept := [p for p in group if isinstance(p, dict | bool)])],
    )


def _expanded(root: Any, start: Any, memo: dict[int, tuple[int, int]]) -> tuple[int, int]:
    """How many schemas one value may be checked against under `start`, and how many of them
    are union alternatives, with every local ``$ref`` followed (each time it is met).

    A schema reached twice counts twice: ``anyOf: [{$ref: S}, {$ref: S}]`` checks S twice,
    and so does jsonschema-rs, so that twenty such levels check a value a million times.
    Of the schemas of a value's properties or items (``properties``, ``items``..), the
    costliest counts: one value is reached through one of them. A ``$ref`` back to a schema
    being counted (a recursive schema) counts one: each round of it checks a value deeper
    in the arguments. Walked without recursion; `memo` holds the counts by the node's id.
    """
    stack: list[tuple[Any, _Parts | None]] = [(start, None)]
    counting: set[int] = set()
    while stack:
        node, parts = stack.pop()
        key = id(node)
        if parts is None:
            if key in memo or key in counting:
                continue
            parts = _expansion_parts(node, root)
            if parts is _NO_PARTS:
                memo[key] = (1, 0)
                continue
            counting.add(key)
            stack.append((node, parts))
            same, alternatives, groups = parts
            for part in (*same, *alternatives, *(p for group in groups for p in group)):
                if id(part) not in memo and id(part) not in counting:
                    stack.append((part, None))
            continue
        counting.discard(key)
        same, alternatives, groups = parts
        checks, unions = 1, 0
        for part in same:
            part_checks, part_unions = memo.get(id(part), (1, 0))
            checks += part_checks
            unions += part_unions
        for part in alternatives:  # every check inside an alternative is a union's
            part_checks, _ = memo.get(id(part), (1, 0))
            checks += part_checks
            unions += part_checks
        for group in groups:
            counted = [memo.get(id(part), (1, 0)) for part in group]
            checks += max(count for count, _ in counted)
            unions += max(count for _, count in counted)
        memo[key] = (min(checks, _EXPANSION_CAP), min(unions, _EXPANSION_CAP))
    return memo.get(id(start), (1, 0))


def _local_reference(root: Any, reference: str) -> Any:
    """The schema a local ``$ref`` (``#`` or ``#/json/pointer``) names, or None."""
    if reference != "#" and not reference.startswith("#/"):
        return None  # a remote or anchor reference: not followed (counted as none)
    from urllib.parse import unquote

    return _resolve(root, unquote(reference))


def _union_nodes(schema: Any) -> tuple[int, bool]:
    """How many schemas lie inside an ``anyOf`` or ``oneOf`` of `schema`, and whether it refers.

    Walked without recursion; values that are no schemas (an ``enum`` of objects) are counted
    too, which only makes the estimate of the work larger.
    """
    count = 0
    references = False
    stack: list[tuple[Any, bool]] = [(schema, False)]
    while stack:
        value, inside = stack.pop()
        if isinstance(value, dict):
            count += inside
            for key, item in value.items():
                references = references or key in _REFERENCE_KEYWORDS
                stack.append((item, inside or key in _UNION_KEYWORDS))
        elif isinstance(value, list):
            stack.extend((item, inside) for item in value)
        elif isinstance(value, bool):
            count += inside
    return count, references


def more_values_than(instance: Any, bound: int) -> bool:
    """Whether `instance` (call arguments, or a tool's schema) holds more than `bound` values,
    counting no further than that."""
    seen = 0
    stack = [instance]
    while stack:
        value = stack.pop()
        seen += 1
        if seen > bound:
            return True
        # Mapping, not dict: a plugin's schema may be any mapping.
        if isinstance(value, Mapping):
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
    return False


def _resolve(schema: Any, pointer: str) -> Any:
    """The part of `schema` at a `json_pointer` (``#/a/0``), or None when there is none."""
    node = schema
    for raw in pointer[2:].split("/") if pointer != "#" else []:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _non_finite_sort_key(found: tuple[_Path, float]) -> tuple[tuple[int, int, str], ...]:
    return _path_sort_key(found[0])


_SortKey = tuple[tuple[tuple[int, int, str], ...], str]


def _keyed_errors(
    found: Iterable[jsonschema_rs.ValidationError], prefix: _Path = ()
) -> list[tuple[_SortKey, str]]:
    """Each error rendered, with its sort key (path, then text), sorted, without repeats."""
    keyed: set[tuple[_SortKey, str]] = set()
    for error in found:
        if prefix:  # the error is of a part of the arguments, its path relative to it
            path: _Path = (*prefix, *error.instance_path)
            text = f"{_where(path)}: {_render_message(error)}"
        else:
            path, text = tuple(error.instance_path), _render_error(error)
        keyed.add(((_path_sort_key(path), text), text))
    return sorted(keyed)


def _render_error(error: jsonschema_rs.ValidationError) -> str:
    return f"{_where(error.instance_path)}: {_render_message(error)}"


#: What a pattern that reached its backtracking limit (one with a backreference or a
#: lookaround, matched by backtracking) is said to have done, instead of the engine's
#: ``Error executing regex: Max limit for backtracking count exceeded``.
_GAVE_UP = (
    "could not be checked against a pattern of the schema (it backtracks past its limit on "
    "this value): a shorter or plainer value may pass"
)


def _render_message(error: jsonschema_rs.ValidationError) -> str:
    if type(error.kind).__name__ == "BacktrackLimitExceeded":
        return _GAVE_UP
    message = error.message
    if len(message) > MAX_MESSAGE_CHARS:
        # Most messages open with the offending value, as compact JSON with sorted keys.
        shown = json.dumps(
            error.instance, separators=(",", ":"), ensure_ascii=False, sort_keys=True, default=str
        )
        if message.startswith(shown) and len(shown) > MAX_VALUE_CHARS:
            message = f"{shown[: MAX_VALUE_CHARS - 3]}...{message[len(shown) :]}"
    return _shorten(message)


def _where(parts: Sequence[str | int]) -> str:
    """The path an error names, cut by its ends: a key of the model's may be of any length."""
    return clip(format_instance_path(parts))


def _path_sort_key(parts: Sequence[str | int]) -> tuple[tuple[int, int, str], ...]:
    # Indexes sort numerically and before keys, so `[2]` comes before `[10]`.
    return tuple((0, part, "") if isinstance(part, int) else (1, 0, part) for part in parts)


def _shorten(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    if len(text) <= limit:
        return text
    keep = limit - 5
    return f"{text[: keep * 2 // 3]} ... {text[-(keep - keep * 2 // 3) :]}"
