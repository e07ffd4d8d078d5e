"""A scripted Anthropic Messages API server on 127.0.0.1 that checks everything it receives.

Each POST to ``/v1/messages`` is checked (headers, block shapes, alternation,
tool_use/tool_result pairing, cache marks) and recorded; a request with any
problem is answered 400 with Anthropic's error body listing them, so a test
sees the provider's error. A clean request gets the next scripted reply;
once the script is used up the server answers 500. After a scripted reply
that stopped at ``pause_turn`` the request may end with an assistant turn:
the content of the paused replies in a row so far, exactly as they were sent.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
from nanobot_core.testing_http import LoopbackRequest, LoopbackResponse, LoopbackServer

API_KEY = "sk-ant-test-Hq4Zc8Vw2Lp6Nr0Tx"
PATH = "/v1/messages"

_USER_BLOCKS = frozenset({"text", "image", "document", "tool_result", "search_result"})
_ASSISTANT_BLOCKS = frozenset(
    {
        "text",
        "thinking",
        "redacted_thinking",
        "tool_use",
        "server_tool_use",
        "web_search_tool_result",
    }
)
_ID = re.compile(r"[a-zA-Z0-9_-]+")
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


@attrs.define
class Reply:
    """One scripted answer: status, JSON body, headers, and the pace of its bytes (0: at once).

    With `chunks` the body is those bytes instead, sent chunked as they come.
    """

    status: int = 200
    body: Any = attrs.field(factory=dict)
    headers: dict[str, str] = attrs.field(factory=dict)
    pace: float = 0.0
    chunks: Iterable[bytes] | None = None


@attrs.frozen
class Recorded:
    """What the server received, and what was wrong with it."""

    headers: dict[str, str]
    body: Any
    raw: bytes
    problems: list[str]


def message_reply(
    blocks: Sequence[dict[str, Any]],
    stop_reason: str = "end_turn",
    *,
    usage: dict[str, int] | None = None,
    model: str = "claude-test",
) -> Reply:
    """A 200 Messages API response with these content blocks."""
    body = {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": list(blocks),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 10, "output_tokens": 5},
    }
    return Reply(body=body)


def text_reply(text: str, **kwargs: Any) -> Reply:
    """A reply with one text block."""
    return message_reply([{"type": "text", "text": text}], **kwargs)


def error_reply(
    status: int, kind: str, message: str, headers: dict[str, str] | None = None
) -> Reply:
    """An error in Anthropic's shape: ``{"type": "error", "error": {"type", "message"}}``."""
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return Reply(status, body, dict(headers or {}))


def check_request(headers: dict[str, str], body: Any, *, paused: Sequence[Any] = ()) -> list[str]:
    """Every way the request breaks the Messages API's rules (empty when it is legal).

    `paused`: the content of the replies that stopped at ``pause_turn`` in a row, the last
    one just before this request; the request may end with it as an assistant turn, the
    paused turn sent back as it was for the model to continue.
    """
    problems: list[str] = []
    if headers.get("x-api-key") != API_KEY:
        problems.append("x-api-key missing or wrong")
    if not headers.get("anthropic-version"):
        problems.append("anthropic-version header missing")
    if not headers.get("content-type", "").startswith("application/json"):
        problems.append("content-type is not application/json")
    if not isinstance(body, dict):
        return [*problems, "body is not a JSON object"]
    if not isinstance(body.get("model"), str):
        problems.append("model missing")
    if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
        problems.append("max_tokens missing")
    temperature = body.get("temperature", 0)
    if not isinstance(temperature, int | float) or not 0 <= temperature <= 1:
        problems.append(f"temperature: {temperature!r} is not from 0 to 1")
    marks = 0
    for tool in body.get("tools", []):
        if not isinstance(tool.get("name"), str) or not isinstance(tool.get("input_schema"), dict):
            problems.append(f"tool {tool!r} lacks name or input_schema")
        elif not _TOOL_NAME.fullmatch(tool["name"]):
            problems.append(f"tool name {tool['name']!r} does not match {_TOOL_NAME.pattern}")
        marks += "cache_control" in tool
    system = body.get("system", [])
    if not isinstance(system, list | str):
        problems.append("system is neither text nor blocks")
    for block in system if isinstance(system, list) else []:
        if block.get("type") != "text" or not str(block.get("text", "")).strip():
            problems.append(f"system block {block!r} is not non-blank text")
        marks += "cache_control" in block
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return [*problems, "messages missing or empty"]
    # Ids as the JSON gave them (a missing or non-string one is a problem noted above, and
    # still has to be answered by the same value).
    pending: set[object] = set()
    seen_uses: set[object] = set()
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        if set(message) != {"role", "content"}:
            problems.append(f"{where}: keys {sorted(message)} (only role and content allowed)")
        role = message.get("role")
        expected = "user" if index % 2 == 0 else "assistant"
        if role != expected:
            problems.append(f"{where}: role {role!r}, expected {expected!r} (roles must alternate)")
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list) or not content:
            problems.append(f"{where}: content empty")
            continue
        allowed = _USER_BLOCKS if role == "user" else _ASSISTANT_BLOCKS
        results_done = False
        answered: set[object] = set()
        for number, block in enumerate(content):
            at = f"{where}.content.{number}"
            kind = block.get("type") if isinstance(block, dict) else None
            if kind not in allowed:
                problems.append(f"{at}: block type {kind!r} not allowed for {role}")
                continue
            if "cache_control" in block:
                marks += 1
                if kind in _UNMARKABLE:
                    problems.append(f"{at}: cache_control on a {kind} block")
            if kind == "tool_result" and isinstance(block.get("content"), list):
                marks += sum(
                    isinstance(part, dict) and "cache_control" in part for part in block["content"]
                )
            if kind == "text" and not str(block.get("text", "")).strip():
                problems.append(f"{at}: text content blocks must contain non-whitespace text")
            if kind in ("thinking", "redacted_thinking") and not (
                block.get("signature") or block.get("data")
            ):
                problems.append(f"{at}: thinking block without its signature")
            if kind == "tool_use":
                if not isinstance(block.get("input"), dict):
                    problems.append(f"{at}: tool_use input is not an object")
                if not isinstance(block.get("id"), str) or not _ID.fullmatch(block["id"]):
                    problems.append(
                        f"{at}: tool_use id {block.get('id')!r} does not match {_ID.pattern}"
                    )
                if not isinstance(block.get("name"), str) or not block["name"]:
                    problems.append(f"{at}: tool_use name {block.get('name')!r} is not a name")
                if block.get("id") in seen_uses:
                    problems.append(f"{at}: tool_use id {block.get('id')!r} is not unique")
                seen_uses.add(block.get("id"))
            if kind == "tool_result":
                if results_done:
                    problems.append(f"{at}: tool_result after other content")
                if block.get("tool_use_id") not in pending:
                    problems.append(
                        f"{at}: tool_result for unknown id {block.get('tool_use_id')!r}"
                    )
                answered.add(block.get("tool_use_id"))
            elif role == "user":
                results_done = True
        if role == "user":
            if pending - answered:
                problems.append(
                    f"{where}: tool_use ids {sorted(pending - answered, key=repr)} not answered"
                )
            pending = set()
        else:
            pending = {
                b.get("id") for b in content if isinstance(b, dict) and b.get("type") == "tool_use"
            }
    if pending:
        problems.append("the last assistant turn has unanswered tool_use blocks")
    if messages[-1].get("role") != "user" and not (
        paused and messages[-1].get("content") == list(paused)
    ):
        problems.append(
            "the last message is not a user turn, nor the paused turn sent back as it was"
            if paused
            else "the last message is not a user turn"
        )
    if marks > 4:
        problems.append(f"{marks} cache_control blocks (at most 4 allowed)")
    return problems


class MessagesServer(LoopbackServer):
    """A threaded HTTP server answering Messages API requests from a script."""

    def __init__(self, replies: Sequence[Reply] = ()) -> None:
        self._script = list(replies)
        self._lock = threading.Lock()
        self.requests: list[Recorded] = []
        self._answered = 0
        # The content of the scripted replies that stopped at pause_turn, in a row so far.
        self._paused: list[Any] = []
        super().__init__(self._respond)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` (the provider adds ``/v1/messages``)."""
        return self.url

    def add(self, *replies: Reply) -> None:
        """Append replies to the script."""
        with self._lock:
            self._script.extend(replies)

    def _respond(self, request: LoopbackRequest) -> LoopbackResponse:
        reply = self._answer(request.method, request.path, request.headers, request.raw)
        return LoopbackResponse(reply.status, reply.body, reply.headers, reply.pace, reply.chunks)

    def _answer(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Reply:
        with self._lock:
            try:
                body = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as exc:
                body, problems = None, [f"body is not UTF-8 JSON: {exc}"]
            else:
                problems = check_request(headers, body, paused=self._paused)
            if method != "POST" or path != PATH:
                problems.append(f"{method} {path!r}, expected POST {PATH!r}")
            self.requests.append(Recorded(headers, body, raw, problems))
            if problems:
                return error_reply(400, "invalid_request_error", "; ".join(problems))
            index = self._answered
            self._answered += 1
            if index < len(self._script):
                reply = self._script[index]
                answer = reply.body if isinstance(reply.body, dict) else {}
                if reply.status == 200:  # an error leaves the turn as it was, for a retry
                    paused = answer.get("stop_reason") == "pause_turn"
                    self._paused = [*self._paused, *answer.get("content", ())] if paused else []
                return reply
        return error_reply(500, "api_error", f"no scripted reply for request {index + 1}")
