"""The one JSON-lines module: how a JSONL file is split into lines and written as lines.

Used by the session store, the history reader and writer and the CLI, so every
JSONL file the project reads or writes follows the same framing: UTF-8, one JSON
value per line, ``\\n`` endings, blank lines (`is_blank`: JSON's own whitespace
alone) skipped but counted, an unterminated last line kept apart (it may be
torn). A UTF-8 byte-order mark at the very start of a file (editors on Windows
write one) is no part of its first line; anywhere else it is a character of its
line, as JSON has it. Each value goes through the JSON boundary
(`nanobot_core._json_boundary`), which owns the limits and replacements.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from nanobot_core._json_boundary import dumps

__all__ = ["BOM", "JSON_WHITESPACE", "encode_lines", "is_blank", "split_lines", "without_bom"]

#: The UTF-8 byte-order mark.
BOM = b"\xef\xbb\xbf"

#: JSON's own whitespace (RFC 8259: space, tab, line feed, carriage return): all a blank
#: line may hold. Other whitespace (a no-break space, U+2028, a form feed) is no JSON
#: whitespace, so a line of it is neither blank nor JSON.
JSON_WHITESPACE = " \t\n\r"
_JSON_WHITESPACE_BYTES = JSON_WHITESPACE.encode("ascii")


def is_blank(line: bytes | str) -> bool:
    """Whether `line` holds nothing but JSON's whitespace: a blank line, skipped.

    The one rule for every JSON-lines reader (the session stores' files, `govern`'s
    history), so that a line one reader skips is never one another reports as invalid.
    """
    if isinstance(line, bytes):
        return not line.strip(_JSON_WHITESPACE_BYTES)
    return not line.strip(JSON_WHITESPACE)


def split_lines(data: bytes) -> tuple[list[tuple[int, bytes]], tuple[int, bytes] | None]:
    """The complete non-blank lines of `data` with their 1-based numbers, and the unterminated tail.

    The tail is ``None`` when `data` ends with a newline (or holds only blanks after it).
    A byte-order mark that starts `data` is left out of line 1 (`without_bom`).
    """
    lines = without_bom(data).split(b"\n")
    tail = lines.pop()
    complete = [(n, raw) for n, raw in enumerate(lines, start=1) if not is_blank(raw)]
    return complete, (None if is_blank(tail) else (len(lines) + 1, tail))


def without_bom(data: bytes) -> bytes:
    """`data` without the byte-order mark it starts with, if any (only there: one elsewhere
    is the character U+FEFF of its line, which JSON refuses outside a string)."""
    return data.removeprefix(BOM)


def encode_lines(
    values: Iterable[Any], *, separators: tuple[str, str] | None = None
) -> Iterator[bytes]:
    """Each of `values` as one strict JSON line in UTF-8 (through the JSON boundary)."""
    for value in values:
        yield (dumps(value, separators=separators) + "\n").encode("utf-8")
