"""Cutting long text into pieces whose token counts add up to the count of the whole.

The tokenizer backend refuses a single call that yields more than 200 000
tokens. A token covers at least one UTF-8 byte and a character is at most
four, so a piece of 50 000 characters always stays under that limit.

Where the text is cut matters for exactness. Both cl100k and o200k split text
into pre-tokens with a regex before merging bytes, and no pre-token ever runs
from a line break into a following letter or digit; so cutting right there
changes nothing, and the counts of the pieces add up exactly. Only text with
no such place in 50 000 characters (one enormous line) is cut elsewhere, which
can shift the total by a token or two per cut; never between the two halves of a
surrogate pair (a character past U+FFFF that Python code built from two): the
backend counts each half apart, as a replacement character, which shifted the
total by 3 tokens in a case measured.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["MAX_PIECE_CHARS", "pieces_for_counting", "safe_cut"]

MAX_PIECE_CHARS = 50_000
# A line break before a letter or digit (`[^\W_]` is what `str.isalnum` is true of), the
# last one in the span matched: `.*` runs to the end of the span and backs off in C. A
# loop in Python over the line breaks took ten times what counting the text did on one
# of blank lines.
_LAST_SAFE_PLACE = re.compile(r".*\n(?=[^\W_])", re.DOTALL)


def safe_cut(text: str, start: int, end: int) -> int:
    """The last position in (start, end] just after a line break and before a letter or digit.

    Returns `end` when there is none.
    """
    newline = text.rfind("\n", start, end - 1)
    if newline < 0:  # no line break at all: found without a regex
        return end
    found = _LAST_SAFE_PLACE.match(text, start, newline + 2)
    return found.end() if found is not None else end


def _splits_a_pair(text: str, cut: int) -> bool:
    """Whether cutting `text` at `cut` parts a high surrogate from the low one after it."""
    return "\ud800" <= text[cut - 1] <= "\udbff" and "\udc00" <= text[cut] <= "\udfff"


def pieces_for_counting(text: str, limit: int = MAX_PIECE_CHARS) -> Iterator[str]:
    """Split `text` into pieces of at most `limit` characters, cut at safe places when possible.

    A cut never parts the two halves of a surrogate pair (with `limit` above 1).
    """
    start = 0
    while len(text) - start > limit:
        cut = safe_cut(text, start, start + limit)
        if cut - 1 > start and _splits_a_pair(text, cut):
            cut -= 1
        yield text[start:cut]
        start = cut
    yield text[start:]
