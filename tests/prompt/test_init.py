"""Workspace templates and ``init``: written once, never overwriting, left out of the prompt."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

from nanobot_core.config import Config
from nanobot_core.prompt import SectionContext, build_default_prompt_builder
from nanobot_core.prompt.workspace_files import init_workspace, shipped_template
from tests.helpers import clean_env, run_cli

TEMPLATES = Path(__file__).resolve().parents[2] / "nanobot_core" / "prompt" / "templates"
FILES = ["AGENTS.md", "SOUL.md", "USER.md", "memory/MEMORY.md"]


def test_shipped_templates_are_the_package_data_files() -> None:
    """Each template loaded as a package resource is the file in prompt/templates/."""
    for relative in FILES:
        assert shipped_template(relative) == (TEMPLATES / relative).read_text(encoding="utf-8")
        assert shipped_template(relative).strip()


def test_init_writes_every_template_into_a_new_workspace(tmp_path: Path) -> None:
    """A missing workspace is created and receives all four templates."""
    workspace = tmp_path / "new" / "ws"
    report = init_workspace(workspace)
    assert report.written == FILES
    assert report.kept == []
    for relative in FILES:
        expected = (TEMPLATES / relative).read_text(encoding="utf-8")
        assert (workspace / relative).read_text(encoding="utf-8") == expected


def test_init_never_overwrites_an_existing_file(tmp_path: Path) -> None:
    """Files already present, even empty ones, are kept byte for byte and reported as kept."""
    (tmp_path / "AGENTS.md").write_text("my own rules")
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "MEMORY.md").write_text("")
    report = init_workspace(tmp_path)
    assert report.written == ["SOUL.md", "USER.md"]
    assert report.kept == ["AGENTS.md", "memory/MEMORY.md"]
    assert (tmp_path / "AGENTS.md").read_text() == "my own rules"
    assert (tmp_path / "memory" / "MEMORY.md").read_text() == ""


def test_running_init_twice_writes_nothing_the_second_time(tmp_path: Path) -> None:
    """A second init keeps everything, including a template the user has since edited."""
    init_workspace(tmp_path)
    (tmp_path / "USER.md").write_text("Call me Ada.")
    report = init_workspace(tmp_path)
    assert report.written == []
    assert report.kept == FILES
    assert (tmp_path / "USER.md").read_text() == "Call me Ada."


def test_a_fresh_workspace_adds_nothing_to_the_prompt(tmp_path: Path) -> None:
    """Right after init the templates are not user memory: the prompt is as without them."""
    builder = build_default_prompt_builder(Config())
    before = builder.build(SectionContext(workspace=tmp_path)).text
    init_workspace(tmp_path)
    built = builder.build(SectionContext(workspace=tmp_path))
    assert built.text == before
    assert {r.name for r in built.sections if r.skipped} == {"bootstrap", "memory", "skills"}


def _limit_file_size() -> None:
    """A file size limit of 100 bytes, shorter than every template: its write fails half-way."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))


def test_init_that_fails_half_way_leaves_no_part_of_a_template(tmp_path: Path) -> None:
    """`init` whose writes fail part of the way (a full disk, here a file size limit) is
    exit 1 naming the templates and why, and leaves no part of one, which the next `init`
    would keep as the user's own and the prompt send as the user's rules; the next `init`
    writes them whole."""
    workspace = tmp_path / "ws"
    failed = subprocess.run(
        [sys.executable, "-m", "nanobot_core", "init", "--workspace", str(workspace)],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=tmp_path,
        preexec_fn=_limit_file_size,
        timeout=60,
        check=False,
    )
    assert failed.returncode == 1, failed.stderr
    assert failed.stderr == (
        f"Error: cannot write templates into {workspace}: AGENTS.md: File too large; "
        "SOUL.md: File too large; USER.md: File too large; memory/MEMORY.md: File too large\n"
    )
    assert [path for path in workspace.rglob("*") if path.is_file()] == []
    again = run_cli("init", "--workspace", str(workspace), "--json", cwd=tmp_path, timeout=60)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["written"] == FILES
    for relative in FILES:
        assert (workspace / relative).read_text(encoding="utf-8") == shipped_template(relative)


def test_init_with_a_file_where_a_folder_goes_writes_the_others_and_names_it(
    tmp_path: Path,
) -> None:
    """A file named `memory` where the folder of memory/MEMORY.md goes: every other template
    is written, the file is left as it is, and `init` is exit 1 naming what is in the way."""
    (tmp_path / "memory").write_text("my notes", encoding="utf-8")
    report = init_workspace(tmp_path)
    assert report.written == ["AGENTS.md", "SOUL.md", "USER.md"]
    assert report.failed == {"memory/MEMORY.md": "memory is not a folder"}
    assert (tmp_path / "memory").read_text(encoding="utf-8") == "my notes"
    result = run_cli("init", "--workspace", str(tmp_path), "--json", cwd=tmp_path, timeout=60)
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stdout) == {
        "workspace": str(tmp_path.resolve()),
        "written": [],
        "kept": ["AGENTS.md", "SOUL.md", "USER.md"],
        "failed": {"memory/MEMORY.md": "memory is not a folder"},
    }
    assert result.stderr == (
        f"Error: cannot write templates into {tmp_path.resolve()}: memory/MEMORY.md: "
        "memory is not a folder\n"
    )
