"""Folders find_files fails to enter or list for another reason than permission (an I/O
error; a folder removed, or replaced by a file or a link, between its listing in its
parent and the walk going into it): named from the workspace in a last line, and the
walk goes on.

Before, an I/O error ended the whole search with an `Error` naming the folder (all
that was found lost), and a folder removed or replaced was passed over without a word.
A disk's I/O error cannot be made on purpose: the system call that fails is made to
fail with its errno, on real folders; a race is made real, by changing the folder from
the call the walk makes to go into it, just before that call.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core.tools import _glob
from nanobot_core.tools.builtin import FindFilesTool
from tests.tools.support import SECRET, path_parts, planted, run

#: The last line of an answer whose walk met a folder removed or replaced since it was listed.
_CHANGED = "[not searched, changed while the search ran (removed, or replaced by a file or a link)"


def _entering(name: str, before: Callable[[], None]) -> Callable[..., int]:
    """`os.open`, except that going into a folder called `name` first runs `before`."""
    real_open = os.open

    def opening(path: Any, flags: int, *args: Any, dir_fd: int | None = None) -> int:
        if dir_fd is not None and path == name and flags & os.O_DIRECTORY:
            before()
        return real_open(path, flags, *args, dir_fd=dir_fd)

    return opening


def _failing(code: int) -> Callable[[], None]:
    """What makes the call it runs before fail with the errno `code`."""

    def fail() -> None:
        raise OSError(code, os.strerror(code))

    return fail


def _tree(root: Path) -> None:
    """Folders ``a``, ``bad`` and ``c`` below `root`, each holding ``f.txt``."""
    for folder in ("a", "bad", "c"):
        (root / folder).mkdir()
        (root / folder / "f.txt").write_text("x\n", encoding="utf-8")


def test_a_folder_that_fails_to_open_is_named_and_the_walk_goes_on(tmp_path: Path) -> None:
    """A folder whose opening fails with an I/O error is named from the workspace with the
    system's reason, and the folders beside it are still searched."""
    _tree(tmp_path)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "open", _entering("bad", _failing(errno.EIO)))
        deep = run(FindFilesTool(tmp_path).execute(pattern="**/*.txt"))
        one_level = run(FindFilesTool(tmp_path).execute(pattern="*/f.txt"))
    note = "[not searched, could not be read (Input/output error): 1 folder, bad]"
    assert deep == f"a/f.txt\nc/f.txt\n{note}"
    assert one_level == f"a/f.txt\nc/f.txt\n{note}"
    assert str(tmp_path) not in deep


def test_a_folder_that_fails_while_it_is_listed_is_named(tmp_path: Path) -> None:
    """A folder whose listing fails with an I/O error after its first entry is named, what
    it gave before stays found, and the walk goes on with the folders beside it."""
    _tree(tmp_path)
    (tmp_path / "bad" / "g.txt").write_text("x\n", encoding="utf-8")
    bad = os.stat(tmp_path / "bad").st_ino
    real_scandir = os.scandir

    def scandir(folder: Any) -> Any:
        listing = real_scandir(folder)
        if not isinstance(folder, int) or os.fstat(folder).st_ino != bad:
            return listing
        return _FailingListing(listing)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "scandir", scandir)
        result = run(FindFilesTool(tmp_path).execute(pattern="**/*.txt"))
    lines = str(result).splitlines()
    assert lines[-1] == "[not searched, could not be read (Input/output error): 1 folder, bad]"
    # One of bad's two files (the system's order) was listed before the failure.
    assert [line for line in lines[:-1] if not line.startswith("bad/")] == ["a/f.txt", "c/f.txt"]
    assert len([line for line in lines if line.startswith("bad/")]) == 1


class _FailingListing:
    """A folder's listing that gives its first entry, then fails with an I/O error."""

    def __init__(self, listing: Any) -> None:
        self.listing = listing
        self.given = 0

    def __enter__(self) -> _FailingListing:
        return self

    def __exit__(self, *_: object) -> None:
        self.listing.close()

    def __iter__(self) -> Iterator[os.DirEntry[str]]:
        for entry in self.listing:
            if self.given:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            self.given += 1
            yield entry


@pytest.mark.parametrize("change", ["removed", "file", "link"])
def test_a_folder_changed_before_the_walk_goes_into_it_is_named(
    tmp_path: Path, change: str
) -> None:
    """A folder listed, then removed, or replaced by a file or by a link out, before the walk
    goes into it is named as changed, never followed out, and the walk goes on."""
    root = tmp_path / "ws"
    root.mkdir()
    _tree(root)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text(SECRET, encoding="utf-8")

    def replace() -> None:
        if (root / "bad").is_symlink() or not (root / "bad").is_dir():
            return  # changed already: a '**' goes into a folder twice
        shutil.rmtree(root / "bad")
        if change == "file":
            (root / "bad").write_text("now a file\n", encoding="utf-8")
        elif change == "link":
            (root / "bad").symlink_to(outside, target_is_directory=True)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "open", _entering("bad", replace))
        result = run(FindFilesTool(root).execute(pattern="**/*.txt"))
    assert result == f"a/f.txt\nc/f.txt\n{_CHANGED}: 1 folder, bad]"
    assert str(tmp_path) not in result


def test_a_search_below_a_folder_that_fails_keeps_what_it_found(tmp_path: Path) -> None:
    """With many folders failing, the search still answers with all it found, the failed
    folders counted in sorted order past the three named, never an error for the lot."""
    for index in range(6):
        (tmp_path / f"d{index}").mkdir()
    (tmp_path / "seen.txt").write_text("x\n", encoding="utf-8")
    real_open = os.open

    def open_failing(path: Any, flags: int, *args: Any, dir_fd: int | None = None) -> int:
        if dir_fd is not None and str(path).startswith("d"):
            raise OSError(errno.EIO, os.strerror(errno.EIO), path)
        return real_open(path, flags, *args, dir_fd=dir_fd)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "open", open_failing)
        result = run(FindFilesTool(tmp_path).execute(pattern="**/*"))
    folders = [f"d{index}/" for index in range(6)]
    assert str(result).splitlines() == [
        *folders,
        "seen.txt",
        "[not searched, could not be read (Input/output error): 6 folders, d0, d1, d2 and 3 more]",
    ]


def test_glob_without_a_failed_callback_still_raises_as_pathlib(tmp_path: Path) -> None:
    """The glob alone (no one told of failures) raises an I/O error as Python 3.11's pathlib
    does, so it still yields what pathlib yields."""
    _tree(tmp_path)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "open", _entering("bad", _failing(errno.EIO)))
        with pytest.raises(OSError, match="Input/output error"):
            list(_glob.glob(tmp_path, "**/*.txt"))


_PARTS = path_parts(min_size=2)

#: A folder beside the generated ones, with a file to find: no generated name is this long.
_BESIDE = "a-folder-beside-the-generated-ones"


@settings(max_examples=40, deadline=None)
@given(
    parts=_PARTS,
    failing=st.integers(0, 2),
    change=st.sampled_from(["EIO", "ESTALE", "removed", "file", "link"]),
)
def test_whatever_folder_fails_it_is_named_from_the_workspace(
    parts: list[str], failing: int, change: str
) -> None:
    """Whatever the folders are called, which one fails and how, it is named from the
    workspace down to it, what is beside it is found, and no answer says where the
    workspace is or what is outside it."""
    failing = min(failing, len(parts) - 2)  # a folder: the last part is the file
    with planted([], "secret.txt") as (root, outside):
        root.joinpath(*parts[:-1]).mkdir(parents=True)
        root.joinpath(*parts).write_text("x\n", encoding="utf-8")
        (root / _BESIDE).mkdir()
        (root / _BESIDE / "seen.txt").write_text("x\n", encoding="utf-8")
        folder = root.joinpath(*parts[: failing + 1])

        def before() -> None:
            if change in ("EIO", "ESTALE"):
                raise OSError(getattr(errno, change), os.strerror(getattr(errno, change)))
            if folder.is_symlink() or not folder.is_dir():
                return  # changed already: a '**' goes into a folder twice
            shutil.rmtree(folder)
            if change == "file":
                folder.write_text("now a file\n", encoding="utf-8")
            elif change == "link":
                folder.symlink_to(outside, target_is_directory=True)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(os, "open", _entering(parts[failing], before))
            result = run(FindFilesTool(root).execute(pattern="**/*"))
    shown = "/".join(parts[: failing + 1])
    why = (
        f"could not be read ({os.strerror(getattr(errno, change))})"
        if change in ("EIO", "ESTALE")
        else "changed while the search ran (removed, or replaced by a file or a link)"
    )
    # The folders down to the one that failed (listed in its folder), and what is beside.
    listed = [f"{'/'.join(parts[: end + 1])}/" for end in range(failing + 1)]
    found = sorted([*listed, f"{_BESIDE}/", f"{_BESIDE}/seen.txt"])
    assert result == "\n".join([*found, f"[not searched, {why}: 1 folder, {shown}]"])
    assert str(root) not in result and "secret" not in result
