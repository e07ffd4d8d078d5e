"""Reading a history from a file (JSONL or a JSON array) and writing one atomically.

Reading JSONL is lenient: a line that is not JSON is left out and reported by
its number, bytes that are not UTF-8 become U+FFFD. A history that does not
parse at all raises `HistoryFormatError` naming the position: a file that starts
with ``[`` but is not one JSON array (a trailing comma, say), or JSONL in which
no line is JSON. What the entries hold is not judged here; that is governance's job.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import attrs

from nanobot_core._atomic import write_atomic
from nanobot_core._json_boundary import loads
from nanobot_core._jsonl import JSON_WHITESPACE, encode_lines, is_blank
from nanobot_core._logging import get_logger
from nanobot_core.errors import SessionError

__all__ = ["HistoryFormatError", "LoadedHistory", "parse_history", "write_jsonl_atomic"]

log = get_logger(__name__)

Shape = Literal["jsonl", "json-array", "json-object"]


class HistoryFormatError(SessionError, ValueError):
    """The history does not parse (the message names the line and column), or holds a
    message no JSON can hold (`Governor.govern`: the message names its index).

    A `SessionError` (the file given as a session is invalid) and, as before, a
    ``ValueError``.
    """


@attrs.frozen
class LoadedHistory:
    """The entries read from a history file and the lines that had to be left out."""

    messages: list[Any]
    shape: Shape
    left_out: list[tuple[int, str]] = attrs.field(factory=list)  # (line number, why)
    not_utf8: list[int] = attrs.field(factory=list)  # lines whose bad bytes became U+FFFD
    #: The line of the file each entry of `messages` is on (JSONL; empty for one JSON document).
    lines: list[int] = attrs.field(factory=list)

    def problems(self, source: str | None = None) -> list[str]:
        """One line per problem, for the report: each begins ``SOURCE:LINE:`` (an editor opens
        that) when `source` names the file, ``line N:`` otherwise."""

        def where(number: int) -> str:
            return f"{source}:{number}" if source is not None else f"line {number}"

        notes = [
            f"{where(n)}: bytes that are not UTF-8 replaced with U+FFFD" for n in self.not_utf8
        ]
        return notes + [f"{where(n)}: left out, {why}" for n, why in self.left_out]


def _decode(data: bytes) -> tuple[str, list[int]]:
    """The text of `data`, and the numbers of the lines whose bytes were not UTF-8."""
    data = data.removeprefix(b"\xef\xbb\xbf")
    try:
        return data.decode("utf-8"), []
    except UnicodeDecodeError:
        pass
    lines = data.split(b"\n")
    bad = []
    for number, line in enumerate(lines, start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            bad.append(number)
    return data.decode("utf-8", "replace"), bad


def _loads(text: str) -> Any:
    """One value through the JSON boundary (limits; replacements are logged)."""
    decoded = loads(text)
    if decoded.replaced:
        log.warning("history decoded with replacements", replaced=list(decoded.replaced))
    return decoded.value


def _whole_document(text: str) -> tuple[Shape, list[Any]] | None:
    """The messages when `text` is one JSON array, or one object with a "messages" array."""
    start = text.lstrip(JSON_WHITESPACE)[:1]
    if start not in ("[", "{"):
        return None
    try:
        document = _loads(text)
    except ValueError as exc:
        if start == "[":
            # Lines of JSONL are objects: a "[" opens a JSON array, so it must be one.
            raise HistoryFormatError(f"the JSON array does not parse: {exc}") from None
        return None
    if isinstance(document, list):
        return "json-array", document
    if isinstance(document, dict) and isinstance(document.get("messages"), list):
        return "json-object", document["messages"]
    return None


def parse_history(data: bytes) -> LoadedHistory:
    """Entries of a JSONL file (one per line), a JSON array, or an object with "messages"."""
    text, not_utf8 = _decode(data)
    whole = _whole_document(text)
    if whole is not None:
        return LoadedHistory(whole[1], whole[0], [], not_utf8)
    messages: list[Any] = []
    left_out: list[tuple[int, str]] = []
    numbers: list[int] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if is_blank(line):  # the session stores' rule: JSON's whitespace alone
            continue
        try:
            messages.append(_loads(line))
        except ValueError as exc:
            left_out.append((number, str(exc)))
        else:
            numbers.append(number)
    if left_out and not messages:
        number, why = left_out[0]
        raise HistoryFormatError(f"no line is JSON; line {number}: {why}")
    return LoadedHistory(messages, "jsonl", left_out, not_utf8, numbers)


def write_jsonl_atomic(path: Path, messages: Iterable[Any]) -> None:
    """Write one JSON value per line to `path`, atomically (see `nanobot_core._atomic`)."""
    write_atomic(path, encode_lines(messages))
