"""The address policy and the resolve-once check, with stub resolvers only."""

from __future__ import annotations

import ipaddress

import pytest

from nanobot_web_tools import FetchRefused, refusal_reason, resolve_checked
from nanobot_web_tools.addresses import system_resolver


def never_called(host: str, port: int) -> list[str]:
    raise AssertionError(f"the resolver must not be asked about {host}")


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd12:3456::1", "private"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("240.0.0.1", "reserved"),
        ("100.64.0.1", "not globally routable"),
        ("169.254.169.254", "a cloud metadata address"),
        ("fd00:ec2::254", "a cloud metadata address"),
        ("100.100.100.200", "a cloud metadata address"),
        ("fec0::1", "site-local"),
        ("feff:ffff::1", "site-local"),
    ],
)
def test_internal_addresses_are_refused_with_their_kind(address: str, reason: str) -> None:
    """Every non-public kind of address is refused, and the reason names the kind."""
    assert refusal_reason(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize("address", ["93.184.215.14", "8.8.8.8", "2606:4700:4700::1111"])
def test_public_addresses_pass(address: str) -> None:
    """Public unicast addresses, IPv4 and IPv6, are allowed."""
    assert refusal_reason(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    "address",
    ["::ffff:127.0.0.1", "::ffff:169.254.169.254", "2002:a00:1::1", "64:ff9b::a9fe:a9fe"],
)
def test_ipv6_forms_that_carry_an_internal_ipv4_are_refused(address: str) -> None:
    """IPv4-mapped, 6to4 and NAT64 addresses are judged by the IPv4 address they reach."""
    reason = refusal_reason(ipaddress.ip_address(address))
    assert reason is not None
    assert "inside" in reason


def test_loopback_switch_lets_only_loopback_through() -> None:
    """The test-only switch allows 127.0.0.0/8 and ::1, but still refuses private and metadata."""
    assert refusal_reason(ipaddress.ip_address("127.0.0.1"), allow_loopback=True) is None
    assert refusal_reason(ipaddress.ip_address("::1"), allow_loopback=True) is None
    assert refusal_reason(ipaddress.ip_address("10.0.0.1"), allow_loopback=True) == "private"
    metadata = ipaddress.ip_address("169.254.169.254")
    assert refusal_reason(metadata, allow_loopback=True) == "a cloud metadata address"


@pytest.mark.parametrize(
    "host",
    ["metadata.google.internal", "METADATA.google.internal.", "metadata", "instance-data"],
)
def test_metadata_host_names_are_refused_without_a_lookup(host: str) -> None:
    """Cloud metadata names are refused by name (any case, trailing dot) before any DNS lookup."""
    with pytest.raises(FetchRefused, match="metadata"):
        resolve_checked(host, 80, resolver=never_called)


def test_localhost_names_are_refused_without_a_lookup() -> None:
    """The name localhost and its subdomains are refused by name."""
    for host in ("localhost", "api.localhost"):
        with pytest.raises(FetchRefused, match="loopback"):
            resolve_checked(host, 80, resolver=never_called)


def test_ip_literals_are_checked_without_a_lookup() -> None:
    """A URL host that is an IP address is judged as it is; IPv6 brackets are understood."""
    with pytest.raises(FetchRefused, match="private"):
        resolve_checked("10.0.0.7", 80, resolver=never_called)
    with pytest.raises(FetchRefused, match="loopback"):
        resolve_checked("[::1]", 80, resolver=never_called)
    public = resolve_checked("93.184.215.14", 80, resolver=never_called)
    assert public == (ipaddress.ip_address("93.184.215.14"),)


def test_a_name_with_one_internal_address_is_refused() -> None:
    """When a name resolves to several addresses, one internal address is enough to refuse."""

    def mixed(host: str, port: int) -> list[str]:
        return ["93.184.215.14", "192.168.0.10"]

    with pytest.raises(FetchRefused, match=r"192\.168\.0\.10, which is private"):
        resolve_checked("mixed.test", 443, resolver=mixed)


def test_the_resolver_is_asked_once_per_check() -> None:
    """One check makes exactly one lookup, with the port it was given."""
    calls: list[tuple[str, int]] = []

    def counting(host: str, port: int) -> list[str]:
        calls.append((host, port))
        return ["93.184.215.14", "2606:4700:4700::1111"]

    addresses = resolve_checked("Example.TEST.", 8443, resolver=counting)
    assert calls == [("example.test", 8443)]
    assert [str(a) for a in addresses] == ["93.184.215.14", "2606:4700:4700::1111"]


def test_resolver_failures_and_garbage_answers_are_refusals() -> None:
    """A failed lookup, an empty answer and a non-address answer all refuse the fetch."""

    def failing(host: str, port: int) -> list[str]:
        raise OSError("name or service not known")

    with pytest.raises(FetchRefused, match="cannot resolve"):
        resolve_checked("nowhere.test", 80, resolver=failing)
    with pytest.raises(FetchRefused, match="no addresses"):
        resolve_checked("empty.test", 80, resolver=lambda host, port: [])
    with pytest.raises(FetchRefused, match="not an IP address"):
        resolve_checked("odd.test", 80, resolver=lambda host, port: ["not-an-ip"])


def test_system_resolver_returns_distinct_addresses_for_localhost() -> None:
    """The default resolver answers with address strings, each once (checked on localhost only)."""
    answers = system_resolver("localhost", 80)
    assert answers
    assert len(answers) == len(set(answers))
    assert all(ipaddress.ip_address(a).is_loopback for a in answers)
