"""The loopback HTTP server of nanobot_core.testing_http, over real sockets."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import certifi
import pytest

from nanobot_core.testing_http import (
    LoopbackRequest,
    LoopbackResponse,
    LoopbackServer,
    counting_ca_loads,
)


def _post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
    request = urllib.request.Request(url, data=body, headers=headers or {}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read()), reply.headers
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), error.headers


def test_every_request_reaches_the_function_and_its_answer_is_sent() -> None:
    """Method, path, lower-cased headers and body arrive; status, JSON and headers go back."""
    seen: list[LoopbackRequest] = []

    def answer(request: LoopbackRequest) -> LoopbackResponse:
        seen.append(request)
        return LoopbackResponse(201, {"echo": request.json}, {"X-Test": "yes"})

    with LoopbackServer(answer) as server:
        assert server.url == f"http://127.0.0.1:{server.port}"
        status, body, headers = _post(
            server.url + "/v1/things?q=1", b'{"a": [1, 2]}', {"X-Key": "k"}
        )
    assert (status, body, headers["X-Test"]) == (201, {"echo": {"a": [1, 2]}}, "yes")
    (request,) = seen
    assert (request.method, request.path) == ("POST", "/v1/things?q=1")
    assert request.headers["x-key"] == "k" and request.raw == b'{"a": [1, 2]}'


def test_a_body_that_is_not_json_reads_as_none_and_a_text_body_is_sent_as_is() -> None:
    """`json` is None for bytes that do not decode; a str body is sent verbatim."""
    seen: list[Any] = []

    def answer(request: LoopbackRequest) -> LoopbackResponse:
        seen.append(request.json)
        return LoopbackResponse(400, '{"error": "raw"}')

    with LoopbackServer(answer) as server:
        status, body, _ = _post(server.url, b"\xff not json")
    assert seen == [None]
    assert (status, body) == (400, {"error": "raw"})


def test_gets_are_answered_too() -> None:
    """A GET has an empty body and the same function answers it."""
    with (
        LoopbackServer(lambda r: LoopbackResponse(200, {"method": r.method})) as server,
        urllib.request.urlopen(server.url + "/hold/x", timeout=10) as reply,
    ):
        assert json.loads(reply.read()) == {"method": "GET"}


def test_a_client_that_leaves_before_the_answer_does_not_break_the_server(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A held answer whose client has gone is dropped quietly; the next request is served."""
    release = threading.Event()
    received = threading.Event()  # the held request reached the handler
    calls: list[str] = []

    def answer(request: LoopbackRequest) -> LoopbackResponse:
        calls.append(request.path)
        if request.path == "/slow":
            received.set()
            release.wait(timeout=10)
        return LoopbackResponse(200, {"path": request.path})

    with LoopbackServer(answer) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as client:
            client.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
            # Left only once it is being answered: on a busy machine the server could
            # otherwise read it after the next request, and the order would say nothing.
            assert received.wait(timeout=10)
        release.set()
        with urllib.request.urlopen(server.url + "/fast", timeout=10) as reply:
            assert json.loads(reply.read()) == {"path": "/fast"}
    assert calls[-1] == "/fast"
    assert "Traceback" not in capsys.readouterr().err


def test_after_the_block_nothing_listens() -> None:
    """Leaving the block closes the socket."""
    with LoopbackServer(lambda r: LoopbackResponse()) as server:
        port = server.port
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_a_paced_body_arrives_a_byte_at_a_time() -> None:
    """With `pace` the body is written byte by byte, each after the wait; it arrives whole."""
    paced = LoopbackServer(lambda request: LoopbackResponse(200, {"a": 1}, pace=0.01))
    with (
        paced as server,
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as client,
    ):
        client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        received = b""
        reads = 0
        while not received.endswith(b"}"):
            received += client.recv(65536)
            reads += 1
    assert received.endswith(b'\r\n\r\n{"a": 1}')
    assert reads > 1


def _raw_exchange(server: LoopbackServer, until: bytes) -> bytes:
    """What the server sends for one GET, read until the bytes end with `until`."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as client:
        client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        received = b""
        while not received.endswith(until):
            received += client.recv(65536)
    return received


def test_chunks_are_sent_with_chunked_transfer_encoding_as_they_come() -> None:
    """With `chunks` the body is those bytes in chunked framing, with no Content-Length."""
    answer = LoopbackResponse(200, chunks=iter([b'{"a": ', b"", b"1}"]))
    with LoopbackServer(lambda request: answer) as server:
        received = _raw_exchange(server, b"0\r\n\r\n")
    head, body = received.split(b"\r\n\r\n", 1)
    assert b"Transfer-Encoding: chunked" in head and b"Content-Length" not in head
    assert body == b'6\r\n{"a": \r\n2\r\n1}\r\n0\r\n\r\n'


def test_a_content_length_given_is_sent_instead_and_bytes_go_as_they_are() -> None:
    """A `Content-Length` header replaces the real one (a lying server); a bytes body is raw."""
    answer = LoopbackResponse(200, b"\x1f\x8b raw", headers={"Content-Length": "99"})
    with LoopbackServer(lambda request: answer) as server:
        received = _raw_exchange(server, b"raw")
    head, body = received.split(b"\r\n\r\n", 1)
    assert head.count(b"Content-Length") == 1 and b"Content-Length: 99" in head
    assert body == b"\x1f\x8b raw"


def _until(condition: Any, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_connections_are_kept_alive_counted_and_dropped_when_idle() -> None:
    """Requests on one kept-alive connection count one; `drop_connections` closes it as a
    keep-alive timeout does (the client reads the end), and a new one counts again."""
    with LoopbackServer(lambda request: LoopbackResponse(200, {"n": request.path})) as server:
        client = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        try:
            for path in ("/a", "/b"):
                client.request("GET", path)
                assert json.loads(client.getresponse().read()) == {"n": path}
            assert (server.connections, server.open_connections) == (1, 1)
            assert server.drop_connections() == 1
            assert _until(lambda: server.open_connections == 0)
            assert client.sock is not None and client.sock.recv(1) == b""  # closed under it
        finally:
            client.close()
        with urllib.request.urlopen(server.url + "/c", timeout=10) as reply:
            assert json.loads(reply.read()) == {"n": "/c"}
        assert server.connections == 2
        assert _until(lambda: server.open_connections == 0)


def test_a_connection_dropped_while_its_answer_is_made_gets_the_whole_answer_first() -> None:
    """`drop_connections` does not cut off a request being answered: its answer arrives
    whole, then its connection is closed."""
    arrived, release = threading.Event(), threading.Event()

    def answer(request: LoopbackRequest) -> LoopbackResponse:
        arrived.set()
        release.wait(timeout=10)
        return LoopbackResponse(200, {"whole": "answer"})

    with LoopbackServer(answer) as server:
        client = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        try:
            client.request("GET", "/")
            assert arrived.wait(timeout=10)
            assert server.drop_connections() == 1
            release.set()
            response = client.getresponse()
            assert json.loads(response.read()) == {"whole": "answer"}
            assert _until(lambda: server.open_connections == 0)
            assert client.sock is not None and client.sock.recv(1) == b""
        finally:
            client.close()


def test_answers_on_a_kept_connection_are_not_held_back_by_nagles_algorithm() -> None:
    """Twenty requests on one connection take milliseconds each, not the 40 ms a delayed
    acknowledgement of the headers would hold each answer's body back."""
    with LoopbackServer(lambda request: LoopbackResponse(200, {"ok": True})) as server:
        client = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        try:
            started = time.monotonic()
            for _ in range(20):
                client.request("POST", "/", body=b"{}")
                assert json.loads(client.getresponse().read()) == {"ok": True}
            elapsed = time.monotonic() - started
        finally:
            client.close()
        assert server.connections == 1
    assert elapsed < 0.6


class _Counter(LoopbackServer):
    """A scripted server of a test's own: it answers with how many requests it has had."""

    def __init__(self) -> None:
        self.answered = 0
        super().__init__(self._answer)

    def _answer(self, request: LoopbackRequest) -> LoopbackResponse:
        self.answered += 1
        return LoopbackResponse(200, {"n": self.answered})


def test_a_subclass_answering_with_its_own_method_is_the_server_it_enters() -> None:
    """A subclass passing its own method serves with it, and ``with`` gives the subclass,
    its connections counted as the server's are."""
    with _Counter() as server:
        assert isinstance(server, _Counter)
        assert [_post(server.url, b"{}")[1] for _ in range(2)] == [{"n": 1}, {"n": 2}]
        assert server.connections == 2
    assert server.answered == 2


def test_ca_loads_are_counted_in_the_block_and_done_all_the_same() -> None:
    """Each load of CA certificates into an SSL context in the block is noted with its
    arguments, in any thread, and the certificates are loaded all the same; after the block
    nothing is counted and the method is the real one again."""
    cafile = certifi.where()

    def load(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(*args, **kwargs)
        return context

    with counting_ca_loads() as loads:
        contexts = [load(cafile=cafile)]
        worker = threading.Thread(target=lambda: contexts.append(load(cafile)))
        worker.start()
        worker.join()
    assert loads == [{"cafile": cafile}, (cafile,)]
    assert all(context.cert_store_stats()["x509_ca"] > 0 for context in contexts)
    load(cafile=cafile)
    assert len(loads) == 2
    assert ssl.SSLContext.load_verify_locations.__qualname__ == "_SSLContext.load_verify_locations"
