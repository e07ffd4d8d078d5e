"""Tool names as the model sees them: ``mcp_<server>_<tool>``, always a legal function name."""

from __future__ import annotations

import hashlib
import re

__all__ = ["MAX_NAME", "bridged_name"]

#: OpenAI-compatible APIs accept at most 64 characters from [A-Za-z0-9_-].
MAX_NAME = 64
_ILLEGAL = re.compile(r"[^A-Za-z0-9_-]")


def bridged_name(server: str, tool: str) -> str:
    """The nanobot name of MCP tool `tool` on `server`.

    Characters the APIs refuse become ``_``. A name longer than 64 characters
    keeps its start and gets a short digest of the full name, so two long names
    that share a prefix still differ.
    """
    name = _ILLEGAL.sub("_", f"mcp_{server}_{tool}")
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(f"{server}\x00{tool}".encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - 9]}_{digest}"
