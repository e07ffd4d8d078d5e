"""Fixtures: a socket guard that fails any non-loopback connection, and local HTTP(S) servers.

The guard is autouse, so no test here can reach the network: connecting to an
address outside 127.0.0.0/8 and ::1, or resolving any name but "localhost",
raises. Pages are served from 127.0.0.1 by threads of this process.
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
import socket
import ssl
import threading
import zlib
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest


class SocketGuard:
    """Records and refuses every connection or name lookup that would leave this machine."""

    def __init__(self) -> None:
        self.blocked: list[str] = []

    @staticmethod
    def is_local(host: Any) -> bool:
        if isinstance(host, bytes):
            host = host.decode("ascii", "replace")
        if host is None or host == "localhost":
            return True
        try:
            address = ipaddress.ip_address(str(host).split("%", 1)[0])
        except ValueError:
            return False
        mapped = getattr(address, "ipv4_mapped", None)
        return address.is_loopback or bool(mapped and mapped.is_loopback)

    def check(self, address: Any) -> None:
        if isinstance(address, tuple) and not self.is_local(address[0]):
            self.blocked.append(str(address[0]))
            raise OSError(f"socket guard: connection to {address[0]} blocked in tests")


@pytest.fixture(autouse=True)
def socket_guard(monkeypatch: pytest.MonkeyPatch) -> SocketGuard:
    """Fail any connection to, or lookup of, something other than the loopback interface."""
    guard = SocketGuard()
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_create_connection, real_getaddrinfo = socket.create_connection, socket.getaddrinfo

    def connect(sock: socket.socket, address: Any) -> None:
        guard.check(address)
        real_connect(sock, address)

    def connect_ex(sock: socket.socket, address: Any) -> int:
        guard.check(address)
        return real_connect_ex(sock, address)

    def create_connection(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        guard.check(address)
        return real_create_connection(address, *args, **kwargs)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not guard.is_local(host):
            guard.blocked.append(str(host))
            raise socket.gaierror(f"socket guard: lookup of {host} blocked in tests")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return guard


class LocalSite:
    """A tiny web site on 127.0.0.1 whose routes exercise every limit of the fetcher."""

    PAGE = (
        "<html><head><title>Local test page</title><style>p {color: red}</style>"
        "<script>var secret = 1;</script></head><body><h1>Hello</h1>"
        "<p>First paragraph.</p><ul><li>one</li><li>two</li></ul></body></html>"
    )
    BIG = b"abcdefghij" * 10_000  # 100 000 bytes
    #: 1.2 MB of HTML at its slowest to read (an element each 3 bytes): most of a second of CPU.
    BLOCKS = b"<p>" * 400_000
    BOMB_SIZE = 200_000_000  # bytes of zeros, gzipped to about 200 kB
    JUNK_SIZE = 100_000_000  # bytes a server sends after the end of its compressed stream
    ENDLESS_SIZE = 2_000_000_000  # bytes an endless response sends unless the client hangs up
    #: Responses that go on for ever (up to ENDLESS_SIZE) and add no byte, or one byte in
    #: 10,000, to the body: their status line and headers, then the piece sent again and again.
    ENDLESS = {
        "gzip-members": (
            b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\n\r\n",
            b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\x03\x00" + bytes(8),  # gzip of b""
        ),
        "deflate-blocks": (
            b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: deflate\r\n\r\n"
            b"x\x9c",  # a zlib header, then empty stored blocks that are not the last
            b"\x00\x00\x00\xff\xff",
        ),
        "chunk-extensions": (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"1;pad=" + b"p" * 10_000 + b"\r\nx\r\n",  # a chunk of 1 byte behind 10 kB
        ),
        "informational": (b"", b"HTTP/1.1 100 Continue\r\nPad: " + b"p" * 8_000 + b"\r\n\r\n"),
    }

    @staticmethod
    def gzip(data: bytes) -> bytes:
        """`data` as one gzip member."""
        packer = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return packer.compress(data) + packer.flush()

    @functools.cached_property
    def bomb(self) -> bytes:
        """`BOMB_SIZE` zero bytes, gzipped."""
        gzip = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        zeros = bytes(1_000_000)
        return b"".join(gzip.compress(zeros) for _ in range(self.BOMB_SIZE // len(zeros))) + (
            gzip.flush()
        )

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.hits: Counter[str] = Counter()
        self.sent: Counter[str] = Counter()  # bytes of each endless response sent
        self.hosts: list[str] = []
        self.release = threading.Event()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                site.hits[url.path] += 1
                site.hosts.append(self.headers.get("Host", ""))
                site.route(self, url.path, parse_qs(url.query))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def route(
        self, handler: BaseHTTPRequestHandler, path: str, query: dict[str, list[str]]
    ) -> None:
        if path == "/page.html":
            self.send(handler, 200, "text/html; charset=utf-8", self.PAGE.encode())
        elif path == "/blocks.html":
            self.send(handler, 200, "text/html", self.BLOCKS)
        elif path == "/host":
            self.send(handler, 200, "text/plain", handler.headers.get("Host", "").encode())
        elif path == "/data.json":
            self.send(handler, 200, "application/json", b'{"answer": 42}')
        elif path == "/latin1.txt":
            self.send(handler, 200, "text/plain; charset=iso-8859-1", "café".encode("latin-1"))
        elif path == "/big.txt":
            self.send(handler, 200, "text/plain", self.BIG)
        elif path == "/image.png":
            self.send(handler, 200, "image/png", b"\x89PNG\r\n\x1a\n" + bytes(100))
        elif path == "/untyped":
            self.send(handler, 200, None, b"what am I")
        elif path in ("/page.gz", "/page.deflate", "/page.raw-deflate"):
            kind = path.rsplit(".", 1)[1]
            wbits = {"gz": 31, "deflate": 15}.get(kind, -15)  # gzip, zlib or raw deflate
            packer = zlib.compressobj(6, zlib.DEFLATED, wbits)
            body = packer.compress(self.BIG) + packer.flush()
            encoding = "gzip" if kind == "gz" else "deflate"
            self.send(handler, 200, "text/plain", body, {"Content-Encoding": encoding})
        elif path == "/gzip-members.txt":  # two gzip members, read one after the other
            body = self.gzip(b"first member, ") + self.gzip(b"second member")
            self.send(handler, 200, "text/plain", body, {"Content-Encoding": "gzip"})
        elif path in ("/gzip-then-junk.txt", "/deflate-then-junk.txt"):
            # A short compressed stream, then JUNK_SIZE bytes that are no part of it.
            kind = "gzip" if path.startswith("/gzip") else "deflate"
            packer = zlib.compressobj(6, zlib.DEFLATED, 31 if kind == "gzip" else 15)
            stream = packer.compress(b"the whole page") + packer.flush()
            junk = b"junk" * 250_000
            handler.send_response(200)
            handler.send_header("Content-Type", "text/plain")
            handler.send_header("Content-Encoding", kind)
            handler.send_header("Content-Length", str(len(stream) + self.JUNK_SIZE))
            handler.end_headers()
            handler.wfile.write(stream)
            try:
                for _ in range(self.JUNK_SIZE // len(junk)):
                    handler.wfile.write(junk)
            except ConnectionError:  # the client stopped reading at the end of the stream
                handler.close_connection = True
        elif path == "/gzip-cut.txt":  # a gzip stream cut short, Content-Length matching the cut
            body = self.gzip(self.BIG)[:-40]
            self.send(handler, 200, "text/plain", body, {"Content-Encoding": "gzip"})
        elif path == "/bomb.txt":
            self.send(handler, 200, "text/plain", self.bomb, {"Content-Encoding": "gzip"})
        elif path == "/not-gzip.txt":
            self.send(handler, 200, "text/plain", b"plain, not gzip", {"Content-Encoding": "gzip"})
        elif path == "/brotli.txt":
            self.send(handler, 200, "text/plain", b"\x0b\x02\x80hi\x03", {"Content-Encoding": "br"})
        elif path == "/cut-short.txt":
            handler.send_response(200)
            handler.send_header("Content-Type", "text/plain")
            handler.send_header("Content-Length", "1000")
            handler.end_headers()
            handler.wfile.write(b"only this much")
            handler.wfile.flush()
            handler.close_connection = True
        elif path == "/typed":  # ?type=<Content-Type>&body=<text>[&encoding=<Content-Encoding>]
            body = query.get("body", ["<p>typed</p>"])[0].encode()
            encoding = {"Content-Encoding": query["encoding"][0]} if "encoding" in query else {}
            self.send(handler, 200, query["type"][0], body, encoding)
        elif path == "/typed-apart":  # ?type=<a>&type=<b>...: one Content-Type header for each
            body = b"<p>typed apart</p>"
            handler.send_response(200)
            for content_type in query["type"]:
                handler.send_header("Content-Type", content_type)
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
        elif path == "/endless":  # ?kind=<a key of ENDLESS>
            kind = query["kind"][0]
            head, piece = self.ENDLESS[kind]
            pieces = piece * max(1, 65_536 // len(piece))
            handler.close_connection = True
            try:
                handler.wfile.write(head)
                while self.sent[kind] < self.ENDLESS_SIZE and not self.release.is_set():
                    handler.wfile.write(pieces)
                    self.sent[kind] += len(pieces)
            except ConnectionError:  # the client hung up
                pass
        elif path == "/missing":
            self.send(handler, 404, "text/plain", b"not here")
        elif path == "/redirect":
            handler.send_response(int(query.get("status", ["302"])[0]))
            handler.send_header("Location", query.get("to", ["/redirect"])[0])
            handler.send_header("Content-Length", "0")
            handler.end_headers()
        elif path == "/slow":
            handler.send_response(200)
            handler.send_header("Content-Type", "text/plain")
            handler.send_header("Content-Length", "1000")
            handler.end_headers()
            handler.wfile.write(b"a little, then nothing")
            handler.wfile.flush()
            self.release.wait(30)
        else:
            self.send(handler, 404, "text/plain", b"no such route")

    @staticmethod
    def send(
        handler: BaseHTTPRequestHandler,
        status: int,
        content_type: str | None,
        body: bytes,
        headers: dict[str, str] | None = None,
    ) -> None:
        handler.send_response(status)
        if content_type is not None:
            handler.send_header("Content-Type", content_type)
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def __enter__(self) -> LocalSite:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def site() -> Iterator[LocalSite]:
    """An HTTP site on 127.0.0.1 (a fresh one per test, so hit counts are the test's own)."""
    with LocalSite() as running:
        yield running


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A throwaway CA and a certificate it signed for the name "site.test" only."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder = tmp_path_factory.mktemp("tls")
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nanobot test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "site.test")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("site.test")]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = {"ca": folder / "ca.pem", "cert": folder / "site.pem", "key": folder / "site.key"}
    paths["ca"].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths["key"].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


@pytest.fixture
def tls_site(certificates: dict[str, Path]) -> Iterator[LocalSite]:
    """An HTTPS site on 127.0.0.1 whose certificate is valid for "site.test" only."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificates["cert"], certificates["key"])
    with LocalSite(tls=context) as running:
        yield running


@pytest.fixture
def client_tls(certificates: dict[str, Path]) -> ssl.SSLContext:
    """A client TLS context that trusts the test CA (and nothing else)."""
    return ssl.create_default_context(cafile=str(certificates["ca"]))
