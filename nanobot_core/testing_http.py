"""A loopback HTTP server for tests: real sockets on 127.0.0.1, answers from a function.

The provider tests of nanobot-core and of provider plugins talk to real
servers that check what they receive; this is the part they share. Give it a
function from the request received to the response to send; it runs in a
thread pool behind ``http.server`` and is called on the handler's thread (it
may wait there, to hold an answer back). Bodies are read whole by
``Content-Length``; a client that goes away before the answer is written is
not an error (a test of a timeout, or of a reply too large to read, does that)::

    def answer(request: LoopbackRequest) -> LoopbackResponse:
        return LoopbackResponse(200, {"echo": request.json})

    with LoopbackServer(answer) as server:
        httpx.post(server.url + "/v1/x", json={...})

A client that makes an SSL context for every request reads the system's CA
certificates each time (tens of milliseconds of CPU); `counting_ca_loads` shows a
test how often that happens::

    with counting_ca_loads() as loads:
        ...  # several requests, on new clients
    assert len(loads) <= 1

A server that answers in something other than HTTP (an SSH greeting, a status line
HTTP cannot read, a body cut off by a closed connection) is `RawLoopbackServer`:
a function from the connection's number to the bytes it answers with.

Stdlib and attrs only (no pytest), so a plugin may use it in its benchmarks too.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

import attrs

__all__ = [
    "LoopbackRequest",
    "LoopbackResponse",
    "LoopbackServer",
    "RawLoopbackServer",
    "counting_ca_loads",
]


@attrs.frozen
class LoopbackRequest:
    """One request received: method, path, headers (names lower-cased) and raw body."""

    method: str
    path: str
    headers: dict[str, str]
    raw: bytes

    @property
    def json(self) -> Any:
        """The body as JSON, or None when it is empty or not UTF-8 JSON."""
        if not self.raw:
            return None
        try:
            return json.loads(self.raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None


@attrs.frozen
class LoopbackResponse:
    """What to answer: a status, a body (JSON-encoded unless it is a str or bytes) and headers.

    With `pace` (seconds) the body is written one byte at a time, `pace` apart:
    a server that trickles its reply, which no per-read timeout ever catches.
    With `chunks` the body is those bytes instead, each sent as it comes with
    ``Transfer-Encoding: chunked`` (an endless iterator: a body that never
    ends). A ``Content-Length`` in `headers` is sent in place of the body's
    real length (a server that announces more than it sends).
    """

    status: int = 200
    body: Any = attrs.field(factory=dict)
    headers: dict[str, str] = attrs.field(factory=dict)
    pace: float = 0.0
    chunks: Iterable[bytes] | None = None

    def payload(self) -> bytes:
        """The body as sent (without `chunks`)."""
        if isinstance(self.body, bytes):
            return self.body
        text = self.body if isinstance(self.body, str) else json.dumps(self.body)
        return text.encode("utf-8")


Answer = Callable[[LoopbackRequest], LoopbackResponse]


class LoopbackServer:
    """``with LoopbackServer(answer) as server:`` serves ``server.url`` until the block ends.

    Connections are kept alive between requests (HTTP/1.1), as a real server keeps
    them: `connections` counts those accepted, `open_connections` those still open,
    and `drop_connections` closes them, as a server's keep-alive timeout does.

    A scripted server of a test's own subclasses it, passing its own method as `answer`
    (``super().__init__(self._answer)``): it has all of this, and ``with`` gives it back
    as itself.
    """

    def __init__(self, answer: Answer) -> None:
        self._httpd = _CountingServer(("127.0.0.1", 0), _handler_for(answer))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def port(self) -> int:
        """The port it listens on (chosen by the system)."""
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, without a trailing slash."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def connections(self) -> int:
        """How many connections the server has accepted so far."""
        with self._httpd.counting:
            return self._httpd.accepted

    @property
    def open_connections(self) -> int:
        """How many of them are open still (a client that closed one shows here a moment later)."""
        with self._httpd.counting:
            return len(self._httpd.open)

    def drop_connections(self) -> int:
        """Close every open connection; return how many.

        The client learns it as it would from a server whose keep-alive timeout
        passed: a connection waiting for its next request is closed under it.
        A request being answered is not cut off: its connection is closed once
        the answer is written.
        """
        with self._httpd.counting:
            idle = [sock for sock in self._httpd.open if sock not in self._httpd.answering]
            self._httpd.closing.update(self._httpd.answering)
            dropped = len(self._httpd.open)
        for sock in idle:  # its handler reads the end, and closes it
            with contextlib.suppress(OSError):  # closed meanwhile
                sock.shutdown(socket.SHUT_RDWR)
        return dropped

    def start(self) -> Self:
        """Start serving (in a daemon thread)."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket; handlers still waiting are left to finish."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class _CountingServer(ThreadingHTTPServer):
    """A threading HTTP server that counts the connections it accepts and keeps those open."""

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self.counting = threading.Lock()
        self.accepted = 0
        self.open: set[socket.socket] = set()
        self.answering: set[socket.socket] = set()  # those a request is being answered on
        self.closing: set[socket.socket] = set()  # to be closed once their answer is written

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.counting:
            self.accepted += 1
            self.open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.counting:
            self.open.discard(request)
            self.closing.discard(request)
        super().shutdown_request(request)


def _handler_for(answer: Answer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Each answer goes out at once, as from a real server: with Nagle's algorithm the
        # body would wait for the client's (delayed) acknowledgement of the headers.
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            self._answer()

        def do_POST(self) -> None:
            self._answer()

        def _answer(self) -> None:
            server = self.server
            assert isinstance(server, _CountingServer)
            with server.counting:
                server.answering.add(self.connection)
            try:
                self._answer_now()
            finally:
                with server.counting:
                    server.answering.discard(self.connection)
                    if self.connection in server.closing:
                        self.close_connection = True  # dropped while it was being answered

        def _answer_now(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {name.lower(): value for name, value in self.headers.items()}
            response = answer(LoopbackRequest(self.command, self.path, headers, raw))
            payload = response.payload()
            named = {name.lower() for name in response.headers}
            try:
                self.send_response(response.status)
                self.send_header("Content-Type", "application/json")
                if response.chunks is not None:
                    self.send_header("Transfer-Encoding", "chunked")
                elif "content-length" not in named:
                    self.send_header("Content-Length", str(len(payload)))
                for name, value in response.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                if response.chunks is not None:
                    for chunk in response.chunks:
                        if chunk:
                            self.wfile.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
                    self.wfile.write(b"0\r\n\r\n")
                elif response.pace > 0:
                    for index in range(len(payload)):
                        self.wfile.write(payload[index : index + 1])
                        self.wfile.flush()
                        time.sleep(response.pace)
                else:
                    self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test) or was killed

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    return Handler


class RawLoopbackServer:
    """``with RawLoopbackServer(answers) as server:`` answers each connection on 127.0.0.1 with
    bytes of its own, HTTP or not: a server that misbehaves below what `LoopbackServer` can.

    The n-th connection (from 0) reads the request whole (its headers, then the body
    its ``Content-Length`` gives), is answered ``answers(n)`` and is closed, gently (a
    FIN, not a reset: nothing of the request is left unread). `connections` counts them.
    """

    def __init__(self, answers: Callable[[int], bytes]) -> None:
        self._answers = answers
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, without a trailing slash."""
        return f"http://127.0.0.1:{self._port}"

    @property
    def connections(self) -> int:
        """How many connections it has accepted so far."""
        with self._lock:
            return self._accepted

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # the listener was closed: the block ended
                return
            with self._lock:
                number = self._accepted
                self._accepted += 1
            threading.Thread(target=self._answer, args=(conn, number), daemon=True).start()

    def _answer(self, conn: socket.socket, number: int) -> None:
        with conn:
            conn.settimeout(10)
            try:
                _read_request(conn)
                conn.sendall(self._answers(number))
                conn.shutdown(socket.SHUT_WR)
                while conn.recv(65536):  # the client closes its side: nothing left unread
                    pass
            except OSError:
                pass  # the client went away first

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with contextlib.suppress(OSError):  # wakes the thread waiting in `accept`
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=10)


def _read_request(conn: socket.socket) -> None:
    """Read one HTTP request from `conn`: its head, then as much body as it announces."""
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        if not piece:
            return
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            length = int(value.strip())
    while len(body) < length:
        piece = conn.recv(65536)
        if not piece:
            return
        body += piece


@contextlib.contextmanager
def counting_ca_loads() -> Iterator[list[object]]:
    """Within the block, note each load of CA certificates into an SSL context.

    Yields a list that gets one entry (the arguments) per call of
    ``ssl.SSLContext.load_verify_locations`` in any thread, the load still done; the
    method is put back when the block ends.
    """
    loads: list[object] = []
    real = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(args or kwargs)
        real(self, *args, **kwargs)

    ssl.SSLContext.load_verify_locations = counted  # type: ignore[method-assign]
    try:
        yield loads
    finally:
        ssl.SSLContext.load_verify_locations = real  # type: ignore[method-assign]
