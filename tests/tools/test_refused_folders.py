"""Folders and files the system refuses to read while find_files or grep walk: named, and
the walk goes on.

Before, both skipped them without a word: `find_files` answered ``No files match``
and `grep` ``No matches`` for a tree they had not been let into, which the model took
for an answer about its files.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path
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
from tests.tools.support import (
    CAN_BE_REFUSED,
    WORKSPACE_GONE,
    path_parts,
    planted,
    run,
    run_unprivileged,
)

_WALKS = """
import asyncio, json, sys
from pathlib import Path
from nanobot_core.tools.builtin import FindFilesTool, GrepTool

calls = [
    (FindFilesTool, {"pattern": "**/*.txt"}),
    (FindFilesTool, {"pattern": "*", "path": "locked"}),
    (FindFilesTool, {"pattern": "locked/*"}),
    (GrepTool, {"pattern": "hit"}),
    (GrepTool, {"pattern": "hit", "path": "locked"}),
    (GrepTool, {"pattern": "hit", "path": "open/private.txt"}),
]
for tool, arguments in calls:
    print(json.dumps(str(asyncio.run(tool(Path(sys.argv[1])).execute(**arguments)))))
"""


@pytest.mark.skipif(not CAN_BE_REFUSED, reason="root, and no setpriv to drop its capabilities")
def test_folders_and_files_the_system_refuses_are_named_and_the_walk_goes_on(
    tmp_path: Path,
) -> None:
    """Real permission bits: what could not be read is named from the workspace and counted,
    and what could is found, never the workspace's place on the host."""
    root = tmp_path / "ws"
    for folder in ("a", "locked/deeper", "listed/sub", "open"):
        (root / folder).mkdir(parents=True)
    for file in ("a/one.txt", "locked/two.txt", "locked/deeper/three.txt", "listed/four.txt"):
        (root / file).write_text("hit\n", encoding="utf-8")
    (root / "listed" / "sub" / "five.txt").write_text("hit\n", encoding="utf-8")
    (root / "open" / "private.txt").write_text("hit\n", encoding="utf-8")
    (root / "locked").chmod(0o000)
    (root / "listed").chmod(0o444)  # its names can be listed, nothing in it looked at
    (root / "open" / "private.txt").chmod(0o000)
    try:
        done = run_unprivileged(_WALKS, str(root), cwd=tmp_path)
    finally:
        (root / "locked").chmod(0o755)
        (root / "listed").chmod(0o755)
        (root / "open" / "private.txt").chmod(0o644)
    assert done.returncode == 0, done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()] == [
        "a/one.txt\nlisted/four.txt\nopen/private.txt\n"
        "[not searched, permission denied: 2 folders, listed/sub, locked]",
        "No files match '*' in locked.\n[not searched, permission denied: 1 folder, locked]",
        "No files match 'locked/*' in the workspace.\n"
        "[not searched, permission denied: 1 folder, locked]",
        "a/one.txt:1: hit\n"
        "[not searched, permission denied: 2 folders, listed/sub, locked]\n"
        "[not searched, permission denied: 2 files, listed/four.txt, open/private.txt]",
        "No matches for 'hit'.\n[not searched, permission denied: 1 folder, locked]",
        "No matches for 'hit'.\n[not searched, permission denied: 1 file, open/private.txt]",
    ]
    assert str(tmp_path) not in done.stdout


def test_many_refused_folders_are_counted_past_the_three_named(tmp_path: Path) -> None:
    """Past three, the refused folders are counted: the note stays one short line."""
    for index in range(5):
        (tmp_path / f"f{index}").mkdir()
    (tmp_path / "seen.txt").write_text("hit\n", encoding="utf-8")
    real_open = os.open

    def open_refusing(path: Any, flags: int, *args: Any, dir_fd: int | None = None) -> int:
        if dir_fd is not None and str(path).startswith("f"):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, *args, dir_fd=dir_fd)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "open", open_refusing)
        found = run(FindFilesTool(tmp_path).execute(pattern="**/*.txt"))
        searched = _contained(GrepTool(tmp_path).search, pattern="hit")
    note = "[not searched, permission denied: 5 folders, f0, f1, f2 and 2 more]"
    assert found == f"seen.txt\n{note}"
    assert searched == f"seen.txt:1: hit\n{note}"


_PARTS = path_parts(min_size=2)

#: A folder beside the generated ones, with a file to find: no generated name is this long.
_BESIDE = "a-folder-beside-the-generated-ones"


@settings(max_examples=40, deadline=None)
@given(parts=_PARTS, refused=st.integers(0, 2), grep=st.booleans())
def test_a_refused_folder_is_named_from_the_workspace_and_the_rest_is_walked(
    parts: list[str], refused: int, grep: bool
) -> None:
    """Whatever the folders are called, the one the system refuses is named from the
    workspace down to it, what is beside it is found, and no answer says where the
    workspace is."""
    refused = min(refused, len(parts) - 2)  # a folder: the last part is the file
    real_open = os.open

    def open_refusing(path: Any, flags: int, *args: Any, dir_fd: int | None = None) -> int:
        # As the kernel answers a folder this user may not read.
        if dir_fd is not None and path == parts[refused]:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, *args, dir_fd=dir_fd)

    with planted([], "secret.txt") as (root, _):
        root.joinpath(*parts[:-1]).mkdir(parents=True)
        root.joinpath(*parts).write_text("hit\n", encoding="utf-8")
        (root / _BESIDE).mkdir()
        (root / _BESIDE / "seen.txt").write_text("hit\n", encoding="utf-8")
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(os, "open", open_refusing)
            if grep:
                result = _contained(GrepTool(root).search, pattern="hit")
            else:
                result = run(FindFilesTool(root).execute(pattern="**/*"))
    note = f"[not searched, permission denied: 1 folder, {'/'.join(parts[: refused + 1])}]"
    if grep:
        assert result == f"{_BESIDE}/seen.txt:1: hit\n{note}"
    else:
        # The folders down to the one refused (listed in its folder), and what is beside.
        listed = [f"{'/'.join(parts[: end + 1])}/" for end in range(refused + 1)]
        found = sorted([*listed, f"{_BESIDE}/", f"{_BESIDE}/seen.txt"])
        assert result == "\n".join([*found, note])
    assert str(root) not in result


_TOOLS: list[tuple[type[WorkspaceTool], dict[str, Any]]] = [
    (ReadFileTool, {}),
    (WriteFileTool, {"content": "x"}),
    (EditFileTool, {"old_text": "a", "new_text": "b"}),
    (ListDirTool, {}),
    (FindFilesTool, {"pattern": "*"}),
    (GrepTool, {"pattern": "a"}),
]


@settings(max_examples=40, deadline=None)
@given(parts=_PARTS, index=st.integers(0, len(_TOOLS) - 1))
def test_no_answer_in_a_workspace_gone_says_where_it_was(parts: list[str], index: int) -> None:
    """Whatever path the model gives once the workspace folder is gone, every tool says it
    is gone, and nothing of where it was."""
    tool, arguments = _TOOLS[index]
    with planted([], "secret.txt") as (root, _):
        made = tool(root)
        shutil.rmtree(root)
        for path in ("/".join(parts), parts[0], f"./{parts[-1]}"):
            result: ToolResult = run(made.execute(path=path, **arguments))
            assert result == WORKSPACE_GONE
            assert str(root) not in result


_STOPS = """
import asyncio, json, sys
from pathlib import Path
from nanobot_core.tools.builtin import FindFilesTool, GrepTool

find, grep = Path(sys.argv[1]), Path(sys.argv[2])
calls = [
    (FindFilesTool(find, max_output_chars=2_000), {"pattern": "**/*"}),  # at most 1,000 paths
    (FindFilesTool(find), {"pattern": "**/*"}),
    (GrepTool(grep), {"pattern": "hit", "max_matches": 1}),
    (GrepTool(grep), {"pattern": "hit"}),
]
for tool, arguments in calls:
    print(json.dumps(str(asyncio.run(tool.execute(**arguments)))))
"""

#: The last line of a search stopped at its limit after it had named what it could not read.
_PARTIAL = (
    "the count above is of what the search met before it stopped, and what it did not reach "
    "is not known"
)


@pytest.mark.skipif(not CAN_BE_REFUSED, reason="root, and no setpriv to drop its capabilities")
def test_a_search_stopped_at_its_limit_says_its_count_of_what_it_could_not_read_is_partial(
    tmp_path: Path,
) -> None:
    """Real permission bits: a search that stops at its limit before it reaches the second
    of two refused folders ends by saying so, not with a count of one as if complete."""
    find, grep = tmp_path / "find", tmp_path / "grep"
    for index in range(10):
        (find / f"d{index}").mkdir(parents=True)
        for file in range(150):
            (find / f"d{index}" / f"{file:03d}").touch()
    # find_files lists the ten folders, then walks them in the order the system lists them:
    # the first refused, then 1,050 paths in the next seven (past its limit of 1,000), and
    # the last refused, not reached.
    order = os.listdir(find)
    first, last = order[0], order[-1]
    # grep walks in sorted order: refused, searched (its first match is the limit), refused.
    for folder in ("a-locked", "b", "c-locked"):
        (grep / folder).mkdir(parents=True)
        (grep / folder / "hit.txt").write_text("hit\n", encoding="utf-8")
    locked = [find / first, find / last, grep / "a-locked", grep / "c-locked"]
    for folder in locked:
        folder.chmod(0o000)
    try:
        done = run_unprivileged(_STOPS, str(find), str(grep), cwd=tmp_path)
    finally:
        for folder in locked:
            folder.chmod(0o755)
    assert done.returncode == 0, done.stderr
    stopped_find, whole_find, stopped_grep, whole_grep = (
        json.loads(line).splitlines() for line in done.stdout.splitlines()
    )
    assert stopped_find[-2:] == [
        f"[not searched, permission denied: 1 folder, {first}]",
        f"[stopped after 1000 paths, in the order found, and more match; {_PARTIAL}; narrow "
        "the pattern or path]",
    ]
    assert whole_find[-1] == (
        f"[not searched, permission denied: 2 folders, {', '.join(sorted([first, last]))}]"
    )
    assert stopped_grep == [
        "b/hit.txt:1: hit",
        "[not searched, permission denied: 1 folder, a-locked]",
        f"[stopped after 1 match; {_PARTIAL}; narrow the search]",
    ]
    assert whole_grep[-1] == "[not searched, permission denied: 2 folders, a-locked, c-locked]"
