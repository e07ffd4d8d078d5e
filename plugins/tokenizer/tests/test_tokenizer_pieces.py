"""Cutting long text for the backend without changing the total count."""

from __future__ import annotations

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
