"""Settings an HTTP provider cannot work without, checked before the first request.

A fault here cannot be cured by retrying, so it is a `ConfigError` naming the
setting (the CLI exits 2): a ``provider.base_url`` that is not an http(s) URL
the HTTP client can send to (port 0, or a ``?query`` or ``#fragment`` the API
path would be appended after, included), a ``provider.api_key`` an HTTP header
cannot carry (a line break, a control or non-ASCII character, a space at either
end: a key pasted with more than the key), and a remote server with no
``provider.api_key``.
A server on this machine or on a private network (Ollama, vLLM, llama.cpp)
needs no key; a remote one that needs none takes any placeholder, such as
``NANOBOT_API_KEY=none``.

`check_endpoint` is public (``nanobot_core.providers.check_endpoint``): the
built-in ``openai`` provider and provider plugins (``anthropic``) call it when
they are built, each with the hints that name its own flags and variables.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from urllib.parse import urlsplit

from nanobot_core.config import named_sources, source_of
from nanobot_core.errors import ConfigError
from nanobot_core.providers.http import without_credentials

__all__ = ["check_endpoint", "is_local_host", "is_openai_api"]

_LOCAL_NAMES = ("localhost", "localhost.localdomain")
#: The host of OpenAI's API (the core's default base URL); its regional ones
#: (``eu.api.openai.com``) end in ``.`` and it.
_OPENAI_HOST = "api.openai.com"


def is_local_host(host: str) -> bool:
    """Whether `host` is this machine or a private-network address (no key expected)."""
    name = host.strip("[]").lower()
    if name in _LOCAL_NAMES or name.endswith((".localhost", ".local")):
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def is_openai_api(base_url: str) -> bool:
    """Whether `base_url` is on OpenAI's API: its host is ``api.openai.com`` or a regional
    ``*.api.openai.com``, in any case, with or without a fully qualified name's final dot.

    False for a string that is not a URL (`check_endpoint` says what is wrong with it).
    """
    try:
        host = (urlsplit(base_url).hostname or "").rstrip(".")
    except ValueError:
        return False
    return host == _OPENAI_HOST or host.endswith("." + _OPENAI_HOST)


def check_endpoint(
    base_url: str,
    api_key: str | None,
    *,
    base_url_hint: str,
    api_key_hint: str,
    base_url_source: str | None = None,
    api_key_source: str | None = None,
) -> None:
    """Raise `ConfigError` naming ``provider.base_url`` or ``provider.api_key`` when a provider
    cannot reach its server with them: a base URL that is not an http(s) URL, or no key for
    a server that is not on this machine or a private network.

    The base URL is refused, too, with port 0 (no server listens there) or with a query or
    fragment (``?...``, ``#...``: the provider appends its API path to the base URL, which
    would land in them). The key is refused when an HTTP header cannot carry it (a line
    break, a tab or other control character, a non-ASCII character such as a non-breaking
    space, a space at either end): the message says which kind of character and at which
    position (from 1), and never shows the key or any part of it.

    Each message begins with where the values were set (the file, environment variable or
    command line `load_config` read them from; `base_url_source` or `api_key_source` for a
    value the provider read itself, such as ``variable_source("ANTHROPIC_BASE_URL")``),
    never shows a password in the URL, and ends with the hint in parentheses: how to set the
    base URL (``base_url_hint``, with an example) or the key (``api_key_hint``).
    """
    url_sources = [base_url_source] if base_url_source is not None else _sources(base_url)
    key_sources = [api_key_source] if api_key_source is not None else _sources(api_key)
    where = named_sources(url_sources)
    hidden = _userinfo(base_url)
    refused = base_url.replace(f"{hidden}@", "***@", 1) if hidden else base_url
    import httpx  # the client that sends to it (imported here: `import nanobot_core` stays light)

    try:
        parts = urlsplit(base_url)
        host = parts.hostname or ""
        _ = parts.port  # a port that is not a number, or past 65535
    except ValueError as exc:
        raise _not_a_url(where, refused, str(exc), hidden) from None
    if parts.scheme not in ("http", "https") or not host:
        raise ConfigError(
            f"{where}provider.base_url: {refused!r} is not an http(s) URL ({base_url_hint})"
        )
    try:
        httpx.URL(base_url)  # a control character, a host name IDNA refuses
    except httpx.InvalidURL as exc:
        raise _not_a_url(where, refused, str(exc), hidden) from None
    if parts.port == 0:
        raise ConfigError(
            f"{where}provider.base_url: {refused!r} has port 0, which no server listens on "
            f"({base_url_hint})"
        )
    cut = re.search(r"[?#]", refused)
    if cut is not None:  # the query or fragment itself is not shown: it may hold a token
        part = "a query ('?...')" if cut.group() == "?" else "a fragment ('#...')"
        raise ConfigError(
            f"{where}provider.base_url: {refused[: cut.start()]!r} is followed by {part}, "
            "after which the API path would be appended; a base URL ends with its path "
            f"({base_url_hint})"
        )
    if api_key:
        fault = _key_fault(api_key)
        if fault is not None:
            raise ConfigError(
                f"{named_sources(key_sources)}provider.api_key holds {fault}, which cannot be sent "
                f"in an HTTP header (the key itself is not shown; {api_key_hint})"
            )
    if not api_key and not is_local_host(host):
        shown = without_credentials(base_url)
        raise ConfigError(
            f"{named_sources([*key_sources, *url_sources])}provider.api_key is not set, "
            f"and provider.base_url {shown!r} is a remote server ({api_key_hint})"
        )


#: Characters that end a line, as `str.splitlines` reads them.
_LINE_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")
#: Spaces that do not break, which a copy from a web page or a document may bring along.
_NO_BREAK_SPACES = frozenset("\xa0\u2007\u202f")


def _key_fault(key: str) -> str | None:
    """What the first character of `key` an HTTP header cannot carry is, and where (from 1),
    without showing it: ``"a line break at character 41"``; None when there is none.

    A header value is printable ASCII (a space inside it too, never at either end).
    """
    last = len(key)
    for position, char in enumerate(key, start=1):
        if " " < char < "\x7f" or (char == " " and 1 < position < last):
            continue
        if char == " ":
            kind = "a leading space" if position == 1 else "a trailing space"
        elif char in _LINE_BREAKS:
            kind = "a line break"
        elif char == "\t":
            kind = "a tab"
        elif char in _NO_BREAK_SPACES:
            kind = "a non-breaking space"
        elif char.isascii() or unicodedata.category(char) == "Cc":
            kind = "a control character"
        elif char.isspace():
            kind = "a non-ASCII space"
        elif unicodedata.category(char) == "Cf":
            kind = "an invisible formatting character"
        else:
            kind = "a non-ASCII character"
        return f"{kind} at character {position}"
    return None


#: What `urllib.parse.urlsplit` removes from a URL before reading it.
_DROPPED = str.maketrans("", "", "\t\r\n")


def _not_a_url(where: str, refused: str, reason: str, hidden: str | None) -> ConfigError:
    """The error for a base URL the parser or the client cannot read, the password in the
    parser's reason masked too (also as the parser shows it: without tabs and line breaks,
    which it drops before reading a URL)."""
    if hidden:
        for shown in (hidden, hidden.translate(_DROPPED)):
            reason = reason.replace(shown, "***") if shown else reason
    return ConfigError(f"{where}provider.base_url: {refused!r} is not a URL ({reason})")


def _sources(value: object) -> list[str]:
    """The source `load_config` noted for `value` (none for a default or a program's value)."""
    return [source_of(value)["source"]] if source_of(value) else []


def _userinfo(text: str) -> str | None:
    """What comes before the last ``@`` of `text`'s network location (its ``user:password``),
    read as a URL is, with or without a scheme, even where `urlsplit` cannot read it."""
    scheme = re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", text)
    netloc = re.split(r"[/?#]", text[scheme.end() if scheme else 0 :], maxsplit=1)[0]
    before, at, _ = netloc.rpartition("@")
    return before if at and before else None
