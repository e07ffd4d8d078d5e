"""What a hostile or broken workspace puts where the prompt reads files: it is refused, never
followed out, and costs nothing that lasts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from nanobot_core.config import Config
from nanobot_core.prompt import SectionContext, build_default_prompt_builder
from nanobot_core.prompt.skills import scan_skills
from nanobot_core.prompt.workspace_files import read_file_start


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


needs_proc = pytest.mark.skipif(
    not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc/self/fd"
)


@needs_proc
def test_a_folder_where_a_file_is_read_leaves_no_descriptor_open(tmp_path: Path) -> None:
    """A folder named AGENTS.md or SKILL.md is refused each build without leaking its descriptor."""
    (tmp_path / "AGENTS.md").mkdir()
    (tmp_path / "skills" / "folded" / "SKILL.md").mkdir(parents=True)
    builder = build_default_prompt_builder(Config())
    ctx = SectionContext(tmp_path)
    builder.build(ctx)  # anything opened once and kept (a cache) is not a leak
    before = _open_descriptors()
    for _ in range(50):
        builder.build(ctx)
    assert _open_descriptors() == before


def test_a_folder_where_a_file_is_read_is_named_by_its_path(tmp_path: Path) -> None:
    """The refusal of a folder names the path it was read at, not a descriptor number."""
    (tmp_path / "skills" / "folded" / "SKILL.md").mkdir(parents=True)
    with pytest.raises(IsADirectoryError) as info:
        read_file_start(tmp_path / "skills" / "folded" / "SKILL.md", 10)
    assert info.value.filename == str(tmp_path / "skills" / "folded" / "SKILL.md")
    [problem] = scan_skills(tmp_path).problems
    assert problem.path == "skills/folded/SKILL.md"
    assert "is a directory" in problem.reason.lower()
