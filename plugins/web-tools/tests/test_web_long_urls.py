"""A URL the model chose, of any length, is quoted in `web_fetch`'s errors by its head and tail."""

from __future__ import annotations

import asyncio
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanobot_core import clip, quoted

from nanobot_web_tools import PinnedFetcher, WebFetch
from nanobot_web_tools.addresses import Resolver
from nanobot_web_tools.fetch import without_userinfo

#: The most characters an error of `web_fetch` takes, whatever URL the model gives: the URL
#: and at most two more values it holds (a host, a port), each cut to 200 characters.
ERROR_CHARS = 1_000

_OMITTED = re.compile(r"\[\.\.\. \d+ characters omitted \.\.\.\]")


def private(host: str, port: int) -> list[str]:
    """A resolver that answers every name with a private address: nothing is ever fetched."""
    return ["10.0.0.1"]


def unknown(host: str, port: int) -> list[str]:
    """A resolver that knows no name."""
    raise OSError("[Errno -2] Name or service not known")


def _error(url: str, resolver: Resolver = private) -> str:
    """The error `web_fetch` answers `url` with (the tool's own text, as the model reads it)."""
    result = asyncio.run(WebFetch(PinnedFetcher(resolver=resolver)).execute(url))
    assert result.is_error, str(result)[:300]
    return str(result)


LONG = 60_000  # under httpx's own limit of 65,536 characters, which is refused as too long


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://example.com/" + "a" * LONG + "END", "example.com resolves to 10.0.0.1"),
        ("http://" + "a" * LONG + ".com/", "resolves to 10.0.0.1, which is private"),
        ("http://localhost./" + "b" * LONG + "END", "localhost. names the loopback interface"),
        ("x" * LONG + "://example.com/", "only http and https URLs can be fetched, not 'xxx"),
        ("http://" + "/" * LONG + "END", "has no host"),
        ("http://example.com/" + "a" * LONG + "\x00", "Invalid non-printable ASCII character"),
        ("http://example.com:" + "9" * LONG + "/", "Invalid port: '999"),
        ("http://" + "\u0080" * 300 + "a" * LONG + ".com/", "Invalid IDNA hostname: '"),
        ("http://" + "a" * (LONG * 2), "URL too long"),
    ],
)
def test_each_error_quotes_a_long_url_by_its_ends(url: str, said: str) -> None:
    """Refused at each check, a 60,000-character URL is quoted cut, its two ends kept."""
    text = _error(url)
    assert text.startswith(f"Error: web_fetch refused {clip(url)}: ")
    assert said in text
    assert len(text) <= ERROR_CHARS
    assert _OMITTED.search(text)


def test_a_name_that_cannot_be_resolved_is_quoted_by_its_ends() -> None:
    """A long host name no resolver knows is named cut, with the resolver's reason."""
    host = "a." * (LONG // 2) + "com"
    text = _error(f"http://{host}/", resolver=unknown)
    assert text.endswith(f"cannot resolve {clip(host)}: [Errno -2] Name or service not known")
    assert len(text) <= ERROR_CHARS


def test_a_short_url_is_quoted_whole() -> None:
    """A URL that fits is quoted as it is, in each place an error names it."""
    text = _error("ftp://example.com/file")
    assert text == (
        "Error: web_fetch refused ftp://example.com/file: "
        "only http and https URLs can be fetched, not 'ftp'"
    )
    assert (
        _error("http:///")
        == f"Error: web_fetch refused http:///: the URL {quoted('http:///')} has no host"
    )


_PIECES = st.text(alphabet="ab.:/%?#@-_\x00\u00e9\u0080", min_size=1, max_size=5)
_HUGE = st.tuples(_PIECES, st.integers(min_value=1, max_value=20_000)).map(lambda p: p[0] * p[1])


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["", "http://", "https://", "ftp://", "http://localhost/", "http://a.com:"]),
    _HUGE,
    st.sampled_from(["", "/", ".com/", "\x00", "/END"]),
)
def test_the_error_for_any_url_is_bounded_and_names_it(prefix: str, middle: str, end: str) -> None:
    """Whatever URL the model gives, the error quotes it cut and stays within the bound."""
    url = prefix + middle + end
    text = _error(url)
    shown = clip(without_userinfo(url))  # the URL's "user:password@", if any, shown as "***@"
    assert text.startswith(f"Error: web_fetch refused {shown}: ") or text.startswith(
        f"Error: web_fetch failed for {shown}: "
    )
    assert len(text) <= ERROR_CHARS, text[:500]
