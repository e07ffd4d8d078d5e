"""The folders this plugin writes in, under the workspace's ``.nanobot/``, reached safely.

The workspace is anyone's to write (the model's file tools, a cloned repository):
a ``.nanobot/cache`` or ``.nanobot/logs`` that is a symbolic link to elsewhere
would have the records and logs written, replaced and emptied there. So the
folders from the workspace down are opened by the core's
`nanobot_core.open_folder_without_links`, and files are opened relative to the
last one.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from nanobot_core import open_folder_without_links

__all__ = ["folder_of", "log_directory"]


def log_directory(workspace: Path) -> Path:
    """Where a workspace keeps its servers' stderr logs, one ``<server>.log`` each."""
    return workspace / ".nanobot" / "logs" / "mcp"


@contextlib.contextmanager
def folder_of(path: Path, root: Path | None, *, create: bool = False) -> Iterator[int]:
    """A descriptor of the folder of `path`, reached from `root` (by default the folder
    above it) without going through a link, and made when missing with `create`.

    A folder on the way that is a link, or a file, raises ``OSError`` (``ELOOP`` or
    ``ENOTDIR``) whose message names its whole path; so does any other failure.
    """
    base = path.parent.parent if root is None else root
    try:
        folder = open_folder_without_links(base, path.parent.relative_to(base).parts, create=create)
    except OSError as exc:
        raise OSError(exc.errno, f"{base / exc.filename} {exc.strerror}") from None
    try:
        yield folder
    finally:
        os.close(folder)
