"""`open_folder_without_links`: the walk into a workspace's folders that never follows a link."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from nanobot_core import open_folder_without_links


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_the_folders_are_made_and_the_last_one_is_opened(tmp_path: Path) -> None:
    """With create, missing folders are made, and a file made in the descriptor is there."""
    fd = open_folder_without_links(tmp_path, [".nanobot", "cache", "mcp"], create=True)
    try:
        os.close(os.open("x.json", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    finally:
        os.close(fd)
    assert (tmp_path / ".nanobot" / "cache" / "mcp" / "x.json").is_file()


@pytest.mark.parametrize("create", [True, False])
@pytest.mark.parametrize("what", ["link", "file"])
def test_a_folder_that_is_a_link_or_a_file_is_refused_naming_it(
    tmp_path: Path, what: str, create: bool
) -> None:
    """A link (to a real folder) or a file on the way raises naming its path below the root;
    nothing is made where the link leads, and nothing is left open."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "ws" / ".nanobot").mkdir(parents=True)
    cache = tmp_path / "ws" / ".nanobot" / "cache"
    if what == "link":
        cache.symlink_to(elsewhere)
    else:
        cache.write_text("", encoding="utf-8")
    before = _open_descriptors()
    with pytest.raises(OSError) as refused:
        open_folder_without_links(tmp_path / "ws", [".nanobot", "cache", "mcp"], create=create)
    # ENOTDIR for a link too where O_DIRECTORY is checked first (Linux); ELOOP elsewhere.
    assert refused.value.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK)
    assert refused.value.filename == ".nanobot/cache"
    assert refused.value.strerror == "is a symbolic link or not a folder, which is not gone through"
    assert list(elsewhere.iterdir()) == []
    assert _open_descriptors() == before


def test_a_missing_folder_without_create_is_not_found_naming_it(tmp_path: Path) -> None:
    """Without create, a missing folder raises FileNotFoundError naming its path below the root."""
    (tmp_path / "a").mkdir()
    with pytest.raises(FileNotFoundError) as missing:
        open_folder_without_links(tmp_path, ["a", "b", "c"])
    assert missing.value.filename == "a/b"
    assert not (tmp_path / "a" / "b").exists()


def test_the_root_itself_may_be_a_link(tmp_path: Path) -> None:
    """The root (the workspace, as the user named it) is opened through a link."""
    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "ws").symlink_to(tmp_path / "real")
    fd = open_folder_without_links(tmp_path / "ws", ["sub"])
    try:
        assert os.fstat(fd).st_ino == (tmp_path / "real" / "sub").stat().st_ino
    finally:
        os.close(fd)
