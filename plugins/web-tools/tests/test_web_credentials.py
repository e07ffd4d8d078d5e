"""Credentials in a URL (``user:password@``) never come back in what `web_fetch` answers.

What counts as credentials is what httpx, which fetches, reads as the URL's userinfo:
the masking of `without_userinfo` must hide all of it, whatever form the URL takes.
Forms a browser would read as credentials but httpx does not (``http:/u:p@host``,
``http:u:p@host``, ``http:\\\\u:p@host``: no authority for httpx, the rest is a path)
are refused before anything is sent, since they do not begin with ``http://``.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nanobot_web_tools import PinnedFetcher, WebFetch

#: A password's mark: no other part of a generated URL holds an upper-case letter.
_MARK = "Secret"

#: Characters of the generated parts, among them those that end or split an authority.
_PIECE = st.text(st.sampled_from(list("az09:@/\\?#%40[]. é-_~!$&'()*+,;=\t")), max_size=8)


def private(host: str, port: int) -> list[str]:
    """A resolver that answers every name with a private address: nothing is ever fetched."""
    return ["10.0.0.1"]


def _answer(url: str) -> str:
    """What `web_fetch` answers `url` with, as the model reads it."""
    return str(asyncio.run(WebFetch(PinnedFetcher(resolver=private)).execute(url)))


def _userinfo(url: str) -> str:
    """The userinfo httpx reads in `url` ('' for none, or for a URL it refuses to parse)."""
    try:
        return httpx.URL(url).userinfo.decode("ascii")
    except httpx.InvalidURL:
        return ""


@settings(max_examples=300, deadline=None)
@given(
    scheme=st.sampled_from(["http", "HTTP", "https", "HtTpS", "ftp", ""]),
    separator=st.sampled_from(["://", ":/", ":", ":\\\\", ":///", "//", ":/\\"]),
    user=_PIECE,
    password=_PIECE,
    host=st.sampled_from(["example.com", "10.0.0.1", "[::1]", "", "h@x"]),
    rest=_PIECE,
)
@example(scheme="http", separator=":/", user="user", password="", host="host", rest="/")
@example(scheme="http", separator=":", user="user", password="", host="host", rest="")
@example(scheme="http", separator=":\\\\", user="u", password="", host="h", rest="/")
@example(scheme="HTTP", separator="://", user="u", password="", host="h", rest="/")
@example(scheme="http", separator="://", user="u%40x", password="p%40w", host="h", rest="/")
@example(scheme="http", separator="://", user="a@b", password="@", host="h", rest="\\@x/")
def test_no_password_httpx_reads_ever_comes_back(
    scheme: str, separator: str, user: str, password: str, host: str, rest: str
) -> None:
    """Whatever the URL's form, a password httpx reads in it is in no answer of the tool."""
    url = f"{scheme}{separator}{user}:{_MARK}{password}@{host}{rest}"
    answer = _answer(url)
    assert answer.startswith("Error: web_fetch refused")  # nothing was fetched
    if _MARK in _userinfo(url):
        assert _MARK not in answer


@pytest.mark.parametrize(
    "url", ["http:/user:Secret@host/", "http:user:Secret@host", "http:\\\\user:Secret@host/"]
)
def test_a_url_httpx_reads_no_credentials_in_is_refused_before_it_is_sent(url: str) -> None:
    """A form a browser reads as holding credentials, and httpx as a path, is refused for not
    beginning with http://: httpx has no password to send, and none is sent."""
    assert _userinfo(url) == ""
    assert _answer(url).endswith(": the URL must begin with http:// or https://")
