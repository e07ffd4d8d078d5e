"""Tool names as the model sees them: ``mcp_<server>_<tool>``, always a legal function name.

The mapping is injective for the tools of one server: a name that is already
legal and short enough is kept as it is; any other name (characters the APIs
refuse replaced by ``_``, or cut to 64 characters) ends with ``_`` and 16 hex
digits of the SHA-256 of the original server and tool names. A legal name that
happens to end that way gets a digest too, so a kept name can never equal a
changed one: ``a.b`` and ``a_b`` are two tools, never one shadowing the other.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["MAX_NAME", "bridged_name"]

#: OpenAI-compatible APIs accept at most 64 characters from [A-Za-z0-9_-].
MAX_NAME = 64
_ILLEGAL = re.compile(r"[^A-Za-z0-9_-]")
_DIGEST_CHARS = 16
_LOOKS_CHANGED = re.compile(rf"_[0-9a-f]{{{_DIGEST_CHARS}}}\Z")


def bridged_name(server: str, tool: str) -> str:
    """The nanobot name of MCP tool `tool` on `server` (distinct tools, distinct names)."""
    raw = f"mcp_{server}_{tool}"
    name = _ILLEGAL.sub("_", raw)
    if name == raw and len(name) <= MAX_NAME and not _LOOKS_CHANGED.search(name):
        return name
    digest = hashlib.sha256(f"{server}\x00{tool}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"{name[: MAX_NAME - _DIGEST_CHARS - 1]}_{digest[:_DIGEST_CHARS]}"
