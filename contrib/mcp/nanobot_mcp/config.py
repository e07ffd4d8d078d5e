"""Which MCP servers to bridge: read from a TOML file, one table per server.

The file is ``$NANOBOT_MCP_CONFIG`` when that is set, else
``<workspace>/.nanobot/mcp.toml``; no file means no servers. Each server is a
``[servers.<name>]`` table::

    [servers.notes]
    command = "python"
    args = ["-m", "notes_server"]
    env = { NOTES_DB = "notes.sqlite" }
    cwd = "tools"              # relative to the workspace; default: the workspace
    startup_timeout = 10.0     # seconds to spawn, handshake and list the tools
    call_timeout = 60.0        # seconds one tool call may take (start-up not included)
    retry_after = 60.0         # seconds a failed start is remembered (0: try every time)
    max_line_bytes = 16777216  # the longest line (one message) the server may send: 16 MiB
    max_tools = 256            # the most tools offered from this server
    max_tool_bytes = 65536     # the largest tool definition offered (as JSON): 64 KiB
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
from nanobot_core import ConfigError, NotRegularFileError, open_regular_file, source_prefix

from nanobot_mcp.stdio import DEFAULT_MAX_LINE_BYTES

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_MAX_TOOLS",
    "DEFAULT_MAX_TOOL_BYTES",
    "ServerConfig",
    "config_path",
    "load_servers",
    "parse_servers",
    "real_workspace",
]

CONFIG_ENV = "NANOBOT_MCP_CONFIG"
_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")
_KEYS = frozenset(
    {
        "command",
        "args",
        "env",
        "cwd",
        "startup_timeout",
        "call_timeout",
        "retry_after",
        "max_line_bytes",
        "max_tools",
        "max_tool_bytes",
    }
)
#: The most tools offered from one server: each is sent to the model with every request.
DEFAULT_MAX_TOOLS = 256
#: The largest definition of one tool (name, description, schemas, annotations as JSON).
DEFAULT_MAX_TOOL_BYTES = 64 * 1024


@attrs.frozen
class ServerConfig:
    """How to start one MCP server over stdio, and how long to wait for it."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: Path | None = None
    startup_timeout: float = 10.0
    call_timeout: float = 60.0
    retry_after: float = 60.0
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    max_tools: int = DEFAULT_MAX_TOOLS
    max_tool_bytes: int = DEFAULT_MAX_TOOL_BYTES
    #: Where the server was configured (the config file), for messages; not part of its identity.
    source: str = attrs.field(default="", eq=False)

    def key(self, key: str) -> str:
        """Where a key of this server is set: ``[servers.notes] command in <file>``."""
        where = f"[servers.{self.name}] {key}"
        return f"{where} in {self.source}" if self.source else where

    @property
    def config_hash(self) -> str:
        """A digest of everything that decides which server runs (not the timeouts or limits)."""
        identity = {
            "command": self.command,
            "args": list(self.args),
            "env": dict(self.env),
            "cwd": None if self.cwd is None else str(self.cwd),
        }
        canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def real_workspace(workspace: str | os.PathLike[str]) -> Path:
    """The workspace as one path however it is spelled: absolute, its links resolved.

    A relative path and an absolute one, a link to the folder and the folder, are one
    workspace to the user; as paths they differ, and so would the ``cwd`` a server is
    keyed by in the cache and the server a call goes to. realpath, as the CLI takes
    ``--workspace``: on a loop of links it stops, where ``Path.resolve`` may raise.
    """
    return Path(os.path.realpath(workspace))


def config_path(workspace: Path, environ: Mapping[str, str]) -> Path:
    """Where the server list is read from."""
    explicit = environ.get(CONFIG_ENV, "").strip()
    return Path(explicit) if explicit else workspace / ".nanobot" / "mcp.toml"


#: The most read of the config file: far more than any server list holds, so that a path
#: to something endless fails at once instead of filling memory.
MAX_CONFIG_BYTES = 16 * 1024 * 1024
_READ_CHUNK = 1 << 20


def load_servers(workspace: Path, environ: Mapping[str, str]) -> list[ServerConfig]:
    """The configured servers, in name order; none when there is no config file.

    The file is opened as a regular file only (a link to one): a named pipe would wait
    for a writer for ever and a device (``/dev/zero``) give bytes without end, so either,
    a folder or a loop of links is a `ConfigError` naming the path, as is a file larger
    than `MAX_CONFIG_BYTES`.
    """
    path = config_path(workspace, environ)
    named = source_prefix(variables=[CONFIG_ENV]) if environ.get(CONFIG_ENV, "").strip() else ""
    if not os.path.lexists(path):
        if named:
            raise ConfigError(f"{named}{path}: no such file")
        return []
    try:
        raw = _read_bounded(path, f"{named}{path}")
        data = tomllib.loads(raw.decode("utf-8"))
    except NotRegularFileError as exc:
        raise ConfigError(
            f"{named}{path}: {exc.strerror}, so it cannot be read as MCP server config"
        ) from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ConfigError(f"{named}{path}: cannot read MCP server config: {reason}") from exc
    except ValueError:
        # tomllib lets through int()'s refusal of a decimal integer longer than Python reads.
        raise ConfigError(
            f"{path}: cannot read MCP server config: an integer of more than "
            f"{sys.get_int_max_str_digits()} digits (a TOML integer has 19 at most)"
        ) from None
    return parse_servers(data, workspace=workspace, source=str(path))


def _read_bounded(path: Path, shown: str) -> bytes:
    """The bytes of the regular file `path`; past `MAX_CONFIG_BYTES`, a `ConfigError` that
    begins with `shown` (where the path was set, and the path).

    Read a chunk at a time, so a small file sets aside little and one that grows while
    it is read stops at the limit.
    """
    with os.fdopen(open_regular_file(path), "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        chunks: list[bytes] = []
        total = 0
        while size <= MAX_CONFIG_BYTES and (
            chunk := handle.read(min(_READ_CHUNK, size + 1, MAX_CONFIG_BYTES + 1 - total))
        ):
            chunks.append(chunk)
            total += len(chunk)
            if total > MAX_CONFIG_BYTES:
                break
    if max(size, total) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{shown}: larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MiB, the most read of "
            "an MCP server config: not a config file"
        )
    return b"".join(chunks)


def parse_servers(data: Mapping[str, Any], *, workspace: Path, source: str) -> list[ServerConfig]:
    """Validate the ``[servers.*]`` tables of a parsed config file.

    A ``cwd`` is taken from the workspace's real path (`real_workspace`), so one
    workspace spelled two ways gives one ``cwd``, one cache record and one server.
    """
    unknown = sorted(set(data) - {"servers"})
    if unknown:
        raise ConfigError(
            f"{source}: unknown top-level key(s) {unknown}; servers go in [servers.<name>]"
        )
    servers = data.get("servers", {})
    if not isinstance(servers, Mapping):
        raise ConfigError(f"{source}: 'servers' must be a table of [servers.<name>] tables")
    workspace = real_workspace(workspace)
    return [_server(name, table, workspace, source) for name, table in sorted(servers.items())]


def _server(name: str, table: Any, workspace: Path, source: str) -> ServerConfig:
    where = f"{source}: servers.{name}"
    if not _SERVER_NAME.fullmatch(name):
        raise ConfigError(f"{where}: a server name is 1-32 letters, digits, '_' or '-'")
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: must be a table")
    unknown = sorted(set(table) - _KEYS)
    remote = [key for key in ("url", "transport", "type") if key in table]
    if remote:
        # Other MCP clients' config files describe HTTP and SSE servers with these keys.
        raise ConfigError(
            f"{where}: {', '.join(map(repr, remote))} given, but only stdio servers are "
            "supported (HTTP and SSE are not): give 'command' (and 'args') to start the server"
        )
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown} (known: {', '.join(sorted(_KEYS))})")
    command = table.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ConfigError(f"{where}: 'command' is required (the program that starts the server)")
    _no_nul(command, "'command'", where)
    args = table.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(f"{where}: 'args' must be a list of strings")
    for index, arg in enumerate(args):
        _no_nul(arg, f"'args' item {index}", where)
    env = table.get("env", {})
    if not isinstance(env, Mapping):
        raise ConfigError(f"{where}: 'env' must be a table of strings")
    for key, value in env.items():
        _env_entry(key, value, where)
    cwd = table.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise ConfigError(f"{where}: 'cwd' must be a path string")
    if cwd is not None:
        _no_nul(cwd, "'cwd'", where)
    return ServerConfig(
        name=name,
        command=command,
        args=tuple(args),
        env=tuple(sorted((str(k), v) for k, v in env.items())),
        cwd=(workspace / cwd) if cwd else workspace,
        startup_timeout=_seconds(table, "startup_timeout", 10.0, where),
        call_timeout=_seconds(table, "call_timeout", 60.0, where),
        retry_after=_seconds(table, "retry_after", 60.0, where, zero=True),
        max_line_bytes=_positive_int(table, "max_line_bytes", DEFAULT_MAX_LINE_BYTES, where),
        max_tools=_positive_int(table, "max_tools", DEFAULT_MAX_TOOLS, where, "tools"),
        max_tool_bytes=_positive_int(table, "max_tool_bytes", DEFAULT_MAX_TOOL_BYTES, where),
        source=source,
    )


def _no_nul(value: str, what: str, where: str) -> None:
    """Refuse a string no process can be given: the OS ends each at its first NUL."""
    if "\x00" in value:
        raise ConfigError(
            f"{where}: {what} holds a NUL character (\\u0000), which no program can be given"
        )


def _env_entry(key: str, value: Any, where: str) -> None:
    """Refuse an environment entry the OS cannot hold, naming it, before the server is started."""
    if not isinstance(value, str):
        raise ConfigError(f"{where}: 'env' must be a table of strings ({key!r} is not a string)")
    if not key or "=" in key or "\x00" in key:
        raise ConfigError(
            f"{where}: 'env' key {key!r} is not a variable name "
            "(a name is not empty and holds no '=' or NUL character)"
        )
    _no_nul(value, f"'env' value of {key!r}", where)


def _positive_int(
    table: Mapping[str, Any], key: str, default: int, where: str, unit: str = "bytes"
) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{where}: '{key}' must be a positive integer ({unit})")
    return value


def _seconds(
    table: Mapping[str, Any], key: str, default: float, where: str, *, zero: bool = False
) -> float:
    value = table.get(key, default)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or value != value  # NaN
        or value == float("inf")
        or not _fits_float(value)  # a whole number too large for a float (a TOML hex literal)
        or value < 0
        or (value == 0 and not zero)
    ):
        kind = "a number of seconds, 0 or more" if zero else "a positive number of seconds"
        raise ConfigError(f"{where}: '{key}' must be {kind}")
    return float(value)


def _fits_float(value: float) -> bool:
    """Whether `value` converts to a float: some ints of 1024 bits do, some do not."""
    try:
        float(value)
    except OverflowError:
        return False
    return True
