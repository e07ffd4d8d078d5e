"""Connection strings in reprs and messages: the password never shows, however it is written."""

from __future__ import annotations

import re
import string

from hypothesis import assume, example, given
from hypothesis import strategies as st

from nanobot_postgres.dsn import describe_dsn, scrub

# What the descriptions and libpq's messages say whatever the password (a word of it found
# here proves nothing).
_FIXED = (
    "postgresql://nanobot@127.0.0.1:5432/nanobot (unparseable dsn, misread) "
    "percent-encode '@', '/', '?', '#' and '%' in its password *** "
    'failed to resolve host; missing "=" after; invalid connection option; '
    "unterminated quoted string in connection info string"
)


def _libpq_says(dsn: str) -> list[str]:
    """What libpq may echo of `dsn`: its parse error, else every value it read from it."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(dsn)
    except Exception as exc:
        return [str(exc)]
    return [f"failed to resolve host '{v}'" for k, v in parts.items() if k != "password"]


@given(st.text(alphabet=string.ascii_letters + string.digits + string.punctuation, min_size=6))
@example("X50%offQ")
@example('"000?%')
@example("Xpa@ssQ")
@example("Xpa/ssQ")
def test_a_password_written_raw_into_a_url_never_shows(password: str) -> None:
    """An unencoded URL password shows neither in the description nor in what libpq says."""
    assume(password not in _FIXED)
    dsn = f"postgresql://nanobot:{password}@127.0.0.1:5432/nanobot"
    assert password not in describe_dsn(dsn)
    for said in _libpq_says(dsn):
        assert password not in scrub(said, dsn)


@given(st.text(alphabet=string.ascii_letters + string.digits + " '=\\", min_size=6))
@example("Xmy secretQ")
def test_a_key_value_password_never_shows(password: str) -> None:
    """No word of a password in a key=value DSN, quoted or not, shows in libpq's words."""
    dsn = f"host=127.0.0.1 port=5432 user=nanobot password={password} dbname=nanobot"
    words = [w for w in re.split(r"[\s'=\\]+", password) if len(w) >= 4]
    assume(words and not any(w in _FIXED or w in dsn.replace(password, "") for w in words))
    shown = [describe_dsn(dsn)] + [scrub(said, dsn) for said in _libpq_says(dsn)]
    assert not [w for w in words if any(w in text for text in shown)]


def test_a_well_written_dsn_is_described_in_full() -> None:
    """A percent-encoded password is read as meant, and the description names the server."""
    dsn = "postgresql://nanobot:p%40ss%2Fw%3Frd@db.internal:6432/sessions"
    assert describe_dsn(dsn) == "postgresql://nanobot@db.internal:6432/sessions"
    assert scrub("auth failed for p@ss/w?rd", dsn) == "auth failed for ***"
