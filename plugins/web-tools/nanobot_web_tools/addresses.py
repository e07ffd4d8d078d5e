"""Which hosts and addresses `web_fetch` may connect to, and DNS resolved exactly once.

The check runs on the *resolved* addresses, not on the spelling of the URL, so
decimal, octal or hex IPv4 forms and names that point at internal addresses
are caught the same way. The fetcher then connects to an address returned
here, never to the name again, so a resolver that changes its answer between
two lookups (DNS rebinding) cannot slip an internal address in after the check.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence

from nanobot_core import clip, quoted

from nanobot_web_tools.errors import FetchRefused

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Turns ``(host, port)`` into address strings; the default asks the system resolver.
Resolver = Callable[[str, int], Sequence[str]]

# Instance-metadata endpoints of the big clouds. Most sit in ranges refused anyway
# (link-local, private, shared); naming them gives a clearer reason and keeps them
# refused even if a range rule is ever relaxed.
METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OCI, DigitalOcean, OpenStack
        "169.254.170.2",  # AWS ECS task metadata
        "169.254.169.253",  # AWS DNS resolver
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud (legacy)
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "fd00:ec2::253",  # AWS DNS resolver over IPv6
    )
)

METADATA_HOSTNAMES: frozenset[str] = frozenset(
    {
        "metadata.google.internal",
        "metadata.goog",
        "metadata",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.internal",
        "metadata.tencentyun.com",
    }
)

_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def refusal_reason(address: IPAddress, *, allow_loopback: bool = False) -> str | None:
    """Why `address` must not be contacted, or None when it is a public unicast address.

    `allow_loopback` lets loopback addresses through (and nothing else); it exists
    for tests that serve pages from 127.0.0.1.
    """
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        reason = refusal_reason(embedded, allow_loopback=allow_loopback)
        return None if reason is None else f"{reason} (IPv4 {embedded} inside {address})"
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if address.is_loopback:
        return None if allow_loopback else "loopback"
    for flag, reason in (
        (address.is_unspecified, "unspecified"),
        (address.is_link_local, "link-local"),
        (address.is_multicast, "multicast"),
        (address.is_reserved, "reserved"),
        (address.is_private, "private"),
        # fec0::/10, deprecated (RFC 3879) but still routed inside some networks; Python
        # counts it as global.
        (isinstance(address, ipaddress.IPv6Address) and address.is_site_local, "site-local"),
    ):
        if flag:
            return reason
    if not address.is_global:
        return "not globally routable"
    return None


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address that an IPv6 address carries (mapped, 6to4, NAT64) and so reaches."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def system_resolver(host: str, port: int) -> list[str]:
    """Resolve `host` with the system resolver, one entry per distinct address."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def normalise_host(host: str) -> str:
    """Lower-case, without brackets or the trailing dot that would dodge a name comparison."""
    return host.strip("[]").rstrip(".").lower()


def resolve_checked(
    host: str, port: int, *, resolver: Resolver, allow_loopback: bool = False
) -> tuple[IPAddress, ...]:
    """Resolve `host` once and return its addresses, or raise `FetchRefused`.

    Every address must pass: a name with one public and one private address is
    refused, since the connection could land on either.
    """
    name = normalise_host(host)
    if name in METADATA_HOSTNAMES:
        raise FetchRefused(f"{clip(host)} is a cloud metadata host name")
    if (name == "localhost" or name.endswith(".localhost")) and not allow_loopback:
        raise FetchRefused(f"{clip(host)} names the loopback interface")
    literal = _parse_address(name)
    if literal is not None:
        addresses: tuple[IPAddress, ...] = (literal,)
    else:
        try:
            answers = resolver(name, port)
        except (OSError, UnicodeError) as exc:
            raise FetchRefused(f"cannot resolve {clip(host)}: {clip(str(exc))}") from exc
        addresses = tuple(_checked_answer(host, answer) for answer in answers)
        if not addresses:
            raise FetchRefused(f"cannot resolve {clip(host)}: no addresses")
    for address in addresses:
        reason = refusal_reason(address, allow_loopback=allow_loopback)
        if reason is not None:
            raise FetchRefused(f"{clip(host)} resolves to {address}, which is {reason}")
    return addresses


def _parse_address(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def _checked_answer(host: str, answer: str) -> IPAddress:
    address = _parse_address(answer)
    if address is None:
        raise FetchRefused(
            f"the resolver gave {quoted(answer)} for {clip(host)}, which is not an IP address"
        )
    return address
