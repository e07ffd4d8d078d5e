"""The system prompt is byte-identical across builds and processes when its inputs are unchanged."""

from __future__ import annotations

import os
from pathlib import Path

from nanobot_core.config import Config
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.prompt import SectionContext
from tests.helpers import run_python

# Builds the prompt the way the runner does (through the plugin manager) and writes its bytes
# to a file (stdout may carry log lines).
SCRIPT = """
import sys
from pathlib import Path
from nanobot_core.config import Config
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.prompt import SectionContext

workspace = Path(sys.argv[1])
manager = PluginManager(Config(), workspace=workspace, autoload=False).load()
ctx = SectionContext(workspace=workspace, channel="cli", session="main", config=manager.config)
Path(sys.argv[2]).write_bytes(manager.prompt_builder().build(ctx).text.encode("utf-8"))
"""


def _populate(workspace: Path) -> None:
    files = {
        "AGENTS.md": "Run `make test` before committing.\n",
        "SOUL.md": "Curious, precise, kind.\n",
        "USER.md": "Ada; Europe/London; metric units.\n",
        "memory/MEMORY.md": "- The staging host is staging.internal.\n",
    }
    for index, name in enumerate(["kilo", "alpha", "Zulu", "mike", "émile", "bravo", "x-ray"]):
        always = "true" if index % 3 == 0 else "false"
        files[f"skills/{name}/SKILL.md"] = (
            f"---\nname: {name}\ndescription: about {name}\nalways: {always}\n---\nUse {name}.\n"
        )
    files["skills/broken/SKILL.md"] = "---\nname broken\n"
    for relative, text in files.items():
        path = workspace / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _prompt_in_subprocess(workspace: Path, hash_seed: str, out: Path) -> bytes:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    run_python(SCRIPT, str(workspace), str(out), env=env, check=True)
    return out.read_bytes()


def test_prompt_bytes_match_across_processes_with_different_hash_seeds(tmp_path: Path) -> None:
    """Two interpreters with different PYTHONHASHSEED produce the same prompt bytes as this one."""
    workspace = tmp_path / "ws"
    _populate(workspace)
    first = _prompt_in_subprocess(workspace, "1", tmp_path / "first.txt")
    second = _prompt_in_subprocess(workspace, "2024", tmp_path / "second.txt")
    manager = PluginManager(Config(), workspace=workspace, autoload=False).load()
    ctx = SectionContext(workspace=workspace, channel="cli", session="main", config=manager.config)
    here = manager.prompt_builder().build(ctx).text.encode("utf-8")
    assert first == second == here
    assert b"Use kilo." in here and b"about alpha (skills/alpha/SKILL.md)" in here


def test_prompt_is_identical_across_turns_in_one_process(tmp_path: Path) -> None:
    """Building again, with a new builder, gives the same text while nothing changed."""
    _populate(tmp_path)
    texts = set()
    for _ in range(3):
        manager = PluginManager(Config(), workspace=tmp_path, autoload=False).load()
        texts.add(manager.prompt_builder().build(SectionContext(workspace=tmp_path)).text)
    assert len(texts) == 1


def test_prompt_changes_when_a_workspace_file_changes(tmp_path: Path) -> None:
    """The prompt is stable only while its inputs are: editing memory changes it."""
    _populate(tmp_path)
    manager = PluginManager(Config(), workspace=tmp_path, autoload=False).load()
    builder = manager.prompt_builder()
    before = builder.build(SectionContext(workspace=tmp_path)).text
    (tmp_path / "memory" / "MEMORY.md").write_text("- New fact.\n", encoding="utf-8")
    after = builder.build(SectionContext(workspace=tmp_path)).text
    assert before != after
    assert "- New fact." in after
