"""The one walk into a workspace's folders that never goes through a symbolic link.

A folder of the workspace may be a link to anywhere (the model writes files there,
a cloned repository brings its own): a file written by its path goes wherever the
link leads. So each folder is opened relative to the descriptor of the one above
it with ``O_NOFOLLOW``, from the workspace down, and what is written goes into the
last descriptor opened: a folder swapped for a link after any check is met as a
link, never followed. ``init`` writes its templates this way, and nanobot-mcp its
records and logs.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["FOLDER_IS_A_LINK", "open_folder_without_links"]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC

#: The ``strerror`` of the ``OSError`` `open_folder_without_links` raises for a folder
#: on the way that is a link or no folder at all.
FOLDER_IS_A_LINK = "is a symbolic link or not a folder, which is not gone through"


def open_folder_without_links(
    root: str | os.PathLike[str], parts: Sequence[str], *, create: bool = False
) -> int:
    """A descriptor of the folder `root`/`parts`, no link below `root` followed; the
    caller closes it.

    `root` (the workspace) is opened as given, links and all; each of `parts` is
    opened in the folder above it without following a link, and made there (0o777
    less the umask) when missing and `create` is true. A part that is a symbolic link,
    or a file, raises ``OSError`` (``ELOOP`` or ``ENOTDIR``) whose ``strerror`` is
    `FOLDER_IS_A_LINK` and whose ``filename`` is the path of that part below `root`
    (``.nanobot/cache``); any other failure is the ``OSError`` of the system call,
    its ``filename`` that path too. Nothing is left open when it raises.
    """
    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    try:
        for index, part in enumerate(parts):
            try:
                try:
                    opened = os.open(part, _FOLDER_FLAGS, dir_fd=folder)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):  # made meanwhile: opened below
                        os.mkdir(part, 0o777, dir_fd=folder)
                    opened = os.open(part, _FOLDER_FLAGS, dir_fd=folder)
            except OSError as exc:
                shown = str(Path(*parts[: index + 1]))
                # ELOOP under O_NOFOLLOW (EMLINK on FreeBSD): a link; ENOTDIR: a file.
                if exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR):
                    raise OSError(exc.errno, FOLDER_IS_A_LINK, shown) from None
                raise OSError(exc.errno, exc.strerror, shown) from None
            os.close(folder)
            folder = opened
    except BaseException:
        os.close(folder)
        raise
    return folder
