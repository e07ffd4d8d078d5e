"""The built-in sections: identity, bootstrap, tool_contract, memory and skills."""

from __future__ import annotations

import os
import platform
import re
import threading
from collections.abc import Callable
from pathlib import Path

from nanobot_core.config import Config
from nanobot_core.prompt import (
    BUILTIN_SECTION_NAMES,
    BuiltPrompt,
    SectionContext,
    build_default_prompt_builder,
)
from nanobot_core.prompt.builtin_sections import (
    render_bootstrap,
    render_identity,
    render_memory,
    render_tool_contract,
)
from nanobot_core.prompt.skills import SkillScan, scan_skills

TEMPLATES = Path(__file__).resolve().parents[2] / "nanobot_core" / "prompt" / "templates"


def _ctx(workspace: Path) -> SectionContext:
    return SectionContext(workspace=workspace)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8"))


def _build(workspace: Path) -> BuiltPrompt:
    return build_default_prompt_builder(Config()).build(_ctx(workspace))


def test_builtin_sections_come_in_the_documented_order(tmp_path: Path) -> None:
    """The five built-in sections come in the documented order, all from builtin:prompt."""
    reports = _build(tmp_path).sections
    assert [r.name for r in reports] == [
        "identity",
        "bootstrap",
        "tool_contract",
        "memory",
        "skills",
    ]
    assert list(BUILTIN_SECTION_NAMES) == [r.name for r in reports]
    assert {r.plugin for r in reports} == {"builtin:prompt"}


def test_an_empty_workspace_gets_identity_and_tool_contract_only(tmp_path: Path) -> None:
    """With no workspace files, bootstrap, memory and skills render nothing."""
    built = _build(tmp_path)
    skipped = {r.name for r in built.sections if r.skipped}
    assert skipped == {"bootstrap", "memory", "skills"}
    assert built.text.startswith("# Identity\n")
    assert built.text.count("\n\n---\n\n") == 1


def test_identity_names_platform_python_and_workspace(tmp_path: Path) -> None:
    """identity states the OS, machine, Python version and workspace path."""
    text = render_identity(_ctx(tmp_path))
    assert f"- Workspace: {tmp_path}\n" in text
    assert platform.system() in text
    assert platform.machine() in text
    assert platform.python_version() in text


def test_identity_holds_nothing_volatile(tmp_path: Path) -> None:
    """identity contains no host name and no time-of-day, so it is stable across turns."""
    text = render_identity(_ctx(tmp_path)).replace(str(tmp_path), "WORKSPACE")
    assert platform.node() not in text
    assert not re.search(r"\d{1,2}:\d{2}", text)
    assert not re.search(r"\d{4}-\d{2}-\d{2}", text)


def test_bootstrap_puts_each_file_under_its_heading_in_fixed_order(tmp_path: Path) -> None:
    """AGENTS.md, SOUL.md and USER.md appear in that order, whatever order they were written."""
    _write(tmp_path / "USER.md", "I am Ada.\n")
    _write(tmp_path / "SOUL.md", "Be kind.")
    _write(tmp_path / "AGENTS.md", "\n\nRun the tests.\n\n")
    assert render_bootstrap(_ctx(tmp_path)) == (
        "# Workspace instructions\n\n"
        "## AGENTS.md\n\nRun the tests.\n\n"
        "## SOUL.md\n\nBe kind.\n\n"
        "## USER.md\n\nI am Ada."
    )


def test_bootstrap_leaves_out_templates_and_empty_files(tmp_path: Path) -> None:
    """A file still holding the shipped template, or only whitespace, is not in the prompt."""
    agents_template = (TEMPLATES / "AGENTS.md").read_text(encoding="utf-8")
    _write(tmp_path / "AGENTS.md", "\n  " + agents_template.replace("\n", "\r\n") + "\n\n")
    _write(tmp_path / "SOUL.md", "")
    _write(tmp_path / "USER.md", "Prefers metric units.")
    assert render_bootstrap(_ctx(tmp_path)) == (
        "# Workspace instructions\n\n## USER.md\n\nPrefers metric units."
    )


def test_bootstrap_renders_nothing_when_every_file_is_template_or_empty(tmp_path: Path) -> None:
    """With only templates and blank files, the bootstrap section is skipped entirely."""
    for name in ("AGENTS.md", "SOUL.md"):
        _write(tmp_path / name, (TEMPLATES / name).read_text(encoding="utf-8"))
    _write(tmp_path / "USER.md", " \n\n\t\n")
    assert render_bootstrap(_ctx(tmp_path)) is None


def test_an_edited_template_is_user_content(tmp_path: Path) -> None:
    """A template with one added line is the user's file and goes in whole."""
    soul = (TEMPLATES / "SOUL.md").read_text(encoding="utf-8") + "Answer briefly.\n"
    _write(tmp_path / "SOUL.md", soul)
    text = render_bootstrap(_ctx(tmp_path))
    assert text is not None
    assert text.endswith("Answer briefly.")
    assert "## SOUL.md\n\n# Soul\n" in text


def test_bootstrap_survives_undecodable_bytes_and_crlf(tmp_path: Path) -> None:
    """Invalid UTF-8 is replaced and CRLF becomes LF, so one bad byte never loses the file."""
    (tmp_path / "AGENTS.md").write_bytes(b"line one\r\nbad \xff byte\r\n")
    assert render_bootstrap(_ctx(tmp_path)) == (
        "# Workspace instructions\n\n## AGENTS.md\n\nline one\nbad \ufffd byte"
    )


def test_a_directory_named_like_a_bootstrap_file_is_ignored(tmp_path: Path) -> None:
    """AGENTS.md being a directory leaves it out instead of breaking the section."""
    (tmp_path / "AGENTS.md").mkdir()
    _write(tmp_path / "USER.md", "Hi.")
    assert render_bootstrap(_ctx(tmp_path)) == "# Workspace instructions\n\n## USER.md\n\nHi."


def test_tool_contract_explains_errors_and_offloaded_results(tmp_path: Path) -> None:
    """tool_contract explains Error results and reading offloaded text with read_file."""
    text = render_tool_contract(_ctx(tmp_path))
    assert 'starts with "Error"' in text
    assert "read_file" in text
    assert "JSON" in text


def test_memory_renders_memory_md(tmp_path: Path) -> None:
    """memory puts memory/MEMORY.md under a Memory heading."""
    _write(tmp_path / "memory" / "MEMORY.md", "- The deploy key is in 1Password.\n")
    text = render_memory(_ctx(tmp_path))
    assert text is not None
    assert text.startswith("# Memory\n")
    assert text.endswith("\n\n- The deploy key is in 1Password.")


def test_memory_template_and_empty_memory_are_left_out(tmp_path: Path) -> None:
    """The shipped MEMORY.md template, or an empty one, is not user memory."""
    memory = tmp_path / "memory" / "MEMORY.md"
    _write(memory, (TEMPLATES / "memory" / "MEMORY.md").read_text(encoding="utf-8") + "\n\n")
    assert render_memory(_ctx(tmp_path)) is None
    _write(memory, "")
    assert render_memory(_ctx(tmp_path)) is None


def test_full_prompt_places_user_files_between_fixed_sections(tmp_path: Path) -> None:
    """With every file present, sections appear in order, separated by '---' lines."""
    _write(tmp_path / "AGENTS.md", "AGENTS-TEXT")
    _write(tmp_path / "memory" / "MEMORY.md", "MEMORY-TEXT")
    _write(tmp_path / "skills" / "s" / "SKILL.md", "---\ndescription: SKILL-TEXT\n---\n")
    text = _build(tmp_path).text
    positions = [
        text.index(marker)
        for marker in ("# Identity", "AGENTS-TEXT", "# Using tools", "MEMORY-TEXT", "SKILL-TEXT")
    ]
    assert positions == sorted(positions)
    assert text.count("\n\n---\n\n") == 4


def _finishes(work: Callable[[], object], fifo: Path) -> tuple[bool, object]:
    """Run `work` in a thread for up to five seconds; unblock a reader of `fifo` if it hangs."""
    done: list[object] = []
    thread = threading.Thread(target=lambda: done.append(work()), daemon=True)
    thread.start()
    thread.join(5)
    if thread.is_alive():  # blocked opening the pipe: give it a writer, so the thread ends
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5)
        return False, None
    return True, done[0]


def test_a_named_pipe_as_a_workspace_file_is_left_out_without_hanging(tmp_path: Path) -> None:
    """AGENTS.md and memory/MEMORY.md being named pipes leaves them out instead of waiting."""
    os.mkfifo(tmp_path / "AGENTS.md")
    (tmp_path / "memory").mkdir()
    os.mkfifo(tmp_path / "memory" / "MEMORY.md")
    _write(tmp_path / "USER.md", "Hi.")
    finished, bootstrap = _finishes(
        lambda: render_bootstrap(_ctx(tmp_path)), tmp_path / "AGENTS.md"
    )
    assert finished and bootstrap == "# Workspace instructions\n\n## USER.md\n\nHi."
    memory = tmp_path / "memory" / "MEMORY.md"
    finished, rendered = _finishes(lambda: render_memory(_ctx(tmp_path)), memory)
    assert finished and rendered is None


def test_a_named_pipe_as_a_skill_file_is_reported_without_hanging(tmp_path: Path) -> None:
    """A SKILL.md that is a named pipe is a skipped skill with a reason, not a hung prompt."""
    (tmp_path / "skills" / "piped").mkdir(parents=True)
    fifo = tmp_path / "skills" / "piped" / "SKILL.md"
    os.mkfifo(fifo)
    finished, scan = _finishes(lambda: scan_skills(tmp_path), fifo)
    assert finished
    assert isinstance(scan, SkillScan) and scan.skills == []
    [problem] = scan.problems
    assert problem.path == "skills/piped/SKILL.md"
    assert problem.reason.endswith(f"{fifo} is a named pipe (FIFO), not a regular file")
