"""Named pipes, sockets and devices in the workspace: every built-in tool answers at once.

A named pipe opened to read waits for a writer (and to write, for a reader), a
socket cannot be opened, a device may give bytes without end. Each call here
runs in a thread given a few seconds, so a tool that waits fails the test
instead of hanging the suite.
"""

from __future__ import annotations

import os
import socket
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core.tools.base import ToolResult
from nanobot_core.tools.builtin import (
    EditFileTool,
    FindFilesTool,
    GrepTool,
    ListDirTool,
    ReadFileTool,
    WorkspaceTool,
    WriteFileTool,
    _contained,
)
from nanobot_core.tools.workspace import open_in_workspace, resolve_in_workspace
from tests.tools.support import run

#: Seconds a call may take: far more than any answers in, far less than grep's timeout.
BOUND = 5.0

_NOT_REGULAR = "not a regular file; the file tools read and write only regular files"


def make_socket(path: Path) -> None:
    """A UNIX socket bound at `path` (by its name from its folder: socket paths are short)."""
    here = os.getcwd()
    os.chdir(path.parent)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(path.name)
    finally:
        os.chdir(here)


def make_special(path: Path, kind: str) -> None:
    """A named pipe ("fifo") or a socket ("socket") at `path`."""
    if kind == "fifo":
        os.mkfifo(path)
    else:
        make_socket(path)


def release(folder: Path) -> None:
    """Let go whatever waits on a named pipe below `folder` (open it both ways, then close)."""
    for root, _, names in os.walk(folder):
        for name in names:
            path = Path(root, name)
            if stat.S_ISFIFO(os.lstat(path).st_mode):
                os.close(os.open(path, os.O_RDWR | os.O_NONBLOCK))


def within(call: Callable[[], ToolResult], workspace: Path) -> ToolResult:
    """What `call` answers, which it must within `BOUND` seconds (else the test fails)."""
    answer: list[ToolResult] = []
    worker = threading.Thread(target=lambda: answer.append(call()), daemon=True)
    worker.start()
    worker.join(BOUND)
    if worker.is_alive():
        release(workspace)  # so that the thread ends instead of waiting for ever
        worker.join(BOUND)
        pytest.fail(f"the call did not answer within {BOUND:g}s: it waited on a special file")
    return answer[0]


def through_execute(tool: WorkspaceTool, **arguments: Any) -> Callable[[], ToolResult]:
    """A call of the tool as the model makes it (grep: its search, as its child runs it)."""
    if isinstance(tool, GrepTool):
        # The child process runs `python -I`, so it imports the installed package: the
        # search is called here, as the child calls it, to test this code.
        return lambda: _contained(tool.search, **arguments)
    return lambda: run(tool.execute(**arguments))


@pytest.fixture
def specials(workspace: Path) -> Path:
    """The workspace with a named pipe, a socket, and links to them, at the top and in dev/."""
    (workspace / "dev").mkdir()
    for folder in (workspace, workspace / "dev"):
        make_special(folder / "pipe", "fifo")
        make_special(folder / "sock", "socket")
    (workspace / "to_pipe").symlink_to("dev/pipe")
    (workspace / "to_sock").symlink_to("dev/sock")
    return workspace


_READERS_AND_WRITERS: list[tuple[type[WorkspaceTool], dict[str, Any]]] = [
    (ReadFileTool, {}),
    (ReadFileTool, {"start_char": 0}),
    (WriteFileTool, {"content": "x"}),
    (EditFileTool, {"old_text": "a", "new_text": "b"}),
    (GrepTool, {"pattern": "a"}),
]


@pytest.mark.parametrize(("tool", "arguments"), _READERS_AND_WRITERS)
@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("pipe", "named pipe (FIFO)"),
        ("dev/pipe", "named pipe (FIFO)"),
        ("to_pipe", "named pipe (FIFO)"),
        ("sock", "socket"),
        ("dev/sock", "socket"),
        ("to_sock", "socket"),
    ],
)
def test_a_tool_given_a_named_pipe_or_socket_refuses_it_at_once(
    specials: Path, tool: type[WorkspaceTool], arguments: dict[str, Any], path: str, kind: str
) -> None:
    """Reading, writing, editing or searching a pipe or socket is an Error naming its kind."""
    result = within(through_execute(tool(specials), path=path, **arguments), specials)
    assert result.is_error
    assert result == f"Error: {path} is a {kind}, {_NOT_REGULAR}"
    # Nothing replaced it: a write refused is a write not made.
    mode = os.stat(specials / path).st_mode
    assert stat.S_ISFIFO(mode) if "pipe" in path else stat.S_ISSOCK(mode)


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [(ListDirTool, {}), (FindFilesTool, {"pattern": "*"})],
)
@pytest.mark.parametrize(
    ("path", "kind"),
    [("pipe", "named pipe (FIFO)"), ("dev/sock", "socket"), ("to_pipe", "named pipe (FIFO)")],
)
def test_a_folder_tool_given_a_named_pipe_or_socket_says_what_it_is(
    specials: Path, tool: type[WorkspaceTool], arguments: dict[str, Any], path: str, kind: str
) -> None:
    """list_dir and find_files given a pipe or socket say it is one, not a missing folder."""
    result = within(through_execute(tool(specials), path=path, **arguments), specials)
    assert result.is_error
    assert result == f"Error: {path} is a {kind}, not a directory"


def test_grep_skips_named_pipes_and_sockets_it_meets_and_names_them(specials: Path) -> None:
    """A search over the workspace goes past pipes and sockets (and links to them), naming them."""
    grep = GrepTool(specials)
    result = within(through_execute(grep, pattern="alpha|print"), specials)
    assert not result.is_error
    assert str(result).splitlines() == [
        "notes.txt:1: alpha",
        "src/main.py:1: print('hello')",
        "[not searched, not regular files (named pipes, sockets or devices): 6 files, pipe, "
        "sock, to_pipe and 3 more]",
    ]
    only = within(through_execute(grep, pattern="alpha", path="dev"), specials)
    assert only == (
        "No matches for 'alpha'.\n"
        "[not searched, not regular files (named pipes, sockets or devices): 2 files, "
        "dev/pipe, dev/sock]"
    )
    globbed = within(through_execute(grep, pattern="alpha", glob="*.txt"), specials)
    assert globbed == "notes.txt:1: alpha"  # what the glob leaves out is not mentioned


def test_list_dir_names_named_pipes_and_sockets_for_what_they_are(specials: Path) -> None:
    """list_dir lists pipes and sockets by kind (not as files of 0 bytes), links by '@'."""
    listed = within(through_execute(ListDirTool(specials), path="dev"), specials)
    assert listed == (
        "pipe  [named pipe (FIFO), not a regular file]\nsock  [socket, not a regular file]"
    )
    top = within(through_execute(ListDirTool(specials)), specials)
    assert "to_pipe@" in str(top).splitlines()


_PIPE_MARK = "  [named pipe (FIFO), not a regular file]"
_SOCKET_MARK = "  [socket, not a regular file]"


def test_find_files_marks_named_pipes_and_sockets_as_list_dir_does(specials: Path) -> None:
    """find_files lists pipes and sockets at once, never opened, each marked with its kind."""
    found = within(through_execute(FindFilesTool(specials), pattern="**/*"), specials)
    paths = str(found).splitlines()
    # The links are shown where they lead (dev/pipe, dev/sock), as every link find_files finds.
    assert paths.count(f"dev/pipe{_PIPE_MARK}") == 2 and paths.count(f"pipe{_PIPE_MARK}") == 1
    assert {f"sock{_SOCKET_MARK}", f"dev/sock{_SOCKET_MARK}", "notes.txt", "dev/"} <= set(paths)
    # Marked as list_dir marks them, so that the two listings agree.
    listed = within(through_execute(ListDirTool(specials), path="dev"), specials)
    assert str(listed).splitlines() == [f"pipe{_PIPE_MARK}", f"sock{_SOCKET_MARK}"]
    named = within(through_execute(FindFilesTool(specials), pattern="to_*"), specials)
    assert str(named).splitlines() == [f"dev/pipe{_PIPE_MARK}", f"dev/sock{_SOCKET_MARK}"]
    by_name = within(through_execute(FindFilesTool(specials), pattern="dev/sock"), specials)
    assert by_name == f"dev/sock{_SOCKET_MARK}"


def test_find_files_shows_regular_files_and_dangling_links_unmarked(workspace: Path) -> None:
    """Only what is there and no regular file is marked: a link to nothing is shown as before."""
    (workspace / "dangling").symlink_to("nowhere")
    found = within(through_execute(FindFilesTool(workspace), pattern="*"), workspace)
    # link_file leads out of the workspace: never shown.
    assert str(found).splitlines() == ["notes.txt", "nowhere", "src/"]


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
@pytest.mark.parametrize(
    ("tool", "arguments"),
    [*_READERS_AND_WRITERS, (ListDirTool, {}), (FindFilesTool, {"pattern": "*"})],
)
def test_a_link_to_a_device_is_outside_and_refused(
    workspace: Path, device: str, tool: type[WorkspaceTool], arguments: dict[str, Any]
) -> None:
    """A link to a device leads out of the workspace: refused as that, never opened."""
    (workspace / "device").symlink_to(device)
    result = within(through_execute(tool(workspace), path="device", **arguments), workspace)
    assert result.is_error and "points outside the workspace" in result


def test_grep_goes_past_a_link_to_a_device_it_meets(workspace: Path) -> None:
    """A search meets a link to /dev/zero: it leads out, so it is skipped, never read."""
    (workspace / "zero").symlink_to("/dev/zero")
    result = within(through_execute(GrepTool(workspace), pattern="alpha"), workspace)
    assert result == "notes.txt:1: alpha"


@contextmanager
def other_end(path: Path, flags: int) -> Iterator[None]:
    """The named pipe at `path` held open at its other end (so that opening it never waits)."""
    fd = os.open(path, flags | os.O_NONBLOCK)
    try:
        yield
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("mode", "holder"),
    [("r", os.O_RDWR), ("rb", os.O_RDWR), ("w", 0)],
    ids=["read", "read-bytes", "write"],
)
def test_the_kind_is_checked_on_the_descriptor_opened(
    workspace: Path, mode: str, holder: int
) -> None:
    """A pipe that opens (a writer or reader at its other end) is refused by its descriptor."""
    pipe = workspace / "pipe"
    os.mkfifo(pipe)
    # A writer (O_RDWR) lets a read open, a reader (O_RDONLY) a write: the open succeeds,
    # and only the descriptor's fstat can tell it is no regular file.
    with other_end(pipe, holder or os.O_RDONLY):
        target = resolve_in_workspace(workspace, "pipe")

        def opening() -> ToolResult:
            with open_in_workspace(workspace, target, mode) as handle:
                return ToolResult(f"opened: {handle.read(1) if 'r' in mode else 'to write'}")

        result = within(lambda: _contained(opening), workspace)
    assert result == f"Error: pipe is a named pipe (FIFO), {_NOT_REGULAR}"


def test_grep_goes_past_a_file_replaced_by_a_named_pipe_after_its_check(workspace: Path) -> None:
    """A file that becomes a pipe between its check and its read is skipped and named."""
    (workspace / "b.txt").write_text("alpha b\n", encoding="utf-8")
    changing = (workspace / "b.txt").resolve()
    search_code = GrepTool._search.__code__

    def before_read(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is search_code and frame.f_locals["file"] == changing:
            changing.unlink()
            os.mkfifo(changing)

    def searching() -> ToolResult:
        sys.setprofile(before_read)
        try:
            return _contained(GrepTool(workspace).search, pattern="alpha")
        finally:
            sys.setprofile(None)

    result = within(searching, workspace)
    assert str(result).splitlines() == [
        "notes.txt:1: alpha",
        "[not searched, not regular files (named pipes, sockets or devices): 1 file, b.txt]",
    ]


# Names of up to 100 bytes (a socket's path is bound by about 108), none that splits a line.
_NAMES = st.text(
    st.characters(
        codec="utf-8", exclude_categories=("Cc", "Cs", "Zl", "Zp"), exclude_characters="/"
    ),
    min_size=1,
    max_size=30,
).filter(lambda name: name not in {".", ".."} and len(name.encode("utf-8")) <= 100)


@settings(max_examples=40, deadline=None)
@given(
    entries=st.dictionaries(
        _NAMES, st.sampled_from(["text", "fifo", "socket"]), min_size=1, max_size=8
    )
)
def test_every_tool_answers_at_once_whatever_pipes_and_sockets_a_folder_holds(
    entries: dict[str, str],
) -> None:
    """Whatever names they have, pipes and sockets are skipped or refused by every tool, at once."""
    with tempfile.TemporaryDirectory() as scratch:
        workspace = Path(scratch).resolve()
        for name, kind in entries.items():
            if kind == "text":
                (workspace / name).write_text("alpha\n", encoding="utf-8")
            else:
                make_special(workspace / name, kind)
        specials = sorted(name for name, kind in entries.items() if kind != "text")
        texts = sorted(name for name, kind in entries.items() if kind == "text")
        found = within(through_execute(GrepTool(workspace), pattern="alpha"), workspace)
        lines = str(found).splitlines()
        assert not found.is_error
        assert [line for line in lines if not line.startswith("[not searched")] == [
            f"{name}:1: alpha" for name in texts
        ] or (not texts and lines[0] == "No matches for 'alpha'.")
        if specials:
            count = "1 file" if len(specials) == 1 else f"{len(specials)} files"
            assert lines[-1].startswith(
                f"[not searched, not regular files (named pipes, sockets or devices): {count}, "
            )
        listed = within(through_execute(ListDirTool(workspace)), workspace)
        assert sum("not a regular file]" in line for line in str(listed).splitlines()) == len(
            specials
        )
        found = within(through_execute(FindFilesTool(workspace), pattern="*"), workspace)
        assert sorted(
            line.rpartition("  [")[0]
            for line in str(found).splitlines()
            if line.endswith(", not a regular file]")
        ) == sorted(specials)
        for name in specials:
            for tool, arguments in _READERS_AND_WRITERS:
                refused = within(
                    through_execute(tool(workspace), path=name, **arguments), workspace
                )
                assert refused.is_error and _NOT_REGULAR in refused
