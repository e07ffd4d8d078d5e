"""Path confinement for workspace tools: every path a model names must stay inside the workspace."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from nanobot_core._clip import clip, quoted
from nanobot_core._regular_file import kind_of, open_regular_file
from nanobot_core.errors import NotRegularFileError, WorkspaceEscapeError

__all__ = [
    "NotRegularFileError",
    "describe_kind",
    "open_folder",
    "open_in_workspace",
    "open_resolved",
    "refuse_hard_links",
    "refuse_link_loop",
    "relative_display",
    "resolve_in_workspace",
]


def describe_kind(mode: int) -> str | None:
    """What a file of `mode` (``st_mode``) is, if neither a regular file, a folder nor a link.

    "named pipe (FIFO)", "socket", "character device", "block device" (or "special file"),
    as `NotRegularFileError` names them.
    """
    if stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
        return None
    return kind_of(mode)


def resolve_in_workspace(workspace: Path, user_path: str) -> Path:
    """The absolute, symlink-resolved path for `user_path`, or `WorkspaceEscapeError`.

    Relative paths are taken from the workspace; absolute paths are allowed
    only when they point inside it. The check runs after resolving symlinks
    and ``..``, so a link inside the workspace that points out is refused too.
    """
    root = workspace.resolve()
    if "\x00" in user_path:
        raise WorkspaceEscapeError(f"path {quoted(user_path)} contains a NUL character")
    # realpath, not Path.resolve: that raises RuntimeError on a loop of links, which realpath
    # leaves unresolved (the loop's link, in its folder: then a file that is not there).
    target = Path(os.path.realpath(root / user_path))
    if not target.is_relative_to(root):
        raise WorkspaceEscapeError(
            # Not where the workspace is on the host: the model names paths relative to
            # it, and this text goes into the provider's logs.
            f"path {quoted(user_path)} points outside the workspace; "
            "use a path inside the workspace, relative to it"
        )
    return target


def relative_display(workspace: Path, path: Path) -> str:
    """How a resolved path inside the workspace is shown to the model: relative, with '/'."""
    relative = path.relative_to(workspace.resolve())
    return relative.as_posix() if relative.parts else "."


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@contextmanager
def open_resolved(
    workspace: Path, target: Path, flags: int, *, make_parents: bool = False, mode: int = 0o644
) -> Iterator[int]:
    """A descriptor of the regular file `target` (from `resolve_in_workspace`), opened race-free.

    `target` was resolved, so no component of it is a symbolic link. Opening it
    by name again would follow whatever is there *now*: a folder swapped for a
    link between the check and the open would lead outside. So every folder is
    opened relative to its parent's descriptor with ``O_NOFOLLOW``, from the
    workspace down, and the file itself with ``O_NOFOLLOW`` too: a link met on
    the way means the path changed after it was checked, and the open is
    refused with `WorkspaceEscapeError`. `make_parents` creates missing folders
    (relative to their parent's descriptor, too). The file is opened by
    `open_regular_file`: without waiting, and refused with `NotRegularFileError`
    (named relative to the workspace) unless it is a regular file.
    """
    root = workspace.resolve()
    parts = target.relative_to(root).parts
    if not parts:
        raise IsADirectoryError(errno.EISDIR, "the workspace itself is a folder", str(target))
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for index, part in enumerate(parts[:-1]):
            parent = fd
            try:
                fd = _enter(parent, part, make_parents, parts[: index + 1], root, target)
            except NotADirectoryError:
                shown = "/".join(parts[: index + 1])
                raise NotADirectoryError(
                    errno.ENOTDIR, f"{quoted(shown)} is a file, not a folder"
                ) from None
            os.close(parent)
        shown = relative_display(root, target)
        try:
            leaf = open_regular_file(
                parts[-1], flags, mode, follow_links=False, dir_fd=fd, shown=shown
            )
        except OSError as exc:
            if isinstance(exc, NotRegularFileError) and exc.errno != errno.ELOOP:
                raise  # a pipe, a device, a folder: named already
            if exc.errno != errno.ELOOP:
                raise _named(exc, target) from None
            # A link where the resolved path had none: it changed, or it loops.
            if _loops(fd, parts[-1]):
                raise _loop("/".join(parts), "/".join(parts)) from None
            raise _changed(shown) from None
    finally:
        os.close(fd)
    try:
        yield leaf
    finally:
        os.close(leaf)


@contextmanager
def open_folder(workspace: Path, target: Path) -> Iterator[int]:
    """A descriptor of the folder `target` (from `resolve_in_workspace`) to list, without a race.

    As `open_resolved` opens a file: every folder from the workspace down is
    opened relative to its parent's descriptor with ``O_NOFOLLOW``, the last
    one too, so a folder swapped for a link after the check is refused with
    `WorkspaceEscapeError` instead of listed through the link. The workspace
    itself can be opened.
    """
    root = workspace.resolve()
    parts = target.relative_to(root).parts
    fd = os.open(root, _DIR_FLAGS)
    try:
        for index, part in enumerate(parts):
            inner = _enter(fd, part, False, parts[: index + 1], root, target)
            os.close(fd)
            fd = inner
        yield fd
    finally:
        os.close(fd)


def refuse_hard_links(fd: int, shown: str) -> None:
    """Refuse to write a file that has other names: a hard link could be a file outside."""
    links = os.fstat(fd).st_nlink
    if links > 1:
        raise WorkspaceEscapeError(
            f"{shown} has {links} hard links (another name may be outside the workspace); "
            "writing through a hard link is refused: write a new file instead"
        )


def _enter(
    parent: int, name: str, make: bool, parts: tuple[str, ...], root: Path, target: Path
) -> int:
    """The folder `name` in `parent` (`parts` of the path below `root`), opened to go on."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        if not make:
            raise FileNotFoundError(
                errno.ENOENT, "no such folder", str(root.joinpath(*parts))
            ) from None
        try:
            os.mkdir(name, 0o755, dir_fd=parent)
        except FileExistsError:
            pass  # made meanwhile, by another call
        except OSError as exc:
            raise _named(exc, root.joinpath(*parts)) from None
        return _enter(parent, name, False, parts, root, target)
    except OSError as exc:
        if exc.errno == errno.ENOTDIR and not _is_link(parent, name):
            raise  # a file where a folder is named: the caller says which
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            if _loops(parent, name):
                raise _loop(relative_display(root, target), "/".join(parts)) from None
            raise _changed(relative_display(root, target)) from None
        raise _named(exc, root.joinpath(*parts)) from None


def _named(exc: OSError, path: Path) -> OSError:
    """`exc`, raised by a call relative to a folder's descriptor, naming the whole `path`.

    Such a call names only the last part (``Permission denied: new.txt`` for
    ``notes/new.txt``); the tools show the whole path, relative to the workspace.
    The class is the one of `exc`'s errno, as an ``OSError`` made from it is.
    """
    return OSError(exc.errno, exc.strerror, str(path))


def _is_link(parent: int, name: str) -> bool:
    """Whether `name` in folder `parent` is a symbolic link (or is gone: it changed)."""
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return True


def _loops(parent: int, name: str) -> bool:
    """Whether `name` in folder `parent` leads into a loop of symbolic links."""
    try:
        os.stat(name, dir_fd=parent)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def refuse_link_loop(workspace: Path, target: Path, given: str | None = None) -> None:
    """Refuse `target` (from `resolve_in_workspace`) if it leads into a loop of symbolic links.

    realpath leaves such a link as it is (there is nothing to resolve it to), so
    the path names no file: a tool would answer that it is not found, though the
    link is there to see. The refusal names the path as `given` (else as
    resolved) and, when that differs, the first link on the resolved path that loops.
    """
    try:
        os.stat(target)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            return
    else:
        return
    root = workspace.resolve()
    parts = target.relative_to(root).parts
    for end in range(1, len(parts) + 1):
        try:
            os.stat(root.joinpath(*parts[:end]))
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _loop(given or "/".join(parts), "/".join(parts[:end])) from None
            return  # it changed meanwhile: what opens it says what is there now


def _changed(shown: str) -> WorkspaceEscapeError:
    """The refusal of the path `shown` (relative to the workspace), changed while opened."""
    return WorkspaceEscapeError(
        f"{clip(shown)}: the path changed (a folder or file became a link) while it was "
        "being opened; refused"
    )


def _loop(path: str, at: str) -> OSError:
    where = "" if at == path else f" at {quoted(at)}"
    return OSError(
        errno.ELOOP,
        f"{quoted(path)} leads into a loop of symbolic links{where} (followed, they come back to "
        "one already followed), never to a file or folder",
    )


_MODES = {
    "r": (os.O_RDONLY, False),
    "rb": (os.O_RDONLY, False),
    "w": (os.O_WRONLY | os.O_CREAT, True),
}


@contextmanager
def open_in_workspace(workspace: Path, target: Path, mode: str) -> Iterator[IO[Any]]:
    """`target` (from `resolve_in_workspace`) opened race-free, as a file object.

    Modes: ``"r"`` (UTF-8 text, bad bytes replaced), ``"rb"``, and ``"w"``
    (UTF-8 text, newlines as written; missing folders are created; a file
    with more than one hard link is refused, and only then emptied).

    Only a regular file is opened: a named pipe, a socket, a device or a folder
    is refused with `NotRegularFileError`, at once (see `open_regular_file`: the
    open does not wait, and the kind is that of the descriptor opened, so a file
    replaced by a pipe after its check is refused too).
    """
    flags, writing = _MODES[mode]
    with open_resolved(workspace, target, flags, make_parents=writing) as fd:
        if writing:
            refuse_hard_links(fd, relative_display(workspace, target))
            os.ftruncate(fd, 0)
        if mode == "rb":
            stream: IO[Any] = os.fdopen(os.dup(fd), "rb")
        elif mode == "r":
            stream = os.fdopen(os.dup(fd), "r", encoding="utf-8", errors="replace")
        else:
            stream = os.fdopen(os.dup(fd), "w", encoding="utf-8", newline="")
        with stream:
            yield stream
