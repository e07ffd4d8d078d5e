"""`nanobot-core run --provider anthropic` with the plugin installed, end to end."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from messages_server import API_KEY, MessagesServer, message_reply, text_reply
from nanobot_core.testing import run_cli


def _run(server: MessagesServer, workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NANOBOT_", "OPENAI_", "ANTHROPIC_"))
    }
    env["ANTHROPIC_API_KEY"] = API_KEY
    return run_cli(
        "run",
        "--provider",
        "anthropic",
        "--base-url",
        server.base_url,
        "--log-level",
        "debug",
        *args,
        cwd=workspace,
        env=env,
    )


def test_a_turn_with_a_tool_call_reports_cache_usage_per_call_and_turn(
    server: MessagesServer, tmp_path: Path
) -> None:
    """run --json: calls[] and usage carry the cache counts; the session keeps usage records."""
    (tmp_path / "notes.txt").write_text("one\ntwo\n", encoding="utf-8")
    server.add(
        message_reply(
            [
                {"type": "thinking", "thinking": "read it", "signature": "c2lnbmF0dXJl"},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "read_file",
                    "input": {"path": "notes.txt"},
                },
            ],
            "tool_use",
            usage={"input_tokens": 5, "output_tokens": 9, "cache_creation_input_tokens": 1500},
        ),
        text_reply(
            "Two lines.",
            usage={"input_tokens": 40, "output_tokens": 3, "cache_read_input_tokens": 1500},
        ),
    )
    result = _run(server, tmp_path, "--json", "--session", "s1", "what is in notes.txt?")
    assert result.returncode == 0, result.stderr
    assert API_KEY not in result.stderr and API_KEY not in result.stdout
    turn = json.loads(result.stdout)
    assert turn["answer"] == "Two lines."
    assert [c["usage"]["cache_creation_input_tokens"] for c in turn["calls"]] == [1500, 0]
    assert [c["usage"]["cache_read_input_tokens"] for c in turn["calls"]] == [0, 1500]
    assert [c["finish_reason"] for c in turn["calls"]] == ["tool_use", "end_turn"]
    assert turn["usage"]["prompt_tokens"] == 1505 + 1540
    assert turn["usage"]["cache_read_input_tokens"] == 1500
    assert all(r.problems == [] for r in server.requests)
    second = server.requests[1].body
    assert second["messages"][1]["content"][0]["signature"] == "c2lnbmF0dXJl"
    lines: list[dict[str, Any]] = [
        json.loads(line)
        for line in (tmp_path / ".nanobot" / "sessions" / "s1.jsonl")
        .read_text("utf-8")
        .splitlines()
    ]
    usage = [line["_meta"] for line in lines if set(line) == {"_meta"}]
    assert [u["kind"] for u in usage] == ["usage", "usage"]
    assert usage[1]["usage"]["cache_read_input_tokens"] == 1500


def test_a_call_the_output_limit_cut_is_answered_not_run(
    server: MessagesServer, tmp_path: Path
) -> None:
    """A write_file cut by max_tokens writes nothing; the model is told and the session goes on."""
    cut = {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "write_file",
        "input": {"path": "app.py", "content": "def main():\n    pri"},
    }
    server.add(message_reply([cut], "max_tokens"), text_reply("I will write it in parts."))
    result = _run(server, tmp_path, "--json", "--session", "s1", "write app.py")
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "app.py").exists()
    assert all(r.problems == [] for r in server.requests)
    answer = server.requests[1].body["messages"][2]["content"][0]
    assert answer["tool_use_id"] == "toolu_1" and "was not run" in answer["content"]
    assert "output limit (finish_reason 'max_tokens')" in answer["content"]


def test_a_paused_turn_is_continued_and_answered_as_one_call(
    server: MessagesServer, tmp_path: Path
) -> None:
    """pause_turn: the paused turn goes back, the answer is the whole turn, one call's record."""
    search = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    server.add(
        message_reply([{"type": "text", "text": "Looking."}, search], "pause_turn"),
        text_reply(" Monday."),
    )
    result = _run(server, tmp_path, "--json", "--session", "s1", "when did it ship?")
    assert result.returncode == 0, result.stderr
    assert [r.problems for r in server.requests] == [[], []]
    turn = json.loads(result.stdout)
    assert turn["answer"] == "Looking. Monday."
    assert [c["finish_reason"] for c in turn["calls"]] == ["end_turn"]
    assert turn["usage"]["prompt_tokens"] == 20
    lines = (tmp_path / ".nanobot" / "sessions" / "s1.jsonl").read_text("utf-8").splitlines()
    replies = [m for m in map(json.loads, lines) if m.get("role") == "assistant"]
    assert [m["anthropic_blocks"] for m in replies] == [[search]]


def test_tool_uses_without_a_name_or_an_id_are_answered_as_the_cores_calls_are(
    server: MessagesServer, tmp_path: Path
) -> None:
    """A tool_use without an id gets a derived one and runs; one without a usable name is
    answered as a call to no tool, as an OpenAI call is, and left out of the next request,
    which the API takes (no nameless tool_use, every id its pattern's)."""
    (tmp_path / "notes.txt").write_text("one\n", encoding="utf-8")
    blocks = [
        {"type": "tool_use", "id": "toolu_1", "input": {}},
        {"type": "tool_use", "id": "toolu_2", "name": 5, "input": {}},
        {"type": "tool_use", "name": "read_file", "input": {"path": "notes.txt"}},
    ]
    server.add(message_reply(blocks, "tool_use"), text_reply("One line."))
    result = _run(server, tmp_path, "--json", "--session", "s1", "what is in notes.txt?")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["answer"] == "One line."
    assert [r.problems for r in server.requests] == [[], []]
    assistant, results = server.requests[1].body["messages"][1:3]
    (use,) = [b for b in assistant["content"] if b["type"] == "tool_use"]
    assert use["name"] == "read_file" and use["id"].startswith("call_")
    (answer,) = results["content"]
    assert answer["tool_use_id"] == use["id"] and "one" in answer["content"]
    stored = [
        json.loads(line)
        for line in (tmp_path / ".nanobot" / "sessions" / "s1.jsonl")
        .read_text("utf-8")
        .splitlines()
    ]
    unnamed = [m for m in stored if m.get("role") == "tool" and "name" not in m]
    assert len(unnamed) == 2 and all(m["content"].startswith("Error") for m in unnamed)
