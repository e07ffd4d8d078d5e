"""Hostile replies and history lines: every command prints strict JSON and exits cleanly."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.boundary.strict import strict_lines, strict_loads
from tests.headless.conftest import cli_env
from tests.headless.fake_server import FakeChatServer, Reply, text_reply

TIMEOUT = 120

# A completion as a raw body: a lone surrogate escape in the answer, NaN and a huge number in
# places a lenient parser accepts, an escaped pair that must survive as its character.
HOSTILE_REPLY = (
    '{"id": "x", "object": "chat.completion", "model": "fake-model",'
    ' "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant",'
    ' "content": "half \\ud800 of a pair, whole \\ud83d\\ude00", "score": NaN}}],'
    ' "usage": {"prompt_tokens": 3, "completion_tokens": 1e999, "total_tokens": 4}}'
)


@pytest.fixture
def server() -> Iterator[FakeChatServer]:
    """A fake chat server on 127.0.0.1."""
    with FakeChatServer() as running:
        yield running


def _cli(
    server: FakeChatServer, workspace: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[bytes]:
    env = {**cli_env(server), "NANOBOT_PROVIDER__MAX_RETRIES": "0", "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        [sys.executable, "-m", "nanobot_core", *args],
        cwd=workspace,
        env=env,
        input=stdin.encode() if stdin is not None else None,
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )


def test_a_hostile_reply_does_not_wedge_the_session(server: FakeChatServer, tmp_path: Path) -> None:
    """Lone surrogates and NaN in a reply: run, the file, a second run and show stay strict."""
    server.add(Reply(body=HOSTILE_REPLY), text_reply("second answer"))
    first = _cli(server, tmp_path, "run", "hello", "--json", "--session", "s")
    assert first.returncode == 0, first.stderr
    turn = strict_loads(first.stdout)
    assert turn["answer"] == "half \ufffd of a pair, whole \U0001f600"
    lines = strict_lines((tmp_path / ".nanobot" / "sessions" / "s.jsonl").read_bytes())
    messages = [line for line in lines if set(line) != {"_meta"}]  # usage records left out
    assert messages[-1]["content"] == turn["answer"]
    second = _cli(server, tmp_path, "run", "again", "--json", "--session", "s")
    assert second.returncode == 0, second.stderr
    assert strict_loads(second.stdout)["answer"] == "second answer"
    sent = server.requests[-1].raw
    assert strict_loads(sent)["messages"][-2]["content"] == turn["answer"]
    shown = _cli(server, tmp_path, "sessions", "show", "s", "--json")
    assert shown.returncode == 0, shown.stderr
    assert strict_loads(shown.stdout)
    listed = _cli(server, tmp_path, "sessions", "--json")
    assert listed.returncode == 0, listed.stderr
    strict_loads(listed.stdout)
    readable = _cli(server, tmp_path, "sessions", "show", "s")
    assert readable.returncode == 0 and b"Traceback" not in readable.stderr


def test_old_session_lines_with_nan_and_escapes_are_served_strictly(
    server: FakeChatServer, tmp_path: Path
) -> None:
    """A session file written by a lenient encoder (NaN, lone escapes, a deep line) stays usable."""
    sessions = tmp_path / ".nanobot" / "sessions"
    sessions.mkdir(parents=True)
    deep = "[" * 5_000 + "]" * 5_000
    (sessions / "old.jsonl").write_text(
        '{"role": "user", "content": "hi \\udc80"}\n'
        '{"role": "assistant", "content": "x", "weight": NaN}\n'
        f'{{"role": "user", "content": {deep}}}\n',
        encoding="ascii",
    )
    server.add(text_reply("fine"))
    shown = _cli(server, tmp_path, "sessions", "show", "old", "--json")
    assert shown.returncode == 0, shown.stderr
    strict_loads(shown.stdout)
    run = _cli(server, tmp_path, "run", "continue", "--json", "--session", "old")
    assert run.returncode == 0, run.stderr
    assert strict_loads(run.stdout)["answer"] == "fine"
    body = strict_loads(server.requests[-1].raw)
    contents = [m.get("content") for m in body["messages"]]
    assert "hi \ufffd" in contents
    assert b"Traceback" not in run.stderr


def test_govern_json_is_strict_for_a_hostile_history(
    server: FakeChatServer, tmp_path: Path
) -> None:
    """govern --json on NaN, 1e999, lone escapes and a too-deep line prints strict JSON, exit 0."""
    history = tmp_path / "history.jsonl"
    history.write_text(
        '{"role": "user", "content": "a \\ud800 b", "n": NaN}\n'
        '{"role": "assistant", "content": "ok", "x": -Infinity, "y": 1e999}\n'
        + "[" * 100_000
        + "]" * 100_000
        + "\n",
        encoding="ascii",
    )
    done = _cli(server, tmp_path, "govern", str(history), "--json")
    assert done.returncode == 0, done.stderr
    out = strict_loads(done.stdout)
    assert out["messages"][0]["content"] == "a \ufffd b"
    assert "nested deeper" in str(out["report"][0])
    assert b"Traceback" not in done.stderr
