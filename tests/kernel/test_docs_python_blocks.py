"""Every Python block of the README and docs/ is Python, and the governance quick start runs.

The tool, stage, section, runtime-block and headless examples are run by the tests of their
pages; this covers what those leave: a block that no longer parses, and the first example a
library user copies from docs/governance.md, run with the names it leaves to the reader.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nanobot_core import PluginManager
from nanobot_core.config import Config, PluginsConfig
from tests.helpers import REPO_ROOT

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


def _blocks(page: Path) -> list[tuple[int, str]]:
    """Each ```python block of `page`, with the line it starts on."""
    text = page.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, found.start()) + 2, found.group(1))
        for found in re.finditer(r"```python\n(.*?)```", text, re.DOTALL)
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_python_block_parses(page: Path) -> None:
    """A block a reader copies compiles as written (names it leaves to the reader aside)."""
    for line, block in _blocks(page):
        compile(block, f"{page.name}:{line}", "exec")


def test_the_governance_quick_start_runs_as_written(tmp_path: Path) -> None:
    """docs/governance.md's first block governs a history and reports with `final` last."""
    (line, block), *_ = _blocks(REPO_ROOT / "docs" / "governance.md")
    config = Config(plugins=PluginsConfig(disable_autoload=True))
    manager = PluginManager(config, workspace=tmp_path).load()
    names = {
        "config": config,
        "workspace": tmp_path,
        "history": [{"role": "user", "content": "hi"}],
        "prompt": "You are terse.",
        "definitions": manager.tool_registry().definitions(),
    }
    exec(compile(block, f"governance.md:{line}", "exec"), names)
    result = names["result"]
    assert result.messages == names["history"]
    assert result.report[-1].stage == "final"
    assert result.fits and result.tokens <= result.budget
