"""Workspace templates and ``init``: written once, never overwriting, left out of the prompt."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core.config import Config
from nanobot_core.errors import WorkspaceEscapeError
from nanobot_core.prompt import SectionContext, build_default_prompt_builder
from nanobot_core.prompt.workspace_files import (
    init_workspace,
    read_workspace_file_start,
    shipped_template,
)
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


def test_init_writes_no_memory_through_a_link_out_of_the_workspace(tmp_path: Path) -> None:
    """`memory` a link to a folder outside the workspace: no MEMORY.md is made there (the
    prompt reads none through it), the other templates are written, and `init` is exit 1
    naming the link and where it leads."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (workspace / "memory").symlink_to(elsewhere)
    report = init_workspace(workspace)
    reason = (
        f"memory is a link out of the workspace (to {elsewhere}), which the prompt does not "
        "follow: nothing is written through it"
    )
    assert report.written == ["AGENTS.md", "SOUL.md", "USER.md"]
    assert report.kept == []
    assert report.failed == {"memory/MEMORY.md": reason}
    assert list(elsewhere.iterdir()) == []
    result = run_cli("init", "--workspace", str(workspace), cwd=tmp_path, timeout=60)
    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        f"Error: cannot write templates into {workspace}: memory/MEMORY.md: {reason}\n"
    )
    assert list(elsewhere.iterdir()) == []


def test_init_writes_memory_through_a_link_inside_the_workspace_where_the_prompt_reads_it(
    tmp_path: Path,
) -> None:
    """`memory` a link to a folder of the workspace: MEMORY.md is written there, and what
    the user then writes in it is the prompt's memory, as the prompt follows the link."""
    (tmp_path / "notes").mkdir()
    (tmp_path / "memory").symlink_to("notes")
    report = init_workspace(tmp_path)
    assert report.written == FILES and report.failed == {}
    written = tmp_path / "notes" / "MEMORY.md"
    assert written.read_text(encoding="utf-8") == shipped_template("memory/MEMORY.md")
    written.write_text("Ada prefers tabs.", encoding="utf-8")
    built = build_default_prompt_builder(Config()).build(SectionContext(workspace=tmp_path))
    assert "Ada prefers tabs." in built.text


def test_init_says_a_link_to_nothing_is_one_and_writes_nothing_through_it(
    tmp_path: Path,
) -> None:
    """AGENTS.md a link to nothing is no file the prompt reads: `init` does not call it kept,
    writes nothing through it (the link stays, its target is not made), and is exit 1 naming
    it a link to nothing and where it points."""
    missing = tmp_path / "gone" / "rules.md"
    (tmp_path / "AGENTS.md").symlink_to(missing)
    reason = f"AGENTS.md is a link to nothing ({missing}): nothing is written through it"
    report = init_workspace(tmp_path)
    assert report.kept == []
    assert report.written == ["SOUL.md", "USER.md", "memory/MEMORY.md"]
    assert report.failed == {"AGENTS.md": reason}
    assert (tmp_path / "AGENTS.md").is_symlink()
    assert not (tmp_path / "gone").exists()
    result = run_cli("init", "--workspace", str(tmp_path), cwd=tmp_path, timeout=60)
    assert result.returncode == 1, result.stderr
    assert "kept  AGENTS.md" not in result.stdout
    assert result.stderr == f"Error: cannot write templates into {tmp_path}: AGENTS.md: {reason}\n"


def test_init_keeps_only_what_the_prompt_reads(tmp_path: Path) -> None:
    """A file the prompt leaves out is not reported kept: AGENTS.md linked out of the
    workspace, SOUL.md a folder, USER.md a link to a named pipe, `memory` a link in a
    loop; each is named under `failed`, and left as it is."""
    outside = tmp_path / "outside.md"
    outside.write_text("secret", encoding="utf-8")
    workspace = tmp_path / "ws"
    (workspace / "SOUL.md").mkdir(parents=True)
    (workspace / "AGENTS.md").symlink_to(outside)
    os.mkfifo(workspace / "pipe")
    (workspace / "USER.md").symlink_to("pipe")
    (workspace / "memory").symlink_to("memory")
    report = init_workspace(workspace)
    assert report.written == []
    assert report.kept == []
    assert report.failed == {
        "AGENTS.md": (
            f"AGENTS.md is a link out of the workspace (to {outside}), which the prompt does "
            "not follow: nothing is written through it"
        ),
        "SOUL.md": "SOUL.md is a directory, not a file: the prompt does not read it",
        "USER.md": (
            f"USER.md links to {workspace / 'pipe'}, which is a named pipe (FIFO), not a "
            "file: the prompt does not read it"
        ),
        "memory/MEMORY.md": "memory is a link in a loop: nothing is written through it",
    }
    assert outside.read_text(encoding="utf-8") == "secret"
    assert list((workspace / "SOUL.md").iterdir()) == []


#: What may stand where a template, or the `memory` folder, goes.
_SHAPES = [
    "missing",
    "file",
    "folder",
    "link inside",
    "link outside",
    "link to nothing",
    "link in a loop",
]


def _make(path: Path, shape: str, *, folder: bool, inside: Path, outside: Path) -> None:
    """Put `shape` at `path`; a link leads to a folder when `folder` (for `memory`), else
    to a file."""
    if shape == "missing":
        return
    if shape == "file":  # where `memory` goes too: a file where a folder goes
        path.write_text("mine", encoding="utf-8")
        return
    if shape == "folder":  # where a template goes too: a folder where a file goes
        path.mkdir()
        return
    if shape == "link to nothing":
        path.symlink_to(inside / f"nothing-{path.name}")
        return
    if shape == "link in a loop":
        path.symlink_to(path.name)
        return
    target = (inside if shape == "link inside" else outside) / f"target-{path.name}"
    target.mkdir() if folder else target.write_text("theirs", encoding="utf-8")
    path.symlink_to(target)


@given(
    shapes=st.fixed_dictionaries(
        {name: st.sampled_from(_SHAPES) for name in ["AGENTS.md", "SOUL.md", "USER.md"]}
    ),
    memory=st.sampled_from(_SHAPES),
    memory_file=st.sampled_from(_SHAPES),
)
@settings(max_examples=80, deadline=None, database=None)
def test_init_writes_nothing_outside_and_keeps_exactly_what_the_prompt_reads(
    shapes: dict[str, str], memory: str, memory_file: str
) -> None:
    """Whatever stands where the templates go (files, folders, links in and out of the
    workspace, links to nothing): nothing outside the workspace changes; each template is
    written, kept or failed, once; written and kept ones are what the prompt reads, the
    written ones holding the template; failed ones are what it cannot read."""
    with tempfile.TemporaryDirectory() as temporary:
        base = Path(temporary).resolve()
        workspace, outside = base / "ws", base / "outside"
        (workspace / "in").mkdir(parents=True)
        outside.mkdir()
        for name, shape in shapes.items():
            _make(workspace / name, shape, folder=False, inside=workspace / "in", outside=outside)
        _make(workspace / "memory", memory, folder=True, inside=workspace / "in", outside=outside)
        if (workspace / "memory").is_dir():
            where = Path(os.path.realpath(workspace / "memory"))
            _make(
                where / "MEMORY.md",
                memory_file,
                folder=False,
                inside=workspace / "in",
                outside=outside,
            )
        before = sorted((p, p.is_symlink()) for p in outside.rglob("*"))
        contents = {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()}
        report = init_workspace(workspace)
        assert sorted((p, p.is_symlink()) for p in outside.rglob("*")) == before
        assert {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()} == contents
        assert sorted([*report.written, *report.kept, *report.failed]) == sorted(FILES)
        for relative in FILES:
            try:
                start = read_workspace_file_start(workspace, relative, 1 << 20)
            except (OSError, WorkspaceEscapeError):
                assert relative in report.failed, relative
                continue
            assert relative not in report.failed, (relative, report.failed)
            if relative in report.written:
                assert start.data == shipped_template(relative).encode("utf-8")


def test_init_writes_nothing_through_a_folder_swapped_for_a_link_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`memory` swapped for a link out of the workspace after `init` found it a folder: the
    link is met as one, never written through, and the template is named under `failed`."""
    import nanobot_core.prompt.workspace_files as workspace_files

    workspace = tmp_path / "ws"
    (workspace / "memory").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    find = workspace_files._template_place

    def swapped(root: Path, relative: str) -> Path | str | None:
        place = find(root, relative)
        if relative == "memory/MEMORY.md":
            (workspace / "memory").rmdir()
            (workspace / "memory").symlink_to(elsewhere)
        return place

    monkeypatch.setattr(workspace_files, "_template_place", swapped)
    report = init_workspace(workspace)
    assert report.written == ["AGENTS.md", "SOUL.md", "USER.md"]
    assert report.failed == {
        "memory/MEMORY.md": "memory became a link or a file while init ran: nothing is "
        "written through it"
    }
    assert list(elsewhere.iterdir()) == []
