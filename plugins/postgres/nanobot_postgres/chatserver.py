"""A rule-driven OpenAI-compatible chat server on 127.0.0.1, for tests and benchmarks.

Stateless, so any number of workers can talk to it at once: a request whose
last message is the user's gets tool calls, one whose last message is a tool
result gets the answer. The user text's first line, ``session NAME turn K``,
names the turn; call ids are derived from it (``NAME-K-a``), so every id is
unique across sessions and turns. A turn whose text contains ``HANG`` asks
for ``slow_step`` with a long sleep (a worker to kill mid-turn). Every
request body is recorded; ``delay`` seconds are waited before each answer.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from nanobot_core.testing_http import LoopbackRequest, LoopbackResponse, LoopbackServer

__all__ = ["ScriptedChatServer", "turn_of"]

HANG_MS = 600_000


def turn_of(messages: list[dict[str, Any]]) -> tuple[str, int] | None:
    """The ``(session, turn)`` of the newest user message, if it names one."""
    for message in reversed(messages):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            words = message["content"].split("\n", 1)[0].split()
            if len(words) >= 4 and words[0] == "session" and words[2] == "turn":
                return words[1], int(words[3])
            return None
    return None


def _answer(body: dict[str, Any]) -> dict[str, Any]:
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    turn = turn_of(messages)
    label = f"{turn[0]}-{turn[1]}" if turn else "x-0"
    if last.get("role") == "tool":
        message: dict[str, Any] = {"role": "assistant", "content": f"done {label}"}
        finish = "stop"
    else:
        hang = "HANG" in str(last.get("content", ""))
        calls = [
            (f"{label}-a", "slow_step", {"ms": HANG_MS if hang else 1}),
            (f"{label}-b", "list_dir", {"path": "."}),
        ]
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
                for call_id, name, arguments in calls
            ],
        }
        finish = "tool_calls"
    return {
        "id": f"chatcmpl-{label}",
        "object": "chat.completion",
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


class ScriptedChatServer(LoopbackServer):
    """``with ScriptedChatServer(delay=0.05) as server:`` then ``server.base_url``."""

    def __init__(self, *, delay: float = 0.0, record: bool = True) -> None:
        self.delay = delay
        self.record = record
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        super().__init__(self._respond)

    @property
    def base_url(self) -> str:
        """The ``/v1`` URL to give the provider."""
        return f"{self.url}/v1"

    def requests_of(self, session: str) -> list[dict[str, Any]]:
        """The recorded request bodies whose newest user message belongs to `session`."""
        with self._lock:
            bodies = list(self.requests)
        return [b for b in bodies if (turn_of(b.get("messages") or []) or ("", 0))[0] == session]

    def _respond(self, request: LoopbackRequest) -> LoopbackResponse:
        body = json.loads(request.raw or b"{}")
        if self.record:
            with self._lock:
                self.requests.append(body)
        if self.delay:
            self._stopping.wait(self.delay)
        return LoopbackResponse(200, _answer(body))

    def stop(self) -> None:
        """Stop serving, first cutting short the delays being waited (or shutdown waits)."""
        self._stopping.set()
        super().stop()
