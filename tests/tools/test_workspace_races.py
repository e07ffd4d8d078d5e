"""File tools against a workspace that changes under them: links swapped in, hard links planted."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nanobot_core.tools.base import ToolResult
from nanobot_core.tools.builtin import (
    EditFileTool,
    FindFilesTool,
    ListDirTool,
    ReadFileTool,
    WorkspaceTool,
    WriteFileTool,
)
from tests.tools.support import run

TRIES = 3_000


@pytest.fixture
def swapper(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A workspace whose folder ``d`` a thread keeps swapping with a link to an outside folder."""
    workspace = tmp_path / "ws"
    (workspace / "d").mkdir(parents=True)
    (workspace / "d" / "f.txt").write_text("inside\n", encoding="utf-8")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("OUTSIDE SECRET\n", encoding="utf-8")
    real = workspace / "d"
    parked = workspace / "d-real"
    link = workspace / "d-link"
    link.symlink_to(outside, target_is_directory=True)
    stop = threading.Event()
    swaps = [0]

    def swap() -> None:
        while not stop.is_set():
            try:
                os.rename(real, parked)
                os.rename(link, real)  # now "d" is a link to the outside
                os.rename(real, link)
                os.rename(parked, real)
                swaps[0] += 1
            except OSError:
                _restore(real, parked, link)

    thread = threading.Thread(target=swap, daemon=True)
    thread.start()
    try:
        yield workspace, outside
    finally:
        stop.set()
        thread.join()
    assert swaps[0] > 10  # the race really ran


def _restore(real: Path, parked: Path, link: Path) -> None:
    """A writer made a fresh "d" while ours was parked: drop it and put ours back."""
    while parked.exists():
        try:
            if real.is_symlink():
                os.rename(real, link)
            elif real.exists():
                shutil.rmtree(real, ignore_errors=True)
            else:
                os.rename(parked, real)
        except OSError:
            continue


def _call(tool: ReadFileTool | WriteFileTool, **arguments: object) -> ToolResult:
    # What execute() runs in its worker thread; the thread hop would only slow the race down.
    return tool._guarded(**arguments)


def test_read_file_never_returns_an_outside_file_while_a_folder_is_swapped(
    swapper: tuple[Path, Path],
) -> None:
    """Thousands of reads racing a folder-for-symlink swap never see the outside file."""
    workspace, _ = swapper
    tool = ReadFileTool(workspace)
    texts = [str(_call(tool, path="d/f.txt")) for _ in range(TRIES)]
    assert not any("OUTSIDE SECRET" in text for text in texts)
    assert any("inside" in text for text in texts)


def test_write_file_never_creates_an_outside_file_while_a_folder_is_swapped(
    swapper: tuple[Path, Path],
) -> None:
    """Thousands of writes racing the swap create nothing outside and leave the outside intact."""
    workspace, outside = swapper
    tool = WriteFileTool(workspace)
    for index in range(TRIES):
        _call(tool, path=f"d/new-{index % 50}.txt", content="written")
        _call(tool, path="d/f.txt", content="overwritten\n")
    assert sorted(p.name for p in outside.iterdir()) == ["f.txt"]
    assert (outside / "f.txt").read_text(encoding="utf-8") == "OUTSIDE SECRET\n"


def test_a_folder_swapped_for_a_link_to_a_file_is_still_a_changed_path(tmp_path: Path) -> None:
    """A link where a checked folder was is refused as a changed path, not called a file."""
    from nanobot_core.errors import WorkspaceEscapeError
    from nanobot_core.tools.workspace import open_in_workspace

    workspace = tmp_path / "ws"
    workspace.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("keep", encoding="utf-8")
    target = workspace / "d" / "f.txt"  # checked while d was a folder (or missing)
    (workspace / "d").symlink_to(outside)  # then planted
    with (
        pytest.raises(WorkspaceEscapeError, match="changed"),
        open_in_workspace(workspace, target, "w"),
    ):
        pass
    assert outside.read_text(encoding="utf-8") == "keep"


def test_a_symlinked_file_is_refused_by_write_when_it_appears_after_the_check(
    tmp_path: Path,
) -> None:
    """The final component is opened with O_NOFOLLOW: a link there is refused, not followed."""
    from nanobot_core.errors import WorkspaceEscapeError
    from nanobot_core.tools.workspace import open_in_workspace

    workspace = tmp_path / "ws"
    workspace.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("keep", encoding="utf-8")
    target = workspace / "f.txt"  # checked while it did not exist
    target.symlink_to(outside)  # then planted
    with (
        pytest.raises(WorkspaceEscapeError, match="changed"),
        open_in_workspace(workspace, target, "w"),
    ):
        pass
    assert outside.read_text(encoding="utf-8") == "keep"


def test_writes_through_a_hard_link_are_refused_and_say_so(tmp_path: Path) -> None:
    """write_file and edit_file refuse a file with two links; the outside name is unchanged."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("original text\n", encoding="utf-8")
    os.link(outside, workspace / "linked.txt")
    written = run(WriteFileTool(workspace).execute(path="linked.txt", content="replaced"))
    assert written.is_error and "2 hard links" in str(written)
    edited = run(
        EditFileTool(workspace).execute(path="linked.txt", old_text="original", new_text="x")
    )
    assert edited.is_error and "hard link" in str(edited)
    assert outside.read_text(encoding="utf-8") == "original text\n"


def test_a_single_link_file_is_written_and_edited_as_before(tmp_path: Path) -> None:
    """Ordinary files (one link) are written, edited and read back unchanged in behaviour."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    written = run(WriteFileTool(workspace).execute(path="a/b/c.txt", content="one\r\ntwo\r\n"))
    assert not written.is_error
    edit = EditFileTool(workspace)
    edited = run(edit.execute(path="a/b/c.txt", old_text="one\n", new_text="1\n"))
    assert not edited.is_error
    assert (workspace / "a" / "b" / "c.txt").read_bytes() == b"1\r\ntwo\r\n"
    read = run(ReadFileTool(workspace).execute(path="a/b/c.txt"))
    assert "1" in str(read) and "two" in str(read)


def test_edit_file_refuses_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    """A file that is not UTF-8 is refused by edit_file and left byte for byte as it was."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "latin1.txt").write_bytes(b"caf\xe9 old\n")
    edited = run(EditFileTool(workspace).execute(path="latin1.txt", old_text="old", new_text="new"))
    assert edited.is_error and "not UTF-8" in str(edited)
    assert (workspace / "latin1.txt").read_bytes() == b"caf\xe9 old\n"


def test_grep_with_a_catastrophic_pattern_stops_at_its_timeout(tmp_path: Path) -> None:
    """``(a+)+$`` on a long line of a's is stopped at the search timeout with an explanation."""
    import time

    from nanobot_core.tools.builtin import GrepTool

    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("a" * 40 + "!\n", encoding="utf-8")
    tool = GrepTool(workspace, search_timeout=2.0)
    started = time.monotonic()
    result = run(tool.execute(pattern="(a+)+$"))
    elapsed = time.monotonic() - started
    assert result.is_error and "did not finish within 2s" in str(result)
    assert "nested quantifiers" in str(result)
    assert elapsed < 30  # stopped, not left to backtrack for hours (no timing asserted closely)
    found = run(GrepTool(workspace).execute(pattern="a{3}"))  # the default timeout, 60 s
    assert not found.is_error and "a.txt:1:" in str(found)


# -- listing and searching while a folder is swapped ------------------------------------------

#: Seconds each listing race runs at most (it stops sooner after `TRIES` answers).
RACE_SECONDS = 4.0


def _answers(tool: WorkspaceTool, **arguments: object) -> list[str]:
    """The tool's answers to the same call, repeated for `TRIES` calls or `RACE_SECONDS`."""
    answers = []
    deadline = time.monotonic() + RACE_SECONDS
    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # the swapping thread gets in between more often
    try:
        while len(answers) < TRIES and time.monotonic() < deadline:
            answers.append(str(tool._guarded(**arguments)))
    finally:
        sys.setswitchinterval(switching)
    return answers


@pytest.mark.parametrize("pattern", ["d/*", "*/*", "**/*", "d/**/*"])
def test_find_files_never_shows_an_outside_name_while_a_folder_is_swapped(
    swapper: tuple[Path, Path], pattern: str
) -> None:
    """find_files racing a folder-for-symlink swap never shows a name only the outside holds."""
    workspace, outside = swapper
    (outside / "outside-only.txt").touch()
    (outside / "outside-dir").mkdir()
    answers = _answers(FindFilesTool(workspace), pattern=pattern)
    assert not [answer for answer in answers if "outside-" in answer]
    assert any("d/f.txt" in answer for answer in answers)


def test_list_dir_never_lists_the_outside_while_a_folder_is_swapped(
    swapper: tuple[Path, Path],
) -> None:
    """list_dir of a folder racing its swap for a link out never lists the outside's names."""
    workspace, outside = swapper
    (outside / "outside-only.txt").touch()
    answers = _answers(ListDirTool(workspace), path="d")
    assert not [answer for answer in answers if "outside-" in answer]
    assert any("f.txt" in answer for answer in answers)


def test_grep_never_reads_or_names_an_outside_file_while_a_folder_is_swapped(
    swapper: tuple[Path, Path],
) -> None:
    """grep's search racing the swap never shows an outside file's name or lines."""
    from nanobot_core.tools.builtin import GrepTool, _contained

    workspace, outside = swapper
    (outside / "outside-only.txt").write_text("OUTSIDE SECRET\n", encoding="utf-8")
    tool = GrepTool(workspace)
    answers = []
    deadline = time.monotonic() + RACE_SECONDS
    while len(answers) < TRIES and time.monotonic() < deadline:
        # What the search's child process runs; a process for each would only slow the race.
        answers.append(str(_contained(tool.search, pattern=".")))
    assert not [answer for answer in answers if "outside-" in answer or "OUTSIDE" in answer]
    assert any("d/f.txt:1: inside" in answer for answer in answers)


def test_grep_goes_on_past_a_file_swapped_for_a_link_while_it_searches(tmp_path: Path) -> None:
    """grep racing a file-for-link swap never fails the search: it names the file it skipped."""
    from nanobot_core.tools.builtin import GrepTool, _contained

    workspace = tmp_path / "ws"
    (workspace / "d").mkdir(parents=True)
    (workspace / "d" / "a.txt").write_text("needle a\n", encoding="utf-8")
    swapped = workspace / "d" / "x.txt"
    swapped.write_text("needle x\n", encoding="utf-8")
    parked, link = workspace / "x-real", workspace / "x-link"  # beside "d", not searched
    outside = tmp_path / "outside.txt"
    outside.write_text("OUTSIDE SECRET\n", encoding="utf-8")
    link.symlink_to(outside)
    stop = threading.Event()
    swaps = [0]

    def swap() -> None:
        while not stop.is_set():
            os.rename(swapped, parked)
            os.rename(link, swapped)  # now "d/x.txt" is a link out
            os.rename(swapped, link)
            os.rename(parked, swapped)
            swaps[0] += 1

    thread = threading.Thread(target=swap, daemon=True)
    tool = GrepTool(workspace)
    answers = []
    deadline = time.monotonic() + RACE_SECONDS
    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # the swapping thread gets in between more often
    thread.start()
    try:
        while len(answers) < TRIES and time.monotonic() < deadline:
            # What the search's child process runs; a process for each would only slow the race.
            answers.append(str(_contained(tool.search, pattern="needle|SECRET", path="d")))
    finally:
        sys.setswitchinterval(switching)
        stop.set()
        thread.join()
    assert swaps[0] > 10  # the race really ran
    skipped = (
        "[not searched, changed while the search ran (removed, or replaced by a link or a "
        "folder): 1 file, d/x.txt]"
    )
    allowed = {"d/a.txt:1: needle a", "d/x.txt:1: needle x", skipped}
    assert [answer for answer in answers if not set(answer.splitlines()) <= allowed] == []
    assert all(answer.startswith("d/a.txt:1: needle a") for answer in answers)
    assert any(skipped in answer for answer in answers)  # the race was met, and said
