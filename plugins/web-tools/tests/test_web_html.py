"""HTML to readable text with the plugin's own linear-time tokenizer."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nanobot_web_tools import html_to_text


def test_scripts_styles_and_markup_are_dropped() -> None:
    """Script and style bodies never reach the text; tags vanish and entities are decoded."""
    html = (
        "<html><head><title>T</title><style>p{}</style><script>alert('x')</script></head>"
        "<body><p>Fish &amp; chips</p><noscript>enable js</noscript></body></html>"
    )
    assert html_to_text(html) == "T\n\nFish & chips"


def test_blocks_become_lines_and_list_items_get_dashes() -> None:
    """Headings and paragraphs are separate lines; list items start with "- "."""
    html = "<h1>Title</h1><p>One   two\nthree</p><ul><li>a</li><li>b</li></ul>"
    assert html_to_text(html) == "Title\n\nOne two three\n\n- a\n\n- b"


def test_inline_elements_keep_words_together() -> None:
    """Inline tags (links, emphasis) do not split a sentence."""
    assert html_to_text('<p>Read <a href="/x">the <b>docs</b></a> now.</p>') == (
        "Read the docs now."
    )


def test_pre_keeps_its_layout() -> None:
    """Text inside <pre> keeps its line breaks and indentation."""
    html = "<p>code:</p><pre>def f():\n    return 1\n</pre>"
    assert html_to_text(html) == "code:\n\ndef f():\n    return 1"


def test_table_cells_share_a_line() -> None:
    """Cells of one table row end up on one line."""
    html = "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>d</td></tr></table>"
    assert html_to_text(html) == "a b\n\nc d"


def test_broken_html_still_gives_its_text() -> None:
    """Unclosed tags and a missing </head> do not swallow the body."""
    html = "<html><head><title>X<body><p>kept<div>also kept"
    text = html_to_text(html)
    assert "kept" in text
    assert "also kept" in text


def test_a_line_break_before_an_inline_tag_is_a_space() -> None:
    """A source line ending just before an inline tag still separates the two words."""
    html = '<p>Read the\n<a href="/docs">docs</a>\nfirst.</p>'
    assert html_to_text(html) == "Read the docs first."


def test_pre_in_a_crlf_page_keeps_its_lines_clean() -> None:
    """CR LF line ends inside <pre> become plain line breaks, with no stray spaces."""
    assert html_to_text("<pre>a\r\n  b\r\nc</pre>") == "a\n  b\nc"


def test_comments_declarations_and_cdata_are_dropped() -> None:
    """Comments (even holding ">"), doctype, processing instructions and CDATA give no text."""
    html = (
        "<!DOCTYPE html><?xml version='1.0'?><p>a<!-- x > y -->b<!---->c"
        "<![CDATA[ z > w ]]>d<!-->e</p>"
    )
    assert html_to_text(html) == "abcde"


def test_a_quoted_attribute_value_may_hold_a_greater_than_sign() -> None:
    """A ">" inside a quoted attribute value does not end the tag."""
    html = """<a title="a > b" data-x='c>d'>link</a> text"""
    assert html_to_text(html) == "link text"


def test_stray_angle_brackets_and_ampersands_are_text() -> None:
    """A "<" that starts no markup, and a bare "&", stay in the text."""
    assert html_to_text("<p>1 < 2 && 3 > 2, x <= y</p>") == "1 < 2 && 3 > 2, x <= y"


def test_markup_cut_off_by_the_end_of_the_page_is_dropped() -> None:
    """A tag, comment or quoted value still open at the end (a truncated page) gives no text."""
    assert html_to_text("<p>kept</p><a href") == "kept"
    assert html_to_text('<p>kept</p><a href="x>never closed</a> tail') == "kept"
    assert html_to_text("<p>kept</p><!-- open") == "kept"
    assert html_to_text("<p>kept</p><script>var a = 1") == "kept"
    assert html_to_text("<p>kept</") == "kept</"


def test_script_ends_at_its_end_tag_even_with_attributes() -> None:
    """A script body runs to "</script" followed by a space or ">", whatever it holds."""
    html = '<script>s = "</scripts><p>no</p>";</script foo>after'
    assert html_to_text(html) == "after"


def test_marked_sections_the_stdlib_parser_rejected_give_text() -> None:
    """Unknown "<![" sections are skipped like comments instead of failing an assertion."""
    assert html_to_text("<p>a<![ x") == "a"
    assert html_to_text("<![foo[ x ]]>after") == "after"
    assert html_to_text("<p>a<![if !IE]>b<![endif]>c</p>") == "abc"


def test_an_overlong_decimal_reference_is_a_replacement_character() -> None:
    """A numeric reference of thousands of digits decodes like any out-of-range one."""
    assert html_to_text("&#" + "9" * 5000 + ";x") == "\ufffdx"
    assert html_to_text("&#" + "0" * 5000 + "65;") == "A"
    assert html_to_text("&#1114112;&#00000065") == "\ufffdA"


def _best_cpu_time(html: str, repeat: int) -> float:
    best = math.inf
    for _ in range(5):
        start = time.process_time()
        for _ in range(repeat):
            html_to_text(html)
        best = min(best, time.process_time() - start)
    return best


@pytest.mark.parametrize(
    "unit", ["<a", "<!--", "</", "<?", "<a\n", "<![", "<a b='", "<a b=x ", "&#1", "<p>a<b>"]
)
def test_hostile_markup_takes_linear_time(unit: str) -> None:
    """Four times the page costs about four times the CPU time, on shapes that were quadratic."""
    small = unit * (40_000 // len(unit))
    html_to_text(small)
    repeat = max(1, math.ceil(0.005 / max(_best_cpu_time(small, 1), 1e-6)))
    per_char_big = _best_cpu_time(small * 4, repeat) / 4
    per_char_small = _best_cpu_time(small, repeat)
    # Linear gives a ratio near 1, quadratic near 4.
    assert per_char_big / per_char_small < 2.5


_MARKUP_HEAVY = st.text(alphabet=st.sampled_from(list("<>/!?-[]'\"= \n\r\t&#;xaApbCDATscript")))


@given(st.text() | _MARKUP_HEAVY)
def test_any_text_gives_text(html: str) -> None:
    """Whatever the page holds, the result is a string and nothing raises."""
    assert isinstance(html_to_text(html), str)


_WORD = st.text(alphabet="abcxyz019", min_size=1, max_size=6)
_INLINE_OR_BLOCK = st.sampled_from(
    ["p", "div", "a", "b", "span", "li", "h2", "td", "em", "section"]
)
_ATTRIBUTES = st.sampled_from(["", ' class="x > y"', " href='/a?b=1&c=2'", " id=plain", " hidden"])
_TREE = st.recursive(
    st.lists(_WORD, min_size=1, max_size=3).map(lambda words: [" " + " ".join(words) + " "]),
    lambda inner: st.tuples(_INLINE_OR_BLOCK, _ATTRIBUTES, st.lists(inner, max_size=3)).map(
        lambda t: [f"<{t[0]}{t[1]}>", *(part for child in t[2] for part in child), f"</{t[0]}>"]
    ),
    max_leaves=12,
)


@given(_TREE)
def test_well_formed_markup_gives_exactly_its_words(parts: list[str]) -> None:
    """Well-formed markup leaves no tag behind and keeps every word, in order."""
    html = "".join(parts)
    words = [w for part in parts if not part.startswith("<") for w in part.split()]
    text = html_to_text(html)
    assert "<" not in text
    assert [w for w in text.split() if w != "-"] == words  # "- " marks list items
