"""What can name a session: the one rule, for every store, the CLI and the configuration.

A module of its own so that the configuration can check ``runner.session`` when it
loads without importing the session machinery.
"""

from __future__ import annotations

import re

from nanobot_core.errors import SessionError

__all__ = ["is_session_name", "validate_session_name"]

_NAME = re.compile(r"[A-Za-z0-9._-]+")
# Leaves room for the longest suffix within the usual 255-byte file-name limit.
_MAX_NAME_LENGTH = 200


def validate_session_name(name: str) -> str:
    """Return `name` if it can name a session, else raise SessionError saying why."""
    if not isinstance(name, str) or not name:
        raise SessionError("a session name must not be empty")
    if name in (".", ".."):
        raise SessionError(f"invalid session name {name!r}: '.' and '..' are not allowed")
    if not _NAME.fullmatch(name):
        bad = sorted({c for c in name if not _NAME.fullmatch(c)})
        raise SessionError(
            f"invalid session name {name!r}: only letters, digits, '.', '_' and '-' are allowed "
            f"(found {', '.join(repr(c) for c in bad)})"
        )
    if len(name) > _MAX_NAME_LENGTH:
        raise SessionError(f"invalid session name: longer than {_MAX_NAME_LENGTH} characters")
    return name


def is_session_name(name: str) -> bool:
    """Whether `name` is a valid session name (for listings, which skip the others)."""
    return bool(_NAME.fullmatch(name)) and name not in (".", "..") and len(name) <= _MAX_NAME_LENGTH
