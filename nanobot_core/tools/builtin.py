"""The built-in workspace tools (read, list, find, grep, write and edit files).

Every path is confined to the workspace (symlinks included). Outputs are
capped below governance's ``max_tool_result_chars``, so a tool's answer is
never offloaded again; ``read_file`` is also how the model reads an offloaded
result back from ``<workspace>/.nanobot/cache/``. File work runs in a worker
thread so concurrent read-only calls do not stall the event loop.
"""

from __future__ import annotations

import abc
import bisect
import errno
import functools
import heapq
import io
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import AbstractContextManager, closing
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any, ClassVar

from nanobot_core._clip import clip, quoted
from nanobot_core._json_boundary import dumps, loads
from nanobot_core._reading import read_up_to
from nanobot_core.errors import WorkspaceEscapeError
from nanobot_core.kernel.context import PluginContext
from nanobot_core.tools import _glob
from nanobot_core.tools._function import run_in_daemon_thread
from nanobot_core.tools.base import Tool, ToolResult
from nanobot_core.tools.workspace import (
    NotRegularFileError,
    describe_kind,
    open_folder,
    open_in_workspace,
    refuse_link_loop,
    relative_display,
    resolve_in_workspace,
)

__all__ = [
    "BUILTIN_TOOLS",
    "EditFileTool",
    "FindFilesTool",
    "GrepTool",
    "ListDirTool",
    "ReadFileTool",
    "WriteFileTool",
]

DEFAULT_OUTPUT_CHARS = 15_000
MAX_LINE_CHARS = 2_000
GREP_LINE_CHARS = 300
MAX_LISTED_ENTRIES = 500
MAX_GREP_FILE_BYTES = 5_000_000
# An edit holds the file several times over (bytes, text, edited text, encoded): up to
# about nine times its size for ASCII text holding one emoji (the text then takes 4 bytes
# a character), so a multi-gigabyte log in the workspace would take the process down.
# Source files are far smaller (SQLite's amalgamation, sqlite3.c, one of the largest
# edited by hand, is 9 MB): 16 MiB costs at most about 150 MB, and edits run one at a time.
MAX_EDIT_FILE_BYTES = 16 * 1024 * 1024
#: Seconds a grep may search before it is stopped (the tools timeout, when built by the hook).
DEFAULT_SEARCH_TIMEOUT = 60.0
BINARY_SNIFF_BYTES = 8_192
_READ_CHUNK = 1 << 16
# Version-control and bytecode folders are never what a search is after.
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__"})


def output_budget(ctx: PluginContext) -> int:
    """Characters a built-in tool may answer with."""
    # Stay under the governance limit with room for its notes, so results are never offloaded.
    budget = ctx.config.governance.max_tool_result_chars - 500
    return max(2_000, min(budget, 100_000))


class WorkspaceTool(Tool):
    """Base of the built-in tools: a workspace root and an output budget in characters."""

    blocking = True  # the body runs in a worker thread; see run_in_daemon_thread
    #: Whether the tool walks a tree: if the workspace is gone when it ends, it found
    #: nothing in the rest of it, and its answer says that instead of what it found.
    walks_tree: ClassVar[bool] = False

    def __init__(self, workspace: Path, *, max_output_chars: int = DEFAULT_OUTPUT_CHARS) -> None:
        self.workspace = Path(workspace).resolve()
        self.max_output_chars = max_output_chars

    @classmethod
    def create(cls, ctx: PluginContext) -> WorkspaceTool:
        return cls(ctx.workspace, max_output_chars=output_budget(ctx))

    async def execute(self, *args: Any, **kwargs: Any) -> ToolResult:
        work = functools.partial(self._guarded, *args, **kwargs)
        return await run_in_daemon_thread(work, name=self.name)

    def _guarded(self, *args: Any, **kwargs: Any) -> ToolResult:
        return _contained(self.run, *args, **kwargs)

    @abc.abstractmethod
    def run(self, *args: Any, **kwargs: Any) -> ToolResult:
        """The tool's work, synchronous; paths go through `resolve`."""

    def resolve(self, path: str) -> Path:
        """The confined absolute path for a path the model gave, refused if it loops."""
        target = resolve_in_workspace(self.workspace, path)
        refuse_link_loop(self.workspace, target, path)
        return target

    def show(self, path: Path) -> str:
        """A resolved path as the model should see it (workspace-relative)."""
        return relative_display(self.workspace, path)

    def open(self, target: Path, mode: str = "r") -> AbstractContextManager[IO[Any]]:
        """A resolved path opened without a race (no link followed; see open_in_workspace)."""
        return open_in_workspace(self.workspace, target, mode)

    def special_kind(self, target: Path) -> str | None:
        """What a resolved path is if it is there but neither a regular file nor a folder.

        A named pipe, a socket or a device: opening one is refused (see
        open_in_workspace); this only words the answer to a path that names one.
        """
        try:
            return describe_kind(os.stat(target).st_mode)
        except OSError:
            return None

    def refuse_special(self, target: Path, path: str) -> None:
        """Refuse `target` (named `path`) at once if it is a named pipe, a socket or a device."""
        if kind := self.special_kind(target):
            raise NotRegularFileError(path, kind)

    def is_binary(self, target: Path) -> bool:
        """Whether the file holds a NUL byte in its first bytes."""
        with self.open(target, "rb") as handle:
            return b"\0" in handle.read(BINARY_SNIFF_BYTES)


def _contained(work: Callable[..., ToolResult], *args: Any, **kwargs: Any) -> ToolResult:
    """`work` called; a path out of the workspace or an OS error becomes its Error result.

    When `work` is a method of a `WorkspaceTool`, a file the error names inside its
    workspace is shown relative to it, as the tools show every path; and a workspace
    folder that is gone (before the call, or found gone when the call failed or walked
    a tree) is answered as such, instead of as whatever its absence made fail.
    """
    owner = getattr(work, "__self__", None)
    if not isinstance(owner, WorkspaceTool):
        return _answer(work, None, *args, **kwargs)
    if gone := _workspace_gone(owner.workspace):
        return ToolResult.error(gone)
    result = _answer(work, owner.workspace, *args, **kwargs)
    # Gone while the call ran: a path in it failed (`No such file or directory: .`), or
    # a walk found nothing more in it, and "no matches" would be taken for an answer.
    if (result.is_error or owner.walks_tree) and (gone := _workspace_gone(owner.workspace)):
        return ToolResult.error(gone)
    return result


def _answer(
    work: Callable[..., ToolResult], workspace: Path | None, *args: Any, **kwargs: Any
) -> ToolResult:
    """`work` called; a path out of `workspace` or an OS error becomes its Error result."""
    try:
        return work(*args, **kwargs)
    except WorkspaceEscapeError as exc:
        return ToolResult.error(str(exc))
    except NotRegularFileError as exc:
        return ToolResult.error(f"{exc}; the file tools read and write only regular files")
    except OSError as exc:
        # The file named is the model's path, resolved: of any length (ENAMETOOLONG).
        where = f": {clip(_shown_filename(exc.filename, workspace))}" if exc.filename else ""
        return ToolResult.error(f"{exc.strerror or exc}{where}")


def _workspace_gone(workspace: Path) -> str | None:
    """What the tools answer when the folder `workspace` (resolved) cannot be worked in; or None.

    Removed, moved away, or replaced (by a file, or a link: the folder the tools were
    made for was resolved, so a link there now is something else); or there but
    closed to this process (a folder above it, or itself, no longer searchable), so
    that nothing in it can be reached. The answer does not say where the workspace
    was: the model names paths relative to it, and the answer goes into the
    provider's logs.
    """
    try:
        info = os.lstat(workspace)
    except (FileNotFoundError, NotADirectoryError):
        pass
    except OSError as exc:  # a folder above it that may no longer be searched, say
        return f"the workspace folder cannot be reached ({exc.strerror or exc}): {_UNTIL_OPEN}"
    else:
        if not stat.S_ISDIR(info.st_mode):
            pass
        elif not os.access(workspace, os.X_OK):
            # Each tool would fail on its own path ("Permission denied: notes.txt"), as if
            # that file alone were closed.
            return f"the workspace folder cannot be reached (Permission denied): {_UNTIL_OPEN}"
        else:
            return None
    return (
        "the workspace folder is gone (removed, moved or replaced since the file tools were "
        f"set up): {_UNTIL_BACK}"
    )


#: What a workspace folder closed to the tools means for the model's next steps.
_UNTIL_OPEN = "no file can be read, written, listed or searched until it can; tell the user"
_UNTIL_BACK = "no file can be read, written, listed or searched until it is back; tell the user"


def _shown_filename(filename: object, workspace: Path | None) -> str:
    """The file an OS error names, relative to `workspace` when it is inside it.

    The tools work on resolved, absolute paths, so an error names the file by where
    the workspace is on the host: the model has no use for that (it names files
    relative to the workspace), and the answer would carry it into the provider's logs.
    """
    text = os.fsdecode(filename) if isinstance(filename, str | bytes) else str(filename)
    if workspace is None or not os.path.isabs(text):
        return text
    path = Path(text)
    return relative_display(workspace, path) if path.is_relative_to(workspace) else text


def _path_property(what: str, default: str | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "description": what}
    if default is not None:
        schema["default"] = default
    return schema


class ReadFileTool(WorkspaceTool):
    """Read a text file with line numbers, a page at a time."""

    name = "read_file"
    description = (
        "Read a text file in the workspace. Lines come numbered (number, tab, text). "
        "Use offset and limit to page through long files; the footer says where to continue. "
        "For very long lines (minified JSON, saved tool results) page by characters instead "
        "with start_char (0-based) and max_chars; the text then comes as it is, unnumbered. "
        "Also reads tool results that were saved under .nanobot/cache/."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": _path_property("File path, relative to the workspace."),
            "offset": {
                "type": "integer",
                "minimum": 1,
                "default": 1,
                "description": "First line to read (1-based).",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 10_000,
                "default": 2_000,
                "description": "Maximum number of lines to read.",
            },
            "start_char": {
                "type": "integer",
                "minimum": 0,
                "description": "Read characters instead of lines, from this 0-based position.",
            },
            "max_chars": {
                "type": "integer",
                "minimum": 1,
                "description": "With start_char: most characters to read (default: a full page).",
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    read_only = True

    def run(
        self,
        path: str,
        offset: int | None = None,
        limit: int | None = None,
        start_char: int | None = None,
        max_chars: int | None = None,
    ) -> ToolResult:
        target = self.resolve(path)
        if target.is_dir():
            return ToolResult.error(
                f"{clip(path)} is a directory; use list_dir to see what is in it"
            )
        if not target.exists():
            return ToolResult.error(f"file not found: {clip(path)}")
        self.refuse_special(target, path)
        if self.is_binary(target):
            return ToolResult.error(f"{clip(path)} is a binary file; read_file only shows text")
        if start_char is not None or max_chars is not None:
            if offset is not None or limit is not None:
                return ToolResult.error(
                    "page either by lines (offset, limit) or by characters (start_char, "
                    "max_chars), not both"
                )
            return self._characters(target, path, start_char or 0, max_chars)
        return self._lines(target, path, offset or 1, limit or 2_000)

    def _characters(self, target: Path, path: str, start: int, wanted: int | None) -> ToolResult:
        """Characters ``[start, start + count)`` of the text, with where to continue."""
        page = max(1, self.max_output_chars - 200)  # room for the footer
        count = min(wanted or page, page)
        with self.open(target) as handle:
            skipped = 0
            while skipped < start:
                chunk = handle.read(min(_READ_CHUNK, start - skipped))
                if not chunk:
                    break
                skipped += len(chunk)
            text = handle.read(count)
            rest = 0
            while chunk := handle.read(_READ_CHUNK):
                rest += len(chunk)
        total = skipped + len(text) + rest
        if total == 0:
            return ToolResult("(empty file)")
        if start >= total:
            return ToolResult.error(
                f"start_char {start} is past the end of {clip(path)} ({total} characters)"
            )
        while True:  # the text, with room for the footer saying where to continue
            end = start + len(text)
            footer = (
                f"\n[Characters {start}-{end} of {total}. "
                f"Call read_file with start_char={end} to continue.]"
                if end < total
                else ""
            )
            over = len(text) + len(footer) - self.max_output_chars
            if over <= 0 or len(text) <= 1:
                return ToolResult(text + footer)
            text = text[: max(1, len(text) - over)]

    def _lines(self, target: Path, path: str, offset: int, limit: int) -> ToolResult:
        shown: list[tuple[str, int, int, int]] = []  # head, length, bare length, line start
        used = 0
        total = 0
        full = False
        position = 0  # characters before the current line, as start_char counts them
        with self.open(target) as handle:
            for number, (head, length, bare_length) in enumerate(_lines_of(handle), start=1):
                total = number
                line_start, position = position, position + length
                if full or number < offset or number >= offset + limit:
                    continue
                text = _numbered(number, head, bare_length, line_start)
                if used + len(text) + 1 > self.max_output_chars and shown:
                    full = True
                    continue
                shown.append((head, bare_length, line_start, len(text)))
                used += len(text) + 1
        if total == 0:
            return ToolResult("(empty file)")
        if offset > total:
            return ToolResult.error(
                f"offset {offset} is past the end of {clip(path)} ({total} lines)"
            )
        # Room for the footer: the last lines go to the next page, and a first line that
        # does not fit with it is cut further (the cut says where its rest starts).
        width = MAX_LINE_CHARS
        while True:
            last = offset + len(shown) - 1
            footer = (
                f"\n\n[Lines {offset}-{last} of {total}. "
                f"Call read_file with offset={last + 1} to continue.]"
                if last < total
                else ""
            )
            over = used - 1 + len(footer) - self.max_output_chars
            if over <= 0 or width == 0:
                break
            if len(shown) > 1:
                used -= shown.pop()[3] + 1
                continue
            head, bare_length, line_start, chars = shown[0]
            width = max(0, min(width, bare_length) - over)
            chars = len(_numbered(offset, head, bare_length, line_start, width))
            shown[0], used = (head, bare_length, line_start, chars), chars + 1
        lines = [
            _numbered(number, head, bare_length, line_start, width if number == offset else None)
            for number, (head, bare_length, line_start, _) in enumerate(shown, start=offset)
        ]
        return ToolResult("\n".join(lines) + footer)


def _numbered(
    number: int, head: str, bare_length: int, line_start: int, width: int | None = None
) -> str:
    """A line as read_file shows it: its number, a tab, its text (cut at `width`, or 2,000)."""
    width = MAX_LINE_CHARS if width is None else width
    bare = head.rstrip(chr(10)).rstrip(chr(13))
    if bare_length > width:
        bare = (
            f"{bare[:width]}… [line cut, {bare_length} characters; "
            f"read_file with start_char={line_start + width} shows the rest]"
        )
    return f"{number:>6}\t{bare}"


def _lines_of(handle: IO[str]) -> Iterator[tuple[str, int, int]]:
    """Each line's start (enough to show it), its length and its length without the newline.

    A line is read a piece at a time and only its start is kept: iterating the file
    would build each line whole, and a file of one multi-gigabyte line (a dump, a
    minified dataset) would take that much memory, several times over.
    """
    while head := handle.readline(MAX_LINE_CHARS + 1):
        length = len(head)
        piece = head
        while not piece.endswith(chr(10)) and (piece := handle.readline(_READ_CHUNK)):
            length += len(piece)
        # Text mode reads every line ending as one newline character.
        yield head, length, length - piece.endswith(chr(10))


class ListDirTool(WorkspaceTool):
    """List a directory: folders end with '/', files show their size."""

    name = "list_dir"
    description = (
        "List the entries of a directory in the workspace, sorted by name. "
        "Folders end with '/'; files show their size in bytes."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": _path_property("Directory, relative to the workspace.", default="."),
        },
        "additionalProperties": False,
    }
    read_only = True

    def run(self, path: str = ".") -> ToolResult:
        target = self.resolve(path)
        if not target.exists():
            return ToolResult.error(f"directory not found: {clip(path)}")
        if not target.is_dir():
            if kind := self.special_kind(target):
                return ToolResult.error(f"{clip(path)} is a {kind}, not a directory")
            return ToolResult.error(f"{clip(path)} is a file, not a directory; use read_file")
        # Listed through a descriptor opened from the workspace down without following a
        # link: a folder swapped for a link out after the check is refused, not listed.
        with open_folder(self.workspace, target) as folder:
            names, total = _first_names(folder, MAX_LISTED_ENTRIES)
            lines = [_describe_entry(folder, name) for name in names]
        if not names:
            return ToolResult(f"{self.show(target)} is empty.")
        return ToolResult(
            _fitted(lines, self.max_output_chars, _more_entries, left_out=total - len(names))
        )


def _more_entries(count: int) -> str:
    """The line saying how many entries list_dir leaves out."""
    return f"[... {count} more entries not shown; find_files with a pattern finds the others]"


def _first_names(folder: int, count: int) -> tuple[list[str], int]:
    """The first `count` names of the folder open as `folder` in sorted order, and how many.

    Only those names are kept while the rest are counted: sorting them all held every
    entry of a folder of millions of files (a cache, a dataset) to show 500 of them.
    """
    total = 0

    def names(scan: Iterator[os.DirEntry[str]]) -> Iterator[str]:
        nonlocal total
        for entry in scan:
            total += 1
            yield entry.name

    with os.scandir(folder) as scan:
        first = heapq.nsmallest(count, names(scan))
    return first, total


def _describe_entry(folder: int, name: str) -> str:
    """An entry of the folder open as `folder`: 'name@' (a link), 'name/', its size or kind."""
    try:
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except OSError:
        return name
    if stat.S_ISLNK(info.st_mode):
        return f"{name}@"
    if stat.S_ISDIR(info.st_mode):
        return f"{name}/"
    if kind := describe_kind(info.st_mode):
        return f"{name}{_not_regular_mark(kind)}"
    return f"{name}  ({info.st_size} bytes)"


def _not_regular_mark(kind: str) -> str:
    """What follows the name of a named pipe, socket or device in list_dir and find_files."""
    return f"  [{kind}, not a regular file]"


def _special_mark(path: str) -> str:
    """`_not_regular_mark` of what `path` leads to, if it is such a file; else ''."""
    try:
        kind = describe_kind(os.stat(path).st_mode)
    except OSError:  # a link to nothing, or gone since it was found: shown as it is
        return ""
    return _not_regular_mark(kind) if kind else ""


class FindFilesTool(WorkspaceTool):
    """Find paths matching a glob pattern."""

    name = "find_files"
    description = (
        "Find files in the workspace whose path matches a glob pattern, e.g. '*.py' (one level) "
        "or '**/*.md' (any depth). Paths are relative to the workspace, sorted; folders end "
        "with '/', and a named pipe, socket or device is marked as one."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Glob pattern, relative to `path`."},
            "path": _path_property("Directory to search from.", default="."),
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    read_only = True
    walks_tree = True

    def run(self, pattern: str, path: str = ".") -> ToolResult:
        parts = PurePosixPath(pattern).parts
        if not pattern or PurePosixPath(pattern).is_absolute() or ".." in parts:
            return ToolResult.error(
                f"pattern {quoted(pattern)} must be relative and must not contain '..'; "
                "use `path` to choose where to search"
            )
        if not parts:  # '.', './': pathlib's glob fails on them with an internal error
            return ToolResult.error(
                f"pattern {quoted(pattern)} names no file; use e.g. '*' for everything in `path`"
            )
        if any("**" in part and part != "**" for part in parts):
            return ToolResult.error(
                f"invalid pattern {quoted(pattern)}: '**' must be a whole path component "
                "(as in '**/*.py'); use '*' to match within a name"
            )
        base = self.resolve(path)
        if not base.is_dir():
            if kind := self.special_kind(base):
                return ToolResult.error(f"{clip(path)} is a {kind}, not a directory")
            return ToolResult.error(f"directory not found: {clip(path)}")
        # The most paths the answer could show (each takes a character and a newline): the
        # glob stops there, where it held every match of '**/*' in a tree of millions. It
        # reads a folder an entry at a time (pathlib's glob reads each one whole), so one
        # folder of millions of files is read only up to the last path the answer holds.
        most = self.max_output_chars // 2
        found: list[str] = []
        # The glob opens every folder from the workspace down without following a link it
        # did not mean to go through, and gives each match's real location: a folder
        # swapped for a link out while the search runs is not entered. Only a match that is
        # a link is resolved (realpath, not Path.resolve, which raises RuntimeError on a
        # loop of links: realpath leaves the loop's link, in its folder, unresolved), and
        # each is checked and shown against the workspace resolved once, as strings.
        root = os.path.normcase(self.workspace)
        below = root.rstrip(os.sep) + os.sep  # what every path under the workspace starts with

        def inside(resolved: str) -> str | None:
            """A resolved path as shown, from the workspace; None if it is outside."""
            where = os.path.normcase(resolved)
            if where == root:
                return "."
            if where.startswith(below):
                return resolved[len(below) :].replace(os.sep, "/")
            return None

        # Folders the system refused to read, each once (a '**' meets one twice), named in
        # sorted order: only those named are kept.
        refused = _Tally(smallest=True, once=True)
        # Folders that failed otherwise: removed or replaced since they were found, or an
        # I/O error while opened or listed (with the system's reason). The walk goes on.
        changed = _Tally(smallest=True, once=True)
        unreadable = _Tally(smallest=True, once=True)

        def refuse(real: str) -> None:
            if (shown := inside(real)) is not None:
                refused.add(shown)

        def fail(real: str, exc: OSError) -> None:
            if (shown := inside(real)) is None:
                return  # out of the workspace, where only a link led: never named
            if exc.errno in _GONE:
                changed.add(shown)
            else:
                unreadable.add(shown, _reason(exc))

        matches = _glob.find(base, pattern, root=self.workspace, refused=refuse, failed=fail)
        for match in matches:
            resolved = os.path.realpath(match.real) if match.link else match.real
            shown = inside(resolved)
            if shown is None:
                continue  # a link, or a path through one, that leads out of the workspace
            if match.is_dir:
                shown += "/"
            elif not match.is_file:
                # Marked as list_dir marks it (grep names it as not searched): listed as a
                # plain path, it would be taken for a file, and read_file refuses it.
                shown += _special_mark(resolved)
            found.append(shown)
            if len(found) > most:
                break
        # Said, whatever was found: else the folders not read would be taken for empty.
        notes = [
            _refused_note(refused, "folder"),
            _changed_note(changed, "folder"),
            _unreadable_note(unreadable, "folder"),
        ]
        if not found:
            where = "the workspace" if base == self.workspace else self.show(base)
            nothing = f"No files match {quoted(pattern)} in {where}."
            return ToolResult(_fitted([], self.max_output_chars, _more("paths"), [nothing, *notes]))
        if len(found) <= most:
            return ToolResult(_fitted(sorted(found), self.max_output_chars, _more("paths"), notes))
        # Last, and saying so when the folders not read are counted above: the search never
        # reached the rest of the tree, which may hold more of them.
        note = _stopped_note(
            f"stopped after {most} paths, in the order found, and more match",
            notes,
            "narrow the pattern or path",
        )
        return ToolResult(
            _fitted(sorted(found[:most]), self.max_output_chars, _more("paths"), [*notes, note])
        )


class GrepTool(WorkspaceTool):
    """Search file contents with a regular expression."""

    name = "grep"
    description = (
        "Search text files in the workspace for a regular expression (Python syntax). "
        "Prints path:line: text for each matching line. Narrow with `path` and `glob` "
        "(e.g. '*.py'); binary files and .git are skipped."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Regular expression to search for."},
            "path": _path_property("File or directory to search.", default="."),
            "glob": {
                "type": "string",
                "description": "Only search files whose path matches this glob.",
            },
            "ignore_case": {"type": "boolean", "default": False},
            "max_matches": {"type": "integer", "minimum": 1, "maximum": 1_000, "default": 100},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    read_only = True
    walks_tree = True

    def __init__(
        self,
        workspace: Path,
        *,
        max_output_chars: int = DEFAULT_OUTPUT_CHARS,
        search_timeout: float = DEFAULT_SEARCH_TIMEOUT,
    ) -> None:
        super().__init__(workspace, max_output_chars=max_output_chars)
        self.search_timeout = search_timeout
        #: Where the search writes how far it got (a descriptor; see `_report`), or None.
        self.progress_fd: int | None = None
        self._looked = 0  # files the search looked at (found by the walk)
        self._searched = 0  # files whose lines it began to search

    @classmethod
    def create(cls, ctx: PluginContext) -> WorkspaceTool:
        return cls(
            ctx.workspace,
            max_output_chars=output_budget(ctx),
            search_timeout=ctx.config.tools.timeout,
        )

    def run(
        self,
        pattern: str,
        path: str = ".",
        glob: str | None = None,
        ignore_case: bool = False,
        max_matches: int = 100,
    ) -> ToolResult:
        """Search in a child process, stopped at the timeout.

        Python's regular expressions backtrack, and a pattern such as ``(a+)+$``
        can take exponential time while holding the GIL, so a search in a thread
        could not be stopped. The child process can: it is killed when the
        timeout passes, and the model is told how far it got (it writes that to a
        file as it goes), so that it knows whether the pattern or the size of the
        tree took the time.
        """
        try:
            re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            return ToolResult.error(f"invalid regular expression {quoted(pattern)}: {exc}")
        with tempfile.TemporaryFile() as progress:
            request = {
                "workspace": str(self.workspace),
                "max_output_chars": self.max_output_chars,
                "progress_fd": progress.fileno(),
                "pattern": pattern,
                "path": path,
                "glob": glob,
                "ignore_case": ignore_case,
                "max_matches": max_matches,
            }
            try:
                # -I: isolated, so a folder named like a module in the workspace cannot be
                # imported; the child loads this very package (see _CHILD_CODE).
                done = subprocess.run(
                    [sys.executable, "-I", "-c", _CHILD_CODE, str(_PACKAGE)],
                    input=dumps(request),
                    capture_output=True,
                    text=True,
                    encoding="utf-8",
                    timeout=self.search_timeout,
                    check=False,
                    pass_fds=(progress.fileno(),),
                )
            except subprocess.TimeoutExpired:
                looked, searched, last = _read_progress(progress)
                return ToolResult.error(
                    _timed_out(quoted(pattern), self.search_timeout, looked, searched, last)
                )
        if done.returncode != 0:
            return ToolResult.error(f"the search failed: {_child_failure(done)}")
        answer = loads(done.stdout).value
        return ToolResult(answer["text"], is_error=answer["error"])

    def search(
        self,
        pattern: str,
        path: str = ".",
        glob: str | None = None,
        ignore_case: bool = False,
        max_matches: int = 100,
    ) -> ToolResult:
        """The search itself (in the child process): files, lines, the bounded answer."""
        try:
            regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            return ToolResult.error(f"invalid regular expression {quoted(pattern)}: {exc}")
        self._report("")  # begun: from here on the time goes to the tree and the pattern
        base = self.resolve(path)
        if not base.exists():
            return ToolResult.error(f"path not found: {clip(path)}")
        self.refuse_special(base, path)
        matches: list[str] = []
        stopped = False  # at max_matches: the rest of the tree was not looked at
        # What was not searched, each said: else "No matches" would read as searched.
        skipped = _NotSearched()
        for file in self._files(base, glob, skipped):
            self._searched += 1
            self._report(self.show(file))
            read = _Read()
            try:
                with closing(self._search(file, regex, read)) as found:
                    for line in found:
                        matches.append(line)
                        if len(matches) >= max_matches:
                            break
            except NotRegularFileError as exc:
                if exc.errno == errno.EISDIR:  # replaced by a folder
                    skipped.changed.add(self.show(file))
                else:
                    skipped.special.add(self.show(file))  # became one after its check
            except (WorkspaceEscapeError, FileNotFoundError, IsADirectoryError, NotADirectoryError):
                # Replaced by a link or a folder, or removed.
                skipped.changed.add(self.show(file))
            except PermissionError:
                skipped.refused_files.add(self.show(file))
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    skipped.changed.add(self.show(file))  # replaced by a loop of links
                elif read.lines:  # failed part-way: the matches found so far stand
                    skipped.read_in_part.add(_up_to(self.show(file), read), _reason(exc))
                else:  # an I/O error, say: its lines may hold matches, so it is named
                    skipped.unreadable_files.add(self.show(file), _reason(exc))
            if read.cut_short:
                skipped.read_in_part.add(_up_to(self.show(file), read), "cut short while read")
            if len(matches) >= max_matches:
                stopped = True
                break
        notes = skipped.notes()
        if stopped:
            # Last, and saying so when what was not searched is counted above: the search
            # never reached the rest of the tree, which may hold more of it.
            notes.append(
                _stopped_note(f"stopped after {_matches(max_matches)}", notes, "narrow the search")
            )
        if not matches:
            notes.insert(0, f"No matches for {quoted(pattern)}.")
        return ToolResult(_fitted(matches, self.max_output_chars, _more("matching lines"), notes))

    def _files(self, base: Path, glob: str | None, skipped: _NotSearched) -> Iterator[Path]:
        """The files to search; what is not searched, and why, is added to `skipped`.

        A file that changes while it is checked is added to `skipped.changed`, a folder
        removed or replaced between its listing and the walk going into it to
        `skipped.changed_folders`. A named
        pipe, a socket or a device is added to `skipped.special`, not searched: reading
        one would wait for a writer, or read without end. A folder the system refuses
        to read is added to `skipped.refused_folders` (as shown), and the others are
        walked; a file it refuses to look at (in a folder that may be listed, not
        searched), to `skipped.refused_files`. A folder or file it fails to read
        otherwise (an I/O error) is added, with the system's reason, to
        `skipped.unreadable_folders` or `skipped.unreadable_files`.
        """

        def refuse(folder: Path) -> None:
            skipped.refused_folders.add(self.show(folder))

        def fail(folder: Path, reason: str) -> None:
            skipped.unreadable_folders.add(self.show(folder), reason)

        def change(folder: Path) -> None:
            skipped.changed_folders.add(self.show(folder))

        candidates = [base] if base.is_file() else _walk(self.workspace, base, refuse, fail, change)
        for file in candidates:
            self._looked += 1
            if self._looked % 1_024 == 0:
                self._report("")  # how far the walk got, should no file be searched for long
            # realpath, not Path.resolve, which raises RuntimeError on a loop of links (a
            # loop's link is left as it is: its stat then fails, and it is skipped).
            try:
                resolved = Path(os.path.realpath(file))
            except OSError:  # a link when looked at, gone when read
                skipped.changed.add(self.show(file))
                continue
            if not resolved.is_relative_to(self.workspace):
                continue  # a symlink pointing out of the workspace
            if glob and not PurePosixPath(self.show(file)).match(glob):
                continue
            try:
                info = resolved.stat()
            except PermissionError:
                skipped.refused_files.add(self.show(file))
                continue
            except OSError as exc:
                if exc.errno not in _GONE:
                    skipped.unreadable_files.add(self.show(file), _reason(exc))
                elif not os.path.lexists(file):
                    skipped.changed.add(self.show(file))  # removed since it was listed
                # Else a link to nothing, or a loop of links: no file to search.
                continue
            if describe_kind(info.st_mode):
                skipped.special.add(self.show(file))
                continue
            if info.st_size > MAX_GREP_FILE_BYTES:
                skipped.too_large.add(self.show(file))  # else "No matches" reads as searched
                continue
            yield resolved

    def _report(self, searching: str) -> None:
        """Write how far the search got, and the file it is `searching` ('' for none).

        One record, written over the last (one write a file): the parent reads it
        if it has to stop the search. `progress_fd` None: nothing is written.
        """
        if self.progress_fd is None:
            return
        name = searching.encode("utf-8", "backslashreplace")
        record = f"{self._looked} {self._searched} {len(name)}\n".encode() + name
        os.pwrite(self.progress_fd, record, 0)

    def _search(
        self, file: Path, regex: re.Pattern[str], read: _Read
    ) -> Generator[str, None, None]:
        """The file's matching lines, each as it is found; none for a binary file.

        The file is opened once to tell binary from text and to search it: what is
        searched is what was sniffed, even if the path changes in between. How far
        it was read goes into `read` as it goes: when a read fails part-way (an I/O
        error), the lines given until then stand, and `read` says up to where they
        were searched; a file that ends before the size it had when opened was cut
        short while it was read, and `read` says so too.
        """
        shown = self.show(file)
        position = 0  # characters before the current line, as read_file's start_char counts
        with self.open(file, "rb") as raw:
            if b"\0" in raw.read(BINARY_SNIFF_BYTES):
                return
            size = os.fstat(raw.fileno()).st_size
            raw.seek(0)
            with io.TextIOWrapper(raw, encoding="utf-8", errors="replace") as handle:
                for number, line in enumerate(handle, start=1):
                    read.lines = number
                    match = regex.search(line)
                    if match:
                        yield f"{shown}:{number}: {_around(line.rstrip(), match, position)}"
                    position += len(line)
                # At its end: a file made shorter while it was read (a log rotated by
                # truncation) was not searched whole, though no read failed.
                read.cut_short = raw.tell() < size


@dataclass
class _Read:
    """How far grep read the file it searched: the lines searched, and whether it ended early."""

    lines: int = 0
    cut_short: bool = False  # it ended before the size it had when it was opened


#: How many of the files that changed while grep searched (or that are not regular files) its
#: answer names.
CHANGED_NAMED = 3
#: Characters of each such name shown (its end: the file's own name is there).
CHANGED_NAME_CHARS = 120
#: Characters of each reason the system gave for a read that failed (its strerror).
REASON_CHARS = 60

# The errors that mean a path is no longer there to read (or is a link to nothing, or a
# loop of links), not that reading it failed.
_GONE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})


#: Names a `_Tally` kept with `once` remembers to count each once: the last ones added.
_RECENT_NAMES = 1_024


class _Tally:
    """Files or folders skipped for one reason: how many, and only the few an answer names.

    The names an answer shows (`CHANGED_NAMED`: the first added, or with `smallest`
    the first in sorted order) and the first distinct reasons (one more than shown,
    to tell there are more) are kept, and the rest only counted: a tree of a million
    unreadable files is a count, not a million names held until the answer is made.
    With `once`, a name added again is counted once, if it was added among the last
    `_RECENT_NAMES` (a '**' meets a refused folder twice in a row, a race the folder
    above one that changed): that many names are remembered, not all of them.
    """

    def __init__(self, *, smallest: bool = False, once: bool = False) -> None:
        self.count = 0
        self.names: list[str] = []
        self.reasons: list[str] = []
        self._smallest = smallest
        self._recent: dict[str, None] | None = {} if once else None

    def __bool__(self) -> bool:
        return self.count > 0

    def add(self, name: str, reason: str | None = None) -> None:
        """Count `name`, skipped (for `reason`, if there are several), keeping it if shown."""
        if self._recent is not None:
            if name in self._recent or name in self.names:
                return
            self._recent[name] = None
            if len(self._recent) > _RECENT_NAMES:
                del self._recent[next(iter(self._recent))]  # the oldest
        self.count += 1
        # One reason more than an answer shows, to tell that there are more.
        if reason is not None and reason not in self.reasons and len(self.reasons) <= CHANGED_NAMED:
            self.reasons.append(reason)
        if len(self.names) < CHANGED_NAMED:
            self.names.append(name)
            if self._smallest:
                self.names.sort()
        elif self._smallest and name < self.names[-1]:
            bisect.insort(self.names, name)
            self.names.pop()


@dataclass
class _NotSearched:
    """What a grep did not search, by why: each kind said in a last line of its answer."""

    changed: _Tally = field(default_factory=_Tally)  # changed between check and search
    # Removed, or replaced by a file or a link, between their listing and the walk going in.
    changed_folders: _Tally = field(default_factory=_Tally)
    special: _Tally = field(default_factory=_Tally)  # named pipes, sockets, devices
    # The system refused to read: a folder refused from a race may be met twice (the one
    # above it, changed).
    refused_folders: _Tally = field(default_factory=lambda: _Tally(once=True))
    refused_files: _Tally = field(default_factory=_Tally)
    # Failed to read otherwise (an I/O error, say): each with the system's reason.
    unreadable_folders: _Tally = field(default_factory=_Tally)
    unreadable_files: _Tally = field(default_factory=_Tally)
    too_large: _Tally = field(default_factory=_Tally)  # over MAX_GREP_FILE_BYTES
    # Searched up to a line, then a read failed or the file ended early: each with why.
    read_in_part: _Tally = field(default_factory=_Tally)

    def notes(self) -> list[str]:
        """A note of each kind skipped (bounded, see `_skipped_note`); none for no kind."""
        notes = [
            _changed_note(self.changed),
            _changed_note(self.changed_folders, "folder"),
            _special_note(self.special),
            _refused_note(self.refused_folders, "folder"),
            _refused_note(self.refused_files),
            _unreadable_note(self.unreadable_folders, "folder"),
            _unreadable_note(self.unreadable_files),
            _read_in_part_note(self.read_in_part),
            _too_large_note(self.too_large),
        ]
        return [note for note in notes if note]


def _reason(exc: OSError) -> str:
    """Why a read failed, as the system says it (`exc`'s strerror), never the path it names."""
    return clip(exc.strerror or f"error {exc.errno}", REASON_CHARS)


def _unreadable_note(unreadable: _Tally, what: str = "file") -> str:
    """The note of the files or folders (`what`) that failed to read, and the system's
    reasons (three at most); or ''."""
    if not unreadable:
        return ""
    reasons = unreadable.reasons
    why = ", ".join(reasons[:CHANGED_NAMED]) + (" and more" if len(reasons) > CHANGED_NAMED else "")
    return _skipped_note(f"could not be read ({why})", unreadable, what)


def _read_in_part_note(read_in_part: _Tally) -> str:
    """The note of the files searched only up to a line, and why (three reasons at most): the
    matches above from them stand, what follows that line was not searched; or ''."""
    if not read_in_part:
        return ""
    reasons = read_in_part.reasons
    why = ", ".join(reasons[:CHANGED_NAMED]) + (" and more" if len(reasons) > CHANGED_NAMED else "")
    return _skipped_note(f"the read stopped ({why})", read_in_part, head="searched only in part")


def _up_to(shown: str, read: _Read) -> str:
    """A file searched only in part, as its note names it: with the last line searched."""
    return f"{shown} up to line {read.lines}"


def _matches(count: int) -> str:
    return "1 match" if count == 1 else f"{count} matches"


def _too_large_note(too_large: _Tally) -> str:
    """The note of the files larger than grep searches (bounded), and how to read one; or ''."""
    if not too_large:
        return ""
    why = f"larger than {MAX_GREP_FILE_BYTES:,} bytes (read_file reads one by parts)"
    return _skipped_note(why, too_large)


def _stopped_note(stopped: str, notes: Iterable[str], advice: str) -> str:
    """The last line of an answer whose search `stopped` at its limit, and the `advice`.

    When `notes` (those above it) count what was not searched, it says that they count
    only what the search met before it stopped: it never reached the rest of the tree,
    which may hold more.
    """
    counted = sum(1 for note in notes if note)
    if not counted:
        return f"[{stopped}; {advice}]"
    above = "the count above is" if counted == 1 else "the counts above are"
    return (
        f"[{stopped}; {above} of what the search met before it stopped, and what it did not "
        f"reach is not known; {advice}]"
    )


def _changed_note(changed: _Tally, what: str = "file") -> str:
    """The answer's note of the files (or folders: `what`) skipped because they changed while
    searched (bounded); or ''."""
    if not changed:
        return ""
    into = "a link or a folder" if what == "file" else "a file or a link"
    return _skipped_note(
        f"changed while the search ran (removed, or replaced by {into})", changed, what
    )


def _special_note(special: _Tally) -> str:
    """The answer's note of the named pipes, sockets and devices not searched (bounded); or ''."""
    if not special:
        return ""
    return _skipped_note("not regular files (named pipes, sockets or devices)", special)


def _refused_note(refused: _Tally, what: str = "file") -> str:
    """The note of the files or folders (`what`) the system refused to read (bounded); or ''."""
    if not refused:
        return ""
    return _skipped_note("permission denied", refused, what)


def _skipped_note(
    why: str, skipped: _Tally, what: str = "file", *, head: str = "not searched"
) -> str:
    """A note of files (or folders) not searched (or as `head` says) and `why`: three named
    (each cut), the rest counted."""
    names = [
        name if len(name) <= CHANGED_NAME_CHARS else "…" + name[-(CHANGED_NAME_CHARS - 1) :]
        for name in skipped.names[:CHANGED_NAMED]
    ]
    total = skipped.count
    more = f" and {total - CHANGED_NAMED} more" if total > CHANGED_NAMED else ""
    count = f"1 {what}" if total == 1 else f"{total} {what}s"
    return f"[{head}, {why}: {count}, {', '.join(names)}{more}]"


def _around(line: str, match: re.Match[str], line_start: int) -> str:
    """A matching line, or for a long one the part around the match and where it is."""
    if len(line) <= GREP_LINE_CHARS:
        return line
    begin = max(0, min(match.start() - GREP_LINE_CHARS // 3, len(line) - GREP_LINE_CHARS))
    end = begin + GREP_LINE_CHARS
    excerpt = ("…" if begin else "") + line[begin:end] + ("…" if end < len(line) else "")
    return (
        f"{excerpt} [line of {len(line)} characters; the match is at start_char="
        f"{line_start + match.start()} for read_file]"
    )


def _walk(
    workspace: Path,
    base: Path,
    refused: Callable[[Path], None] | None = None,
    failed: Callable[[Path, str], None] | None = None,
    changed: Callable[[Path], None] | None = None,
) -> Iterator[Path]:
    """The files below the folder `base`, in os.walk's order (top down, sorted names).

    Each folder is listed through a descriptor opened from the workspace down without
    following a link (`open_folder`): one swapped for a link out while the search runs
    is not listed, so every name found is one in the workspace (os.walk, listing by
    path, read the outside through the link). Links to folders are not entered. A
    folder the system refuses to open or read is given to `refused` (the one refused,
    which may be a folder above it since changed), one it fails to read otherwise (an
    I/O error) to `failed` with the system's reason, one removed or replaced (by a
    file or a link) since it was found to `changed`, and the walk goes on with the rest.
    """
    folders = [base]
    while folders:
        folder = folders.pop()
        try:
            with open_folder(workspace, folder) as fd, os.scandir(fd) as scan:
                entries = sorted((e.name, _is_folder(e), e.is_symlink()) for e in scan)
        except PermissionError as exc:
            if refused is not None:
                named = Path(os.fsdecode(exc.filename)) if exc.filename else folder
                refused(named if named.is_relative_to(workspace) else folder)
            continue
        except WorkspaceEscapeError:  # replaced by a link since it was found
            if changed is not None:
                changed(folder)
            continue
        except OSError as exc:
            if exc.errno in _GONE:  # removed, or replaced by a file or a link, since found
                if changed is not None:
                    changed(folder)
            elif failed is not None:
                failed(folder, _reason(exc))
            continue
        for name, is_dir, _ in entries:
            if not is_dir:
                yield folder / name
        inner = [name for name, is_dir, link in entries if is_dir and not link]
        folders.extend(folder / name for name in reversed(inner) if name not in SKIPPED_DIRS)


def _is_folder(entry: os.DirEntry[str]) -> bool:
    """Whether the entry is a folder or a link to one (not: a loop of links, as os.walk)."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _fitted(
    lines: list[str],
    limit: int,
    more: Callable[[int], str],
    notes: Iterable[str] = (),
    *,
    left_out: int = 0,
) -> str:
    """The first `lines` that fit in `limit` characters, then `more` of the rest, then `notes`.

    What is left out (the lines that do not fit, and `left_out` more already left out
    before) is said by ``more(count)``, and the notes (``''`` for none) always come last:
    room is left for both, so the answer, notes included, is at most `limit` characters.
    Only a limit too small for the notes themselves cuts them (at the end).
    """
    tail = [note for note in notes if note]
    tail_chars = sum(len(note) + 1 for note in tail)  # each with the newline before it

    def size(chars: int, count: int) -> int:  # `count` lines of `chars` in all, then the tail
        return chars + max(0, count - 1) + tail_chars - (0 if count else 1)

    chars = sum(len(line) for line in lines)
    if not left_out and size(chars, len(lines)) <= limit:
        return "\n".join([*lines, *tail])
    kept = 0
    used = 0  # characters of the lines kept
    while kept < len(lines):
        with_next = used + len(lines[kept])
        if size(with_next + len(more(len(lines) - kept - 1 + left_out)), kept + 2) > limit:
            break
        kept, used = kept + 1, with_next
    answer = "\n".join([*lines[:kept], more(len(lines) - kept + left_out), *tail])
    return answer if len(answer) <= limit else answer[: max(0, limit - 1)] + "…"


def _more(what: str) -> Callable[[int], str]:
    """The line saying how many `what` (matching lines, paths) an answer leaves out."""
    return lambda count: f"[... {count} more {what} not shown; narrow the search]"


class WriteFileTool(WorkspaceTool):
    """Write a whole file, creating parent folders."""

    name = "write_file"
    description = (
        "Write text to a file in the workspace, replacing it if it exists. "
        "Missing parent folders are created. To change part of a file, use edit_file."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": _path_property("File path, relative to the workspace."),
            "content": {"type": "string", "description": "The complete new file content."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }

    def run(self, path: str, content: str) -> ToolResult:
        target = self.resolve(path)
        if target.is_dir():
            return ToolResult.error(f"{clip(path)} is a directory")
        self.refuse_special(target, path)
        with self.open(target, "w") as handle:
            handle.write(content)
        return ToolResult(f"Wrote {len(content)} characters to {self.show(target)}.")


class EditFileTool(WorkspaceTool):
    """Replace exact text in a file."""

    name = "edit_file"
    description = (
        "Replace an exact piece of text in a file. old_text must match the file exactly "
        "(whitespace included) and occur once, unless replace_all is true. "
        "Include surrounding lines to make it unique."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": _path_property("File path, relative to the workspace."),
            "old_text": {"type": "string", "minLength": 1, "description": "Exact text to replace."},
            "new_text": {"type": "string", "description": "Text to put in its place."},
            "replace_all": {
                "type": "boolean",
                "default": False,
                "description": "Replace every occurrence instead of exactly one.",
            },
        },
        "required": ["path", "old_text", "new_text"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        workspace: Path,
        *,
        max_output_chars: int = DEFAULT_OUTPUT_CHARS,
        max_file_bytes: int = MAX_EDIT_FILE_BYTES,
    ) -> None:
        super().__init__(workspace, max_output_chars=max_output_chars)
        self.max_file_bytes = max_file_bytes

    def run(self, path: str, old_text: str, new_text: str, replace_all: bool = False) -> ToolResult:
        target = self.resolve(path)
        self.refuse_special(target, path)
        if not target.is_file():
            return ToolResult.error(f"file not found: {clip(path)}")
        with self.open(target, "rb") as raw:
            # The size of the file opened, not of the path checked: it is refused unread.
            size = os.fstat(raw.fileno()).st_size
            if size > self.max_file_bytes:
                return self._too_large(path, f"{size:,} bytes")
            # Bounded too: a file that grows after the fstat is not read past the limit.
            data = read_up_to(raw, self.max_file_bytes, size=size)
        if len(data) > self.max_file_bytes:
            return self._too_large(path, f"more than {self.max_file_bytes:,} bytes (it grew)")
        try:
            content = data.decode("utf-8")
        except UnicodeDecodeError:
            return ToolResult.error(f"{clip(path)} is not UTF-8 text; edit_file only edits text")
        if old_text not in content and "\r\n" in content and "\r\n" not in old_text:
            # The model writes "\n"; the file uses Windows line endings.
            old_text, new_text = old_text.replace("\n", "\r\n"), new_text.replace("\n", "\r\n")
        count = content.count(old_text)
        if count == 0:
            return ToolResult.error(
                f"old_text was not found in {clip(path)}; read the file again and copy the text "
                "exactly"
            )
        if count > 1 and not replace_all:
            return ToolResult.error(
                f"old_text occurs {count} times in {clip(path)}; include more surrounding text to "
                "make it unique, or set replace_all to true"
            )
        replaced = count if replace_all else 1
        # Worked out before replacing: a short old_text replaced everywhere by a long
        # new_text would otherwise make a text of count times new_text (gigabytes).
        growth = len(new_text.encode("utf-8")) - len(old_text.encode("utf-8"))
        result_size = len(data) + replaced * growth
        del data  # the text holds it now
        if result_size > self.max_file_bytes:
            return ToolResult.error(
                f"this edit would make {clip(path)} {result_size:,} bytes, more than edit_file "
                f"writes ({self.max_file_bytes:,}); replace fewer occurrences or with shorter "
                "text, or write a new file with write_file"
            )
        updated = (
            content.replace(old_text, new_text)
            if replace_all
            else content.replace(old_text, new_text, 1)
        )
        with self.open(target, "w") as handle:
            handle.write(updated)
        return ToolResult(f"Replaced {replaced} occurrence(s) in {self.show(target)}.")

    def _too_large(self, path: str, size: str) -> ToolResult:
        """The refusal of a file over `max_file_bytes`, saying what to do instead."""
        return ToolResult.error(
            f"{clip(path)} is {size}, and edit_file edits files of at most "
            f"{self.max_file_bytes:,} bytes: change it with "
            "a command-line tool if you have one (such as sed), or write what you need to a "
            "new file with write_file (read_file still reads it)"
        )


BUILTIN_TOOLS: tuple[type[WorkspaceTool], ...] = (
    ReadFileTool,
    ListDirTool,
    FindFilesTool,
    GrepTool,
    WriteFileTool,
    EditFileTool,
)


#: The package the grep child loads: this one, wherever it is (the installed one may differ).
_PACKAGE = Path(__file__).parents[1]
#: What the grep child runs (``python -I -c``, the package folder its argument): the
#: package loaded from that folder, so that parent and child run the same code.
_CHILD_CODE = """\
import importlib.util, os, sys
folder = sys.argv[1]
spec = importlib.util.spec_from_file_location(
    "nanobot_core", os.path.join(folder, "__init__.py"), submodule_search_locations=[folder]
)
module = importlib.util.module_from_spec(spec)
sys.modules["nanobot_core"] = module
spec.loader.exec_module(module)
from nanobot_core.tools.builtin import _search_in_child
_search_in_child()
"""


def _child_failure(done: subprocess.CompletedProcess[str]) -> str:
    """Why the grep child failed, for the model: its error's last line, or the signal.

    Not the whole of its stderr: a traceback's lines name where the package is
    installed, which is the host's layout (as the workspace's place is), and the
    model can act on the error alone.
    """
    if done.returncode < 0:
        try:
            name = f" ({signal.Signals(-done.returncode).name})"
        except ValueError:
            name = ""
        return f"the search process was killed by signal {-done.returncode}{name}"
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    if not lines:
        return f"the search process ended with exit code {done.returncode}"
    return clip(lines[-1].strip(), 300)


def _read_progress(progress: IO[bytes]) -> tuple[int, int, str]:
    """The files a stopped search looked at (-1: it had not begun), searched, and the last."""
    progress.seek(0)
    head, _, rest = progress.read().partition(b"\n")
    try:
        looked, searched, size = (int(number) for number in head.split())
    except ValueError:  # nothing written yet: stopped before the search began
        return -1, 0, ""
    return looked, searched, rest[:size].decode("utf-8", "replace")


def _timed_out(pattern: str, seconds: float, looked: int, searched: int, last: str) -> str:
    """What grep answers when its search was stopped at the timeout, by how far it got."""
    stopped = f"the search for {pattern} did not finish within {seconds:g}s and was stopped"
    found = "1 file found" if looked == 1 else f"{looked:,} files found"
    if looked < 0:
        return f"{stopped} before it began: {seconds:g}s is too short for a search to start"
    if searched == 0:
        return (
            f"{stopped} before it searched a file ({found}, none searched yet): the tree "
            "under `path` is too large to go through in that time; narrow `path` (`glob` "
            "chooses among the files found, but all of them are still looked at)"
        )
    if searched == 1:
        return (
            f"{stopped} in the first file it searched, {last} ({found}): the regular "
            "expression may backtrack without end (nested quantifiers such as (a+)+); use a "
            "simpler pattern, or leave that file out with `path` or `glob`"
        )
    done = "1 file" if searched == 2 else f"{searched - 1:,} files"
    return (
        f"{stopped} after it had searched {done} ({found}), in {last}: either the tree "
        "is too large to search in that time (narrow `path` and `glob`) or the regular "
        "expression backtracks without end (nested quantifiers such as (a+)+; use a "
        "simpler pattern)"
    )


def _search_in_child() -> None:
    """The child side of `GrepTool.run`: a request on stdin, the result as JSON on stdout."""
    request = loads(sys.stdin.read()).value
    tool = GrepTool(
        Path(request.pop("workspace")), max_output_chars=request.pop("max_output_chars")
    )
    tool.progress_fd = request.pop("progress_fd", None)
    # The search resolves the path here, in the child: an escape is answered like every tool's.
    result = _contained(tool.search, **request)
    sys.stdout.write(dumps({"text": str(result), "error": result.is_error}))


if __name__ == "__main__":
    _search_in_child()
