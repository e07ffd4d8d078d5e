"""A scripted OpenAI chat-completions server on 127.0.0.1, for tests.

Each test gives the server a list of `Reply` objects; the server answers the
n-th POST to ``/v1/chat/completions`` with the n-th reply (a JSON body, a
status code, headers, an optional delay, or a hold until an event is set),
and records every request's method, path, headers and JSON body. Once the
script is used up it answers 500, so a test that expects fewer requests sees
the extra one. Other paths (``GET /hold/...``) can be scripted too, so a
tool run by the agent can signal the test through the server.

Usage::

    with FakeChatServer([tool_call_reply(...), text_reply("done")]) as server:
        ... base_url=server.base_url ...
    server.requests[0].body["messages"]
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from nanobot_core.testing_http import LoopbackRequest, LoopbackResponse, LoopbackServer

__all__ = [
    "FakeChatServer",
    "RecordedRequest",
    "Reply",
    "error_reply",
    "text_reply",
    "tool_call_reply",
]

CHAT_PATH = "/v1/chat/completions"


@attrs.define
class Reply:
    """One scripted answer: status, JSON (or raw text) body, headers, and when to send it.

    `received` is set as soon as the request is read; the answer then waits
    for `release` (if given) and then `delay` seconds.
    """

    status: int = 200
    body: Any = attrs.field(factory=dict)
    headers: dict[str, str] = attrs.field(factory=dict)
    delay: float = 0.0
    received: threading.Event | None = None
    release: threading.Event | None = None


@attrs.frozen
class RecordedRequest:
    """What the server received: method, path, headers (lower-cased names) and JSON body."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw: bytes


def text_reply(content: str | None, *, usage: dict[str, int] | None = None) -> Reply:
    """A 200 reply whose message has `content` and no tool calls."""
    return Reply(body=_completion({"role": "assistant", "content": content}, "stop", usage))


def tool_call_reply(
    calls: Iterable[tuple[Any, Any, Any]],
    *,
    content: str | None = None,
    usage: dict[str, int] | None = None,
) -> Reply:
    """A 200 reply asking for tool calls, each given as ``(id, name, arguments)`` verbatim."""
    tool_calls = [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        for call_id, name, arguments in calls
    ]
    message = {"role": "assistant", "content": content, "tool_calls": tool_calls}
    return Reply(body=_completion(message, "tool_calls", usage))


def error_reply(
    status: int, message: str, *, headers: dict[str, str] | None = None, delay: float = 0.0
) -> Reply:
    """An error status with OpenAI's error body ``{"error": {"message", "type"}}``."""
    body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    return Reply(status=status, body=body, headers=dict(headers or {}), delay=delay)


def strict_refusal(body: Any) -> str | None:
    """Why a strict server refuses a chat request's messages, or None when it takes them:
    after the system messages they start at a user message and do not end with an
    assistant message (which Anthropic refuses, or takes as a reply to go on with)."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        return "messages: not a list"
    roles = [m.get("role") if isinstance(m, dict) else None for m in messages]
    chat = [role for role in roles if role not in ("system", "developer")]
    if not chat:
        return "messages: at least one message is required"
    if chat[0] != "user":
        return f"messages: the first message must use the user role, not {chat[0]!r}"
    if chat[-1] == "assistant":
        return "messages: the final message must not be an assistant message"
    return None


def _completion(
    message: dict[str, Any], finish_reason: str, usage: dict[str, int] | None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": "fake-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


class FakeChatServer(LoopbackServer):
    """A threaded HTTP server answering chat-completions requests from a script."""

    def __init__(
        self,
        replies: Sequence[Reply] = (),
        *,
        holds: dict[str, Reply] | None = None,
        strict: bool = False,
    ) -> None:
        self._script = list(replies)
        self._holds = dict(holds or {})
        # Refuse, as Anthropic (and OpenAI for some models) do, a request that does not start
        # at a user message or ends with an assistant message; a refusal uses no reply.
        self._strict = strict
        self._lock = threading.Condition()
        self.requests: list[RecordedRequest] = []
        self.other_requests: list[RecordedRequest] = []
        super().__init__(self._answer)

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (``http://127.0.0.1:PORT/v1``)."""
        return f"{self.url}/v1"

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return self.url

    def add(self, *replies: Reply) -> None:
        """Append replies to the script."""
        with self._lock:
            self._script.extend(replies)

    def bodies(self) -> list[Any]:
        """The JSON bodies of the chat requests received so far."""
        with self._lock:
            return [r.body for r in self.requests]

    def stop(self) -> None:
        """Stop serving, first letting go the handlers that hold a reply (or shutdown waits)."""
        for reply in [*self._script, *self._holds.values()]:
            if reply.release is not None:
                reply.release.set()
        super().stop()

    def _answer(self, request: LoopbackRequest) -> LoopbackResponse:
        recorded = RecordedRequest(
            request.method, request.path, request.headers, request.json, request.raw
        )
        reply = self._next_reply(recorded)
        if reply.received is not None:
            reply.received.set()
        if reply.release is not None:
            reply.release.wait(timeout=60)
        if reply.delay:
            threading.Event().wait(reply.delay)
        return LoopbackResponse(reply.status, reply.body, reply.headers)

    def _next_reply(self, request: RecordedRequest) -> Reply:
        with self._lock:
            if request.path == CHAT_PATH and request.method == "POST":
                index = len(self.requests)
                self.requests.append(request)
                refusal = strict_refusal(request.body) if self._strict else None
                if refusal is not None:
                    self._script.insert(index, error_reply(400, refusal))
                if index < len(self._script):
                    return self._script[index]
                return error_reply(500, f"fake server: no scripted reply for request {index + 1}")
            self.other_requests.append(request)
            hold = self._holds.get(request.path)
            return hold if hold is not None else error_reply(404, f"no route {request.path}")
