"""What a hostile or broken workspace puts where the prompt reads files: it is refused, never
followed out, and costs nothing that lasts."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from nanobot_core import NotRegularFileError
from nanobot_core.config import Config
from nanobot_core.prompt import SectionContext, build_default_prompt_builder
from nanobot_core.prompt.skills import scan_skills
from nanobot_core.prompt.workspace_files import (
    read_file_start,
    read_user_file,
    read_workspace_file_start,
)
from tests.tools.support import CAN_BE_REFUSED, run_unprivileged


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
    """The refusal of a folder names the path it was read at, not a descriptor number, and says
    it is a directory."""
    (tmp_path / "skills" / "folded" / "SKILL.md").mkdir(parents=True)
    with pytest.raises(NotRegularFileError) as info:
        read_file_start(tmp_path / "skills" / "folded" / "SKILL.md", 10)
    assert info.value.filename == str(tmp_path / "skills" / "folded" / "SKILL.md")
    assert info.value.errno == errno.EISDIR
    assert str(info.value) == f"{info.value.filename} is a directory, not a regular file"
    [problem] = scan_skills(tmp_path).problems
    assert problem.path == "skills/folded/SKILL.md"
    assert "is a directory" in problem.reason.lower()


SECRET = "TOP-SECRET-OUTSIDE"
_SKILL = f"---\ndescription: from outside\nalways: true\n---\n{SECRET} skill body\n"


def _outside(tmp_path: Path) -> Path:
    """A folder beside the workspace holding a secret file and a valid skill."""
    outside = tmp_path / "outside"
    (outside / "skill").mkdir(parents=True)
    (outside / "secret.txt").write_text(f"{SECRET} key\n", encoding="utf-8")
    (outside / "skill" / "SKILL.md").write_text(_SKILL, encoding="utf-8")
    return outside


def test_links_leading_out_of_the_workspace_are_not_read_into_the_prompt(tmp_path: Path) -> None:
    """AGENTS.md, MEMORY.md, a SKILL.md or a skill folder linked outside are left out and named."""
    outside = _outside(tmp_path)
    workspace = tmp_path / "workspace"
    (workspace / "memory").mkdir(parents=True)
    (workspace / "skills" / "linked_file").mkdir(parents=True)
    (workspace / "AGENTS.md").symlink_to(outside / "secret.txt")
    (workspace / "memory" / "MEMORY.md").symlink_to(outside / "secret.txt")
    (workspace / "skills" / "linked_file" / "SKILL.md").symlink_to(outside / "skill" / "SKILL.md")
    (workspace / "skills" / "linked_folder").symlink_to(outside / "skill")
    (workspace / "USER.md").write_text("Inside.", encoding="utf-8")
    with capture_logs() as logs:
        built = build_default_prompt_builder(Config()).build(SectionContext(workspace))
    assert SECRET not in built.text
    assert "## USER.md\n\nInside." in built.text  # the other files are read as before
    left_out = {entry["path"] for entry in logs if "leads out of the workspace" in str(entry)}
    assert left_out == {
        str(workspace / "AGENTS.md"),
        str(workspace / "memory" / "MEMORY.md"),
        "skills/linked_file/SKILL.md",
        "skills/linked_folder/SKILL.md",
    }


def test_a_folder_of_the_workspace_linked_outside_is_not_read_through(tmp_path: Path) -> None:
    """memory/ or skills/ as a link to a folder outside gives nothing of what is there."""
    outside = _outside(tmp_path)
    (outside / "MEMORY.md").write_text(f"{SECRET} memory\n", encoding="utf-8")
    (outside / "skills" / "s").mkdir(parents=True)
    (outside / "skills" / "s" / "SKILL.md").write_text(_SKILL, encoding="utf-8")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "memory").symlink_to(outside)
    (workspace / "skills").symlink_to(outside / "skills")
    built = build_default_prompt_builder(Config()).build(SectionContext(workspace))
    assert SECRET not in built.text


def test_links_that_stay_in_the_workspace_are_followed(tmp_path: Path) -> None:
    """AGENTS.md linked to a file of the workspace, and a skill folder linked inside, are read."""
    workspace = tmp_path / "workspace"
    (workspace / "docs" / "skill").mkdir(parents=True)
    (workspace / "docs" / "rules.md").write_text("Rules inside.", encoding="utf-8")
    (workspace / "docs" / "skill" / "SKILL.md").write_text(
        "---\nname: inner\ndescription: d\nalways: true\n---\nInner body.", encoding="utf-8"
    )
    (workspace / "AGENTS.md").symlink_to("docs/rules.md")
    (workspace / "skills").mkdir()
    (workspace / "skills" / "inner").symlink_to(workspace / "docs" / "skill")
    built = build_default_prompt_builder(Config()).build(SectionContext(workspace))
    assert "## AGENTS.md\n\nRules inside." in built.text
    assert "## Skill: inner\n\nInner body." in built.text


def test_a_workspace_reached_through_a_link_reads_its_own_files(tmp_path: Path) -> None:
    """A workspace given as a link to its folder is not taken for a link leading out."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "AGENTS.md").write_text("Mine.", encoding="utf-8")
    (tmp_path / "alias").symlink_to(real)
    built = build_default_prompt_builder(Config()).build(SectionContext(tmp_path / "alias"))
    assert "## AGENTS.md\n\nMine." in built.text


_BUILD_AND_REPORT = """
import json, sys
from pathlib import Path
from typing import Any
from structlog.testing import capture_logs
from nanobot_core.config import Config
from nanobot_core.prompt import SectionContext, build_default_prompt_builder
from nanobot_core.prompt.skills import scan_skills
workspace = Path(sys.argv[1])
with capture_logs() as logs:
    built = build_default_prompt_builder(Config()).build(SectionContext(workspace))
skills = next(r for r in built.sections if r.name == "skills")
problems = [[p.path, p.reason] for p in scan_skills(workspace).problems]
levels = sorted({entry["log_level"] for entry in logs})
print(json.dumps({"skills": [skills.skipped, skills.reason], "problems": problems,
                  "levels": levels, "text": built.text}))
"""


@pytest.mark.skipif(not CAN_BE_REFUSED, reason="root, and no setpriv to drop its capabilities")
def test_a_skills_folder_the_system_refuses_to_list_is_a_problem_not_a_raise(
    tmp_path: Path,
) -> None:
    """skills/ unreadable is a skill problem (a warning), not the skills section raising."""
    workspace = tmp_path / "workspace"
    (workspace / "skills" / "s").mkdir(parents=True)
    (workspace / "skills" / "s" / "SKILL.md").write_text(
        "---\ndescription: D\n---\n", encoding="utf-8"
    )
    (workspace / "USER.md").write_text("Still here.", encoding="utf-8")
    (workspace / "skills").chmod(0)
    try:
        done = run_unprivileged(_BUILD_AND_REPORT, str(workspace), cwd=tmp_path)
    finally:
        (workspace / "skills").chmod(0o755)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["skills"] == [True, "rendered nothing"]
    [[path, reason]] = result["problems"]
    assert path == "skills"
    assert reason.startswith("cannot list: PermissionError")
    assert result["levels"] == ["warning"]
    assert "## USER.md\n\nStill here." in result["text"]


def test_a_folder_swapped_for_a_link_after_the_check_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link checked as leading inside, its folder then made a link out, is refused."""
    outside = _outside(tmp_path)
    (outside / "rules.md").write_text(f"{SECRET} rules\n", encoding="utf-8")
    workspace = tmp_path / "workspace"
    (workspace / "docs").mkdir(parents=True)
    (workspace / "docs" / "rules.md").write_text("Rules inside.", encoding="utf-8")
    (workspace / "AGENTS.md").symlink_to("docs/rules.md")
    realpath = os.path.realpath

    def swap_after_resolving(path: Any, *args: Any, **kwargs: Any) -> str:
        resolved = realpath(path, *args, **kwargs)
        if str(path).endswith("AGENTS.md") and not (workspace / "docs").is_symlink():
            (workspace / "docs").rename(workspace / "docs.old")
            (workspace / "docs").symlink_to(outside)
        return resolved

    monkeypatch.setattr(os.path, "realpath", swap_after_resolving)
    with capture_logs() as logs:
        built = build_default_prompt_builder(Config()).build(SectionContext(workspace))
    assert SECRET not in built.text
    [warning] = [entry for entry in logs if entry["path"] == str(workspace / "AGENTS.md")]
    assert "AGENTS.md changed while it was opened" in warning["error"]


def test_a_loop_of_links_is_named_as_one(tmp_path: Path) -> None:
    """A SKILL.md that is a link to itself is skipped as a loop, named relative to the workspace."""
    (tmp_path / "skills" / "looped").mkdir(parents=True)
    (tmp_path / "skills" / "looped" / "SKILL.md").symlink_to("SKILL.md")
    [problem] = scan_skills(tmp_path).problems
    assert problem.path == "skills/looped/SKILL.md"
    assert "loop of symbolic links" in problem.reason


def test_a_binary_workspace_file_is_left_out_as_read_file_refuses_it(tmp_path: Path) -> None:
    """A sparse AGENTS.md of gigabytes and a UTF-16 SOUL.md are logged and left out, not NULs."""
    with (tmp_path / "AGENTS.md").open("wb") as sparse:
        sparse.truncate(5 * 1024**3)  # holes: no disk used, and all of it NUL bytes
    (tmp_path / "SOUL.md").write_text("\ufeffBe kind.", encoding="utf-16-le")
    (tmp_path / "USER.md").write_text("Text.", encoding="utf-8")
    with capture_logs() as logs:
        built = build_default_prompt_builder(Config()).build(SectionContext(tmp_path))
    assert "\x00" not in built.text
    assert "## AGENTS.md" not in built.text and "## SOUL.md" not in built.text
    assert "## USER.md\n\nText." in built.text
    binary = {entry["path"]: entry for entry in logs if "binary" in entry["event"]}
    assert set(binary) == {str(tmp_path / "AGENTS.md"), str(tmp_path / "SOUL.md")}
    assert "UTF-8" in binary[str(tmp_path / "SOUL.md")]["hint"]


def test_a_binary_skill_file_is_a_skipped_skill(tmp_path: Path) -> None:
    """A SKILL.md holding a NUL byte is skipped with a reason saying it is binary."""
    (tmp_path / "skills" / "packed").mkdir(parents=True)
    (tmp_path / "skills" / "packed" / "SKILL.md").write_bytes(
        b"---\ndescription: D\nalways: true\n---\nbody\x00\x01\x02"
    )
    scan = scan_skills(tmp_path)
    assert scan.skills == []
    [problem] = scan.problems
    assert problem.path == "skills/packed/SKILL.md"
    assert problem.reason.startswith("is a binary file")


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.one_of(st.binary(max_size=300), st.text(max_size=100).map(str.encode)),
    limit=st.integers(1, 400),
)
def test_whatever_bytes_a_file_holds_the_prompt_gets_text_or_nothing(
    tmp_path: Path, data: bytes, limit: int
) -> None:
    """Any bytes and limit: the walk reads what a plain open reads, and the prompt never a NUL."""
    (tmp_path / "AGENTS.md").write_bytes(data)
    start = read_workspace_file_start(tmp_path, "AGENTS.md", limit)
    assert start == read_file_start(tmp_path / "AGENTS.md", limit)
    assert data.startswith(start.data) and len(start.data) <= limit and start.size == len(data)
    text = read_user_file(tmp_path, "AGENTS.md", max_bytes=limit)
    if b"\0" in start.data:
        assert text is None
        return
    blank = not start.data.decode("utf-8", errors="replace").removeprefix("\ufeff").strip()
    assert (text is None) == (blank and not start.cut)
