"""The one open of a file that must be regular: never waits, refuses the rest by name."""

from __future__ import annotations

import errno
import os
import pickle
import socket
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nanobot_core
from nanobot_core import NotRegularFileError, ToolError, errors, open_regular_file

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX files")

T = TypeVar("T")

_WAIT = 5.0


def _at_once(work: Callable[[], T]) -> T:
    """What `work` returns or raises, failing the test when it does not end within seconds."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(work())
        except BaseException as exc:
            failure.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(_WAIT)
    if worker.is_alive():
        pytest.fail("the open waited")
    if failure:
        raise failure[0]
    return outcome[0]


def _refusal(path: Path | str, flags: int = os.O_RDONLY, **options: object) -> NotRegularFileError:
    """The refusal of opening `path` with `flags`, which must come at once."""
    with pytest.raises(NotRegularFileError) as info:
        _at_once(lambda: open_regular_file(path, flags, **options))  # type: ignore[arg-type]
    return info.value


def _descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else set()


@pytest.fixture
def no_leak() -> Iterator[None]:
    """Fails the test when a descriptor opened in it is left open."""
    before = _descriptors()
    yield
    assert _descriptors() <= before


def test_a_regular_file_is_opened_blocking_and_read(tmp_path: Path) -> None:
    """A regular file is opened, and its descriptor is blocking again (O_NONBLOCK cleared)."""
    (tmp_path / "notes.txt").write_bytes(b"hello")
    fd = open_regular_file(tmp_path / "notes.txt")
    try:
        assert os.get_blocking(fd) and not os.get_inheritable(fd)
        assert os.read(fd, 100) == b"hello"
    finally:
        os.close(fd)


@pytest.mark.parametrize("flags", [os.O_RDONLY, os.O_WRONLY, os.O_RDWR])
def test_a_named_pipe_is_refused_at_once_with_its_name(
    tmp_path: Path, flags: int, no_leak: None
) -> None:
    """A named pipe, opened to read or to write with nothing at its other end, is refused at
    once, naming the path and what it is."""
    os.mkfifo(tmp_path / "pipe")
    refusal = _refusal(tmp_path / "pipe", flags)
    assert str(refusal) == f"{tmp_path / 'pipe'} is a named pipe (FIFO), not a regular file"
    assert (refusal.errno, refusal.kind, refusal.filename) == (
        errno.EINVAL,
        "named pipe (FIFO)",
        str(tmp_path / "pipe"),
    )
    assert refusal.strerror == "a named pipe (FIFO), not a regular file"


def test_a_pipe_nothing_reads_is_refused_as_such_where_pipes_are_taken(tmp_path: Path) -> None:
    """Where a pipe may take what is written (`regular_only` false), one nothing reads from is
    refused at once, saying so, and one something reads from is opened, blocking."""
    os.mkfifo(tmp_path / "pipe")
    refusal = _refusal(tmp_path / "pipe", os.O_WRONLY, regular_only=False)
    assert str(refusal) == f"{tmp_path / 'pipe'} is a named pipe (FIFO), which nothing reads from"
    reader = os.open(tmp_path / "pipe", os.O_RDONLY | os.O_NONBLOCK)
    try:
        fd = _at_once(lambda: open_regular_file(tmp_path / "pipe", os.O_WRONLY, regular_only=False))
        assert os.get_blocking(fd)
        os.write(fd, b"line\n")
        os.close(fd)
        assert os.read(reader, 100) == b"line\n"
    finally:
        os.close(reader)


@pytest.mark.parametrize("flags", [os.O_RDONLY, os.O_WRONLY, os.O_RDWR | os.O_CREAT])
def test_a_directory_is_refused(tmp_path: Path, flags: int, no_leak: None) -> None:
    """A directory is refused to read or write, even where devices are taken (EISDIR)."""
    (tmp_path / "folder").mkdir()
    for regular_only in (True, False):
        refusal = _refusal(tmp_path / "folder", flags, regular_only=regular_only)
        assert str(refusal) == f"{tmp_path / 'folder'} is a directory, not a regular file"
        assert refusal.errno == errno.EISDIR and refusal.kind == "directory"


def test_a_link_is_followed_unless_told_not_to(tmp_path: Path, no_leak: None) -> None:
    """A symbolic link to a regular file is followed by default; with `follow_links` false it
    is refused, naming it, and the file it points to is not touched."""
    (tmp_path / "real").write_bytes(b"kept")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    fd = open_regular_file(tmp_path / "link")
    with os.fdopen(fd, "rb") as file:
        assert file.read() == b"kept"
    flags = os.O_WRONLY | os.O_TRUNC
    refusal = _refusal(tmp_path / "link", flags, follow_links=False)
    assert str(refusal) == f"{tmp_path / 'link'} is a symbolic link, which is not followed"
    assert refusal.errno == errno.ELOOP and refusal.kind == "symbolic link"
    assert (tmp_path / "real").read_bytes() == b"kept"


def test_a_dangling_link_creates_nothing_when_not_followed(tmp_path: Path) -> None:
    """Creating through a link to nothing is refused when links are not followed, and no file
    is made where it points."""
    (tmp_path / "link").symlink_to(tmp_path / "made")
    refusal = _refusal(tmp_path / "link", os.O_WRONLY | os.O_CREAT, follow_links=False)
    assert refusal.kind == "symbolic link"
    assert not (tmp_path / "made").exists()


def test_a_link_to_a_pipe_is_refused_as_the_pipe(tmp_path: Path) -> None:
    """A link followed to a named pipe is refused as the pipe it leads to, at once."""
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "link").symlink_to(tmp_path / "pipe")
    assert _refusal(tmp_path / "link", os.O_WRONLY).kind == "named pipe (FIFO)"


def test_a_character_device_is_refused_unless_devices_are_taken(no_leak: None) -> None:
    """/dev/null is a character device: refused as a regular file, written into where devices
    are taken."""
    refusal = _refusal(os.devnull)
    assert str(refusal) == f"{os.devnull} is a character device, not a regular file"
    fd = open_regular_file(os.devnull, os.O_WRONLY, regular_only=False)
    try:
        assert stat.S_ISCHR(os.fstat(fd).st_mode) and os.get_blocking(fd)
        assert os.write(fd, b"gone") == 4
    finally:
        os.close(fd)


def test_a_socket_file_is_refused(no_leak: None) -> None:
    """A socket file cannot be opened (ENXIO): it is refused as a socket, to read or write."""
    # A short folder: a socket's path is limited to about a hundred bytes.
    with tempfile.TemporaryDirectory() as folder:
        where = os.path.join(folder, "s")
        server = socket.socket(socket.AF_UNIX)
        try:
            server.bind(where)
            for flags in (os.O_RDONLY, os.O_WRONLY):
                for regular_only in (True, False):
                    refusal = _refusal(where, flags, regular_only=regular_only)
                    assert str(refusal) == f"{where} is a socket, not a regular file"
        finally:
            server.close()


def test_write_append_and_create_modes(tmp_path: Path) -> None:
    """Write, append and create open as ``os.open`` does: a new file gets `mode` (less the
    umask), an append writes at the end, a truncating open empties the file."""
    path = tmp_path / "log"
    fd = open_regular_file(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"one\n")
    os.close(fd)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    fd = open_regular_file(path, os.O_WRONLY | os.O_APPEND, follow_links=False)
    os.write(fd, b"two\n")
    os.close(fd)
    assert path.read_bytes() == b"one\ntwo\n"
    fd = open_regular_file(path, os.O_WRONLY | os.O_TRUNC)
    os.close(fd)
    assert path.read_bytes() == b""
    with pytest.raises(FileNotFoundError):
        open_regular_file(tmp_path / "missing", os.O_WRONLY)


def test_relative_to_a_folder_and_named_as_shown(tmp_path: Path) -> None:
    """`dir_fd` opens relative to a folder's descriptor; `shown` is how a refusal names it."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "file").write_bytes(b"x")
    (tmp_path / "sub" / "link").symlink_to("file")
    folder = os.open(tmp_path / "sub", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = open_regular_file("file", dir_fd=folder)
        os.close(fd)
        refusal = _refusal("link", dir_fd=folder, follow_links=False, shown="sub/link")
        assert str(refusal) == "sub/link is a symbolic link, which is not followed"
    finally:
        os.close(folder)


def test_the_refusal_is_one_error_of_the_tree() -> None:
    """The refusal is an OSError and a ToolError of the one tree, exported at the top, and
    survives a round trip through pickle."""
    refusal = NotRegularFileError("a/pipe", "named pipe (FIFO)")
    assert isinstance(refusal, OSError) and isinstance(refusal, ToolError)
    assert errors.NotRegularFileError is NotRegularFileError
    again = pickle.loads(pickle.dumps(refusal))
    assert (str(again), again.errno, again.kind) == (str(refusal), errno.EINVAL, refusal.kind)


_NAMES = st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters="/\x00"),
    min_size=1,
    max_size=60,
).filter(lambda name: name not in (".", "..") and len(name.encode("utf-8")) < 200)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=_NAMES, flags=st.sampled_from([os.O_RDONLY, os.O_WRONLY, os.O_RDWR]))
def test_any_name_of_a_pipe_is_refused_at_once_and_named(
    tmp_path: Path, name: str, flags: int
) -> None:
    """Whatever a named pipe is called, opening it is refused at once, and the refusal names it
    as given."""
    path = tmp_path / name
    os.mkfifo(path)
    try:
        refusal = _refusal(path, flags)
        assert (
            str(refusal)
            == f"{nanobot_core.clip(str(path))} is a named pipe (FIFO), not a regular file"
        )
    finally:
        path.unlink()
