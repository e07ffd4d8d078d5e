"""`write_project`: a project written whole, or nothing of it left behind."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

from nanobot_core.scaffold import KINDS, PluginProject, render_project, write_project


def _fail_on_write(monkeypatch: pytest.MonkeyPatch, nth: int) -> None:
    """Make the `nth` file opened for writing fail as a full disk does."""
    real_open = Path.open
    opened = 0

    def failing_open(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        nonlocal opened
        if "x" in mode or "w" in mode:
            opened += 1
            if opened == nth:
                raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", failing_open)  # `Path.write_text` opens through it too


@pytest.mark.parametrize("kind", KINDS)
def test_a_project_is_written_whole(tmp_path: Path, kind: str) -> None:
    """Every file the templates give is written, under folders made as needed."""
    project = PluginProject(distribution="acme-words", kind=kind)
    target = tmp_path / "deeper" / "acme"
    written = write_project(project, target)
    expected = render_project(project)
    assert sorted(written) == sorted(target / relative for relative in expected)
    for relative, content in expected.items():
        assert (target / relative).read_text(encoding="utf-8") == content


@pytest.mark.parametrize("nth", [1, 2, 3, 4])
def test_a_write_that_fails_part_of_the_way_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nth: int
) -> None:
    """A disk that fills at any file takes back the files and folders written so far."""
    project = PluginProject(distribution="acme-words", kind="tool")
    (tmp_path / "mine.txt").write_text("the user's", encoding="utf-8")
    _fail_on_write(monkeypatch, nth)
    with pytest.raises(OSError, match="No space left"):
        write_project(project, tmp_path / "a" / "b")
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]
    assert (tmp_path / "mine.txt").read_text(encoding="utf-8") == "the user's"
    # Once the cause is gone, the same call writes the project.
    assert len(write_project(project, tmp_path / "a" / "b")) == len(render_project(project))


def test_a_folder_that_holds_something_else_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Taking back removes only what was written: a file put in a made folder meanwhile stays."""
    target = tmp_path / "acme"
    real_open = Path.open

    def open_then_fail(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if self.name == "pyproject.toml" and mode != "r":
            (target / "notes.txt").write_text("someone else's", encoding="utf-8")
            raise OSError(errno.EDQUOT, "Disk quota exceeded", str(self))
        return real_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", open_then_fail)
    with pytest.raises(OSError, match="quota"):
        write_project(PluginProject(distribution="acme-words", kind="tool"), target)
    monkeypatch.undo()
    assert [p.name for p in target.iterdir()] == ["notes.txt"]


def test_an_existing_target_is_refused_and_kept(tmp_path: Path) -> None:
    """A target that is there already is a FileExistsError; nothing in it changes."""
    target = tmp_path / "acme"
    target.mkdir()
    (target / "README.md").write_text("mine", encoding="utf-8")
    with pytest.raises(FileExistsError):
        write_project(PluginProject(distribution="acme-words", kind="tool"), target)
    assert [p.name for p in target.iterdir()] == ["README.md"]
    assert (target / "README.md").read_text(encoding="utf-8") == "mine"
