"""Settings an HTTP provider cannot work without, checked before the first request.

A fault here cannot be cured by retrying, so it is a `ConfigError` naming the
setting (the CLI exits 2): a ``provider.base_url`` that is not an http(s) URL
the HTTP client can send to, and a remote server with no ``provider.api_key``.
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
from urllib.parse import urlsplit

from nanobot_core.config import source_of
from nanobot_core.errors import ConfigError
from nanobot_core.providers.http import without_credentials

__all__ = ["check_endpoint", "is_local_host"]

_LOCAL_NAMES = ("localhost", "localhost.localdomain")


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


def check_endpoint(
    base_url: str,
    api_key: str | None,
    *,
    base_url_hint: str,
    api_key_hint: str,
    base_url_source: str | None = None,
) -> None:
    """Raise `ConfigError` naming ``provider.base_url`` or ``provider.api_key`` when a provider
    cannot reach its server with them: a base URL that is not an http(s) URL, or no key for
    a server that is not on this machine or a private network.

    Each message begins with where the values were set (the file, environment variable or
    command line `load_config` read them from; `base_url_source`, such as ``"environment
    variable ANTHROPIC_BASE_URL"``, for a base URL the provider read itself), never shows a
    password in the URL, and ends with the hint in parentheses: how to set the base URL
    (``base_url_hint``, with an example) or the key (``api_key_hint``).
    """
    url_sources = [base_url_source] if base_url_source is not None else _sources(base_url)
    where = _prefix(url_sources)
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
    if not api_key and not is_local_host(host):
        shown = without_credentials(base_url)
        raise ConfigError(
            f"{_prefix([*_sources(api_key), *url_sources])}provider.api_key is not set, "
            f"and provider.base_url {shown!r} is a remote server ({api_key_hint})"
        )


def _not_a_url(where: str, refused: str, reason: str, hidden: str | None) -> ConfigError:
    """The error for a base URL the parser or the client cannot read, the password in the
    parser's reason masked too."""
    reason = reason.replace(hidden, "***") if hidden else reason
    return ConfigError(f"{where}provider.base_url: {refused!r} is not a URL ({reason})")


def _sources(value: object) -> list[str]:
    """The source `load_config` noted for `value` (none for a default or a program's value)."""
    return [source_of(value)["source"]] if source_of(value) else []


def _prefix(sources: list[str]) -> str:
    """The start of a config error about values set in `sources`, as `source_prefix` words it."""
    named = dict.fromkeys(sources)
    return f"{', '.join(named)}: " if named else ""


def _userinfo(text: str) -> str | None:
    """What comes before the last ``@`` of `text`'s network location (its ``user:password``),
    read as a URL is, with or without a scheme, even where `urlsplit` cannot read it."""
    scheme = re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", text)
    netloc = re.split(r"[/?#]", text[scheme.end() if scheme else 0 :], maxsplit=1)[0]
    before, at, _ = netloc.rpartition("@")
    return before if at and before else None
