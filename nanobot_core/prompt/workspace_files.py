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

import attrs

from nanobot_core._logging import get_logger

__all__ = [
    "BOOTSTRAP_FILES",
    "MEMORY_FILE",
    "TEMPLATE_FILES",
    "InitReport",
    "init_workspace",
    "read_regular_file",
    "read_user_file",
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


def read_regular_file(path: Path) -> bytes:
    """The bytes of `path`, which must be a regular file (a link to one is followed).

    Opening never waits: a named pipe, a device or a socket raises ``OSError``
    ("not a regular file") instead of blocking the prompt until something
    writes to it, or reading without end.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    fd = os.open(path, flags)
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(handle.fileno()).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return handle.read()


def read_user_file(workspace: Path, relative: str) -> str | None:
    """The normalised text of a workspace file, or None when it is missing, empty or the template.

    Undecodable bytes are replaced rather than failing, and an unreadable file
    is logged and left out: one bad file should not cost the agent the others.
    """
    path = workspace / relative
    try:
        raw = read_regular_file(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        log.warning(
            "workspace file unreadable; left out of the prompt",
            path=str(path),
            error=f"{type(exc).__name__}: {exc}",
        )
        return None
    text = _normalise(raw.decode("utf-8", errors="replace"))
    if not text:
        return None
    if relative in TEMPLATE_FILES and text == _normalise(shipped_template(relative)):
        return None
    return text


@attrs.frozen
class InitReport:
    """What ``init`` did: the template files it wrote and the existing files it kept."""

    workspace: Path
    written: list[str]
    kept: list[str]


def init_workspace(workspace: Path, files: Sequence[str] = TEMPLATE_FILES) -> InitReport:
    """Write the shipped templates into `workspace`, never replacing a file that exists.

    Creation is exclusive (``open(..., "x")``), so a file that appears between
    the check and the write is kept, not overwritten.
    """
    written: list[str] = []
    kept: list[str] = []
    for relative in files:
        path = workspace / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with path.open("x", encoding="utf-8", newline="\n") as handle:
                handle.write(shipped_template(relative))
        except FileExistsError:
            kept.append(relative)
        else:
            written.append(relative)
    return InitReport(workspace, written, kept)
