"""The one JSONL framing module and the one atomic-write helper."""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core._atomic import create_new, write_atomic
from nanobot_core._jsonl import encode_lines, split_lines

BOM = b"\xef\xbb\xbf"  # the UTF-8 byte-order mark

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(st.characters(exclude_categories=["Cs"])),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(st.characters(exclude_categories=["Cs"])), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(st.lists(JSON_VALUES, max_size=5), st.booleans())
def test_encoded_lines_split_back_into_the_same_values(values: list[object], bom: bool) -> None:
    """Values written as lines come back one per line, in order, as valid UTF-8 JSON, a
    byte-order mark an editor put before them or not."""
    data = (BOM if bom else b"") + b"".join(encode_lines(values))
    lines, tail = split_lines(data)
    assert tail is None
    assert [json.loads(raw.decode("utf-8")) for _, raw in lines] == values
    assert [number for number, _ in lines] == list(range(1, len(values) + 1))


def test_a_lone_surrogate_is_never_written_raw() -> None:
    """Text UTF-8 cannot hold is replaced on the way out, so the line is valid UTF-8."""
    (line,) = encode_lines([{"content": "a\udc80b"}])
    assert json.loads(line.decode("utf-8")) == {"content": "a\ufffdb"}


def test_lines_are_numbered_and_the_tail_is_kept_apart() -> None:
    """Blank lines are skipped but counted; an unterminated last line is the tail."""
    complete, tail = split_lines(b'{"a":1}\n\n  \n[2]\n{"torn')
    assert complete == [(1, b'{"a":1}'), (4, b"[2]")]
    assert tail == (5, b'{"torn')
    assert split_lines(b"[1]\n") == ([(1, b"[1]")], None)


def test_a_byte_order_mark_is_read_past_at_the_start_of_the_data_only() -> None:
    """The mark before line 1 is no part of it; before any other line it stays in that line."""
    assert split_lines(BOM + b'{"a":1}\n' + BOM + b"[2]\n" + BOM) == (
        [(1, b'{"a":1}'), (2, BOM + b"[2]")],
        (3, BOM),
    )
    assert split_lines(BOM) == ([], None)
    assert split_lines(BOM + BOM + b"[1]\n") == ([(1, BOM + b"[1]")], None)


def test_atomic_write_replaces_the_whole_file(tmp_path: Path) -> None:
    """The target holds exactly the new chunks, and no temporary file is left beside it."""
    target = tmp_path / "out.jsonl"
    target.write_bytes(b"old\n")
    write_atomic(target, [b"new ", b"content\n"])
    assert target.read_bytes() == b"new content\n"
    assert os.listdir(tmp_path) == ["out.jsonl"]


def test_a_failed_atomic_write_leaves_the_old_file(tmp_path: Path) -> None:
    """When producing the data fails midway, the old file is untouched and nothing is left."""
    target = tmp_path / "out.jsonl"
    target.write_bytes(b"old\n")

    def chunks() -> Iterator[bytes]:
        yield b"partial"
        raise RuntimeError("producer failed")

    with pytest.raises(RuntimeError, match="producer failed"):
        write_atomic(target, chunks())
    assert target.read_bytes() == b"old\n"
    assert os.listdir(tmp_path) == ["out.jsonl"]


def test_a_symbolic_link_stays_a_link_and_its_file_is_replaced(tmp_path: Path) -> None:
    """Writing through a link replaces the file it points to, not the link itself."""
    real = tmp_path / "real.jsonl"
    real.write_bytes(b"old\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    write_atomic(link, b"new\n")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_bytes() == b"new\n"
    assert sorted(os.listdir(tmp_path)) == ["link.jsonl", "real.jsonl"]


def test_a_link_loop_is_refused_and_stays_a_link(tmp_path: Path) -> None:
    """A link that loops cannot be written through: ELOOP, and the link is not replaced."""
    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    with pytest.raises(OSError) as raised:
        write_atomic(loop, b"new\n")
    assert raised.value.errno == errno.ELOOP
    assert os.readlink(loop) == "loop"
    assert os.listdir(tmp_path) == ["loop"]


def test_a_named_pipe_is_written_into_and_stays_a_pipe(tmp_path: Path) -> None:
    """A target that is not a regular file (a pipe, a device) gets the data, and is not replaced."""
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)  # a reader is there: the write won't block
    try:
        write_atomic(pipe, [b"one\n", b"two\n"])
        assert stat.S_ISFIFO(os.lstat(pipe).st_mode)
        assert os.read(reader, 100) == b"one\ntwo\n"
    finally:
        os.close(reader)
    assert os.listdir(tmp_path) == ["pipe"]


@given(st.integers(0, 3), st.booleans(), st.lists(st.binary(max_size=20), max_size=3))
def test_writing_through_any_chain_of_links_keeps_every_link(
    links: int, exists: bool, chunks: list[bytes]
) -> None:
    """However many links lead to the file (and whether it exists yet), only the file changes."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        real = root / "real"
        if exists:
            real.write_bytes(b"old")
        path = real
        for number in range(links):
            link = root / f"link{number}"
            link.symlink_to(path)
            path = link
        write_atomic(path, chunks)
        assert real.read_bytes() == b"".join(chunks)
        assert all((root / f"link{n}").is_symlink() for n in range(links))
        assert len(os.listdir(root)) == links + 1


@pytest.mark.parametrize(("umask", "expected"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_new_file_gets_the_mode_open_gives(tmp_path: Path, umask: int, expected: int) -> None:
    """A file the write creates has 0o666 less the umask, as a shell redirection would give."""
    previous = os.umask(umask)
    try:
        write_atomic(tmp_path / "out.jsonl", b"{}\n")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "out.jsonl").stat().st_mode) == expected


def test_a_replaced_file_keeps_its_mode(tmp_path: Path) -> None:
    """Replacing a file keeps the mode it had, whatever the umask."""
    target = tmp_path / "out.jsonl"
    target.write_bytes(b"old\n")
    target.chmod(0o640)
    previous = os.umask(0o077)
    try:
        write_atomic(target, b"new\n")
    finally:
        os.umask(previous)
    assert target.read_bytes() == b"new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]  # no temporary left


def test_a_mode_that_cannot_be_set_leaks_no_descriptor_and_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file system refusing chmod fails the write cleanly: its file closed, the old one kept."""
    import nanobot_core._atomic as atomic

    target = tmp_path / "out.jsonl"
    target.write_bytes(b"old\n")
    made: list[int] = []
    create = atomic._create_beside

    def spied(path: Path) -> tuple[int, str]:
        handle, name = create(path)
        made.append(handle)
        return handle, name

    def refused(fd: int, mode: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(atomic, "_create_beside", spied)
    monkeypatch.setattr(atomic.os, "fchmod", refused)
    with pytest.raises(PermissionError):
        write_atomic(target, b"new\n")
    (handle,) = made
    with pytest.raises(OSError):  # closed: EBADF
        os.fstat(handle)
    assert target.read_bytes() == b"old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


@given(data=st.binary(max_size=2048), hard_links=st.booleans())
@settings(deadline=None, database=None)
def test_create_new_makes_the_file_whole_and_nothing_beside_it(
    data: bytes, hard_links: bool
) -> None:
    """Whatever the bytes, `create_new` leaves exactly them in a new file and no temporary
    file, with hard links or, where the file system makes none, without."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "AGENTS.md")
        with pytest.MonkeyPatch.context() as patch:
            if not hard_links:
                patch.setattr(os, "link", _no_hard_links)
            create_new(path, data)
        assert path.read_bytes() == data
        assert os.listdir(folder) == ["AGENTS.md"]


def _no_hard_links(source: object, target: object) -> None:
    raise OSError(errno.EPERM, "Operation not permitted")


@pytest.mark.parametrize("there", ["file", "folder", "link to nothing", "link to a file"])
def test_create_new_replaces_nothing_that_is_there(tmp_path: Path, there: str) -> None:
    """A file, a folder or a link (even one to nothing) where `create_new` would create its
    file is FileExistsError, and is left exactly as it was, with nothing beside it."""
    path = tmp_path / "new.md"
    kept = tmp_path / "kept.md"
    if there == "file":
        path.write_bytes(b"mine")
    elif there == "folder":
        path.mkdir()
    elif there == "link to nothing":
        path.symlink_to(tmp_path / "nowhere")
    else:
        kept.write_bytes(b"mine")
        path.symlink_to(kept)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(FileExistsError):
        create_new(path, b"template")
    assert sorted(os.listdir(tmp_path)) == before
    assert not (tmp_path / "nowhere").exists()
    if there == "file":
        assert path.read_bytes() == b"mine"
    if there == "link to a file":
        assert kept.read_bytes() == b"mine"


@pytest.mark.parametrize("hard_links", [True, False])
def test_create_new_that_fails_part_of_the_way_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hard_links: bool
) -> None:
    """A write that fails once the file is made (a full disk, found at fsync) leaves no
    file, not one that a later run would take for a whole one and keep."""

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    if not hard_links:
        monkeypatch.setattr(os, "link", _no_hard_links)
    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        create_new(tmp_path / "AGENTS.md", b"template")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("hard_links", [True, False])
def test_create_new_in_an_open_folder_writes_there_whatever_its_path_leads_to_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hard_links: bool
) -> None:
    """With `dir_fd`, the file is made whole in the folder opened, even once its path is a
    link elsewhere, with hard links or without, and nothing is left beside it."""

    def no_hard_links(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    if not hard_links:
        monkeypatch.setattr(os, "link", no_hard_links)
    opened = tmp_path / "opened"
    opened.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    fd = os.open(opened, os.O_RDONLY | os.O_DIRECTORY)
    try:
        opened.rename(tmp_path / "moved")
        opened.symlink_to(elsewhere)
        create_new("AGENTS.md", b"template", dir_fd=fd)
        with pytest.raises(FileExistsError):
            create_new("AGENTS.md", b"other", dir_fd=fd)
    finally:
        os.close(fd)
    assert os.listdir(tmp_path / "moved") == ["AGENTS.md"]
    assert (tmp_path / "moved" / "AGENTS.md").read_bytes() == b"template"
    assert os.listdir(elsewhere) == []
