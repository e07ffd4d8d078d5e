"""HTML to readable text with the stdlib parser."""

from __future__ import annotations

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
