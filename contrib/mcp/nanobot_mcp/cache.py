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

The folders from the workspace down to the cache are opened without following a
symbolic link (`nanobot_core.open_folder_without_links`): the workspace is anyone's
to write, and a ``.nanobot/cache`` that is a link to elsewhere would have the records
written, replaced and removed there. Such a cache is neither read nor written, and a
warning names the folder; the servers still run, started anew each time.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nanobot_core import NotRegularFileError, open_regular_file, report_problem

from nanobot_mcp.config import ServerConfig
from nanobot_mcp.connection import RejectedTool, definition_size
from nanobot_mcp.folders import folder_of

__all__ = [
    "ToolListCache",
    "cache_directory",
    "read_record",
    "read_regular",
    "remove_record",
    "write_json_atomically",
    "write_record",
]

_FORMAT = 1


def cache_directory(workspace: Path) -> Path:
    """Where a workspace keeps what this plugin remembers of its servers."""
    return workspace / ".nanobot" / "cache" / "mcp"


class ToolListCache:
    """Reads and writes cached tool lists in one directory.

    The folders from `root` (the workspace; by default the directory's parent) down to
    the directory are never gone through as symbolic links (see the module's docstring).
    """

    def __init__(self, directory: Path, *, root: Path | None = None) -> None:
        self.directory = directory
        self.root = directory.parent if root is None else root

    @classmethod
    def for_workspace(cls, workspace: Path) -> ToolListCache:
        """The cache of a workspace."""
        return cls(cache_directory(workspace), root=workspace)

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
        try:
            write_record(self.path(server), server, _FORMAT, fields, root=self.root)
        except OSError as exc:
            # A cache: without it the server is started again next time, nothing else.
            report_problem(
                f"MCP server {server.name!r}: its tool list is not cached "
                f"({self.path(server)}: {exc.strerror or exc}); it is started again next time"
            )

    def _read(self, server: ServerConfig) -> dict[str, Any] | None:
        data = read_record(self.path(server), server, _FORMAT, root=self.root)
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


def read_record(
    path: Path, server: ServerConfig, version: int, *, root: Path | None = None
) -> dict[str, Any] | None:
    """The JSON object at `path` when it is a record in format `version` of `server`'s config
    as it is now; None when the file is missing, unreadable, not a JSON object, in another
    format, or of a config since changed (its hash differs). A file nested deeper than
    `json` walks is unreadable too: the workspace's files are anyone's to write. So is
    one that is no regular file (a named pipe would block the read for ever): a
    problem names it. So is one reached through a folder below `root` (by default the
    folder above `path`'s) that is a symbolic link, or a file that is one: it is
    not the record written here."""
    try:
        with folder_of(path, root) as folder:
            fd = open_regular_file(path.name, follow_links=False, dir_fd=folder, shown=str(path))
        with os.fdopen(fd, "rb") as file:
            data = json.loads(file.read().decode("utf-8"))
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


def write_record(
    path: Path,
    server: ServerConfig,
    version: int,
    fields: Mapping[str, Any],
    *,
    root: Path | None = None,
) -> None:
    """Write `fields` to `path` as a record in format `version` of `server`'s config as it
    is now, for `read_record`; a reader never sees half a file.

    The folders from `root` (by default the folder above `path`'s) down are made when
    missing and never gone through as links: one that is a link, or a file, raises
    ``OSError`` naming it, and nothing is written. A `path` that is a link is replaced by
    the record, never written through.
    """
    payload = {
        "format": version,
        "server": server.name,
        "config_hash": server.config_hash,
        **fields,
    }
    with folder_of(path, root, create=True) as folder:
        write_json_atomically(Path(path.name), payload, dir_fd=folder)


def remove_record(path: Path, *, root: Path | None = None) -> None:
    """Remove the record at `path` if it is there, as `write_record` reaches it: never a file
    reached through a folder that is a link."""
    with contextlib.suppress(FileNotFoundError), folder_of(path, root) as folder:
        os.unlink(path.name, dir_fd=folder)  # a link there is removed, not what it leads to


def write_json_atomically(path: Path, payload: Any, *, dir_fd: int | None = None) -> None:
    """Write `payload` as JSON to `path` so that a reader never sees half a file.

    With `dir_fd`, `path` is a name in that open folder. A `path` that is a symbolic
    link is replaced by the file, never written through.
    """
    temporary = f".{path.stem}.{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    if dir_fd is None:
        temporary = str(path.parent / temporary)
    handle = open_regular_file(temporary, flags, 0o600, follow_links=False, dir_fd=dir_fd)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            json.dump(payload, file, ensure_ascii=False, indent=1, sort_keys=True)
        os.replace(temporary, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise
