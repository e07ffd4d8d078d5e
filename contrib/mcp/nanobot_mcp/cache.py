"""The tool lists of MCP servers, cached on disk so listing tools does not start every server.

One JSON file per server, ``<workspace>/.nanobot/cache/mcp/<server>.json``,
holding the hash of the server's config and its tools as MCP sends them
(``name``, ``description``, ``inputSchema``, ``annotations``), the tools
it listed that were left out as invalid, with why (``rejected``), and what
else its listing left out, one line each (``problems``). A file whose
hash does not match the current config is ignored, so editing the command,
its arguments, environment or directory forces a fresh listing; so does
changing ``max_tools`` or ``max_tool_bytes``, the bounds the listing was cut to. The cache is
refreshed each time a server actually starts.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nanobot_core import NotRegularFileError, open_regular_file, report_problem

from nanobot_mcp.config import ServerConfig
from nanobot_mcp.connection import RejectedTool, definition_size

__all__ = [
    "ToolListCache",
    "cache_directory",
    "read_record",
    "read_regular",
    "write_json_atomically",
    "write_record",
]

_FORMAT = 1


def cache_directory(workspace: Path) -> Path:
    """Where a workspace keeps what this plugin remembers of its servers."""
    return workspace / ".nanobot" / "cache" / "mcp"


class ToolListCache:
    """Reads and writes cached tool lists in one directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @classmethod
    def for_workspace(cls, workspace: Path) -> ToolListCache:
        """The cache of a workspace."""
        return cls(cache_directory(workspace))

    def path(self, server: ServerConfig) -> Path:
        """The cache file of one server."""
        return self.directory / f"{server.name}.json"

    def load(self, server: ServerConfig) -> list[dict[str, Any]] | None:
        """The cached tools of `server`, or None when missing, stale or unreadable."""
        data = self._read(server)
        return None if data is None else data["tools"]

    def rejected(self, server: ServerConfig) -> list[RejectedTool]:
        """The tools `server` listed that were left out as invalid (none when not cached)."""
        data = self._read(server)
        entries = [] if data is None else data.get("rejected", [])
        if not isinstance(entries, list):
            return []
        return [
            RejectedTool(e.get("tool") if isinstance(e.get("tool"), str) else None, e["reason"])
            for e in entries
            if isinstance(e, dict) and isinstance(e.get("reason"), str)
        ]

    def problems(self, server: ServerConfig) -> list[str]:
        """What else the listing of `server` left out, one line each (none when not cached)."""
        data = self._read(server)
        entries = [] if data is None else data.get("problems", [])
        return [e for e in entries if isinstance(e, str)] if isinstance(entries, list) else []

    def store(
        self,
        server: ServerConfig,
        tools: list[dict[str, Any]],
        rejected: Sequence[RejectedTool] = (),
        problems: Sequence[str] = (),
    ) -> None:
        """Write the tools of `server` atomically (a reader never sees half a file)."""
        fields = {
            "limits": _limits(server),
            "tools": tools,
            "rejected": [{"tool": r.tool, "reason": r.reason} for r in rejected],
            "problems": list(problems),
        }
        write_record(self.path(server), server, _FORMAT, fields)

    def _read(self, server: ServerConfig) -> dict[str, Any] | None:
        data = read_record(self.path(server), server, _FORMAT)
        if (
            data is None
            or not isinstance(data.get("tools"), list)
            or not all(
                isinstance(t, dict) and isinstance(t.get("name"), str) for t in data["tools"]
            )
            # Listed under other bounds (changed since), or past its own (the file is
            # anyone's to write): listed afresh, so what is left out is told right.
            or data.get("limits") != _limits(server)
            or len(data["tools"]) > server.max_tools
            or any(definition_size(t) > server.max_tool_bytes for t in data["tools"])
        ):
            return None
        return data


def _limits(server: ServerConfig) -> dict[str, int]:
    """The bounds a listing of `server` is cut to: a cache listed under others is stale."""
    return {"max_tools": server.max_tools, "max_tool_bytes": server.max_tool_bytes}


def read_record(path: Path, server: ServerConfig, version: int) -> dict[str, Any] | None:
    """The JSON object at `path` when it is a record in format `version` of `server`'s config
    as it is now; None when the file is missing, unreadable, not a JSON object, in another
    format, or of a config since changed (its hash differs). A file nested deeper than
    `json` walks is unreadable too: the workspace's files are anyone's to write. So is
    one that is no regular file (a named pipe would block the read for ever): a
    problem names it."""
    try:
        data = json.loads(read_regular(path).decode("utf-8"))
    except NotRegularFileError as exc:
        report_problem(f"MCP server {server.name!r}: {exc}; it is taken as no record")
        return None
    except (OSError, ValueError, RecursionError):
        return None
    if (
        not isinstance(data, dict)
        or data.get("format") != version
        or data.get("config_hash") != server.config_hash
    ):
        return None
    return data


def read_regular(path: Path) -> bytes:
    """The bytes of `path`, a regular file (or a link to one).

    Opened by the core's `open_regular_file`, which does not wait: a named pipe
    would block the read until something writes to it, and a device may never
    end. Either, or a folder, raises `NotRegularFileError` naming the path and
    what it is; any other failure to open or read it, `OSError`.
    """
    with os.fdopen(open_regular_file(path), "rb") as file:
        return file.read()


def write_record(path: Path, server: ServerConfig, version: int, fields: Mapping[str, Any]) -> None:
    """Write `fields` to `path` (its folder made) as a record in format `version` of
    `server`'s config as it is now, for `read_record`; a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": version,
        "server": server.name,
        "config_hash": server.config_hash,
        **fields,
    }
    write_json_atomically(path, payload)


def write_json_atomically(path: Path, payload: Any) -> None:
    """Write `payload` as JSON to `path` so that a reader never sees half a file."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            json.dump(payload, file, ensure_ascii=False, indent=1, sort_keys=True)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
