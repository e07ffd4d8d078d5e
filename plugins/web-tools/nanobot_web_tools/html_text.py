"""Readable text from HTML, with the standard library's tolerant parser.

Deliberately minimal: drop what is never read (scripts, styles, embedded
documents), turn block elements (and the title) into lines and list items
into "- " lines, keep ``<pre>`` text as it is, collapse the rest of the
whitespace. No layout engine, no readability heuristics.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

__all__ = ["html_to_text"]

_SKIPPED = frozenset(
    [
        "script",
        "style",
        "noscript",
        "template",
        "svg",
        "math",
        "iframe",
        "object",
        "canvas",
        "select",
    ]
)
_BLOCKS = frozenset(
    [
        "address",
        "article",
        "aside",
        "blockquote",
        "body",
        "br",
        "caption",
        "dd",
        "details",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hr",
        "li",
        "main",
        "nav",
        "ol",
        "p",
        "pre",
        "section",
        "summary",
        "table",
        "title",
        "tr",
        "ul",
    ]
)
_SPACES = re.compile(r"[ \t\r\f\v\u00a0]+")
_BLANK_LINES = re.compile(r"\n{3,}")

# Inside <pre>, line breaks and spaces are content: hide them from the collapsing below.
_PROTECT = str.maketrans({"\n": "\x00", " ": "\x01", "\t": "\x02"})
_RESTORE = str.maketrans({"\x00": "\n", "\x01": " ", "\x02": "\t"})
_DROP_MARKERS = str.maketrans({"\x00": None, "\x01": None, "\x02": None})


class _TextCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip_depth = 0
        self.pre_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED:
            self.skip_depth += 1
        if tag == "pre":
            self.pre_depth += 1
        if tag in _BLOCKS:
            self.parts.append("\n")
        if tag == "li":
            self.parts.append("- ")
        elif tag in ("td", "th"):
            self.parts.append(" ")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED and self.skip_depth:
            self.skip_depth -= 1
        if tag == "pre" and self.pre_depth:
            self.pre_depth -= 1
        if tag in _BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.skip_depth:
            data = data.translate(_DROP_MARKERS)
            # A line break in HTML source is just a space; only <pre> keeps it.
            self.parts.append(
                data.translate(_PROTECT) if self.pre_depth else " ".join(data.splitlines())
            )


def html_to_text(html: str) -> str:
    """The readable text of an HTML document or fragment."""
    collector = _TextCollector()
    collector.feed(html)
    collector.close()
    text = "".join(collector.parts)
    lines = (_SPACES.sub(" ", line).strip() for line in text.replace("\r\n", "\n").split("\n"))
    text = "\n".join(lines).translate(_RESTORE)
    return _BLANK_LINES.sub("\n\n", text).strip()
