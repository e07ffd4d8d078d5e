"""The one rule for text shown to a person: on a terminal, control characters are shown escaped.

The CLI prints text that a model, a tool, a web page, an MCP server or a plugin
controls. Written to a terminal as it is, such text drives the terminal: OSC 52
writes the clipboard, OSC 8 makes links, cursor moves and clear-screen hide or
fake earlier lines, a bidirectional override (U+202E) makes a line read
otherwise. So where the stream written to is a terminal, every control
character but newline and tab (C0, DEL, C1) and every bidirectional control is
written as an escape (`escape_controls`): ``\\x{1b}``, ``\\x{202e}``. Nothing
else changes, but a backslash that would read as one of those escapes, which is
written ``\\x{5c}``: the escaping is injective, and `unescape_controls` gives the
text back. A pipe or a file gets the bytes as they are (scripts, session
exports and ``--output`` round-trip byte for byte).

JSON for a person (``--json`` on a terminal) keeps its value: JSON escapes
C0 itself, and DEL, C1 and the bidirectional controls, which it leaves raw,
are written as JSON's own ``\\u`` escapes (`escape_json_controls`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = [
    "ESCAPED_CHARACTERS",
    "TerminalStream",
    "escape_controls",
    "escape_json_controls",
    "escape_on_terminals",
    "is_terminal",
    "unescape_controls",
    "verbatim",
]

# C0 but tab and newline, DEL, C1.
_CONTROLS = [chr(c) for c in (*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))]
# Unicode's bidirectional formatting characters (UAX #9): the marks, embeddings,
# overrides and isolates.
_BIDI = [chr(c) for c in (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))]
# Bytes 0x80-0x9F of a file name that is not UTF-8, held as lone surrogates: stdout writes
# them back as the raw bytes, which are C1 controls to a terminal that reads 8-bit C1.
_RAW_C1 = [chr(c) for c in range(0xDC80, 0xDCA0)]

#: Every character written as an escape on a terminal (besides a backslash that would read
#: as an escape).
ESCAPED_CHARACTERS = frozenset(_CONTROLS + _BIDI + _RAW_C1)


def _form(char: str) -> str:
    # Braces, unlike Python's repr (``\\x1b``): a message quoting a value by its repr
    # shows as it did, and cannot be taken for a character the escaping replaced.
    return f"\\x{{{ord(char):02x}}}"


_FORMS = {char: _form(char) for char in sorted(ESCAPED_CHARACTERS)}
_FORMS["\\"] = _form("\\")
_DECODED = {form: char for char, form in _FORMS.items()}
# A backslash is escaped only where it would read as an escape: followed by what
# follows the backslash of one (``x{1b}``, ``x{202e}``, ``x{5c}``).
_ESCAPED = re.compile(
    "["
    + "".join(re.escape(char) for char in sorted(ESCAPED_CHARACTERS))
    + "]|\\\\(?="
    + "|".join(re.escape(form[1:]) for form in sorted(_DECODED))
    + ")"
)
_ESCAPES = re.compile("|".join(re.escape(form) for form in sorted(_DECODED)))
_JSON_RAW = re.compile("[\x7f-\x9f" + "".join(_BIDI) + "]")

_VERBATIM: ContextVar[bool] = ContextVar("nanobot_terminal_verbatim", default=False)


def escape_controls(text: str) -> str:
    """`text` as shown on a terminal: control characters but newline and tab, and the
    bidirectional controls, as ``\\x{HH}``, their code point in lower-case hex.

    A backslash followed by what would read as one of those escapes is written
    ``\\x{5c}``; any other character is left as it is. `unescape_controls` undoes it.
    """
    return _ESCAPED.sub(lambda match: _FORMS[match.group()], text)


def unescape_controls(text: str) -> str:
    """The text `escape_controls` was given, from what it returned."""
    return _ESCAPES.sub(lambda match: _DECODED[match.group()], text)


def escape_json_controls(text: str) -> str:
    """JSON text `text` with DEL, C1 and the bidirectional controls as JSON ``\\uHHHH`` escapes.

    Those characters can only be inside JSON strings, where the escape stands for
    the same character: the text still decodes to the same value.
    """
    return _JSON_RAW.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def is_terminal(stream: Any) -> bool:
    """Whether `stream` writes to a terminal (False for None, a closed or odd stream)."""
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, OSError, ValueError):
        return False


@contextmanager
def verbatim() -> Iterator[None]:
    """Within the block, this thread's writes to a `TerminalStream` are not escaped.

    For text that is safe already and must stay as it is: JSON escaped by
    `escape_json_controls`, the CLI's own control sequences (the live progress line).
    """
    token = _VERBATIM.set(True)
    try:
        yield
    finally:
        _VERBATIM.reset(token)


class TerminalStream:
    """Stands in for a text stream on a terminal: what is written is shown escaped.

    Each write is escaped on its own (a message and its line end are written
    whole). Not an ``io`` subclass: the real stream answers ``encoding``,
    ``buffer``, ``fileno``, ``isatty``; a write of bytes fails as on the real
    stream (click tells text streams from binary ones so).
    """

    def __init__(self, real: Any) -> None:
        self.real = real

    def write(self, text: str) -> int:
        if _VERBATIM.get():
            written: int = self.real.write(text)
            return written
        self.real.write(escape_controls(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # encoding, buffer, flush, fileno, isatty...
        return getattr(self.real, name)


def _shown(stream: Any) -> Any:
    """`stream` behind a `TerminalStream` when it is a terminal, once."""
    if isinstance(stream, TerminalStream) or not is_terminal(stream):
        return stream
    return TerminalStream(stream)


def escape_on_terminals() -> None:
    """Show what the process writes to stdout and stderr escaped, where each is a terminal.

    From then on, for the life of the process (as the stand-in for stdout of
    `nanobot_core._containment`, which the escaping goes beneath: what plugin
    code prints is logged, escaped once, not shown).
    """
    from nanobot_core._containment import guard_stdout

    guard_stdout(through=_shown)
    sys.stderr = _shown(sys.stderr)
