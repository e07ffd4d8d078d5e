"""Connection strings without their secrets: for reprs, messages and logs."""

from __future__ import annotations

__all__ = ["describe_dsn", "scrub"]


def _parts(dsn: str) -> dict[str, str]:
    from psycopg.conninfo import conninfo_to_dict

    try:
        return {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v is not None}
    except Exception:  # an unparseable DSN is described, never echoed
        return {}


def describe_dsn(dsn: str | None) -> str:
    """``postgresql://user@host:port/dbname``: where the DSN points, never its password."""
    if not dsn:
        return "postgresql (no dsn)"
    parts = _parts(dsn)
    if not parts:
        return "postgresql (unparseable dsn)"
    user = parts.get("user", "")
    host = parts.get("host", parts.get("hostaddr", "localhost"))
    port = parts.get("port", "5432")
    database = parts.get("dbname", user)
    return f"postgresql://{user + '@' if user else ''}{host}:{port}/{database}"


def scrub(text: str, dsn: str | None) -> str:
    """`text` with the DSN's password (and the DSN itself) replaced by ``***``."""
    if not dsn:
        return text
    secrets = [dsn, _parts(dsn).get("password", "")]
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
