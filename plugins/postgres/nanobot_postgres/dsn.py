"""Connection strings without their secrets: for reprs, messages and logs.

A URL whose password holds a character it should have percent-encoded
(``@``, ``/``, ``?``, ``#``, ``%``) does not parse as it was meant: libpq
reads part of the password as the host, port or database, or quotes it in
its error. So besides the password libpq finds, the password as written
(the text between the first ``:`` and the last ``@`` of the URL) is treated
as a secret, piece by piece; and libpq's quotes of a DSN it cannot parse at
all are never echoed.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = ["describe_dsn", "parse_fault", "scrub"]

_URL = re.compile(r"postgres(?:ql)?://", re.IGNORECASE)
# Where libpq cuts a URL into parts: the pieces of a password that hold one of these.
_CUTS = re.compile(r"[@/?#:\[\]]")
# What libpq quotes of a connection string it cannot parse.
_QUOTED = re.compile(r'"[^"]*"')


def _parts(dsn: str) -> dict[str, str]:
    from psycopg.conninfo import conninfo_to_dict

    try:
        return {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v is not None}
    except Exception:  # an unparseable DSN is described, never echoed
        return {}


def _written_password(dsn: str) -> str:
    """The password of a URL DSN as written, up to its last ``@`` ('' when none)."""
    match = _URL.match(dsn.strip())
    if match is None:
        return ""
    userinfo, at, _ = dsn.strip()[match.end() :].partition("?")[0].rpartition("@")
    return userinfo.partition(":")[2] if at else ""


def _misread(dsn: str, parts: dict[str, str]) -> bool:
    """Whether libpq read the DSN's password other than it was written."""
    written = _written_password(dsn)
    return bool(written) and unquote(written) != parts.get("password", "")


def parse_fault(dsn: str) -> str | None:
    """Why libpq cannot parse `dsn` (secrets scrubbed), or None when it can."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        return scrub(" ".join(str(exc).split()), dsn)
    return None


def describe_dsn(dsn: str | None) -> str:
    """``postgresql://user@host:port/dbname``: where the DSN points, never its password."""
    if not dsn:
        return "postgresql (no dsn)"
    parts = _parts(dsn)
    if not parts:
        return "postgresql (unparseable dsn)"
    if _misread(dsn, parts):
        return "postgresql (dsn misread: percent-encode '@', '/', '?', '#' and '%' in its password)"
    user = parts.get("user", "")
    host = parts.get("host", parts.get("hostaddr", "localhost"))
    port = parts.get("port", "5432")
    database = parts.get("dbname", user)
    return f"postgresql://{user + '@' if user else ''}{host}:{port}/{database}"


def scrub(text: str, dsn: str | None) -> str:
    """`text` with the DSN's password (and the DSN itself) replaced by ``***``."""
    if not dsn:
        return text
    parts = _parts(dsn)
    written = _written_password(dsn)
    secrets = [dsn, parts.get("password", ""), written, unquote(written)]
    if _misread(dsn, parts):
        secrets += _CUTS.split(written) + _CUTS.split(unquote(written))
    for secret in sorted((s for s in set(secrets) if s), key=len, reverse=True):
        text = text.replace(secret, "***")
    if not parts:  # libpq quotes the part it could not parse, which may be the password
        text = _QUOTED.sub('"***"', text)
    return text
