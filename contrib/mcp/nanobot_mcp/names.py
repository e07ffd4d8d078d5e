"""Tool names as the model sees them: ``mcp_<server>_<tool>``, always a legal function name.

The mapping is injective: a name that is already legal and short enough is
kept as it is; any other name (characters the APIs refuse replaced by ``_``,
or cut to 64 characters) ends with ``_`` and 16 hex digits of the SHA-256 of
the original server and tool names. A legal name that happens to end that way
gets a digest too, so a kept name can never equal a changed one: ``a.b`` and
``a_b`` are two tools, never one shadowing the other.

Across servers, ``_`` in server names could make two tools meet: server
``a_b``'s tool ``c`` and server ``a``'s tool ``b_c`` are both ``mcp_a_b_c``.
So the names that begin with another configured server's prefix belong to that
server: a tool of ``a`` whose name begins with ``b_`` gets a digest when a
server ``a_b`` is configured, whatever either server lists. The rule depends
on the configured server names and the tool's own name only, so the same
config gives the same names in every process, whichever servers started.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection

__all__ = ["MAX_NAME", "bridged_name"]

#: OpenAI-compatible APIs accept at most 64 characters from [A-Za-z0-9_-].
MAX_NAME = 64
_ILLEGAL = re.compile(r"[^A-Za-z0-9_-]")
_DIGEST_CHARS = 16
_LOOKS_CHANGED = re.compile(rf"_[0-9a-f]{{{_DIGEST_CHARS}}}\Z")


def bridged_name(server: str, tool: str, servers: Collection[str] = ()) -> str:
    """The nanobot name of MCP tool `tool` on `server` (distinct tools, distinct names).

    `servers` are the names of every configured server: a name that could also
    be one of another server's tools is changed (see the module's docstring).
    """
    raw = f"mcp_{server}_{tool}"
    name = _ILLEGAL.sub("_", raw)
    if (
        name == raw
        and len(name) <= MAX_NAME
        and not _LOOKS_CHANGED.search(name)
        and not _in_namespace_of_another(server, tool, servers)
    ):
        return name
    digest = hashlib.sha256(f"{server}\x00{tool}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"{name[: MAX_NAME - _DIGEST_CHARS - 1]}_{digest[:_DIGEST_CHARS]}"


def _in_namespace_of_another(server: str, tool: str, servers: Collection[str]) -> bool:
    """Whether ``<server>_<tool>`` begins with ``<other>_`` for a longer configured server."""
    joined = f"{server}_{tool}"
    return any(len(other) > len(server) and joined.startswith(f"{other}_") for other in servers)
