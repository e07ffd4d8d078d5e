"""Cutting long text for the backend without changing the total count."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_tokenizer.segments import pieces_for_counting, safe_cut


def test_short_text_is_one_piece() -> None:
    """Text within the limit is passed through whole."""
    assert list(pieces_for_counting("abc\ndef", limit=10)) == ["abc\ndef"]


def test_cuts_land_after_a_line_break_before_a_word() -> None:
    """A cut goes just after the last line break that is followed by a letter or digit."""
    text = "one\n two\nthree\n-four"
    assert safe_cut(text, 0, len(text)) == text.index("three")


def test_without_a_safe_place_the_cut_is_at_the_limit() -> None:
    """With no line break before a word, the piece is cut at exactly the limit."""
    assert safe_cut("x" * 20, 0, 10) == 10
    assert list(pieces_for_counting("x" * 25, limit=10)) == ["x" * 10, "x" * 10, "x" * 5]


@settings(derandomize=True, deadline=None, max_examples=200)
@given(st.text(alphabet="ab1 \n.-/é\t", max_size=300), st.integers(min_value=2, max_value=40))
def test_pieces_rebuild_the_text_within_the_limit(text: str, limit: int) -> None:
    """Pieces are never longer than the limit, never empty (unless the text is) and join back."""
    pieces = list(pieces_for_counting(text, limit=limit))
    assert "".join(pieces) == text
    assert all(len(piece) <= limit for piece in pieces)
    assert all(pieces) or pieces == [""]


def _cut_by_definition(text: str, start: int, end: int) -> int:
    """safe_cut as its docstring words it, one position at a time."""
    for cut in range(end - 1, start, -1):
        if text[cut - 1] == "\n" and text[cut].isalnum():
            return cut
    return end


@settings(derandomize=True, deadline=None, max_examples=500)
@given(
    st.text(
        alphabet=st.one_of(st.sampled_from("\n\n\r a1_²é日\u0301-"), st.characters()),
        min_size=1,
        max_size=200,
    ),
    st.data(),
)
def test_the_cut_is_the_last_line_break_before_a_letter_or_digit(
    text: str, data: st.DataObject
) -> None:
    """For any text and span, the cut is where the docstring's definition puts it."""
    start = data.draw(st.integers(min_value=0, max_value=len(text) - 1))
    end = data.draw(st.integers(min_value=start + 1, max_value=len(text)))
    assert safe_cut(text, start, end) == _cut_by_definition(text, start, end)


def test_a_letter_or_digit_is_what_the_cut_looks_for_in_every_code_point() -> None:
    """Each code point after a line break allows a cut exactly when `str.isalnum` is true of it."""
    allowed = [cp for cp in range(0x110000) if safe_cut(f"ab\n{chr(cp)}c", 0, 5) == 3]
    assert allowed == [cp for cp in range(0x110000) if chr(cp).isalnum()]


_HIGH, _LOW = "\ud83d", "\ude00"  # the halves of U+1F600, as Python code can hold them apart


def test_a_forced_cut_does_not_part_a_surrogate_pair() -> None:
    """A cut at the limit that would fall between the halves of a pair goes before the pair."""
    text = "x" * 9 + _HIGH + _LOW + "y"
    assert list(pieces_for_counting(text, limit=10)) == ["x" * 9, _HIGH + _LOW + "y"]


@settings(derandomize=True, deadline=None, max_examples=300)
@given(
    st.lists(st.sampled_from(["a", " ", "\n", "1", _HIGH + _LOW, _HIGH, _LOW])).map("".join),
    st.integers(min_value=2, max_value=12),
)
def test_no_piece_ends_inside_a_surrogate_pair(text: str, limit: int) -> None:
    """Whatever the text (lone halves too), no piece ends with a high surrogate whose low one
    starts the next piece, and the pieces still join back within the limit."""
    pieces = list(pieces_for_counting(text, limit=limit))
    assert "".join(pieces) == text
    assert all(0 < len(piece) <= limit for piece in pieces) or pieces == [""]
    for piece, after in itertools.pairwise(pieces):
        assert not (piece.endswith(_HIGH) and after.startswith(_LOW))
