"""JSON Schema for tool arguments: validation with short path-prefixed errors, casting, repair.

Validation is jsonschema-rs: 2020-12 by default, or the draft a schema's ``$schema`` declares
(4, 6, 7, 2019-09). Two choices differ from the library defaults, for every draft alike:

- ``format`` is an annotation, never asserted: tools check the meaning of their own strings, and a
  model should not be refused over a date written without a time zone.
- Remote references are never fetched over the network; pass a ``retriever`` to resolve them.

A schema that is not a valid JSON Schema raises `InvalidSchemaError` (a `ToolError` and a
`ValueError`) when it is compiled: at `SchemaValidator.compile`, or on first use.
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
    "MAX_MESSAGE_CHARS",
    "InvalidSchemaError",
    "Retriever",
    "SchemaValidator",
    "compile_schema",
    "format_instance_path",
    "json_pointer",
    "validate",
]

Retriever = Callable[[str], Any]
"""Returns the JSON document for an absolute URI that a ``$ref`` names (raise if unknown)."""

MAX_MESSAGE_CHARS = 240
"""An error longer than this is cut: its instance is what makes it long, and the model has that."""

MAX_VALUE_CHARS = 60
"""A value quoted in a long error is cut to this many characters."""

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

    __slots__ = ("_compiled", "_retriever", "_schema", "_subschemas")

    def __init__(
        self, schema: Mapping[str, Any] | bool, *, retriever: Retriever | None = None
    ) -> None:
        self._schema: dict[str, Any] | bool = _snapshot(schema)
        self._retriever = retriever
        self._compiled: jsonschema_rs.Validator | None = None
        self._subschemas: jsonschema_rs.ValidatorMap | None = None

    @property
    def schema(self) -> dict[str, Any] | bool:
        """The schema this validator checks against (its own copy: do not mutate it)."""
        return self._schema

    def compile(self) -> None:
        """Compile now (it happens anyway on first use); raises `InvalidSchemaError` if invalid."""
        self._validator()

    def errors(self, instance: Any) -> list[str]:
        """Every problem with ``instance``, sorted by path then text; empty when it is valid."""
        found = self._found(instance)
        return found if isinstance(found, list) else found.rendered()

    def first_errors(self, instance: Any, limit: int) -> tuple[list[str], int]:
        """The first `limit` of ``errors(instance)``, and how many more there are.

        Only the errors shown are rendered: the others are counted. Arguments that break the
        schema at each of 50,000 items are answered with a few errors, not 50,000 texts built.
        """
        found = self._found(instance)
        if isinstance(found, list):
            return found[:limit], max(0, len(found) - limit)
        return found.first(limit), max(0, found.count() - limit)

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
        if self._subschemas is None:
            self._validator()
            self._subschemas = _build(self._schema, self._retriever, whole_map=True)
        subschema = self._subschemas.get(pointer)
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

    __slots__ = ("_by_path_and_message",)

    def __init__(self, found: Iterable[jsonschema_rs.ValidationError]) -> None:
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
        paths = {path for path, _ in self._by_path_and_message}
        # Each path gives one error at least, and its errors all sort before any of a later path.
        shown = set(heapq.nsmallest(max(0, limit), paths, key=_path_sort_key))
        return _render_errors(
            error for (path, _), error in self._by_path_and_message.items() if path in shown
        )[:limit]

    def rendered(self) -> list[str]:
        """Every error rendered, sorted by path then text, without repeats."""
        return _render_errors(self._by_path_and_message.values())


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


def _non_finite_sort_key(found: tuple[_Path, float]) -> tuple[tuple[int, int, str], ...]:
    return _path_sort_key(found[0])


def _render_errors(found: Iterable[jsonschema_rs.ValidationError]) -> list[str]:
    keyed = {(_path_sort_key(error.instance_path), _render_error(error)) for error in found}
    return [text for _, text in sorted(keyed)]


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
