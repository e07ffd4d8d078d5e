"""Argument repair and parsing: linear or bounded, never an exception, limits as Error results."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nanobot_core import ToolRegistry, tool
from nanobot_core._json_boundary import MAX_DEPTH, JSONLimitError, JSONSyntaxError
from nanobot_core._json_repair import MAX_REPAIR_CHARS, repair
from nanobot_core.governance.stages.arguments import normalise_arguments
from nanobot_core.tools.registry import parse_arguments

ARGUMENTS = settings(
    max_examples=2_000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

keys = st.text(st.characters(codec="utf-8", exclude_characters='"\\'), min_size=1, max_size=6)
leaves = st.none() | st.booleans() | st.integers() | st.text(max_size=10)
objects = st.dictionaries(
    keys,
    st.recursive(leaves, lambda inner: st.lists(inner, max_size=3), max_leaves=6),
    min_size=1,
    max_size=4,
)


@tool
def echo(text: str) -> str:
    """Return the text."""
    return text


def _registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.add(echo)
    return registry


def test_a_cut_off_string_value_is_closed() -> None:
    """A call whose text value was cut mid-string keeps the text it had."""
    value, done = repair('{"path": "a.txt", "content": "line one\\nline tw')
    assert value == {"path": "a.txt", "content": "line one\nline tw"}
    assert done == "repaired malformed JSON"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1, "b"', {"a": 1}),
        ('{"a": 1, "b":', {"a": 1}),
        ('{"a": [1, 2,', {"a": [1, 2]}),
        ('{"a": [1, tr', {"a": [1]}),
        ('{"a": "x\\', {"a": "x"}),
        ('{"a": {"b": "c"}, ', {"a": {"b": "c"}}),
    ],
)
def test_each_kind_of_cut_off_tail_is_dropped(text: str, expected: dict[str, Any]) -> None:
    """A dangling key, colon, comma, half literal or lone backslash is dropped, brackets closed."""
    assert repair(text)[0] == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{'text': 'a b c'", {"text": "a b c"}),
        ("{'text': 'a b c", {"text": "a b c"}),
        ("['a'", ["a"]),
        ('{"a": 1, b: [1]', {"a": 1, "b": [1]}),
    ],
)
def test_a_last_member_that_is_no_cut_json_is_kept(text: str, expected: Any) -> None:
    """A cut-off text whose last member is whole but not JSON (single quotes, a bare key)
    keeps it: dropping it as unfinished gave ``{}`` for ``{'text': 'a b c'``."""
    assert repair(text)[0] == expected


# Printable text without the quotes and backslash a Python-style literal would escape, nor
# the punctuation json-repair reads as structure inside a quoted key.
plain = st.text(
    st.characters(min_codepoint=32, max_codepoint=126, exclude_characters="'\\\",:[]{}")
)


@ARGUMENTS
@given(st.dictionaries(plain.filter(str.strip), plain, min_size=1, max_size=4), st.booleans())
def test_single_quoted_members_cut_before_the_brace_are_all_kept(
    value: dict[str, str], comma: bool
) -> None:
    """``{'k': 'v', ...`` cut before its closing brace (or after a comma) loses no member."""
    text = "{" + ", ".join(f"'{key}': '{item}'" for key, item in value.items())
    assert repair(text + ("," if comma else ""))[0] == value


def test_a_cut_off_text_keeps_its_numbers_as_written() -> None:
    """With written_numbers, a closed truncation keeps each number's text; json-repair does not."""
    value, _ = repair('{"a": 3.10, "b": [1E+2', written_numbers=True)
    assert (value["a"].text, value["b"][0].text) == ("3.10", "1E+2")
    value, _ = repair("{'a': 3.10}", written_numbers=True)
    assert value["a"].text == "3.1"  # json-repair wrote the number again


def test_other_breakage_is_repaired_below_the_limit() -> None:
    """Single quotes, comments and trailing text are repaired when short."""
    assert repair("{'a': 1}")[0] == {"a": 1}
    assert repair('{"a": 1, // note\n "b": 2}')[0] == {"a": 1, "b": 2}


def test_long_breakage_that_is_not_a_cut_off_is_refused_with_the_limit() -> None:
    """Broken JSON over MAX_REPAIR_CHARS that is not a truncation is refused, naming the limit."""
    text = "{'a': '" + "x" * MAX_REPAIR_CHARS + "'}"
    with pytest.raises(JSONLimitError, match=f"at most {MAX_REPAIR_CHARS} characters"):
        repair(text)


def test_a_long_cut_off_value_is_repaired_whatever_its_size() -> None:
    """Truncation is repaired beyond MAX_REPAIR_CHARS: 2 MB of escaped text, closed."""
    body = 'x\\"y \\\\ z\\n' * 200_000
    value, _ = repair('{"content": "' + body)
    assert value == {"content": json.loads('"' + body + '"')}


def test_deep_cut_off_text_is_refused_as_too_deep() -> None:
    """A truncation opening more than MAX_DEPTH brackets is refused while scanning."""
    with pytest.raises(JSONLimitError, match="nested deeper"):
        repair("[" * (MAX_DEPTH + 1))


def test_text_that_is_no_json_at_all_is_a_syntax_error() -> None:
    """Prose is not JSON: a JSONSyntaxError, which callers turn into an Error result."""
    with pytest.raises(JSONSyntaxError):
        repair("")


@ARGUMENTS
@given(objects, st.data())
def test_any_cut_of_a_json_object_parses_without_exception(
    value: dict[str, Any], data: st.DataObject
) -> None:
    """Every prefix of valid arguments parses to an object or to an error phrase, nothing else."""
    text = json.dumps(value, ensure_ascii=False)
    cut = data.draw(st.integers(min_value=1, max_value=len(text)))
    parsed = parse_arguments(text[:cut])
    assert (parsed.error is None) == isinstance(parsed.value, dict)
    if cut == len(text):
        assert parsed.value == value and parsed.repairs == ()
    if parsed.error is None:
        json.dumps(parsed.value, allow_nan=False)  # what is kept can always be encoded


@ARGUMENTS
@given(st.text(max_size=40))
def test_any_text_as_arguments_is_an_object_or_an_error(text: str) -> None:
    """Arbitrary model text never raises: the governance stage always yields an object string."""
    encoded, _ = normalise_arguments(text)
    assert isinstance(json.loads(encoded), dict)
    parsed = parse_arguments(text)
    assert parsed.error is None or parsed.error.startswith(("must be", "cannot be used"))


# Strings without a brace: none of them is the text of an object (double-encoded arguments).
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(st.characters(exclude_characters="{")),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
)


@ARGUMENTS
@given(json_values, st.booleans())
def test_any_json_value_as_arguments_becomes_an_object_string(value: Any, twice: bool) -> None:
    """Whatever JSON value a history's arguments hold (encoded once or twice), the stage hands
    on the text of a JSON object: that object when the value is one, else ``{}``."""
    text = json.dumps(json.dumps(value) if twice else value)
    encoded, _ = normalise_arguments(text)
    decoded = json.loads(encoded)
    assert decoded == (value if isinstance(value, dict) else {})


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("[" * 50_000 + "]" * 50_000, "cannot be used: nested deeper than 100 levels"),
        (
            "[" * 100_000 + "]" * 100_000,
            "cannot be used: more than 100,000 values (each comma, [ and { counts one)",
        ),
        ("[{" * 20_000, "cannot be used: nested deeper than 100 levels"),
        ('{"text": ' + "1" * 5_000 + "}", "cannot be used: an integer of more than 4300 digits"),
    ],
)
def test_issue_reproducers_are_error_results(raw: str, expected: str) -> None:
    """The deep, unclosed and huge-integer arguments of the issue give Error results, no raise."""
    prepared = _registry().prepare_call("echo", raw)
    assert prepared.error == f'Error: arguments for tool "echo" {expected}'


def test_deep_object_arguments_from_python_are_refused() -> None:
    """Arguments handed over as a Python object nested past the limit are refused the same way."""
    deep: Any = "x"
    for _ in range(10_000):
        deep = {"text": deep}
    prepared = _registry().prepare_call("echo", deep)
    assert prepared.error is not None and "nested deeper" in prepared.error


def test_non_finite_arguments_reach_validation() -> None:
    """NaN in arguments text is kept as a float, so validation (not the parser) refuses it."""
    parsed = parse_arguments('{"x": NaN, "y": Infinity}')
    assert parsed.error is None
    assert math.isnan(parsed.value["x"]) and parsed.value["y"] == math.inf
    prepared = _registry().prepare_call("echo", '{"text": NaN}')
    assert prepared.error is not None and prepared.error.startswith("Error: invalid arguments")
