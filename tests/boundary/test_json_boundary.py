"""The JSON boundary: limits on the way in, strict JSON on the way out, whatever the input."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nanobot_core._json_boundary import (
    LONE_SURROGATES_REPLACED,
    MAX_DEPTH,
    MAX_ENCODED_DEPTH,
    MAX_INT_DIGITS,
    SURROGATE_PAIRS_JOINED,
    JSONLimitError,
    JSONRepeatedKeyError,
    JSONSyntaxError,
    WrittenFloat,
    WrittenInt,
    check_depth,
    check_values,
    dumps,
    loads,
    plain_numbers,
    sanitized,
    viewable,
    without_lone_surrogates,
)
from tests.boundary.strict import strict_loads
from tests.helpers import plugin_values

# Any text, lone surrogates included: what a broken decoder or a JSON escape can produce.
texts = st.text(st.characters(codec=None, exclude_categories=()), max_size=12)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | texts
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=20,
)
BOUNDARY = settings(max_examples=2_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _nest(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_depth_at_the_limit_is_accepted_and_one_more_is_refused() -> None:
    """MAX_DEPTH nested arrays decode; one level more is a JSONLimitError naming the limit."""
    assert loads(_nest(MAX_DEPTH)).value is not None
    with pytest.raises(JSONLimitError, match=f"nested deeper than {MAX_DEPTH} levels"):
        loads(_nest(MAX_DEPTH + 1))
    objects = '{"a":' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1)
    with pytest.raises(JSONLimitError, match="nested deeper"):
        loads(objects)


def test_a_hundred_thousand_deep_array_is_refused_not_a_recursion_error() -> None:
    """The issue's ``"[" * 100000 + "]" * 100000`` is refused as too deep."""
    with pytest.raises(JSONLimitError, match="nested deeper"):
        loads(_nest(100_000))


def test_an_unclosed_deep_text_is_a_syntax_error() -> None:
    """The issue's ``"[{" * 20000`` is not JSON, said with its position."""
    with pytest.raises(JSONSyntaxError, match=r"not JSON \(.* line 1 column 3\)"):
        loads("[{" * 20_000)


@settings(max_examples=200, deadline=None)
@given(
    depth=st.integers(0, 20_000) | st.sampled_from([MAX_DEPTH, MAX_DEPTH + 1]),
    opener=st.sampled_from(["[", '{"k":', '["]}",']),  # brackets in a string do not count
    error=st.sampled_from(["", "x", ",", "}", '"open', "1 2"]),
)
def test_a_text_nested_past_the_limit_before_its_error_is_refused_for_depth(
    depth: int, opener: str, error: str
) -> None:
    """Past MAX_DEPTH before its syntax error: JSONLimitError, whatever depth Python's parser
    reaches (3.11, 3.12 and 3.13 differ); an error reached first: JSONSyntaxError."""
    refusal = JSONLimitError if depth > MAX_DEPTH else JSONSyntaxError
    with pytest.raises(refusal):
        loads(opener * depth + error)


def _nested_value(depth: int, container: type[list[Any] | tuple[Any, ...] | dict[str, Any]]) -> Any:
    """`depth` dicts, lists or tuples around one number (built without recursion)."""
    value: Any = 1
    for _ in range(depth):
        value = {"k": value} if container is dict else container([value])
    return value


@settings(max_examples=200, deadline=None)
@given(
    depth=st.integers(MAX_DEPTH - 3, 20_000)
    | st.sampled_from([MAX_DEPTH, MAX_DEPTH + 1, MAX_ENCODED_DEPTH, MAX_ENCODED_DEPTH + 1]),
    container=st.sampled_from([list, tuple, dict]),
)
def test_dumps_encodes_up_to_the_encoded_depth_and_refuses_deeper_on_every_version(
    depth: int, container: type[list[Any] | tuple[Any, ...] | dict[str, Any]]
) -> None:
    """Up to MAX_ENCODED_DEPTH a value is encoded as it is; deeper, a JSONLimitError, whatever
    depth Python's own encoder reaches (about 1,000 on 3.11, 1,500 on 3.12, 10,000 on 3.13)."""
    value = _nested_value(depth, container)
    if depth <= MAX_ENCODED_DEPTH:
        assert dumps(value) == json.dumps(value)
    else:
        with pytest.raises(JSONLimitError, match=f"nested deeper than {MAX_DEPTH} levels"):
            dumps(value)


def test_integer_digits_are_limited() -> None:
    """An integer of MAX_INT_DIGITS digits decodes and encodes again; more digits are refused."""
    assert dumps(loads("9" * MAX_INT_DIGITS).value) == "9" * MAX_INT_DIGITS
    with pytest.raises(JSONLimitError, match=f"more than {MAX_INT_DIGITS} digits"):
        loads("9" * 5_000)
    with pytest.raises(JSONLimitError, match="digits"):
        dumps(10**5_000)


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", "1e999", "-1e400"])
def test_non_finite_numbers_become_null_and_are_reported(text: str) -> None:
    """NaN, Infinity and overflowing numbers are replaced by null, each one reported."""
    decoded = loads(f'{{"x": {text}, "y": [{text}]}}')
    assert decoded.value == {"x": None, "y": [None]}
    assert len(decoded.replaced) == 2
    assert all("replaced by null" in note for note in decoded.replaced)


def test_non_finite_numbers_are_kept_when_asked() -> None:
    """keep_nonfinite leaves NaN a float, for argument validation to refuse by name."""
    value = loads('{"x": NaN, "y": 1e999}', keep_nonfinite=True).value
    assert math.isnan(value["x"]) and value["y"] == math.inf


def test_written_numbers_keep_their_text() -> None:
    """With written_numbers every number keeps the text it was written as, in any container."""
    value = loads('{"a": [3.10, 1E+2, -0], "b": {"c": 0.30000000000000001}}', written_numbers=True)
    (a, e, z), c = value.value["a"], value.value["b"]["c"]
    assert (a.text, e.text, z.text, c.text) == ("3.10", "1E+2", "-0", "0.30000000000000001")
    assert (a, e, z, c) == (3.1, 100.0, 0, 0.3)
    assert [type(n) for n in (a, e, z, c)] == [WrittenFloat, WrittenFloat, WrittenInt, WrittenFloat]


def test_written_numbers_keep_the_limits() -> None:
    """Written numbers change no limit: too many integer digits are refused, non-finite kept."""
    with pytest.raises(JSONLimitError, match=f"more than {MAX_INT_DIGITS} digits"):
        loads("[" + "9" * 5_000 + "]", written_numbers=True)
    assert loads("[1e999]", written_numbers=True).value == [None]
    assert loads("[1e999]", keep_nonfinite=True, written_numbers=True).value == [math.inf]


def test_written_numbers_survive_the_surrogate_walk() -> None:
    """A text with a lone surrogate is walked and copied; its numbers still keep their text."""
    value = loads('{"\\ud800": [2.50]}', written_numbers=True).value
    assert value["\ufffd"][0].text == "2.50"


def test_plain_numbers_leaves_no_written_number() -> None:
    """plain_numbers makes plain floats and ints in dicts, lists and tuples, keeping the shape."""
    value = {"a": [WrittenFloat("2.50"), (WrittenInt("-0"), [WrittenFloat("1e2")])], "b": "x"}
    plain = plain_numbers(value)
    assert plain == {"a": [2.5, (0, [100.0])], "b": "x"}
    inner = plain["a"][1]
    assert [type(plain["a"][0]), type(inner), type(inner[0]), type(inner[1][0])] == [
        float,
        tuple,
        int,
        float,
    ]
    assert type(plain_numbers(WrittenFloat("0.5"))) is float


def test_plain_numbers_returns_a_plain_value_itself() -> None:
    """A value holding no written number comes back as the same object, however deep."""
    value: list[Any] = [1, 2.5, {"a": (3,)}]
    for _ in range(100_000):
        value = [value]
    assert plain_numbers(value) is value


def test_plain_numbers_copies_deep_values_without_recursion() -> None:
    """A written number 100,000 lists deep is made plain without a RecursionError."""
    value: Any = [WrittenFloat("1.50")]
    for _ in range(100_000):
        value = [value]
    plain = plain_numbers(value)
    for _ in range(100_000):
        plain = plain[0]
    assert type(plain[0]) is float and plain == [1.5]


def test_lone_surrogate_escapes_become_replacement_characters() -> None:
    """An escaped lone surrogate decodes to U+FFFD, reported; an escaped pair is its character."""
    decoded = loads('{"\\udc80k": "a\\ud800b \\ud83d\\ude00"}')
    assert decoded.value == {"\ufffdk": "a\ufffdb \U0001f600"}
    assert decoded.replaced == ("lone surrogates replaced by U+FFFD",)


def test_bytes_that_are_not_utf8_are_a_syntax_error() -> None:
    """Bytes are decoded strictly: a bad byte is a JSONSyntaxError naming its offset."""
    with pytest.raises(JSONSyntaxError, match=r"not UTF-8 .* at byte 2"):
        loads(b'"a\xff"')


def test_dumps_replaces_what_cannot_be_strict_json() -> None:
    """NaN and infinities become null and lone surrogates U+FFFD, and the caller is told."""
    told: list[tuple[str, ...]] = []
    text = dumps({"a": math.nan, "b": ["\ud800", -math.inf], "\udfff": 1}, on_replace=told.append)
    assert strict_loads(text) == {"a": None, "b": ["\ufffd", None], "\ufffd": 1}
    assert len(told) == 1 and "lone surrogates replaced by U+FFFD" in told[0]


def test_dumps_refuses_values_deeper_than_the_limit() -> None:
    """A Python value nested past MAX_DEPTH is a JSONLimitError, never a RecursionError."""
    deep: Any = []
    for _ in range(5_000):
        deep = [deep]
    with pytest.raises(JSONLimitError):
        dumps([deep, math.nan])
    with pytest.raises(JSONLimitError):
        check_depth(deep)


def test_dumps_refuses_what_is_not_json() -> None:
    """Objects that are not JSON values are a TypeError naming the type."""
    with pytest.raises(TypeError, match="set"):
        dumps({"a": {1, 2}})


def test_without_lone_surrogates_joins_pairs_and_replaces_halves() -> None:
    """A split pair is joined into its character; a half alone becomes U+FFFD."""
    assert without_lone_surrogates("x\ud83d\ude00y\ud83d") == "x\U0001f600y\ufffd"
    plain = "plain text"
    assert without_lone_surrogates(plain) is plain


# Pieces of a str with surrogates: halves alone, halves that pair, and characters around them.
_HIGH = st.characters(min_codepoint=0xD800, max_codepoint=0xDBFF)
_LOW = st.characters(min_codepoint=0xDC00, max_codepoint=0xDFFF)
_PIECES = st.lists(
    _HIGH | _LOW | st.sampled_from(["a", "\u00e9", "\ufffd", "\U0001f600", "\ud83d\ude00"]),
    max_size=12,
).map("".join)


def _surrogates_in(text: str) -> tuple[int, int]:
    """(pairs, lone halves) in `text`, read as UTF-16 reads it: a high half then a low is a pair."""
    pairs = lone = index = 0
    while index < len(text):
        here = ord(text[index])
        after = ord(text[index + 1]) if index + 1 < len(text) else 0
        if 0xD800 <= here <= 0xDBFF and 0xDC00 <= after <= 0xDFFF:
            pairs, index = pairs + 1, index + 2
            continue
        lone += 0xD800 <= here <= 0xDFFF
        index += 1
    return pairs, lone


@given(st.lists(_PIECES, min_size=1, max_size=4))
def test_what_dumps_says_of_surrogates_is_what_it_did(strings: list[str]) -> None:
    """dumps says pairs were joined when a string held one as two code points, lone halves
    replaced when one held a half alone, both when both, and nothing when neither."""
    pairs = sum(_surrogates_in(text)[0] for text in strings)
    lone = sum(_surrogates_in(text)[1] for text in strings)
    said = {LONE_SURROGATES_REPLACED: lone > 0, SURROGATE_PAIRS_JOINED: pairs > 0}
    expected = tuple(message for message, happened in said.items() if happened)
    told: list[tuple[str, ...]] = []
    text = dumps({"k": strings}, on_replace=told.append)
    assert told == ([expected] if expected else [])
    written = strict_loads(text)["k"]
    assert [len(s) for s in written] == [len(t) - _surrogates_in(t)[0] for t in strings]
    replacements = zip(written, strings, strict=True)
    assert sum(s.count("\ufffd") - t.count("\ufffd") for s, t in replacements) == lone
    assert loads(json.dumps(strings, ensure_ascii=False)).replaced == expected


def test_a_pair_held_as_two_code_points_is_said_to_be_joined() -> None:
    """A str holding an emoji as its two UTF-16 halves is written as the emoji, and the caller
    is told a pair was joined, not that a lone surrogate was replaced."""
    told: list[tuple[str, ...]] = []
    text = dumps(["\ud83d\ude00"], on_replace=told.append)
    assert strict_loads(text) == ["\U0001f600"]
    assert told == [("surrogate pairs joined into the characters they encode",)]


@BOUNDARY
@given(values)
def test_any_value_encodes_to_strict_json_and_decodes_to_the_same(value: Any) -> None:
    """dumps gives strict UTF-8 JSON for any value; loads of it gives the sanitised value."""
    text = dumps(value)
    parsed = strict_loads(text.encode("utf-8"))
    clean = sanitized(value).value
    assert parsed == json.loads(json.dumps(clean))
    assert loads(text).value == parsed


@BOUNDARY
@given(values)
def test_any_decoded_value_can_be_encoded_again(value: Any) -> None:
    """What loads accepts (written with NaN and escapes as a lenient encoder would) re-encodes."""
    lenient = json.dumps(value, ensure_ascii=True, allow_nan=True)
    decoded = loads(lenient).value
    assert strict_loads(dumps(decoded)) == decoded


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=3 * MAX_DEPTH), st.sampled_from(["[", '{"k":']))
def test_depth_is_refused_exactly_above_the_limit(depth: int, opener: str) -> None:
    """Any depth up to MAX_DEPTH decodes and any deeper is refused, for arrays and objects."""
    closer = "]" if opener == "[" else "}"
    text = opener * depth + "0" + closer * depth
    if depth <= MAX_DEPTH:
        assert loads(text).value is not None
    else:
        with pytest.raises(JSONLimitError):
            loads(text)


def test_plugin_tool_output_goes_through_the_boundary() -> None:
    """A tool returning NaN or lone surrogates gets strict JSON text, never bare NaN."""
    from nanobot_core.tools.base import ToolResult

    result = ToolResult.of({"score": math.nan, "name": "\ud800x"})
    assert strict_loads(str(result)) == {"score": None, "name": "\ufffdx"}
    deep: Any = [math.nan]
    for _ in range(5_000):
        deep = [deep]
    refused = ToolResult.of(deep)  # too deep to sanitise: an error result, not a RecursionError
    assert refused.is_error and "nested deeper" in str(refused)


@pytest.mark.parametrize(
    ("deepest", "refusal"), [(MAX_DEPTH, JSONSyntaxError), (MAX_DEPTH + 1, JSONLimitError)]
)
def test_broken_text_with_many_brackets_is_refused_for_depth_only_past_the_limit(
    deepest: int, refusal: type[Exception]
) -> None:
    """More brackets than MAX_DEPTH, nested at most MAX_DEPTH deep before the error: not JSON;
    one level deeper: too deep."""
    text = "[[]," + "[" * (deepest - 1) + "x"
    with pytest.raises(refusal) as raised:
        loads(text)
    assert raised.type is refusal


def test_a_value_nested_exactly_max_depth_levels_is_sanitized_and_one_more_is_refused() -> None:
    """`sanitized` takes a value nested MAX_DEPTH levels deep, and refuses one level more."""
    deepest = _nested_value(MAX_DEPTH, list)
    assert sanitized(deepest).value == deepest
    with pytest.raises(JSONLimitError, match=f"nested deeper than {MAX_DEPTH} levels"):
        sanitized(_nested_value(MAX_DEPTH + 1, list))


@BOUNDARY
@given(st.text(alphabet='[]{},"a0 ', max_size=40), st.integers(1, 40))
def test_check_values_refuses_a_text_exactly_when_its_values_reach_the_limit(
    text: str, limit: int
) -> None:
    """Commas, ``[`` and ``{`` outside strings (an open string runs to the end) are counted:
    reaching `limit` of them is refused, fewer are not, whatever the text's length."""
    counted = sum(re.sub(r'"[^"]*"?', "", text).count(c) for c in ",[{")
    if counted >= limit:
        with pytest.raises(JSONLimitError, match=f"more than {limit:,} values"):
            check_values(text, limit)
    else:
        check_values(text, limit)


class _NoRepr:
    """A value a plugin hands back whose repr and str are broken: never called."""

    def __repr__(self) -> str:
        raise RuntimeError("repr called")

    __str__ = __repr__


def _cycle() -> list[Any]:
    looped: list[Any] = []
    looped.append(looped)
    return looped


def test_viewable_names_what_json_cannot_hold_and_keeps_the_rest() -> None:
    """Objects, sets, odd keys, huge ints, cycles and deep nesting are named; JSON is kept."""
    from pathlib import PurePosixPath

    deep: list[Any] = []
    for _ in range(MAX_ENCODED_DEPTH + 10):
        deep = [deep]
    value = {
        "path": PurePosixPath("a/b"),
        "tags": {"x"},
        "pair": (1, _NoRepr()),
        "cycle": _cycle(),
        "huge": 10**5000,
        (1, 2): "tuple key",
        3: "int key",
        None: "null key",
        "plain": {"n": 1.5, "s": "text", "b": True},
        "deep": deep,
    }
    shown = viewable(value)
    strict = json.loads(dumps(shown))
    assert {k: v for k, v in strict.items() if k != "deep"} == {
        "path": "<a PurePosixPath>",
        "tags": "<a set>",
        "pair": [1, "<a _NoRepr>"],
        "cycle": ["<a cycle>"],
        "huge": "<an int of 16610 bits>",
        "<a tuple>": "tuple key",
        "3": "int key",
        "null": "null key",
        "plain": {"n": 1.5, "s": "text", "b": True},
    }
    nested, levels = strict["deep"], 1
    while isinstance(nested, list):
        (nested,), levels = nested, levels + 1
    assert (nested, levels) == (f"<nested deeper than {MAX_DEPTH} levels>", MAX_DEPTH)


_ANYTHING = plugin_values()


@settings(max_examples=300, deadline=None)
@given(value=_ANYTHING)
def test_viewable_of_anything_is_written_by_dumps_and_json_is_kept_whole(value: Any) -> None:
    """Whatever a plugin holds, its view is strict JSON; a value dumps takes is its own view."""
    try:
        dumps(value)
    except (TypeError, ValueError):
        writable = False
    else:
        writable = True
    shown = viewable(value)
    dumps(shown)
    if writable:
        assert shown is value


def test_a_repeated_key_is_refused_only_when_asked() -> None:
    """`unique_keys` refuses a key given twice in one object, naming its path; else last wins."""
    text = '{"a": [1, {"b": 1, "b": 2}]}'
    assert loads(text).value == {"a": [1, {"b": 2}]}
    with pytest.raises(JSONRepeatedKeyError) as caught:
        loads(text, unique_keys=True)
    assert caught.value.path == ("a", 1, "b")
    assert str(caught.value) == "the key 'b' is given twice in one object"
