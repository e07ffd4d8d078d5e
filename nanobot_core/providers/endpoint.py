"""Settings an HTTP provider cannot work without, checked before the first request.

A fault here cannot be cured by retrying, so it is a `ConfigError` naming the
setting (the CLI exits 2): a ``provider.base_url`` that is not an http(s) URL,
and a remote server with no ``provider.api_key``. A server on this machine or
on a private network (Ollama, vLLM, llama.cpp) needs no key; a remote one that
needs none takes any placeholder, such as ``NANOBOT_API_KEY=none``.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from nanobot_core.config import ProviderConfig, source_prefix
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


def check_endpoint(config: ProviderConfig) -> None:
    """Raise `ConfigError` naming the setting when the provider settings cannot work."""
    # Each message begins with the source of the values it refuses, as config errors do.
    where = source_prefix(config.base_url)
    hidden = _userinfo(config.base_url)
    refused = config.base_url.replace(f"{hidden}@", "***@", 1) if hidden else config.base_url
    try:
        parts = urlsplit(config.base_url)
        host = parts.hostname or ""
    except ValueError as exc:
        reason = str(exc).replace(hidden, "***") if hidden else str(exc)
        raise ConfigError(
            f"{where}provider.base_url: {refused!r} is not a URL ({reason})"
        ) from None
    if parts.scheme not in ("http", "https") or not host:
        raise ConfigError(
            f"{where}provider.base_url: {refused!r} is not an http(s) URL "
            "(set --base-url or NANOBOT_BASE_URL, e.g. http://localhost:11434/v1)"
        )
    if not config.api_key and not is_local_host(host):
        shown = without_credentials(config.base_url)
        raise ConfigError(
            f"{source_prefix(config.api_key, config.base_url)}provider.api_key is not set, "
            f"and provider.base_url {shown!r} is a remote server "
            "(set NANOBOT_API_KEY or OPENAI_API_KEY; NANOBOT_API_KEY=none for a server that "
            "needs no key)"
        )


def _userinfo(text: str) -> str | None:
    """What comes before the last ``@`` of `text`'s network location (its ``user:password``),
    read as a URL is, with or without a scheme, even where `urlsplit` cannot read it."""
    scheme = re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", text)
    netloc = re.split(r"[/?#]", text[scheme.end() if scheme else 0 :], maxsplit=1)[0]
    before, at, _ = netloc.rpartition("@")
    return before if at and before else None
