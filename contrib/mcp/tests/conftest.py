"""Fixtures: a workspace with an MCP config pointing at the tiny notes server of this folder.

The server is a real MCP stdio server (``servers/notes_server.py``, built on
the official SDK) started as a subprocess by the code under test.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nanobot_mcp import CONFIG_ENV, reset_default_bridge

NOTES_SERVER = Path(__file__).parent / "servers" / "notes_server.py"


class Workspace:
    """A temporary workspace whose ``.nanobot/mcp.toml`` the test writes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.spawn_log = root / "spawns.txt"

    def configure(self, **servers: dict[str, Any]) -> Path:
        """Write one ``[servers.<name>]`` table per keyword; the notes server is the default."""
        lines: list[str] = []
        for name, options in servers.items():
            # A generous start-up time unless a test sets its own: on a loaded machine the
            # SDK import alone can take seconds, and a timeout here is not what is tested.
            table = {
                "command": sys.executable,
                "args": [str(NOTES_SERVER)],
                "startup_timeout": 60,
                **options,
            }
            table["env"] = {"NOTES_SERVER_SPAWN_LOG": str(self.spawn_log), **table.get("env", {})}
            lines.append(f"[servers.{name}]")
            lines += [f"{key} = {_toml(value)}" for key, value in table.items()]
        path = self.root / ".nanobot" / "mcp.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    def spawns(self) -> int:
        """How many times a notes server process has started in this workspace."""
        return len(self.spawn_log.read_text().split()) if self.spawn_log.exists() else 0


def _toml(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Workspace]:
    """A fresh workspace; afterwards the process-wide bridge is closed, so no server outlives it."""
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    yield Workspace(tmp_path)
    reset_default_bridge()
