"""Workspace templates and ``init``: written once, never overwriting, left out of the prompt."""

from __future__ import annotations

from pathlib import Path

from nanobot_core.config import Config
from nanobot_core.prompt import SectionContext, build_default_prompt_builder
from nanobot_core.prompt.workspace_files import init_workspace, shipped_template

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
