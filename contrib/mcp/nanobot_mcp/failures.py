"""Servers that failed to start, remembered on disk for ``retry_after`` seconds.

Every command is a new process, and a server that cannot start costs its
whole start-up timeout (plus the SDK's few seconds to stop it) each time it
is tried. So a failed start is written to
``<workspace>/.nanobot/cache/mcp/<server>.failed.json`` with the server's
config hash, the time and the reason; until ``retry_after`` seconds have
passed, that server is not started again (its tools are left out, and a call
to one is answered with the remembered reason). A successful start, a
changed server config, or deleting the file ends the wait at once.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

import attrs
from nanobot_core import report_problem

from nanobot_mcp.cache import cache_directory, read_record, remove_record, write_record
from nanobot_mcp.config import ServerConfig

__all__ = ["FailureMemory", "RememberedFailure"]

_FORMAT = 1


@attrs.frozen
class RememberedFailure:
    """A start that failed `age` seconds ago, and why."""

    reason: str
    age: float

    def describe(self, server: ServerConfig) -> str:
        """The reason, with how long ago it happened and when the server is tried again."""
        wait = max(0.0, server.retry_after - self.age)
        return (
            f"{self.reason} (failed {self.age:.0f} s ago; not started again for another "
            f"{wait:.0f} s, see [servers.{server.name}] retry_after)"
        )


class FailureMemory:
    """Reads and writes the failure records of one directory (next to the tool-list cache)."""

    def __init__(
        self,
        directory: Path,
        clock: Callable[[], float] = time.time,
        *,
        root: Path | None = None,
    ) -> None:
        self.directory = directory
        self.clock = clock
        #: Where the folders down to `directory` are walked from without following links.
        self.root = directory.parent if root is None else root

    @classmethod
    def for_workspace(cls, workspace: Path) -> FailureMemory:
        """The failure records of a workspace."""
        return cls(cache_directory(workspace), root=workspace)

    def path(self, server: ServerConfig) -> Path:
        """The failure record of one server."""
        return self.directory / f"{server.name}.failed.json"

    def recent(self, server: ServerConfig) -> RememberedFailure | None:
        """The failure of `server` when it is younger than its ``retry_after``, else None."""
        data = read_record(self.path(server), server, _FORMAT, root=self.root)
        if (
            data is None
            or not isinstance(data.get("time"), int | float)
            or not isinstance(data.get("reason"), str)
        ):
            return None
        try:
            age = self.clock() - float(data["time"])
        except OverflowError:  # an int too large for a float: the file is anyone's to write
            return None
        # Not `age < 0 or ...`: a time of NaN would then be recent for ever.
        if not 0 <= age < server.retry_after:
            return None
        return RememberedFailure(data["reason"], age)

    def record(self, server: ServerConfig, reason: str) -> None:
        """Remember that `server` failed to start now, for `reason` (written atomically)."""
        if server.retry_after <= 0:
            return
        try:
            write_record(
                self.path(server),
                server,
                _FORMAT,
                {"time": self.clock(), "reason": reason},
                root=self.root,
            )
        except OSError as exc:
            # Not remembered: the server is tried again at the next start, nothing else.
            report_problem(
                f"MCP server {server.name!r}: its failed start is not remembered "
                f"({self.path(server)}: {exc.strerror or exc})"
            )

    def forget(self, server: ServerConfig) -> None:
        """Drop the failure record of `server` (it started)."""
        # A folder on the way that is a link holds no record written here (none is read
        # through it either): nothing to forget.
        with contextlib.suppress(OSError):
            remove_record(self.path(server), root=self.root)
