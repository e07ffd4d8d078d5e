"""The workspace files the prompt reads, their shipped templates, and ``init``.

A file counts as the user's only when it says something of its own: a missing
file, an empty one, or one that still holds the shipped template (ignoring
surrounding whitespace and line endings) is left out of the prompt.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import BinaryIO

import attrs

from nanobot_core._logging import get_logger
from nanobot_core._reading import read_at_most
from nanobot_core._regular_file import kind_of, open_regular_file
from nanobot_core.config import DEFAULT_PROMPT_FILE_BYTES
from nanobot_core.errors import NotRegularFileError, WorkspaceEscapeError
from nanobot_core.tools.builtin import BINARY_SNIFF_BYTES

__all__ = [
    "BOOTSTRAP_FILES",
    "MEMORY_FILE",
    "TEMPLATE_FILES",
    "FileStart",
    "InitReport",
    "binary_reason",
    "cut_notice",
    "init_workspace",
    "read_file_start",
    "read_regular_file",
    "read_user_file",
    "read_workspace_file_start",
    "shipped_template",
]

log = get_logger("nanobot_core.prompt")

BOOTSTRAP_FILES: tuple[str, ...] = ("AGENTS.md", "SOUL.md", "USER.md")
MEMORY_FILE = "memory/MEMORY.md"
TEMPLATE_FILES: tuple[str, ...] = (*BOOTSTRAP_FILES, MEMORY_FILE)


@functools.cache
def shipped_template(relative: str) -> str:
    """The text of the template shipped for `relative` (a path such as ``memory/MEMORY.md``)."""
    if relative not in TEMPLATE_FILES:
        raise KeyError(f"no template is shipped for {relative!r}")
    resource = resources.files("nanobot_core.prompt").joinpath("templates")
    for part in relative.split("/"):
        resource = resource.joinpath(part)
    return resource.read_text(encoding="utf-8")


def _normalise(text: str) -> str:
    """Text as the prompt uses it: no BOM, LF line endings, no surrounding whitespace."""
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").strip()


def _open_regular(path: Path) -> BinaryIO:
    """`path` opened for reading in binary, refused unless it is a regular file (or a link to one).

    Opening never waits (`open_regular_file`): a named pipe, a device, a socket
    or a folder raises `NotRegularFileError` naming the path instead of blocking
    the prompt until something writes to it, or reading without end.
    """
    return os.fdopen(open_regular_file(path), "rb")


def read_regular_file(path: Path) -> bytes:
    """The bytes of `path`, which must be a regular file (a link to one is followed).

    Reads the whole file: for text that goes into the prompt, use
    :func:`read_file_start`, which reads no more than a limit.
    """
    with _open_regular(path) as handle:
        return handle.read()


@attrs.frozen
class FileStart:
    """The first bytes of a file, cut on a UTF-8 character boundary, and the file's size.

    `data` is the whole file when `cut` is false.
    """

    data: bytes
    size: int

    @property
    def cut(self) -> bool:
        """Whether the file holds more than `data`."""
        return len(self.data) < self.size


def _utf8_prefix(data: bytes, limit: int) -> bytes:
    """The first `limit` bytes of `data` or fewer, never ending inside a UTF-8 character.

    ``data[limit]`` (when there is one) tells whether the cut falls inside a
    character: it does when that byte continues one (``0b10xxxxxx``), and the
    cut then moves back to the character's first byte. A character is at most
    four bytes, so bytes that are not UTF-8 at all move it back at most three.
    """
    cut = min(limit, len(data))
    floor = max(cut - 3, 0)
    while cut > floor and cut < len(data) and data[cut] & 0xC0 == 0x80:
        cut -= 1
    return data[:cut]


def read_file_start(path: Path, max_bytes: int) -> FileStart:
    """At most `max_bytes` of the regular file `path`, cut on a UTF-8 character boundary.

    One byte more than the limit is read, to tell a file of exactly `max_bytes`
    from a longer one (and where its last character ends); the rest is never
    read, so a file of gigabytes costs no more than one at the limit.
    """
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be at least 1, got {max_bytes}")
    with _open_regular(path) as handle:
        raw, size = read_at_most(handle, max_bytes)
    return _start(raw, size, max_bytes)


_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC


def _is_link(folder: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_without_links(root: Path, parts: Sequence[str], shown: Path) -> int | None:
    """A descriptor of the regular file `root`/`parts`, no link below `root` followed; None
    when one is met.

    Each folder is opened relative to the one above it, so what is opened is what
    is there as it is walked: a folder swapped for a link meanwhile is met as a
    link, never followed. The file is opened by `open_regular_file` (no wait; a
    pipe, a device or a folder is a `NotRegularFileError`). Errors name the whole
    path, as `shown`.
    """
    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)  # the workspace, as given
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            try:
                if last:
                    opened = open_regular_file(
                        part, follow_links=False, dir_fd=folder, shown=str(shown)
                    )
                else:
                    opened = os.open(part, _FOLDER_FLAGS, dir_fd=folder)
            except NotRegularFileError as exc:
                if exc.errno == errno.ELOOP:
                    return None  # the file is a link
                raise
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK) and _is_link(
                    folder, part
                ):
                    return None
                raise OSError(exc.errno, exc.strerror, str(shown)) from None
            if last:
                return opened
            os.close(folder)
            folder = opened
    finally:
        os.close(folder)
    raise IsADirectoryError(errno.EISDIR, "is the workspace itself", str(shown))


def _open_in_workspace(workspace: Path, relative: str) -> int:
    """A descriptor of the file at `relative` in `workspace`, links followed only inside it."""
    shown = workspace / relative
    parts = [part for part in relative.split("/") if part]
    fd = _open_without_links(workspace, parts, shown)
    if fd is not None:
        return fd
    # A link on the way: followed to where it leads, if that is inside the workspace.
    try:
        os.stat(shown)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(
                errno.ELOOP, "leads into a loop of symbolic links, never to a file", str(shown)
            ) from None
    root = workspace.resolve()
    # realpath, not Path.resolve: that raises RuntimeError on a loop of links.
    target = Path(os.path.realpath(root / relative))
    if not target.is_relative_to(root) or target == root:
        raise WorkspaceEscapeError(
            f"{relative} leads out of the workspace (a link to what is outside it); "
            "only files inside the workspace are read into the prompt"
        )
    fd = _open_without_links(root, target.relative_to(root).parts, shown)
    if fd is None:
        raise WorkspaceEscapeError(
            f"{relative} changed while it was opened (a folder or file became a link); "
            "left out of the prompt"
        )
    return fd


def read_workspace_file_start(workspace: Path, relative: str, max_bytes: int) -> FileStart:
    """As :func:`read_file_start`, of the file at `relative` in `workspace`, kept inside it.

    A link is followed only while it stays in the workspace, as the file tools
    follow one: a workspace from elsewhere (a cloned repository) whose
    ``AGENTS.md`` or skill folder is a link to ``~/.ssh`` would otherwise put
    what is there into the prompt sent to the provider. Such a path raises
    `WorkspaceEscapeError` before anything outside is opened. Every folder is
    opened from the workspace down without following links, so one swapped
    for a link after the check is refused too (`WorkspaceEscapeError`). What is
    not a regular file (a named pipe, a device, a folder) raises
    `NotRegularFileError` at once, naming the path.
    """
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be at least 1, got {max_bytes}")
    with os.fdopen(_open_in_workspace(workspace, relative), "rb") as handle:
        raw, size = read_at_most(handle, max_bytes)
    return _start(raw, size, max_bytes)


def _start(raw: bytes, size: int, max_bytes: int) -> FileStart:
    """The `FileStart` of `raw`, read as at most ``max_bytes + 1`` bytes of a file of `size`."""
    if len(raw) <= max_bytes:
        return FileStart(raw, len(raw))
    # The file may have grown since fstat: it holds at least what was read.
    return FileStart(_utf8_prefix(raw, max_bytes), max(size, len(raw)))


def binary_reason(start: FileStart) -> str | None:
    """Why the file that `start` begins is no text for the prompt, or None when it is text.

    A NUL byte in its first bytes, as ``read_file`` tells a binary file: a file of
    holes (a sparse file of gigabytes is all NUL), a picture, or UTF-16 text,
    whose every ASCII character is followed by one.
    """
    if b"\0" not in start.data[:BINARY_SNIFF_BYTES]:
        return None
    return (
        f"is a binary file (a NUL byte in its first {BINARY_SNIFF_BYTES:,} bytes); "
        "UTF-16 text is one: save it as UTF-8"
    )


def cut_notice(relative: str, start: FileStart) -> str:
    """The line that ends the text of a file cut to `prompt.max_file_bytes` in the prompt."""
    return (
        f"[{relative} was cut here: the prompt holds its first {len(start.data):,} of "
        f"{start.size:,} bytes (prompt.max_file_bytes). Read the file with read_file for "
        "the rest.]"
    )


def read_user_file(
    workspace: Path, relative: str, *, max_bytes: int = DEFAULT_PROMPT_FILE_BYTES
) -> str | None:
    """The normalised text of a workspace file, or None when it is missing, empty or the template.

    Undecodable bytes are replaced rather than failing, and an unreadable or
    binary file (:func:`binary_reason`) is logged and left out: one bad file
    should not cost the agent the others.
    A file larger than `max_bytes` is read only that far: its text ends with
    :func:`cut_notice`, and a warning names the file.
    """
    path = workspace / relative
    try:
        start = read_workspace_file_start(workspace, relative, max_bytes)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, WorkspaceEscapeError) as exc:
        log.warning(
            "workspace file unreadable; left out of the prompt",
            path=str(path),
            error=f"{type(exc).__name__}: {exc}",
        )
        return None
    if (binary := binary_reason(start)) is not None:
        log.warning(
            "workspace file is binary; left out of the prompt",
            path=str(path),
            hint=binary,
        )
        return None
    text = _normalise(start.data.decode("utf-8", errors="replace"))
    if start.cut:
        log.warning(
            "workspace file larger than prompt.max_file_bytes; only its start is in the prompt",
            path=str(path),
            size=start.size,
            kept=len(start.data),
            max_file_bytes=max_bytes,
        )
        return f"{text}\n\n{cut_notice(relative, start)}".lstrip()
    if not text:
        return None
    if relative in TEMPLATE_FILES and text == _normalise(shipped_template(relative)):
        return None
    return text


@attrs.frozen
class InitReport:
    """What ``init`` did: the template files it wrote, the existing files it kept, and
    those it could not write, each with why (a file where its folder goes, a full disk,
    a link out of the workspace or to nothing)."""

    workspace: Path
    written: list[str]
    kept: list[str]
    failed: dict[str, str] = attrs.field(factory=dict)


def init_workspace(workspace: Path, files: Sequence[str] = TEMPLATE_FILES) -> InitReport:
    """Write the shipped templates into `workspace`, never replacing a file that exists.

    Each is created whole or not at all (`create_new`): a file that appears between
    the check and the write is kept, not overwritten, and a write that fails part of
    the way (a full disk) leaves no part of a template, which a later ``init`` would
    keep as the user's own and the prompt would send as the user's rules.

    A link on the way (``memory``, or the file itself) is followed only as the prompt
    follows it (`read_workspace_file_start`), inside the workspace: one that leads out
    of it, or to nothing, is written through by no template, and the template is
    listed under `failed` naming the link and where it leads, as is anything but a
    regular file where the template goes. A template is kept only when the prompt
    reads what is there.
    """
    root = Path(os.path.realpath(workspace))
    written: list[str] = []
    kept: list[str] = []
    failed: dict[str, str] = {}
    try:
        root.mkdir(parents=True, exist_ok=True)  # the workspace, as the user named it
    except OSError as exc:
        return InitReport(workspace, [], [], dict.fromkeys(files, exc.strerror or str(exc)))
    for relative in files:
        place = _template_place(root, relative)
        if isinstance(place, str):
            failed[relative] = place
            continue
        if place is None:
            kept.append(relative)
            continue
        try:
            _create_template(root, place, shipped_template(relative).encode("utf-8"))
        except FileExistsError:
            kept.append(relative)  # made meanwhile by someone else: theirs, kept
        except OSError as exc:  # one template: the others are still written
            failed[relative] = exc.strerror or str(exc)
        else:
            written.append(relative)
    return InitReport(workspace, written, kept, failed)


def _create_template(root: Path, place: Path, data: bytes) -> None:
    """Create `place` (in `root`, found with no link in its path) holding `data`, with the
    folders it needs.

    Each folder is opened from `root` down without following a link, and made there
    when missing, and the file is made in the last one opened (`create_new`): a folder
    swapped for a link since `place` was found is met as a link (``OSError``, ELOOP or
    ENOTDIR), never written through, as the prompt never reads through one.
    """
    from nanobot_core._atomic import create_new
    from nanobot_core._folders import open_folder_without_links

    *folders, name = place.relative_to(root).parts
    try:
        folder = open_folder_without_links(root, folders, create=True)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR):
            raise
        raise OSError(
            exc.errno,
            f"{exc.filename} became a link or a file while init ran: nothing is written through it",
        ) from None
    try:
        create_new(name, data, dir_fd=folder)
    finally:
        os.close(folder)


def _template_place(root: Path, relative: str) -> Path | str | None:
    """Where template `relative` goes in the workspace `root` (a real path, no link in it):
    the path to create, with no link in it; None when a regular file the prompt reads is
    there (kept); or why the template is not written, naming what is in the way.

    Walked from `root` down, each part looked at without following it; a link is followed
    to where it leads, and what is there, or made there, must be inside `root`, as the
    prompt reads a file only where its path leads inside the workspace. A link to
    nothing is followed by no write.
    """
    parts = relative.split("/")
    here = root
    # The link that led out of the workspace, while what is walked is outside it.
    led_out: tuple[str, Path] | None = None
    for index, part in enumerate(parts):
        shown = "/".join(parts[: index + 1])
        path = here / part
        try:
            status = os.lstat(path)
        except FileNotFoundError:
            if led_out is not None:
                return _led_out(*led_out)
            return here.joinpath(*parts[index:])  # created from here down
        except OSError as exc:
            return f"{shown} cannot be used: {exc.strerror or exc}"
        what = shown
        if stat.S_ISLNK(status.st_mode):
            followed = _follow(path, shown)
            if isinstance(followed, str):
                return followed
            status = followed
            path = Path(os.path.realpath(path))
            led_out = None if path.is_relative_to(root) else (shown, path)
            what = f"{shown} links to {path}, which"
        if index < len(parts) - 1:
            if not stat.S_ISDIR(status.st_mode):
                return f"{what} is not a folder"
            here = path
        elif led_out is not None:
            return _led_out(*led_out)
        elif (kind := kind_of(status.st_mode)) is not None:
            return f"{what} is a {kind}, not a file: the prompt does not read it"
    return None


def _led_out(shown: str, target: Path) -> str:
    """Why no template is written, nor kept, through the link `shown`, which leads out of
    the workspace to `target`."""
    return (
        f"{shown} is a link out of the workspace (to {target}), which the prompt does "
        "not follow: nothing is written through it"
    )


def _follow(link: Path, shown: str) -> os.stat_result | str:
    """What the link `link` leads to (`shown` as the template's path names it), or why no
    template is written through it: it leads to nothing, into a loop, or cannot be
    followed."""
    try:
        return os.stat(link)
    except FileNotFoundError:
        target = Path(os.path.realpath(link))
        return f"{shown} is a link to nothing ({target}): nothing is written through it"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"{shown} is a link in a loop: nothing is written through it"
        return f"{shown} is a link that cannot be followed: {exc.strerror or exc}"
