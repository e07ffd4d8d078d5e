"""The one rule for text shown on a terminal: control characters escaped, injectively."""

from __future__ import annotations

import io
import json
import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core import escape_controls, unescape_controls
from nanobot_core._json_boundary import dumps
from nanobot_core._terminal import TerminalStream, escape_json_controls, verbatim

BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"

# Text from outside: any code point, and plenty of what drives a terminal or reads as an
# escape (a backslash, 'x', braces, hex digits).
_DRIVING = st.sampled_from(
    ["\x1b", "\x07", "\r", "\x7f", "\x9b", "\u202e", "\u2066", "\udc9b", "\\", "x", "{", "}"]
)
_TEXT = st.lists(st.one_of(st.characters(), _DRIVING, st.sampled_from(["1b", "5c", "202e"]))).map(
    "".join
)


def _drives_a_terminal(char: str) -> bool:
    """Whether `char` is a control (Cc) but newline and tab, a bidi control, or a raw C1 byte."""
    if char in "\n\t":
        return False
    return unicodedata.category(char) == "Cc" or char in BIDI or "\udc80" <= char <= "\udc9f"


@settings(max_examples=500, deadline=None)
@given(_TEXT)
def test_escaped_text_drives_no_terminal_and_unescapes_to_itself(text: str) -> None:
    """For any text, what a terminal gets holds no control but newline and tab, and no bidi
    control, and unescaping it gives the text back."""
    shown = escape_controls(text)
    assert not any(_drives_a_terminal(char) for char in shown)
    assert unescape_controls(shown) == text


@settings(max_examples=300, deadline=None)
@given(_TEXT, _TEXT)
def test_the_escaping_is_injective(one: str, other: str) -> None:
    """Two different texts are never shown alike."""
    if one != other:
        assert escape_controls(one) != escape_controls(other)


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(exclude_categories=("Cc", "Cf", "Cs"), exclude_characters="\\")))
def test_text_without_controls_or_backslashes_is_shown_as_it_is(text: str) -> None:
    """Nothing changes in text that holds nothing to escape."""
    assert escape_controls(text) == text


def test_each_control_is_shown_by_its_code_point() -> None:
    """Escapes, bidi overrides and C1 are shown as ``\\x{HH}``; newline and tab stay."""
    text = "a\x1b]52;c;SGk=\x07b\r\x7f\x9b\u202eevil\u2069\tend\n"
    assert escape_controls(text) == (
        "a\\x{1b}]52;c;SGk=\\x{07}b\\x{0d}\\x{7f}\\x{9b}\\x{202e}evil\\x{2069}\tend\n"
    )


def test_a_backslash_is_escaped_only_where_it_reads_as_an_escape() -> None:
    """Python's repr of a control (``\\x1b``), a Windows path and JSON escapes stay as they are;
    a literal escape of the terminal rule gets its backslash escaped."""
    assert escape_controls(r"'a\x1b' C:\x{zz} \u00e9 \\") == r"'a\x1b' C:\x{zz} \u00e9 \\"
    assert escape_controls(r"\x{1b}") == r"\x{5c}x{1b}"
    assert unescape_controls(r"\x{5c}x{1b}") == r"\x{1b}"


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | _TEXT, lambda inner: st.lists(inner, max_size=3)))
def test_json_for_a_terminal_is_the_same_value_and_drives_nothing(value: object) -> None:
    """JSON escaped for a terminal decodes to the same value and holds no control or bidi."""
    text = dumps(value, indent=2)
    shown = escape_json_controls(text)
    assert json.loads(shown) == json.loads(text)
    assert not any(_drives_a_terminal(char) for char in shown)


def test_a_terminal_stream_escapes_each_write_unless_verbatim() -> None:
    """What is written through the stand-in is escaped; a verbatim block is written as it is."""
    real = io.StringIO()
    stream = TerminalStream(real)
    assert stream.write("x\x1b[2J\n") == len("x\x1b[2J\n")
    with verbatim():
        stream.write("\r\x1b[2K")
    stream.writelines(["\u202e", "\n"])
    assert real.getvalue() == "x\\x{1b}[2J\n\r\x1b[2K\\x{202e}\n"
