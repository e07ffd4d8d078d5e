"""Fixtures for the tool tests: a workspace next to a folder outside it, and a plugin context."""

from __future__ import annotations

from pathlib import Path

import pytest

from nanobot_core.kernel.context import PluginContext
from tests.tools.support import SECRET


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside the workspace holding a secret file."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text(f"{SECRET}\n", encoding="utf-8")
    return folder


@pytest.fixture
def workspace(tmp_path: Path, outside: Path) -> Path:
    """A workspace with a file, a folder, and symlinks that point outside it."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("alpha\nbeta\ngamma\n", encoding="utf-8")
    (root / "src").mkdir()
    (root / "src" / "main.py").write_text("print('hello')\n", encoding="utf-8")
    (root / "link_dir").symlink_to(outside, target_is_directory=True)
    (root / "link_file").symlink_to(outside / "secret.txt")
    return root


@pytest.fixture
def ctx(workspace: Path) -> PluginContext:
    """A plugin context for the workspace, with default config."""
    return PluginContext(workspace=workspace)
