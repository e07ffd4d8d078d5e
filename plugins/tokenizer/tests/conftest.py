"""Every test here runs offline: sockets that would leave the machine fail, and the tiktoken
cache directory is an empty temporary folder, so a tokenizer that tried to download its
encoding files (as plain tiktoken does on first use) would fail loudly.
"""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path
from typing import Any

import pytest


def _is_loopback(host: Any) -> bool:
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if host is None or host == "localhost":
        return True
    try:
        return ipaddress.ip_address(str(host).split("%", 1)[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any connection to, or name lookup of, anything but the loopback interface."""

    def refuse(what: Any) -> None:
        raise OSError(f"network access blocked in tests: {what!r}")

    def guarded(real: Any, host_of: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            host = host_of(*args)
            if not _is_loopback(host):
                refuse(host)
            return real(*args, **kwargs)

        return call

    def address_host(address: Any) -> Any:
        return address[0] if isinstance(address, tuple) else None

    monkeypatch.setattr(
        socket.socket,
        "connect",
        guarded(socket.socket.connect, lambda sock, address: address_host(address)),
    )
    monkeypatch.setattr(
        socket.socket,
        "connect_ex",
        guarded(socket.socket.connect_ex, lambda sock, address: address_host(address)),
    )
    monkeypatch.setattr(
        socket,
        "create_connection",
        guarded(socket.create_connection, lambda address, *rest: address_host(address)),
    )
    monkeypatch.setattr(
        socket, "getaddrinfo", guarded(socket.getaddrinfo, lambda host, *rest: host)
    )


@pytest.fixture(autouse=True)
def empty_tiktoken_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Point TIKTOKEN_CACHE_DIR at a fresh empty folder for the test."""
    cache = tmp_path_factory.mktemp("tiktoken-cache")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    return cache
