"""Settings of ``[sessions.postgres]`` the store refuses: each refusal is a configuration error
(exit 2, before any connection) that begins with where the setting was made."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from nanobot_core import ConfigError, PluginContext, load_config
from nanobot_core.testing import run_cli
from nanobot_core.testing_http import LoopbackRequest, LoopbackResponse, LoopbackServer

from nanobot_postgres import store_for

#: A DSN libpq reads, pointing at a port nothing listens on: no refusal here connects to it.
UNUSED_DSN = "host=127.0.0.1 port=9 dbname=nanobot"
_SECRET = "hunter2-pw"
#: The tail of the refusal of a pool of 1 that results share.
ONE_CONNECTION = (
    "sessions.postgres.pool_size: 1 leaves no connection for offloaded results "
    "(sessions.postgres.results = true): a turn's lease holds the only one, so each offload "
    "would wait connect_timeout and the result be truncated; set pool_size to 2 or more, or "
    "results = false"
)


def _answer(request: LoopbackRequest) -> LoopbackResponse:
    """A chat completion saying "ok", for a request that should never be made."""
    message = {"role": "assistant", "content": "ok"}
    return LoopbackResponse(200, {"choices": [{"message": message, "finish_reason": "stop"}]})


def _refusal(tmp_path: Path, toml: str, **env: str) -> str:
    """The stderr of a real ``nanobot-core run`` with the postgres store, `toml` in
    nanobot.toml and `env` set, which must stop at exit 2 without asking the model."""
    (tmp_path / "nanobot.toml").write_text(toml, encoding="utf-8")
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("NANOBOT_", "OPENAI_"))}
    with LoopbackServer(_answer) as server:
        environ.update(
            NANOBOT_SESSIONS__STORE="postgres",
            NANOBOT_API_KEY="sk-test",
            NANOBOT_BASE_URL=f"{server.url}/v1",
            NANOBOT_PROVIDER__MAX_RETRIES="0",
            **env,
        )
        done = run_cli("run", "hi", cwd=tmp_path, env=environ, timeout=60)
        assert server.connections == 0, done.stderr
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    return done.stderr


def test_a_pool_of_one_set_in_the_file_names_the_file(tmp_path: Path) -> None:
    """pool_size = 1 in nanobot.toml (results on by default) is refused naming that file."""
    said = _refusal(
        tmp_path, "[sessions.postgres]\npool_size = 1\n", NANOBOT_POSTGRES_DSN=UNUSED_DSN
    )
    assert said == f"Error: configuration: {tmp_path / 'nanobot.toml'}: {ONE_CONNECTION}\n"


def test_a_pool_of_one_from_a_variable_names_it_and_the_file_that_set_results(
    tmp_path: Path,
) -> None:
    """The variable that set pool_size and the file that set results are both named."""
    said = _refusal(
        tmp_path,
        "[sessions.postgres]\nresults = true\npool_size = 8\n",
        NANOBOT_POSTGRES_DSN=UNUSED_DSN,
        NANOBOT_SESSIONS__POSTGRES__POOL_SIZE="1",
    )
    assert said == (
        "Error: configuration: environment variable NANOBOT_SESSIONS__POSTGRES__POOL_SIZE, "
        f"{tmp_path / 'nanobot.toml'}: {ONE_CONNECTION}\n"
    )


def test_a_dsn_set_empty_names_the_variable(tmp_path: Path) -> None:
    """NANOBOT_POSTGRES_DSN= over a file's DSN is refused naming the variable, as empty."""
    said = _refusal(
        tmp_path, f'[sessions.postgres]\ndsn = "{UNUSED_DSN}"\n', NANOBOT_POSTGRES_DSN=""
    )
    assert said == (
        "Error: configuration: environment variable NANOBOT_POSTGRES_DSN: "
        "sessions.postgres.dsn: empty (set it in [sessions.postgres], or NANOBOT_POSTGRES_DSN)\n"
    )


@pytest.mark.parametrize(
    ("dsn", "reason"),
    [
        (
            f"postgresql://me:{_SECRET}@[::1/nanobot",
            'end of string reached when looking for matching "***" in IPv6 host address in '
            'URI: "***"',
        ),
        (f"host=127.0.0.1 password='{_SECRET}", "unterminated quoted string in connection info"),
        (
            f"postgresql://me:{_SECRET}%C3%28@127.0.0.1/nanobot",
            "a percent-encoded byte sequence ('%80', say) that is not UTF-8 text",
        ),
    ],
)
@pytest.mark.parametrize("where", ["nanobot.toml", "NANOBOT_POSTGRES_DSN"])
def test_a_dsn_libpq_cannot_read_is_a_config_error_naming_its_source(
    tmp_path: Path, dsn: str, reason: str, where: str
) -> None:
    """A DSN that does not parse is exit 2 naming where it was set, not a database failure
    (exit 1), and its password is not shown."""
    if where == "nanobot.toml":
        quoted = dsn.replace("\\", "\\\\").replace('"', '\\"')
        said = _refusal(tmp_path, f'[sessions.postgres]\ndsn = "{quoted}"\n')
        source = str(tmp_path / "nanobot.toml")
    else:
        said = _refusal(tmp_path, "", NANOBOT_POSTGRES_DSN=dsn)
        source = f"environment variable {where}"
    assert said.startswith(
        f"Error: configuration: {source}: sessions.postgres.dsn: not a connection string or "
        f"URL libpq can read ({reason}"
    )
    assert said.endswith("; the dsn itself is not shown)\n")
    assert _SECRET not in said


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    host=st.text(alphabet=st.sampled_from("[]:@/?#=' \\\"%ab1"), max_size=10),
    tail=st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=6),
)
@example(host="[", tail="")
@example(host="127.0.0.1", tail="%80")
def test_any_dsn_libpq_cannot_read_is_refused_naming_the_variable_never_its_password(
    tmp_path: Path, host: str, tail: str
) -> None:
    """Whatever URL a variable gives the DSN, the store built from it either parses it or
    refuses it with a ConfigError that begins with the variable and holds no password."""
    from nanobot_postgres.dsn import parse_fault

    dsn = f"postgresql://me:{_SECRET}@{host}/db{tail}"
    config = load_config(cwd=tmp_path, environ={"NANOBOT_POSTGRES_DSN": dsn})
    store = store_for(PluginContext(workspace=tmp_path, config=config))
    if parse_fault(dsn) is None:
        return  # a DSN libpq reads: using it would connect
    with pytest.raises(ConfigError) as refused:
        store.pool()
    said = str(refused.value)
    assert said.startswith(
        "environment variable NANOBOT_POSTGRES_DSN: sessions.postgres.dsn: not a connection "
    )
    assert _SECRET not in said


#: DSNs libpq parses whose port it refuses only when it connects, and what the refusal says
#: of them after ``sessions.postgres.dsn: ``.
BAD_PORTS = {
    "host=127.0.0.1 port=abc dbname=nanobot": "port 'abc' is not a number from 1 to 65535",
    f"postgresql://me:{_SECRET}@127.0.0.1:abc/nanobot": (
        "port 'abc' is not a number from 1 to 65535"
    ),
    f"postgresql://me:{_SECRET}@127.0.0.1:99999/nanobot": (
        "port '99999' is not a number from 1 to 65535"
    ),
    "host=127.0.0.1 port=0 dbname=nanobot": "port '0' is not a number from 1 to 65535",
    f"postgresql://me:{_SECRET}@127.0.0.1:9,127.0.0.2:x9/nanobot": (
        "port 'x9' (number 2 of 2, '9,x9') is not a number from 1 to 65535"
    ),
    "host=127.0.0.1 port=9,9 dbname=nanobot": (
        "2 ports for 1 host: give one port for each host, or one for all"
    ),
}


@pytest.mark.parametrize("dsn", sorted(BAD_PORTS))
@pytest.mark.parametrize("where", ["nanobot.toml", "NANOBOT_POSTGRES_DSN"])
def test_a_port_libpq_refuses_only_when_connecting_is_a_config_error_naming_its_source(
    tmp_path: Path, dsn: str, where: str
) -> None:
    """A DSN whose port is not a number, is outside 1 to 65535, or whose ports do not fit its
    hosts is exit 2 naming where it was set, before any connection, not a database failure
    (exit 1) at the first one; its password is not shown."""
    if where == "nanobot.toml":
        said = _refusal(tmp_path, f'[sessions.postgres]\ndsn = "{dsn}"\n')
        source = str(tmp_path / "nanobot.toml")
    else:
        said = _refusal(tmp_path, "", NANOBOT_POSTGRES_DSN=dsn)
        source = f"environment variable {where}"
    assert said == (
        f"Error: configuration: {source}: sessions.postgres.dsn: {BAD_PORTS[dsn]} "
        "(the dsn itself is not shown)\n"
    )


def test_a_port_read_from_a_misread_password_is_not_shown(tmp_path: Path) -> None:
    """A URL password holding an unencoded '/' makes libpq read part of it as the port: the
    refusal hides that part and says to percent-encode the password."""
    dsn = "postgresql://me:ab7/cd9@127.0.0.1/nanobot"
    config = load_config(cwd=tmp_path, environ={"NANOBOT_POSTGRES_DSN": dsn})
    store = store_for(PluginContext(workspace=tmp_path, config=config))
    with pytest.raises(ConfigError) as refused:
        store.pool()
    assert str(refused.value) == (
        "environment variable NANOBOT_POSTGRES_DSN: sessions.postgres.dsn: port '***' is not "
        "a number from 1 to 65535; percent-encode '@', '/', '?', '#' and '%' in its password "
        "(the dsn itself is not shown)"
    )


def _libpq_refuses_port(dsn: str) -> bool:
    """Whether connecting with `dsn` fails on its port (psycopg's count of ports and hosts
    included): its hosts are socket folders that do not exist, so nothing is reached."""
    import psycopg

    try:
        psycopg.connect(dsn, connect_timeout=1).close()
    except psycopg.OperationalError as exc:
        said = str(exc)
        return any(
            fault in said
            for fault in ("invalid integer value", "invalid port number", "could not match")
        )
    raise AssertionError(f"connected with {dsn!r}")  # pragma: no cover


@settings(max_examples=300, deadline=None)
@given(
    ports=st.text(alphabet=st.sampled_from("0123456789+- \t\v,a\u0663"), max_size=14),
    hosts=st.integers(min_value=1, max_value=3),
)
@example(ports="65535", hosts=1)
@example(ports="65536", hosts=1)
@example(ports=" +0009 ", hosts=1)
@example(ports="9,", hosts=2)
@example(ports="9", hosts=3)
def test_a_port_is_refused_exactly_when_libpq_would_refuse_it_at_connect(
    ports: str, hosts: int
) -> None:
    """Whatever ports a DSN gives for one to three hosts, `port_fault` refuses them exactly
    when libpq (through psycopg, as the store connects) fails on them, and never the rest."""
    from psycopg.conninfo import make_conninfo

    from nanobot_postgres.dsn import port_fault

    folders = ",".join(f"/nonexistent-nanobot-{n}" for n in range(hosts))
    dsn = make_conninfo(host=folders, port=ports, dbname="nanobot")
    assert (port_fault(dsn) is not None) == _libpq_refuses_port(dsn), port_fault(dsn)


#: DSNs whose host and hostaddr lists differ in length, which psycopg refuses only when it
#: connects, and what the refusal says of them after ``sessions.postgres.dsn: ``.
BAD_HOSTS = {
    "host=a,b hostaddr=127.0.0.1 port=9 dbname=nanobot": (
        "2 host names in host for 1 address in hostaddr: give one hostaddr for each host"
    ),
    f"postgresql://me:{_SECRET}@a/nanobot?hostaddr=127.0.0.1,127.0.0.2": (
        "1 host name in host for 2 addresses in hostaddr: give one hostaddr for each host"
    ),
    "host=db hostaddr=db.internal port=9 dbname=nanobot": (
        "hostaddr 'db.internal' is not an IP address (libpq takes only a numeric one there; "
        "a host name goes in host)"
    ),
    f"postgresql://me:{_SECRET}@a,b/nanobot?hostaddr=127.0.0.1,{_SECRET}": (
        "hostaddr '***' (number 2 of 2, '127.0.0.1,***') is not an IP address (libpq takes "
        "only a numeric one there; a host name goes in host)"
    ),
}


@pytest.mark.parametrize("dsn", sorted(BAD_HOSTS))
@pytest.mark.parametrize("where", ["nanobot.toml", "NANOBOT_POSTGRES_DSN"])
def test_hosts_and_addresses_libpq_refuses_at_connect_are_a_config_error_naming_its_source(
    tmp_path: Path, dsn: str, where: str
) -> None:
    """A DSN giving more host names than hostaddr values, or fewer, or a hostaddr that is
    not an IP address, is exit 2 naming the key and where it was set, before any
    connection; its password is not shown."""
    if where == "nanobot.toml":
        said = _refusal(tmp_path, f'[sessions.postgres]\ndsn = "{dsn}"\n')
        source = str(tmp_path / "nanobot.toml")
    else:
        said = _refusal(tmp_path, "", NANOBOT_POSTGRES_DSN=dsn)
        source = f"environment variable {where}"
    assert said == (
        f"Error: configuration: {source}: sessions.postgres.dsn: {BAD_HOSTS[dsn]} "
        "(the dsn itself is not shown)\n"
    )
    assert _SECRET not in said


def _psycopg_refuses_hosts(dsn: str) -> bool:
    """Whether connecting with `dsn` fails on the number of its hosts and addresses: each
    address is on the loopback interface at a port nothing listens on, so nothing is reached."""
    import psycopg

    try:
        psycopg.connect(dsn, connect_timeout=1).close()
    except psycopg.OperationalError as exc:
        return "host names with" in str(exc) and "hostaddr values" in str(exc)
    raise AssertionError(f"connected with {dsn!r}")  # pragma: no cover


@settings(max_examples=60, deadline=None)
@given(
    # Socket folders that do not exist: with no hostaddr nothing is looked up or reached.
    hosts=st.lists(st.sampled_from([f"/nonexistent-nanobot-{n}" for n in range(3)]), max_size=3),
    addresses=st.lists(st.sampled_from(["127.0.0.1", "::1", "127.0.0.2"]), max_size=3),
    ports=st.sampled_from(["", "9"]),
)
@example(hosts=["/nonexistent-nanobot-0"] * 2, addresses=["127.0.0.1"], ports="9")
@example(hosts=["/nonexistent-nanobot-0"], addresses=["127.0.0.1", "127.0.0.2"], ports="9")
def test_hosts_are_refused_exactly_when_psycopg_would_refuse_them_at_connect(
    hosts: list[str], addresses: list[str], ports: str
) -> None:
    """Whatever number of host names and hostaddr values a DSN gives, `host_fault` refuses
    them exactly when psycopg, as the store connects, fails on their numbers."""
    from psycopg.conninfo import make_conninfo

    from nanobot_postgres.dsn import host_fault

    assume(hosts or addresses)  # else libpq's default socket, which a machine may serve
    port = ",".join([ports] * max(len(hosts), len(addresses), 1)) if ports else None
    dsn = make_conninfo(
        host=",".join(hosts) or None,
        hostaddr=",".join(addresses) or None,
        port=port,
        dbname="nanobot",
    )
    assert (host_fault(dsn) is not None) == _psycopg_refuses_hosts(dsn), host_fault(dsn)


def _libpq_refuses_address(dsn: str) -> bool:
    """Whether connecting with `dsn` fails on a hostaddr libpq cannot parse: every other
    attempt is refused on the loopback interface or by a socket folder that does not exist."""
    import psycopg

    try:
        psycopg.connect(dsn, connect_timeout=1).close()
    except psycopg.OperationalError as exc:
        return "could not parse network address" in str(exc)
    raise AssertionError(f"connected with {dsn!r}")  # pragma: no cover


def _reaches_beyond_loopback(address: str) -> bool:
    """Whether the system reads `address` as one off this machine: libpq would connect to it."""
    import ipaddress
    import socket

    try:
        found = socket.getaddrinfo(address.encode(), None, 0, 0, 0, socket.AI_NUMERICHOST)
    except (OSError, ValueError):
        return False
    return not all(ipaddress.ip_address(str(f[4][0]).split("%")[0]).is_loopback for f in found)


#: Pieces of addresses: numbers in each base C reads, separators, blanks, a scope, non-ASCII
#: digits, a name.
_ADDRESS_PIECES = st.sampled_from(
    [
        *("127", "0", "1", "00", "0x7f", "0X7F", "255", "256", "4294967295", "017", "."),
        *(":", "::", "ffff", "%", "%1", "%lo", " ", "\t", "\u0661", "\uff11", "a", "localhost"),
    ]
)


#: Candidate addresses: loopback beginnings (so that some are addresses, and on this
#: machine) and any pieces after them.
_ADDRESSES = st.builds(
    "".join,
    st.tuples(
        st.sampled_from(["", "127.", "127.0.0.", "0x7f.", "0177.", "::", "::ffff:127."]),
        st.lists(_ADDRESS_PIECES, max_size=6).map("".join),
    ),
)


@settings(max_examples=200, deadline=None)
@given(addresses=st.lists(_ADDRESSES, max_size=3))
@example(addresses=["127.0.0.1"])
@example(addresses=["127.1"])
@example(addresses=["0x7f.0.0.1"])
@example(addresses=["::1"])
@example(addresses=["::ffff:127.0.0.1"])
@example(addresses=["localhost"])
@example(addresses=[" 127.0.0.1"])
@example(addresses=["::1%lo"])
@example(addresses=["\uff11\uff12\uff17.0.0.1"])
@example(addresses=["127.0.0.1", ""])
@example(addresses=["", "127.0.0.1.1"])
def test_a_hostaddr_is_refused_exactly_when_libpq_would_refuse_it_at_connect(
    addresses: list[str],
) -> None:
    """Whatever hostaddr values a DSN gives (one per host), `host_fault` refuses them exactly
    when libpq, as the store connects through psycopg, fails to parse one, and never the
    rest. Values that name an address off this machine are left out: libpq would connect."""
    from psycopg.conninfo import make_conninfo

    from nanobot_postgres.dsn import host_fault

    assume(addresses and not any(_reaches_beyond_loopback(a) for a in addresses))
    folders = ",".join(f"/nonexistent-nanobot-{n}" for n in range(len(addresses)))
    dsn = make_conninfo(host=folders, hostaddr=",".join(addresses), port="9", dbname="nanobot")
    assert (host_fault(dsn) is not None) == _libpq_refuses_address(dsn), host_fault(dsn)
