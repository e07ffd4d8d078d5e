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
import socket
import sys
from itertools import zip_longest
from urllib.parse import quote, unquote

__all__ = ["describe_dsn", "host_fault", "one_printable_line", "parse_fault", "port_fault", "scrub"]

_URL = re.compile(r"postgres(?:ql)?://", re.IGNORECASE)
# Where libpq cuts a URL into parts: the pieces of a password that hold one of these.
_CUTS = re.compile(r"[@/?#:\[\]]")
# What libpq quotes of a connection string it cannot parse. The token it quotes last, after
# a colon (``invalid percent-encoded token: "..."``), may itself hold a quote: from there
# the quoting runs to the line's last quote, not to the next one.
_QUOTED = re.compile(r'(?<=: )"[^\n]*"|"[^"\n]*"')
# A port as libpq reads it (strtol, then nothing but blanks): C's blanks around a sign and
# ASCII digits. Its range is checked apart.
_PORT = re.compile(r"[ \t\n\v\f\r]*[+-]?[0-9]+[ \t\n\v\f\r]*")
_HIGHEST_PORT = 65535
_PERCENT_ENCODE = "percent-encode '@', '/', '?', '#' and '%' in its password"


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


def _reported(fault: str | None, dsn: str, parts: dict[str, str]) -> str | None:
    """A fault found in `dsn` as it is said: secrets scrubbed, and how to write the password
    when libpq read it other than it was written (a cause of the fault, most likely)."""
    if fault is None:
        return None
    return scrub(fault, dsn) + (f"; {_PERCENT_ENCODE}" if _misread(dsn, parts) else "")


def parse_fault(dsn: str) -> str | None:
    """Why libpq cannot parse `dsn` (secrets scrubbed), or None when it can."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        return one_printable_line(str(exc), dsn)
    except UnicodeDecodeError:  # psycopg decodes what libpq read: it says which byte, where
        return "a percent-encoded byte sequence ('%80', say) that is not UTF-8 text"
    return None


def _cut(text: str, most: int = 40) -> str:
    """`text` quoted, cut to its first `most` characters when longer (a port is a few)."""
    return repr(text) if len(text) <= most else f"{text[:most]!r}..."


def _is_port(text: str) -> bool:
    """Whether libpq reads `text` as a port it can connect to: a number from 1 to 65535."""
    if _PORT.fullmatch(text) is None:
        return False
    number = text.strip(" \t\n\v\f\r")
    digits = number.lstrip("+-").lstrip("0")  # int() refuses more than 4,300 digits
    if number.startswith("-") or len(digits) > len(str(_HIGHEST_PORT)):
        return False
    return 1 <= int(digits or "0") <= _HIGHEST_PORT


def port_fault(dsn: str) -> str | None:
    """Why the port (or ports) of `dsn`, which libpq parses, cannot be connected to, secrets
    scrubbed; None when there is none or each is a number from 1 to 65535.

    libpq checks them only when it connects: ``port=abc`` or ``postgresql://h:abc/db``
    parses, and fails there. Several hosts take a comma-separated list, one port for each
    (an empty one is the default port) or one for all; psycopg refuses any other count.
    """
    parts = _parts(dsn)
    ports = parts.get("port", "").split(",") if parts.get("port") else []
    fault = None
    for number, port in enumerate(ports, 1):
        if port and not _is_port(port):
            which = _place(number, ports, parts["port"])
            fault = f"port {_cut(port)}{which} is not a number from 1 to {_HIGHEST_PORT}"
            break
    # Counted as psycopg counts them, and only when the DSN names its hosts: else they come
    # from PGHOST or PGHOSTADDR when it connects, if from anywhere.
    hosts = max(
        (len(parts[key].split(",")) for key in ("host", "hostaddr") if parts.get(key)), default=0
    )
    if fault is None and hosts and 1 < len(ports) != hosts:
        fault = (
            f"{len(ports)} ports for {hosts} host{'s' if hosts > 1 else ''}: give one port "
            "for each host, or one for all"
        )
    return _reported(fault, dsn, parts)


def _is_address(text: str) -> bool:
    """Whether libpq takes `text` as a ``hostaddr``: what the system's getaddrinfo reads as
    a numeric address, as libpq asks it (``AI_NUMERICHOST``: no name is looked up).

    The C library decides, not a pattern: glibc takes ``127.1`` and ``0x7f.0.0.1``, and
    refuses a blank around the address and an interface name as the scope of one that is
    not link-local (``::1%lo``). The bytes go as libpq sends them: as text, Python would
    turn fullwidth digits into ASCII ones first.
    """
    try:
        socket.getaddrinfo(
            text.encode("utf-8"), None, 0, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST
        )
    except (OSError, UnicodeError, ValueError):  # ValueError: a NUL, which libpq cuts at
        return False
    return True


def host_fault(dsn: str) -> str | None:
    """Why the hosts of `dsn`, which libpq parses, cannot be connected to (secrets
    scrubbed): a ``host`` list and a ``hostaddr`` list of different lengths, or a
    ``hostaddr`` that is not an IP address; None when there is no such fault.

    Each address is that of the host at the same place in the list, so psycopg refuses any
    other count, but only when it connects; and libpq refuses an address that is not
    numeric (a host name) only when it comes to it. An empty one in a list takes the host
    at its place, as libpq does. Only the DSN's own lists are read: one taken from PGHOST
    or PGHOSTADDR is read when connecting, as `port_fault` leaves them.
    """
    parts = _parts(dsn)
    hosts, addresses = (
        parts[key].split(",") if parts.get(key) else [] for key in ("host", "hostaddr")
    )
    fault = None
    if hosts and addresses and len(hosts) != len(addresses):
        fault = (
            f"{_count(len(hosts), 'host name')} in host for "
            f"{_count(len(addresses), 'address')} in hostaddr: give one hostaddr for each host"
        )
    for number, address in enumerate(addresses, 1):
        if fault is None and address and not _is_address(address):
            which = _place(number, addresses, parts["hostaddr"])
            fault = (
                f"hostaddr {_cut(address)}{which} is not an IP address (libpq takes only a "
                "numeric one there; a host name goes in host)"
            )
    return _reported(fault, dsn, parts)


def _place(number: int, items: list[str], listed: str) -> str:
    """Which of a comma-separated list's `items` a fault is about (``listed``, as written),
    when there are several: `` (number 2 of 3, 'a,b,c')``; nothing for a list of one."""
    return f" (number {number} of {len(items)}, {_cut(listed)})" if items[1:] else ""


def _count(number: int, noun: str) -> str:
    plural = "es" if noun.endswith("s") else "s"
    return f"{number} {noun}{plural if number != 1 else ''}"


def _libpq_defaults() -> dict[str, str]:
    """What libpq takes for each part a DSN does not give, as libpq itself says it now
    (``PQconndefaults``): the part's ``PG*`` variable (``PGHOST``, ``PGPORT``, ``PGUSER``,
    ``PGDATABASE``...) or the service ``PGSERVICE`` names, else its built-in default (port
    5432, the user the process runs as). Asked at each call: the variables can change."""
    from psycopg import pq

    try:
        options = pq.Conninfo.get_defaults()
    except Exception:  # libpq out of memory: the DSN is still described by what it gives
        return {}
    return {
        option.keyword.decode(): option.val.decode("utf-8", errors="replace")
        for option in options
        if option.val is not None
    }


def describe_dsn(dsn: str | None) -> str:
    """``postgresql://user@host:port/dbname``: where the DSN points, never its password.

    A URL libpq reads back as the same user, hosts, ports and database: in a user or
    database name a character a URL cannot hold as it is (a space, a quote, ``@``, ``/``,
    ``%``...) or that is not printable (a control character, a line break, a bidirectional
    override) is percent-encoded, so the description is one line that says which name it
    is, and drives no terminal. A socket folder given as the host is percent-encoded whole
    (``%2Fvar%2Frun%2Fpostgresql``) and an IPv6 address bracketed, each host with its
    port, as libpq writes them in a URL. A part the DSN does not give is the one libpq
    will use (`_libpq_defaults`): ``PGHOST``, ``PGPORT``, ``PGUSER``, ``PGDATABASE``, else
    its default; with no host anywhere, the host is left empty (``postgresql://me@:5432/me``),
    as in libpq's own URLs: the Unix socket in the folder libpq was built with
    (``/var/run/postgresql`` or ``/tmp``), ``localhost`` on Windows, which is named. A DSN
    naming a ``service`` of pg_service.conf says so (``?service=NAME``), and leaves out the
    user, host, port and database it does not give: the service file gives them before the
    variables do, and only libpq reads it, when it connects. A part that holds the password
    (a user or database named as the password is: the name then *is* the password) is
    masked as the password is in every message.
    """
    if not dsn:
        return "postgresql (no dsn)"
    parts = _parts(dsn)
    if not parts:
        return "postgresql (unparseable dsn)"
    if _misread(dsn, parts):
        return f"postgresql (dsn misread: {_PERCENT_ENCODE})"
    given = parts if parts.get("service") else {**_libpq_defaults(), **parts}
    service = given.get("service", "")
    user = given.get("user", "")
    default_host = "localhost" if sys.platform == "win32" and not service else ""
    hosts = (given.get("host") or given.get("hostaddr") or default_host).split(",")
    ports = (given.get("port") or ("" if service else "5432")).split(",")
    database = given.get("dbname") or ("" if service else user)

    def shown(part: str, safe: str) -> str:
        return _url_part(scrub(part, dsn), safe)

    servers = ",".join(
        _host_shown(scrub(host, dsn)) + (f":{shown(port, _NAME_SAFE)}" if port else "")
        for host, port in zip_longest(hosts, ports * len(hosts) if len(ports) == 1 else ports)
        if host is not None
    )
    user_part = f"{shown(user, _NAME_SAFE)}@" if user else ""
    query = f"?service={shown(service, _NAME_SAFE)}" if service else ""
    return f"postgresql://{user_part}{servers}/{shown(database, _NAME_SAFE)}{query}"


# What a user or database name keeps as it is in a URL (RFC 3986's unreserved and
# sub-delimiters, and any letter or digit): the rest is percent-encoded as UTF-8.
_NAME_SAFE = "-._~!$&'()*+,;="


def _host_shown(host: str) -> str:
    """One host of the list as a URL holds it: an IPv6 address in brackets, its colons kept;
    anything else (a name, an IPv4 address, a socket folder) percent-encoded as a name."""
    if ":" in host and not host.startswith("/"):
        return f"[{_url_part(host, _NAME_SAFE.replace(',', '') + ':')}]"
    return _url_part(host, _NAME_SAFE.replace(",", ""))


def _url_part(text: str, safe: str) -> str:
    """`text` percent-encoded where a URL could not hold a character, or a person not see it."""
    return "".join(
        char
        if char.isprintable() and (char.isalnum() or char in safe)
        else quote(char, safe="", errors="surrogatepass")
        for char in text
    )


# A secret shorter than this is masked only where it stands whole (`_TOKEN_EDGE`): as a
# piece of a longer word it tells nothing of which piece it is, and masking every ``a`` of
# a message for the password ``a`` left it unreadable (``p***ssword ***uthentic***tion``).
_SHORT_SECRET = 4
# What ends a token around a short secret: the text's ends, a blank, and the characters that
# set a value apart in libpq's messages and in a DSN (quotes, ``=``, a URL's delimiters, the
# commas between hosts). A letter, digit, ``.``, ``-`` or ``_`` beside it makes it part of
# another word.
_TOKEN_EDGE = r"""\s"'=,;:@/?#&()\[\]<>"""


def _secret_pattern(secret: str) -> str:
    """The pattern of `secret` where it is masked: anywhere, or whole when short."""
    if len(secret) >= _SHORT_SECRET:
        return re.escape(secret)
    return rf"(?<![^{_TOKEN_EDGE}]){re.escape(secret)}(?![^{_TOKEN_EDGE}])"


def scrub(text: str, dsn: str | None) -> str:
    """`text` with the DSN's password (and the DSN itself) replaced by ``***``.

    A password of fewer than four characters is replaced where it stands as a token of its
    own (a value in quotes, after ``=``, between a URL's delimiters), not inside another
    word, which it would garble; the password itself is never shown.
    """
    if not dsn:
        return text
    parts = _parts(dsn)
    written = _written_password(dsn)
    secrets = [dsn, parts.get("password", ""), written, unquote(written)]
    if _misread(dsn, parts):
        secrets += _CUTS.split(written) + _CUTS.split(unquote(written))
    ordered = sorted((s for s in set(secrets) if s), key=len, reverse=True)
    if ordered:  # one pass, longest first: a mask is never masked again
        text = re.sub("|".join(map(_secret_pattern, ordered)), "***", text)
    if not parts:  # libpq quotes the part it could not parse, which may be the password
        text = _QUOTED.sub('"***"', text)
    return text


# What a line shown to a person must not hold raw: C0 and C1 controls (line breaks and tabs
# included) and DEL, the line and paragraph separators, Unicode's bidirectional formatting
# characters (a U+202E made the rest of a line read backwards), and lone surrogates (bytes
# that were not UTF-8).
_UNSHOWN = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def _escaped(text: str) -> str:
    """`text` with each character `_UNSHOWN` holds written as Python writes it in a string
    (``\\n``, ``\\x1b``, ``\\u202e``): what the plugin's own messages show of a name."""
    return _UNSHOWN.sub(lambda found: repr(found.group())[1:-1], text)


def _lines_joined(text: str) -> str:
    """libpq's message `text` on one line: its lines joined, each hint its own sentence.

    libpq breaks a message over lines, a hint on a tab-indented line of its own
    (``server closed the connection unexpectedly\n\tThis probably means ...``), and
    the CLI prints an error as one ``Error:`` line: a log collector keeping lines
    apart would cut the hint from the error. A line that begins with a capital
    letter starts a sentence, so the line before it is ended with a full stop.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    joined = ""
    for line in lines:
        if joined:
            ends = joined[-1] in ".!?:;,"
            joined += (" " if ends or not line[0].isupper() else ". ") + line
        else:
            joined = line
    return joined


def one_printable_line(text: str, dsn: str | None) -> str:
    """libpq's (or the server's) message `text` as the plugin's errors show it: one line of
    printable characters, the DSN's password masked (`scrub`).

    Every message of libpq or the server that reaches a person goes through here, once. A
    user, database or host name of the DSN that holds a control, line-breaking or
    bidirectional character is quoted by libpq as it is (``user "a<LF>b"``): it is shown
    escaped (``user "a\\nb"``), as the plugin's messages show a table's name, before
    libpq's own lines are joined, so its line break is not taken for one of libpq's; any
    other such character left is escaped too. The escapes are not the CLI's
    (``\\x{1b}``), which it writes on a terminal for what is still raw there: so the
    CLI prints these as they are, escaped once, and a program that logs the exception's
    text, or a pipe, gets one printable line as well.
    """
    text = scrub(text, dsn)
    names = [
        value
        for key, value in (_parts(dsn) if dsn else {}).items()
        if key != "password" and _UNSHOWN.search(value)
    ]
    for name in sorted(names, key=len, reverse=True):
        text = text.replace(name, _escaped(name))
    return scrub(_escaped(_lines_joined(text)), dsn)
