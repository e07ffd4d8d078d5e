"""Readable text from HTML, with a small tokenizer of our own.

Deliberately minimal: drop what is never read (scripts, styles, embedded
documents), turn block elements (and the title) into lines and list items
into "- " lines, keep ``<pre>`` text as it is, collapse the rest of the
whitespace. No layout engine, no readability heuristics.

The page comes from outside, so the tokenizer makes one left-to-right pass and
each of its regular expressions can only move forward (possessive quantifiers,
no backtracking): the time is linear in the page on any input. Markup is read
much as a browser reads it: a quoted attribute value may hold ``>``; comments,
``<!...>`` declarations, ``<?...>`` instructions and CDATA sections are dropped;
``<`` that starts no markup is text; script and style bodies run to their end
tag. A tag, comment or quoted attribute value that is still open when the page
ends (a cut-off page) is dropped with the rest of the page, as a browser does.
"""

from __future__ import annotations

import re
from html import unescape

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
_RAW_TEXT = frozenset(["script", "style"])  # their bodies are text up to the end tag
_SPACES = re.compile(r"[ \t\r\f\v\u00a0]+")
_BLANK_LINES = re.compile(r"\n{3,}")

# Inside <pre>, line breaks and spaces are content: hide them from the collapsing below.
_PROTECT = str.maketrans({"\n": "\x00", " ": "\x01", "\t": "\x02"})
_RESTORE = str.maketrans({"\x00": "\n", "\x01": " ", "\x02": "\t"})
_DROP_MARKERS = str.maketrans({"\x00": None, "\x01": None, "\x02": None})
# Outside <pre>, a line break in the source is just a space (str.splitlines' line breaks).
_LINE_BREAKS = str.maketrans(dict.fromkeys("\n\v\f\x1c\x1d\x1e\x85\u2028\u2029", " "))

# Where markup may start: "<" then a letter, "/", "!" or "?"; any other "<" is text.
_MARKUP_START = re.compile(r"<[a-zA-Z/!?]")
# The rest of a start or end tag after its first letter, up to and with its ">": the
# name, then attributes whose quoted values may hold ">". Every quantifier is
# possessive, so a match costs the length it scans; it fails only when the page ends
# inside the tag (an unclosed quote runs to the end, as in a browser).
_TAG_REST = re.compile(
    r"""
    (?P<name>[^\t\n\f\r />]*+)
    (?:
        [\t\n\f\r /]*+
        [^\t\n\f\r />][^\t\n\f\r />=]*+
        (?:
            [\t\n\f\r ]*+=[\t\n\f\r ]*+
            (?:"[^"]*+(?:"|\Z)|'[^']*+(?:'|\Z)|[^\t\n\f\r >]++)?+
        )?+
    )*+
    (?P<close>[\t\n\f\r /]*+)>
    """,
    re.VERBOSE,
)
_COMMENT_END = re.compile(r"--!?>")
_RAW_TEXT_END = {
    name: re.compile(rf"</{name}(?=[\t\n\f\r />])", re.IGNORECASE | re.ASCII) for name in _RAW_TEXT
}
# Decimal character references too long for int() (it refuses over 4300 digits):
# past seven digits (leading zeros aside) they are all beyond Unicode.
_LONG_DECIMAL_REF = re.compile(r"&#([0-9]{8,}+);?")


def _short_decimal_ref(match: re.Match[str]) -> str:
    digits = match.group(1).lstrip("0")
    return "&#xFFFD;" if len(digits) > 7 else f"&#{digits or '0'};"


def _decode(text: str) -> str:
    """Character references decoded, as html.unescape does, on text of any length."""
    if "&#" in text:
        text = _LONG_DECIMAL_REF.sub(_short_decimal_ref, text)
    return unescape(text)


class _TextCollector:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.skip_depth = 0
        self.pre_depth = 0

    def start_tag(self, tag: str) -> None:
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

    def empty_tag(self, tag: str) -> None:
        """A self-closing tag (``<br/>``): it opens nothing."""
        if tag in _BLOCKS:
            self.parts.append("\n")

    def end_tag(self, tag: str) -> None:
        if tag in _SKIPPED and self.skip_depth:
            self.skip_depth -= 1
        if tag == "pre" and self.pre_depth:
            self.pre_depth -= 1
        if tag in _BLOCKS:
            self.parts.append("\n")

    def data(self, data: str) -> None:
        if not self.skip_depth:
            data = data.translate(_DROP_MARKERS)
            self.parts.append(
                data.translate(_PROTECT) if self.pre_depth else data.translate(_LINE_BREAKS)
            )


def _tokenize(html: str, out: _TextCollector) -> None:
    """Feed `out` the tags and text of `html`, in one pass that never moves back."""
    end = len(html)
    i = 0
    while i < end:
        markup = _MARKUP_START.search(html, i)
        if markup is None:
            break
        j = markup.start()
        if j > i:
            out.data(_decode(html[i:j]))
        kind = html[j + 1]
        if kind == "!" or kind == "?":
            i = _skip_declaration(html, j)
        elif kind != "/":
            i = _start_tag(html, j, out)
        elif j + 2 == end:  # "</" ending the page is text
            out.data("</")
            i = end
        elif html[j + 2] == ">":  # "</>" is nothing
            i = j + 3
        elif html[j + 2].isascii() and html[j + 2].isalpha():
            tag = _TAG_REST.match(html, j + 2)
            if tag is None:
                return
            out.end_tag(tag.group("name").lower())
            i = tag.end()
        else:  # "</" and no name: a bogus comment up to ">"
            i = _past(html, ">", j + 2)
    if i < end:
        out.data(_decode(html[i:]))


def _start_tag(html: str, j: int, out: _TextCollector) -> int:
    """Handle the start tag at `j`; where the page goes on (its end when the tag is cut off)."""
    tag = _TAG_REST.match(html, j + 1)
    if tag is None:
        return len(html)
    name = tag.group("name").lower()
    i = tag.end()
    if tag.group("close").endswith("/"):
        out.empty_tag(name)
        return i
    out.start_tag(name)
    if name not in _RAW_TEXT:
        return i
    # Script and style bodies are raw text (no tags, no references) up to </script ...>.
    closing = _RAW_TEXT_END[name].search(html, i)
    if closing is None:
        out.data(html[i:])
        return len(html)
    out.data(html[i : closing.start()])
    tag = _TAG_REST.match(html, closing.start() + 2)
    if tag is None:
        return len(html)
    out.end_tag(name)
    return tag.end()


def _skip_declaration(html: str, j: int) -> int:
    """Skip the comment, CDATA section, ``<!...>`` or ``<?...>`` at `j`; where the page goes on."""
    if html.startswith("<!--", j):
        if html.startswith(">", j + 4):  # "<!-->" is an empty comment
            return j + 5
        if html.startswith("->", j + 4):  # and so is "<!--->"
            return j + 6
        closing = _COMMENT_END.search(html, j + 4)
        return len(html) if closing is None else closing.end()
    if html[j + 2 : j + 9].upper() == "[CDATA[":
        return _past(html, "]]>", j + 9)
    return _past(html, ">", j + 2)


def _past(html: str, closing: str, start: int) -> int:
    """Where the page goes on after the next `closing` from `start` (its end when none)."""
    found = html.find(closing, start)
    return len(html) if found < 0 else found + len(closing)


def html_to_text(html: str) -> str:
    """The readable text of an HTML document or fragment."""
    collector = _TextCollector()
    # As a browser does before anything else: CR LF and lone CR are line feeds.
    _tokenize(html.replace("\r\n", "\n").replace("\r", "\n"), collector)
    text = "".join(collector.parts)
    lines = (_SPACES.sub(" ", line).strip() for line in text.split("\n"))
    text = "\n".join(lines).translate(_RESTORE)
    return _BLANK_LINES.sub("\n\n", text).strip()
