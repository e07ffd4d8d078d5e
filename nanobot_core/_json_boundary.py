"""The JSON boundary: all JSON text entering the core is decoded here, all leaving encoded here.

What comes in (model replies, session lines, tool arguments, plugin output)
is decoded within documented limits, into values that can always be encoded
again:

- nesting deeper than `MAX_DEPTH` arrays and objects is refused (a text that nests
  past it before a syntax error is refused for depth, whatever follows), the same on
  every Python version, whatever depth the standard library's parser reaches,
- an integer of more than `MAX_INT_DIGITS` digits is refused,
- a text of more than `MAX_VALUES` values (tool arguments: `MAX_ARGUMENT_VALUES`)
  is refused before it is decoded, so that memory stays proportional to the
  text (an empty ``{}`` of 3 bytes decodes to a dict of 64),
- ``NaN``, ``Infinity`` and numbers too large for a float (``1e999``) are
  replaced by ``null``, unless the caller keeps them (tool arguments keep
  them, so that validation refuses them by name),
- a lone surrogate (``"\\ud800"``, a legal JSON escape that no UTF-8 text can
  hold) is replaced by U+FFFD; escaped pairs stay the character they encode,
  and a pair held as two code points (a Python str can) is joined into it.

With ``written_numbers`` the numbers decode as `WrittenFloat` and `WrittenInt`:
a float or int that keeps the text it was written as (``3.10``, ``1e2``,
``-0``), for a caller that must cast a number to a string without losing a
digit. They are for that caller only: `plain_numbers` turns them back into
plain numbers before anything else sees them (jsonschema-rs, for one, refuses
subclasses of float and int).

A refusal is a `JSONSyntaxError` or a `JSONLimitError` (both
`JSONBoundaryError`, a ``ValueError``) whose message says what was wrong;
every replacement is listed in `Decoded.replaced`, for the caller
to report. Encoding (`dumps`) never fails on such values either: it makes the
same replacements, so what leaves the core (request bodies, ``--json``
output, session files) is always strict JSON in valid UTF-8.

The values are counted, before decoding, as the commas, ``[`` and ``{``
outside strings, plus one: exactly the number of values when every array and
object holds at least one (an empty one counts as holding one). A text shorter
than the limit cannot exceed it and is not counted; a longer one has the three
characters counted in one pass over its bytes (an upper bound), and only a
text over the limit by that count has its strings cut out (one linear
regular-expression pass) to count exactly.

Both directions cost time linear in the size of the text: the fast paths are
the standard library's C code, and the walk that finds replacements is
iterative, so depth never reaches Python's recursion limit.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

import attrs

from nanobot_core._clip import a_type

__all__ = [
    "LONE_SURROGATES_REPLACED",
    "MAX_ARGUMENT_VALUES",
    "MAX_DEPTH",
    "MAX_ENCODED_DEPTH",
    "MAX_INT_DIGITS",
    "MAX_VALUES",
    "SURROGATE_PAIRS_JOINED",
    "Decoded",
    "JSONBoundaryError",
    "JSONLimitError",
    "JSONRepeatedKeyError",
    "JSONSyntaxError",
    "WrittenFloat",
    "WrittenInt",
    "check_depth",
    "check_values",
    "dumps",
    "loads",
    "nests_past",
    "past_encoded_depth",
    "plain_numbers",
    "sanitized",
    "surrogates_fixed",
    "viewable",
    "without_lone_surrogates",
]

#: Arrays and objects nested deeper than this are refused.
MAX_DEPTH = 100
#: A value nested deeper than this is refused when encoded (`dumps`), on every Python
#: version: the standard library's encoder gives up at a depth that depends on the version
#: (Python's recursion limit, 1,000 levels less the frames already in use, on 3.11; 1,500 on
#: 3.12; 10,000 on 3.13). A value between `MAX_DEPTH` and this is encoded as it is.
MAX_ENCODED_DEPTH = 500
#: Integers with more digits than this are refused: Python's own limit on converting
#: integers to and from text, so what decodes can always be encoded again.
MAX_INT_DIGITS = 4_300
#: A text of more values than this (counted as in the module docstring) is refused: each value
#: is a Python object of tens of bytes, more than the text it was written in.
MAX_VALUES = 1_000_000
#: The same limit for the arguments of a tool call, lower because validating and casting them
#: costs more memory a value than decoding does.
MAX_ARGUMENT_VALUES = 100_000

#: What `Decoded.replaced` says when a string held a surrogate with no partner.
LONE_SURROGATES_REPLACED = "lone surrogates replaced by U+FFFD"
#: What it says when a string held a surrogate pair as two code points (a Python str can).
SURROGATE_PAIRS_JOINED = "surrogate pairs joined into the characters they encode"

_SURROGATE = re.compile("[\ud800-\udfff]")
# An escaped surrogate in JSON text (an escaped pair decodes to one character; a lone one does not).
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89abcdefABCDEF]")
# A string, closed or open up to the end of the text: possessive, so it never backtracks, and an
# open one is matched once, to the end (the scan is linear whatever the quotes).
_STRING = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"?', re.DOTALL)


# Outside the NanobotError tree: a private module's, and each caller turns a refusal
# into its own error (SessionError, ProviderError, a tool's error result) or a ValueError.
class JSONBoundaryError(ValueError):
    """JSON text that cannot enter the core: not JSON, or outside the limits."""


class JSONSyntaxError(JSONBoundaryError):
    """Text that is not JSON (or not UTF-8)."""


class JSONLimitError(JSONBoundaryError):
    """JSON outside the boundary's limits (depth, integer digits)."""


class JSONRepeatedKeyError(JSONLimitError):
    """An object that gives one key twice, refused by `loads` with ``unique_keys``.

    ``path`` leads from the decoded value to the key (the keys and indexes on the way, the
    key last): which of its values was meant cannot be told, and a parser keeps the last.
    """

    def __init__(self, path: tuple[str | int, ...]) -> None:
        super().__init__(f"the key {path[-1]!r} is given twice in one object")
        self.path = path


@attrs.frozen
class Decoded:
    """A decoded value and what was replaced in it to make it encodable."""

    value: Any
    replaced: tuple[str, ...] = ()


class WrittenFloat(float):
    """A float decoded by `loads` with ``written_numbers``: ``text`` is how the JSON wrote it."""

    __slots__ = ("text",)
    text: str

    def __new__(cls, text: str) -> WrittenFloat:
        number = super().__new__(cls, text)
        number.text = text
        return number


class WrittenInt(int):
    """An int decoded by `loads` with ``written_numbers``: ``text`` is how the JSON wrote it."""

    text: str  # int is of variable size: no __slots__ beyond its own

    def __new__(cls, text: str) -> WrittenInt:
        number = super().__new__(cls, text)
        number.text = text
        return number


def without_lone_surrogates(text: str) -> str:
    """`text` with surrogate pairs joined and lone surrogates replaced by U+FFFD."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def surrogates_fixed(text: str, fixed: str) -> tuple[bool, bool]:
    """(pairs joined, lone halves replaced) in making `fixed` of `text` (`without_lone_surrogates`).

    A pair's two code points become one character, so the text is shorter; a
    half alone becomes one U+FFFD, so there are more of those.
    """
    if fixed is text:
        return False, False
    return len(fixed) < len(text), fixed.count("\ufffd") > text.count("\ufffd")


def _nonfinite(
    keep: bool, found: list[str], make: Callable[[str], float] = float
) -> tuple[Callable[[str], Any], Callable[[str], Any]]:
    def constant(name: str) -> Any:
        found.append(name)
        return float(name) if keep else None

    def number(text: str) -> Any:
        value = make(text)
        if math.isfinite(value):
            return value
        found.append(text if len(text) <= 20 else text[:17] + "...")
        return value if keep else None

    return constant, number


def loads(
    text: str | bytes,
    *,
    keep_nonfinite: bool = False,
    depth_checked: bool = False,
    written_numbers: bool = False,
    max_values: int = MAX_VALUES,
    unique_keys: bool = False,
) -> Decoded:
    """Decode JSON `text` within the limits; raises `JSONSyntaxError` or `JSONLimitError`.

    Bytes must be UTF-8. With `keep_nonfinite` non-finite numbers stay floats
    (the caller must refuse them before they are encoded); otherwise they
    become ``None`` and are listed as replaced. `depth_checked` skips the
    depth walk, for a caller that has already counted the brackets. With
    `written_numbers` every number is a `WrittenFloat` or `WrittenInt` that
    keeps its text (the limits are the same: an integer of more than
    `MAX_INT_DIGITS` digits is still refused); see `plain_numbers`. A text of
    more than `max_values` values is refused before it is decoded. With
    `unique_keys` an object that gives a key twice is refused
    (`JSONRepeatedKeyError`, naming the first such key's path) instead of
    keeping its last value.
    """
    raw = None
    if isinstance(text, bytes | bytearray):
        raw = bytes(text)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONSyntaxError(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    # Each value but the first needs a character of its own: a shorter text needs no count.
    long = len(text) >= max_values
    if long:
        _check_values(text, max_values, raw)
    found: list[str] = []
    try:
        # parse_int=None is the decoder's own int (and its C fast path).
        constant, number = _nonfinite(
            keep_nonfinite, found, WrittenFloat if written_numbers else float
        )
        whole = WrittenInt if written_numbers else None
        repeated: list[tuple[dict[str, Any], str]] = []
        value = json.loads(
            text,
            parse_constant=constant,
            parse_float=number,
            parse_int=whole,
            object_pairs_hook=_keys_once(repeated) if unique_keys else None,
        )
    except RecursionError:
        raise JSONLimitError(f"nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        # Refused for depth when it nests past the limit before its error, as a parser that
        # counted levels would refuse it: how deep the standard library's goes before its
        # RecursionError depends on the Python version (about 1,000 levels on 3.11, 1,500
        # on 3.12, 10,000 on 3.13), and which refusal a text gets must not.
        if nests_past(text[: exc.pos], MAX_DEPTH):
            raise JSONLimitError(f"nested deeper than {MAX_DEPTH} levels") from None
        raise JSONSyntaxError(
            f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except ValueError:  # the standard library's own limit on integer digits
        raise JSONLimitError(f"an integer of more than {MAX_INT_DIGITS} digits") from None
    if repeated:
        holder, key = repeated[0]
        raise JSONRepeatedKeyError((*_path_to(value, holder), key))
    replaced = [] if keep_nonfinite else [f"non-finite number {n} replaced by null" for n in found]
    # Brackets can only nest as deep as there are brackets: most texts need no walk for depth.
    # A long text is walked without counting (the walk visits containers only, and there are
    # fewer of them than the limit): cheaper than counting its brackets.
    deep = not depth_checked and (long or text.count("[") + text.count("{") > MAX_DEPTH)
    if deep and isinstance(value, dict | list) and _too_deep(value):
        raise JSONLimitError(f"nested deeper than {MAX_DEPTH} levels")
    if _ESCAPED_SURROGATE.search(text) is not None or (
        not text.isascii() and _SURROGATE.search(text) is not None
    ):
        value, fixed = _walk(value, check_depth=False)
        replaced.extend(fixed)
    return Decoded(value, tuple(replaced))


def _keys_once(
    repeated: list[tuple[dict[str, Any], str]],
) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """An ``object_pairs_hook`` that builds each object and notes the first that repeats a key."""

    def build(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        made = dict(pairs)
        if len(made) < len(pairs) and not repeated:
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    repeated.append((made, key))
                    break
                seen.add(key)
        return made

    return build


def _path_to(value: Any, target: dict[str, Any]) -> tuple[str | int, ...]:
    """The keys and indexes from `value` to the object `target` (found by identity), walked
    without recursion: only a text refused for a repeated key pays for it."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if item is target:
            return path
        if isinstance(item, dict):
            stack.extend((child, (*path, key)) for key, child in item.items())
        elif isinstance(item, list):
            stack.extend((child, (*path, index)) for index, child in enumerate(item))
    return ()


def check_values(text: str, limit: int = MAX_VALUES) -> None:
    """Raise `JSONLimitError` when the JSON `text` holds more than `limit` values.

    Values are counted as in the module docstring; linear in the length of `text`.
    """
    if len(text) >= limit:
        _check_values(text, limit, None)


def _check_values(text: str, limit: int, raw: bytes | None) -> None:
    """`check_values`, on `raw` (the UTF-8 bytes of `text`) when the caller has them."""
    if _counted(text if raw is None else raw) < limit:
        return
    if _counted(_STRING.sub("", text)) >= limit:
        raise JSONLimitError(f"more than {limit:,} values (each comma, [ and {{ counts one)")


# Every byte but the three that are counted: deleting them leaves those to count, in one pass.
_NOT_COUNTED = bytes(byte for byte in range(256) if byte not in b",[{")


def _counted(text: str | bytes) -> int:
    """How many commas, ``[`` and ``{`` `text` holds (anywhere, strings included)."""
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    return len(data.translate(None, _NOT_COUNTED))


def check_depth(value: Any) -> None:
    """Raise `JSONLimitError` when the dicts and lists of `value` nest deeper than `MAX_DEPTH`."""
    if isinstance(value, dict | list) and _too_deep(value):
        raise JSONLimitError(f"nested deeper than {MAX_DEPTH} levels")


def plain_numbers(value: Any) -> Any:
    """`value` with every `WrittenFloat` and `WrittenInt` made a plain float and int.

    `value` itself when it holds none; otherwise a copy of its dicts, lists and
    tuples. Iterative, so depth costs no recursion.
    """
    if not _holds_written(value):
        return value
    top: list[Any] = [None]
    stack: list[tuple[Any, Any]] = []
    tuples: list[tuple[Any, Any, list[Any]]] = []  # (container, key, items), parents first

    def copy(item: Any, container: Any, key: Any) -> Any:
        if isinstance(item, WrittenFloat):
            return float(item)
        if isinstance(item, WrittenInt):
            return int(item)
        if not isinstance(item, dict | list | tuple):
            return item
        shell: Any = {} if isinstance(item, dict) else []
        if isinstance(item, tuple):
            tuples.append((container, key, shell))
        stack.append((item, shell))
        return shell

    top[0] = copy(value, top, 0)
    while stack:
        source, target = stack.pop()
        if isinstance(source, dict):
            for key, item in source.items():
                target[key] = copy(item, target, key)
        else:
            for item in source:
                target.append(copy(item, target, len(target)))
    for container, key, items in reversed(tuples):  # children before their parents
        container[key] = tuple(items)
    return top[0]


def _holds_written(value: Any) -> bool:
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, WrittenFloat | WrittenInt):
            return True
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
    return False


# Every character but a bracket, once strings are cut out: what is left says how deep a text nests.
_NOT_A_BRACKET = re.compile(r"[^\[\]{}]+")


def nests_past(text: str, limit: int) -> bool:
    """Whether the arrays and objects `text` opens (a text cut anywhere) nest past `limit`.

    For the text before a syntax error, which counts as deep as it nests there. Strings
    are cut out first (one at the end may be open), so brackets in them do not count.
    Linear in the length of `text`; a loop over its brackets only when it opens more than
    `limit` of them.
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for bracket in _NOT_A_BRACKET.sub("", _STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        if depth > limit:
            return True
    return False


def past_encoded_depth(text: str, value: Any) -> bool:
    """Whether `value`, decoded from or encoded as `text`, nests deeper than `MAX_ENCODED_DEPTH`.

    Levels need brackets: a text holding fewer ``[`` and ``{`` than that costs no walk
    (and one of fewer characters, no count).
    """
    return (
        len(text) > MAX_ENCODED_DEPTH
        and text.count("[") + text.count("{") > MAX_ENCODED_DEPTH
        and isinstance(value, dict | list | tuple)
        and _too_deep(value, MAX_ENCODED_DEPTH)
    )


def _too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether containers nest deeper than `limit` in `value` (iterative, containers only).

    Dicts, lists and tuples, and their subclasses: what the encoder writes as objects and arrays.
    """
    # Run on every request body of more than `MAX_ENCODED_DEPTH` brackets: a tuple of
    # types and bound methods, because ``isinstance`` with ``dict | list | tuple`` made
    # this walk four times slower (2.6 against 0.7 ms on a 1.9 MB body).
    stack = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        node, depth = pop()
        if depth > limit:
            return True
        deeper = depth + 1
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, _CONTAINERS):
                push((child, deeper))
    return False


# What the encoder writes as objects and arrays, subclasses included.
_CONTAINERS = (dict, list, tuple)


def sanitized(value: Any) -> Decoded:
    """`value` (built in Python, e.g. by a plugin) made encodable: the replacements of `loads`.

    Anything that is not a JSON type is an error (``TypeError``), as is
    nesting deeper than `MAX_DEPTH` (`JSONLimitError`).
    """
    out, replaced = _walk(value, check_depth=True, numbers=True)
    return Decoded(out, tuple(replaced))


def dumps(
    value: Any,
    *,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
    ascii_only: bool = False,
    on_replace: Callable[[tuple[str, ...]], None] | None = None,
) -> str:
    """Strict JSON for `value`: never ``NaN``, never a lone surrogate.

    `on_replace` is called with what was replaced, when anything was. A value
    that needs no replacement is encoded by the standard library as it is (what
    the core writes was decoded within the limits, and session lines are
    checked for depth before they are stored); one that must be sanitised, or
    nested deeper than `MAX_ENCODED_DEPTH` (on every Python version), is
    walked, and raises `JSONLimitError` when nested deeper than `MAX_DEPTH`.
    Raises ``TypeError`` for values that are not JSON types.
    """
    options: dict[str, Any] = {
        "ensure_ascii": ascii_only,
        "allow_nan": False,
        "indent": indent,
        "separators": separators,
        "sort_keys": sort_keys,
    }
    try:
        text = json.dumps(value, **options)
    except (ValueError, RecursionError):
        text = None
    if text is not None and past_encoded_depth(text, value):
        text = None  # what the encoder gives up on, on one version or another
    if text is not None and (text.isascii() or _SURROGATE.search(text) is None):
        return text
    clean = sanitized(value)
    if on_replace is not None and clean.replaced:
        on_replace(clean.replaced)
    return json.dumps(clean.value, **options)


_SCALARS = (bool, int, type(None))


def viewable(value: Any) -> Any:
    """`value` as `dumps` can write it, for a report (``--json``): what JSON cannot hold, named.

    `value` itself when `dumps` takes it. Otherwise a copy of its dicts, lists and
    tuples in which a value of no JSON type is the text ``<a PosixPath>`` (a key of
    no JSON key type likewise), an int of more than `MAX_INT_DIGITS` digits ``<an int
    of N bits>``, a dict or list met again inside itself ``<a cycle>``, and one nested
    deeper than `MAX_DEPTH` ``<nested deeper than 100 levels>``. What a tool's own
    argument check returned may hold any of these. No code of the values' own runs
    for the copy (no ``repr``, no ``items`` of a dict subclass). Iterative.
    """
    try:
        dumps(value)
    except (TypeError, ValueError, RecursionError):
        pass
    else:
        return value

    def leaf(item: Any) -> Any:
        if isinstance(item, bool) or item is None:
            return item
        if isinstance(item, int):
            if item.bit_length() > MAX_INT_DIGITS * 3.32:
                return f"<an int of {item.bit_length()} bits>"
            return int.__int__(item)
        if isinstance(item, float):
            return float.__float__(item)
        if isinstance(item, str):
            return str.__str__(item)
        return f"<{a_type(item)}>"

    def key_of(key: Any) -> str:
        if isinstance(key, str):
            return str.__str__(key)
        shown = leaf(key)
        if isinstance(shown, str):  # a type named, or an int too long to write
            return shown
        return json.dumps(shown)  # what json.dumps itself makes of such a key

    if not isinstance(value, dict | list | tuple):
        return leaf(value)
    out: Any = {} if isinstance(value, dict) else []
    # (container, its copy, the ids of the containers it is inside, itself included)
    stack: list[tuple[Any, Any, frozenset[int]]] = [(value, out, frozenset({id(value)}))]
    while stack:
        source, target, inside = stack.pop()
        pairs = dict.items(source) if isinstance(source, dict) else enumerate(_members(source))
        for key, item in pairs:
            if isinstance(item, dict | list | tuple):
                if id(item) in inside:
                    copied: Any = "<a cycle>"
                elif len(inside) >= MAX_DEPTH:
                    copied = f"<nested deeper than {MAX_DEPTH} levels>"
                else:
                    copied = {} if isinstance(item, dict) else []
                    stack.append((item, copied, inside | {id(item)}))
            else:
                copied = leaf(item)
            if isinstance(target, dict):
                target[key_of(key)] = copied
            else:
                target.append(copied)
    return out


def _members(sequence: list[Any] | tuple[Any, ...]) -> list[Any]:
    """The items of a list or tuple, read as the built-in type reads them (a subclass's own
    ``__iter__`` is its code)."""
    return list.copy(sequence) if isinstance(sequence, list) else list(tuple.__iter__(sequence))


def _walk(value: Any, *, check_depth: bool, numbers: bool = False) -> tuple[Any, list[str]]:
    """A copy of `value` with lone surrogates (and, with `numbers`, non-finite floats) replaced.

    Iterative: a stack of (container, its copy, depth), so depth costs no recursion.
    """
    replaced: list[str] = []
    seen = {"lone": False, "pair": False}

    def leaf(item: Any) -> Any:
        if isinstance(item, str):
            fixed = without_lone_surrogates(item)
            if fixed is not item:
                joined, lone = surrogates_fixed(item, fixed)
                seen["pair"] = seen["pair"] or joined
                seen["lone"] = seen["lone"] or lone
            return fixed
        if isinstance(item, float):
            if numbers and not math.isfinite(item):
                replaced.append(f"non-finite number {item!r} replaced by null")
                return None
            return item
        if isinstance(item, _SCALARS):
            if numbers and isinstance(item, int) and not isinstance(item, bool):
                _check_int(item)
            return item
        if isinstance(item, dict | list | tuple):
            return item  # containers are handled by the loop
        raise TypeError(f"a {type(item).__name__} is not a JSON value")

    def shell(item: Any) -> Any:
        return {} if isinstance(item, dict) else []

    if not isinstance(value, dict | list | tuple):
        out = leaf(value)
    else:
        out = shell(value)
        stack: list[tuple[Any, Any, int]] = [(value, out, 1)]
        while stack:
            source, target, depth = stack.pop()
            if check_depth and depth > MAX_DEPTH:
                raise JSONLimitError(f"nested deeper than {MAX_DEPTH} levels")
            items = source.items() if isinstance(source, dict) else enumerate(source)
            for key, item in items:
                if isinstance(source, dict):
                    if not isinstance(key, str):
                        if not isinstance(key, int | float | bool | None):
                            raise TypeError(f"a {type(key).__name__} key is not a JSON key")
                        key = json.dumps(key)  # what json.dumps itself makes of such a key
                    key = leaf(key)
                copied = leaf(item)
                if isinstance(item, dict | list | tuple):
                    copied = shell(item)
                    stack.append((item, copied, depth + 1))
                if isinstance(target, dict):
                    target[key] = copied
                else:
                    target.append(copied)
    if seen["lone"]:
        replaced.append(LONE_SURROGATES_REPLACED)
    if seen["pair"]:
        replaced.append(SURROGATE_PAIRS_JOINED)
    return out, replaced


def _check_int(value: int) -> None:
    # 3.32 bits a decimal digit: a cheap bound, exact enough for a limit of thousands of digits.
    if value.bit_length() > MAX_INT_DIGITS * 3.32:
        raise JSONLimitError(f"an integer of more than {MAX_INT_DIGITS} digits")
