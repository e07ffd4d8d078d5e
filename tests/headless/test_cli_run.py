"""`nanobot-core run` and `sessions` as real subprocesses against a real HTTP server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nanobot_core.governance.invariants import check_tool_pairing
from tests.headless.conftest import API_KEY, cli_env
from tests.headless.fake_server import (
    FakeChatServer,
    Reply,
    error_reply,
    strict_refusal,
    text_reply,
    tool_call_reply,
)
from tests.helpers import cli_process, install_plugin, plugin_env

NOTES = "alpha line\nbeta line\n"
TIMEOUT = 60


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "nanobot_core", *args]


def _cli(
    server: FakeChatServer, workspace: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        _command(*args),
        cwd=workspace,
        env=cli_env(server),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert API_KEY not in result.stdout and API_KEY not in result.stderr
    return result


def _session_records(workspace: Path, name: str = "default") -> list[dict[str, Any]]:
    path = workspace / ".nanobot" / "sessions" / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _session_lines(workspace: Path, name: str = "default") -> list[dict[str, Any]]:
    """The message lines of a session file (record lines, only ``_meta``, left out)."""
    return [r for r in _session_records(workspace, name) if set(r) != {"_meta"}]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace with one small text file."""
    (tmp_path / "notes.txt").write_text(NOTES, encoding="utf-8")
    return tmp_path


def test_run_prints_the_answer_and_progress_on_stderr(
    server: FakeChatServer, workspace: Path
) -> None:
    """stdout is the answer alone; stderr says which tool ran and for how long; exit 0."""
    server.add(
        tool_call_reply([("c1", "read_file", '{"path": "notes.txt"}')]), text_reply("Two lines.")
    )
    result = _cli(server, workspace, "run", "What is in notes.txt?", "--log-level", "debug")
    assert result.returncode == 0, result.stderr
    assert "provider reply" in result.stderr  # debug logs are on, and hold no key (see _cli)
    assert result.stdout == "Two lines.\n"
    assert "tool read_file: running" in result.stderr
    assert "tool read_file: done in" in result.stderr
    assert server.requests[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert [m["role"] for m in _session_lines(workspace)] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


def test_run_json_prints_the_whole_turn(server: FakeChatServer, workspace: Path) -> None:
    """--json gives the answer, messages, tool calls with timings, governance reports and usage."""
    server.add(
        tool_call_reply(
            [("c1", "read_file", '{"path": "notes.txt"}')],
            usage={"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
        ),
        text_reply(
            "Done.",
            usage={
                "prompt_tokens": 20,
                "completion_tokens": 3,
                "total_tokens": 23,
                "prompt_tokens_details": {"cached_tokens": 8},
            },
        ),
    )
    result = _cli(server, workspace, "run", "read it", "--json", "--session", "json-test")
    assert result.returncode == 0, result.stderr
    turn = json.loads(result.stdout)
    assert turn["answer"] == "Done." and turn["session"] == "json-test"
    assert turn["stop_reason"] == "answer" and turn["max_iterations_reached"] is False
    assert turn["cut_off"] is False
    assert turn["usage"] == {
        "prompt_tokens": 30,
        "completion_tokens": 5,
        "total_tokens": 35,
        "cache_read_input_tokens": 8,
        "cache_creation_input_tokens": 0,
    }
    assert [(c["round"], c["finish_reason"]) for c in turn["calls"]] == [
        (1, "tool_calls"),
        (2, "stop"),
    ]
    assert turn["calls"][1]["usage"]["cache_read_input_tokens"] == 8
    assert turn["calls"][0]["usage"]["prompt_tokens"] == 10
    records = [r["_meta"] for r in _session_records(workspace, "json-test") if set(r) == {"_meta"}]
    assert [(r["kind"], r["round"], r["usage"]["cache_read_input_tokens"]) for r in records] == [
        ("usage", 1, 0),
        ("usage", 2, 8),
    ]
    assert records[1]["turn"]["prompt_tokens"] == 30
    assert [m["role"] for m in turn["messages"]] == ["user", "assistant", "tool", "assistant"]
    (call,) = turn["tool_calls"]
    assert call["name"] == "read_file" and call["error"] is False and call["duration"] >= 0
    assert [r["round"] for r in turn["governance"]] == [1, 2]
    assert all(isinstance(r["report"], list) for r in turn["governance"])


def test_prompt_from_stdin(server: FakeChatServer, workspace: Path) -> None:
    """PROMPT '-' reads the prompt from stdin."""
    server.add(text_reply("heard you"))
    result = _cli(server, workspace, "run", "-", stdin="a prompt from a pipe\n")
    assert result.returncode == 0, result.stderr
    assert server.requests[0].body["messages"][-1]["content"].startswith("a prompt from a pipe")


def test_retries_are_announced_on_stderr(server: FakeChatServer, workspace: Path) -> None:
    """A 503 then an answer: exit 0 and a retry line on stderr."""
    server.add(error_reply(503, "warming up"), text_reply("ready"))
    result = _cli(server, workspace, "run", "hi")
    assert result.returncode == 0, result.stderr
    assert "nanobot: provider: HTTP 503: warming up" in result.stderr
    assert "retry 1/1" in result.stderr
    assert len(server.requests) == 2


def test_provider_refusal_exits_1_with_the_server_message_and_no_key(
    server: FakeChatServer, workspace: Path
) -> None:
    """A 401 that echoes the key exits 1, shows the server's message, and masks the key."""
    server.add(error_reply(401, f"Incorrect API key provided: {API_KEY}"))
    result = _cli(server, workspace, "run", "hi")
    assert result.returncode == 1
    assert "HTTP 401: Incorrect API key provided: ***" in result.stderr
    assert result.stdout == ""


def test_a_provider_error_names_the_provider(server: FakeChatServer, workspace: Path) -> None:
    """The error line says which provider failed before what its message says."""
    server.add(error_reply(400, "unknown model"))
    result = _cli(server, workspace, "run", "hi")
    assert result.returncode == 1
    (line, *_) = [x for x in result.stderr.splitlines() if x.startswith("Error:")]
    assert line.startswith(f"Error: provider 'openai': {server.base_url}")


def test_a_reply_that_is_not_a_chat_completion_exits_1(
    server: FakeChatServer, workspace: Path
) -> None:
    """A 200 with a Responses API body exits 1 with a provider error, tried once, no answer."""
    server.add(Reply(body={"id": "resp_1", "object": "response", "output": []}))
    result = _cli(server, workspace, "run", "hi")
    assert result.returncode == 1
    assert "not a chat completion" in result.stderr and "object: 'response'" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert len(server.requests) == 1


def test_a_reply_whose_every_call_is_nameless_is_explained_in_the_next_request(
    server: FakeChatServer, workspace: Path
) -> None:
    """Two nameless calls: the next request tells the model once why they did not run."""
    server.add(
        tool_call_reply([("c1", "", '{"path": "notes.txt"}'), ("c2", None, "{}")]),
        text_reply("Sorry."),
    )
    result = _cli(server, workspace, "run", "read notes.txt")
    assert result.returncode == 0, result.stderr
    second = server.requests[1].body["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert "tool_calls" not in second[-2]
    note = second[-2]["content"]
    assert note.count("could run") == 1
    assert "None of the 2 tool call(s)" in note and "has no tool name" in note
    assert "call a tool by its name" in note  # what to do, not only what went wrong
    assert "read_file" in note  # the error lists the tools that do exist


def test_a_reply_whose_only_call_is_nameless_is_followed_by_a_request_a_strict_server_takes(
    workspace: Path,
) -> None:
    """A reply whose one call has no name: the runner answers it, and the next request ends
    not with the reply's notice (which a strict server refuses as the last message) but with
    a "(continue)" user message, which the session does not keep."""
    with FakeChatServer(strict=True) as strict:
        strict.add(tool_call_reply([("c1", "", "{}")]), text_reply("Reading it by name now."))
        result = _cli(strict, workspace, "run", "read notes.txt")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Reading it by name now.\n"
    assert len(strict.requests) == 2
    assert strict_refusal(strict.requests[1].body) is None
    second = strict.requests[1].body["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[-2]["content"].startswith("[None of the 1 tool call(s) of this reply could run.")
    assert second[-1] == {"role": "user", "content": "(continue)"}
    assert "(continue)" not in json.dumps(_session_lines(workspace))


def test_a_nameless_call_beside_a_named_one_is_explained_in_the_next_request(
    server: FakeChatServer, workspace: Path
) -> None:
    """A named call and a nameless one: the named one runs and is sent with its result; the
    reply says once, in every later request, that the other was left out and what to do."""
    server.add(
        tool_call_reply([("c1", "read_file", '{"path": "notes.txt"}'), ("c2", "", "{}")]),
        text_reply("Read it."),
        text_reply("Done."),
    )
    assert _cli(server, workspace, "run", "--session", "s", "read notes.txt").returncode == 0
    result = _cli(server, workspace, "run", "--session", "s", "thanks")
    assert result.returncode == 0, result.stderr
    for request in server.requests[1:]:
        messages = request.body["messages"]
        assert [m["role"] for m in messages[:4]] == ["system", "user", "assistant", "tool"]
        reply = messages[2]
        assert [c["id"] for c in reply["tool_calls"]] == ["c1"]
        assert reply["content"].startswith(
            "[1 of the 2 tool call(s) of this reply could not run: it was left out. "
            "Error: the tool call has no tool name: call a tool by its name"
        )
        assert messages[3]["tool_call_id"] == "c1"
        assert json.dumps(messages).count("could not run") == 1
    assert server.requests[2].body["messages"][:4] == server.requests[1].body["messages"][:4]


def _legacy_function_call_reply(name: str, arguments: str) -> Reply:
    """A 200 reply in the shape of OpenAI's old functions API: `function_call`, no `tool_calls`."""
    message = {
        "role": "assistant",
        "content": None,
        "function_call": {"name": name, "arguments": arguments},
    }
    choice = {"index": 0, "message": message, "finish_reason": "function_call"}
    return Reply(body={"object": "chat.completion", "model": "fake-model", "choices": [choice]})


def test_a_legacy_function_call_is_run_and_answered(
    server: FakeChatServer, workspace: Path
) -> None:
    """A reply holding only `function_call` runs that tool; the next request pairs it by id."""
    server.add(
        _legacy_function_call_reply("read_file", '{"path": "notes.txt"}'), text_reply("Two lines.")
    )
    result = _cli(server, workspace, "run", "What is in notes.txt?")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Two lines.\n"
    assert "tool read_file: done in" in result.stderr
    second = server.requests[1].body["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
    assert all("function_call" not in m for m in second)
    (call,) = second[2]["tool_calls"]
    assert call["function"]["name"] == "read_file"
    assert second[3]["tool_call_id"] == call["id"] and "alpha line" in second[3]["content"]
    assert check_tool_pairing(second) == []
    stored = _session_lines(workspace)
    assert "function_call" not in stored[1] and stored[1]["tool_calls"][0]["id"] == call["id"]


def test_a_stored_call_id_too_long_for_openai_is_sent_shortened_and_paired(
    server: FakeChatServer, workspace: Path
) -> None:
    """A session holding a 64-character call id (stored before replies were normalised) goes on."""
    long_id = "functions.read_file:0:" + "7" * 42
    stored = [
        {"role": "user", "content": "What is in notes.txt?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": long_id,
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": long_id, "name": "read_file", "content": NOTES},
        {"role": "assistant", "content": "Two lines."},
    ]
    sessions = workspace / ".nanobot" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "default.jsonl").write_text(
        "".join(json.dumps(m) + "\n" for m in stored), encoding="utf-8"
    )
    server.add(text_reply("Still two lines."))
    result = _cli(server, workspace, "run", "And now?")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Still two lines.\n"
    sent = server.requests[0].body["messages"]
    (call,) = sent[2]["tool_calls"]
    assert call["id"].startswith("call_") and len(call["id"]) <= 40
    assert sent[3]["tool_call_id"] == call["id"]
    assert check_tool_pairing(sent) == []
    assert _session_lines(workspace)[1]["tool_calls"][0]["id"] == long_id  # the file is untouched


def test_a_session_continued_after_the_anthropic_provider_sends_no_anthropic_blocks(
    server: FakeChatServer, workspace: Path
) -> None:
    """Thinking and other blocks an Anthropic provider kept stay in the session, off the wire."""
    thinking = [{"type": "thinking", "thinking": "look", "signature": "c2ln"}]
    stored = [
        {"role": "user", "content": "What is in notes.txt?"},
        {"role": "assistant", "content": "Two lines.", "thinking_blocks": thinking},
        {"role": "user", "content": "Sure?"},
        {
            "role": "assistant",
            "content": "Yes.",
            "anthropic_blocks": [{"type": "server_tool_use", "id": "srvtoolu_1"}],
            "reasoning_content": "kept: servers that speak chat completions may want it",
        },
    ]
    sessions = workspace / ".nanobot" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "default.jsonl").write_text(
        "".join(json.dumps(m) + "\n" for m in stored), encoding="utf-8"
    )
    server.add(text_reply("Still two lines."))
    result = _cli(server, workspace, "run", "And now?")
    assert result.returncode == 0, result.stderr
    sent = server.requests[0].body["messages"]
    assert [sorted(m) for m in sent[2:5:2]] == [
        ["content", "role"],
        ["content", "reasoning_content", "role"],
    ]
    assert sent[2]["content"] == "Two lines."
    assert _session_lines(workspace)[1]["thinking_blocks"] == thinking  # the file keeps them


def _cut_off_reply(content: str) -> Reply:
    """A 200 text reply that stopped at the output limit (`finish_reason` `length`)."""
    choice = {"index": 0, "message": {"role": "assistant", "content": content}}
    choice["finish_reason"] = "length"
    return Reply(body={"object": "chat.completion", "model": "fake-model", "choices": [choice]})


def test_an_answer_cut_off_at_the_output_limit_is_marked(
    server: FakeChatServer, workspace: Path
) -> None:
    """The partial answer is printed, exit 0; stderr says it is incomplete; --json has cut_off."""
    server.add(_cut_off_reply("The steps are: first"), _cut_off_reply("The steps are: first"))
    plain = _cli(server, workspace, "run", "List the steps.")
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout == "The steps are: first\n"
    assert "cut off at the output limit" in plain.stderr
    assert "the answer is incomplete" in plain.stderr
    as_json = _cli(server, workspace, "run", "List the steps.", "--json")
    assert as_json.returncode == 0, as_json.stderr
    turn = json.loads(as_json.stdout)
    assert turn["cut_off"] is True and turn["stop_reason"] == "answer"
    assert turn["answer"] == "The steps are: first"


def test_a_request_over_the_budget_is_a_warning_on_stderr(
    server: FakeChatServer, workspace: Path
) -> None:
    """When governance cannot make the request fit, run says so on stderr and still sends it."""
    server.add(text_reply("ok"))
    done = subprocess.run(
        _command("run", "word " * 2_000),
        cwd=workspace,
        env={**cli_env(server), "NANOBOT_GOVERNANCE__INPUT_LIMIT": "50"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "nanobot: warning: the request takes" in done.stderr
    assert "input budget of 50" in done.stderr
    assert len(server.requests) == 1


def test_a_third_identical_read_is_refused_within_a_turn(
    server: FakeChatServer, workspace: Path
) -> None:
    """read_file on the same file three times in one turn: the third is refused, not run."""
    same = '{"path": "notes.txt"}'
    server.add(
        tool_call_reply([("c1", "read_file", same), ("c2", "read_file", same)]),
        tool_call_reply([("c3", "read_file", same)]),
        text_reply("Done."),
    )
    result = _cli(server, workspace, "run", "read notes.txt", "--json")
    assert result.returncode == 0, result.stderr
    results = [m["content"] for m in json.loads(result.stdout)["messages"] if m["role"] == "tool"]
    assert "alpha line" in results[0] and "alpha line" in results[1]
    assert results[2].startswith('Error: tool "read_file" was already called')
    assert "alpha line" not in results[2]


def test_max_identical_calls_comes_from_the_config(server: FakeChatServer, workspace: Path) -> None:
    """[tools] max_identical_calls = 1 refuses the second identical read."""
    same = '{"path": "notes.txt"}'
    server.add(tool_call_reply([("c1", "read_file", same), ("c2", "read_file", same)]))
    server.add(text_reply("Done."))
    (workspace / "nanobot.toml").write_text("[tools]\nmax_identical_calls = 1\n")
    result = _cli(server, workspace, "run", "read notes.txt", "--json")
    assert result.returncode == 0, result.stderr
    results = [m["content"] for m in json.loads(result.stdout)["messages"] if m["role"] == "tool"]
    assert "alpha line" in results[0] and "already called" in results[1]


def test_max_iterations_exits_1_and_says_so(server: FakeChatServer, workspace: Path) -> None:
    """Hitting --max-iterations is exit 1 with the reason on stderr; --json still has the turn."""
    server.add(tool_call_reply([("c1", "read_file", '{"path": "notes.txt"}')]))
    result = _cli(server, workspace, "run", "loop", "--max-iterations", "1", "--json")
    assert result.returncode == 1, result.stderr
    assert "Error: stopped after 1 round(s) (runner.max_iterations)" in result.stderr
    assert json.loads(result.stdout)["max_iterations_reached"] is True
    assert len(server.requests) == 1


def test_max_iterations_prints_no_empty_answer(server: FakeChatServer, workspace: Path) -> None:
    """Without --json, hitting the limit prints nothing on stdout (no empty line) and exits 1."""
    server.add(tool_call_reply([("c1", "read_file", '{"path": "notes.txt"}')]))
    result = _cli(server, workspace, "run", "loop", "--max-iterations", "1")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.count("stopped after 1 round(s)") == 1


@pytest.mark.parametrize("name", ["../escape", "a/b", "..", "bad name"])
def test_bad_session_name_exits_2_and_touches_nothing(
    server: FakeChatServer, workspace: Path, name: str
) -> None:
    """An invalid --session is a usage error: exit 2, no file written, no request sent."""
    result = _cli(server, workspace, "run", "hi", "--session", name)
    assert result.returncode == 2
    assert "session name" in result.stderr
    assert not (workspace / ".nanobot").exists() and server.requests == []


def test_usage_errors_exit_2(server: FakeChatServer, workspace: Path) -> None:
    """An unknown provider and an empty prompt are usage errors."""
    assert _cli(server, workspace, "run", "hi", "--provider", "nope").returncode == 2
    assert _cli(server, workspace, "run", "   ").returncode == 2
    assert server.requests == []


def test_sessions_list_and_show(server: FakeChatServer, workspace: Path) -> None:
    """`sessions` lists name, messages, size, time; `sessions show` prints the lines."""
    server.add(text_reply("first answer"), text_reply("second answer"))
    assert _cli(server, workspace, "run", "one", "--session", "alpha").returncode == 0
    assert _cli(server, workspace, "run", "two", "--session", "beta").returncode == 0

    listing = json.loads(_cli(server, workspace, "sessions", "--json").stdout)
    assert [(s["name"], s["messages"]) for s in listing] == [("alpha", 2), ("beta", 2)]
    size = (workspace / ".nanobot" / "sessions" / "alpha.jsonl").stat().st_size
    assert listing[0]["size"] == size and listing[0]["modified"]
    table = _cli(server, workspace, "sessions").stdout
    assert "alpha" in table and "beta" in table

    shown = json.loads(_cli(server, workspace, "sessions", "show", "beta", "--json").stdout)
    assert [m.get("role") or m["_meta"]["kind"] for m in shown["messages"]] == [
        "user",
        "assistant",
        "usage",
    ]
    assert shown["messages"][1]["content"] == "second answer" and shown["problems"] == []
    text = _cli(server, workspace, "sessions", "show", "alpha").stdout
    assert "first answer" in text and "[1] user" in text
    assert _cli(server, workspace, "sessions", "show", "missing").returncode == 2
    # The group's --workspace is the subcommands' when they are given none; their own wins.
    elsewhere = workspace / "elsewhere"
    elsewhere.mkdir()
    grouped = _cli(server, elsewhere, "sessions", "--workspace", str(workspace), "show", "alpha")
    assert grouped.returncode == 0 and "first answer" in grouped.stdout, grouped.stderr
    own = _cli(
        server,
        workspace,
        "sessions",
        "--workspace",
        ".",
        "show",
        "alpha",
        "--workspace",
        "elsewhere",
    )
    assert own.returncode == 2 and "no session named 'alpha'" in own.stderr, own.stderr
    assert _cli(server, workspace, "sessions", "show", "../x").returncode == 2


def _signal_during_the_second_model_request(
    server: FakeChatServer, workspace: Path, signum: int
) -> tuple[subprocess.Popen[str], str]:
    """`run` reads a file, then gets `signum` while the server holds its second request."""
    received, release = threading.Event(), threading.Event()
    server.add(
        tool_call_reply([("c1", "read_file", '{"path": "notes.txt"}')]),
        Reply(body=text_reply("too late").body, received=received, release=release),
    )
    with cli_process("run", "read notes", cwd=workspace, env=cli_env(server)) as process:
        try:
            assert received.wait(TIMEOUT), "the second model request never arrived"
            os.kill(process.pid, signum)
            _, stderr = process.communicate(timeout=TIMEOUT)
        finally:
            release.set()
    return process, stderr


def test_kill_9_during_the_model_request_then_resume(
    server: FakeChatServer, workspace: Path
) -> None:
    """Killed while the server holds its request, a run leaves whole lines; the next continues."""
    process, _ = _signal_during_the_second_model_request(server, workspace, signal.SIGKILL)
    assert process.returncode == -signal.SIGKILL
    before = _session_lines(workspace)
    assert [m["role"] for m in before] == ["user", "assistant", "tool"]

    server.add(text_reply("resumed"))
    result = _cli(server, workspace, "run", "go on")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "resumed\n"
    sent = server.requests[-1].body["messages"]
    assert check_tool_pairing(sent) == []
    assert sent[-1]["content"].startswith("go on")
    assert _session_lines(workspace)[:3] == before


def test_ctrl_c_during_the_model_request_exits_130_and_keeps_the_session(
    server: FakeChatServer, workspace: Path
) -> None:
    """Ctrl-C while the model is asked: exit 130 (not a failure's 1), every line kept whole."""
    process, stderr = _signal_during_the_second_model_request(server, workspace, signal.SIGINT)
    assert process.returncode == 130, stderr
    assert "Interrupted." in stderr and "Traceback" not in stderr
    assert [m["role"] for m in _session_lines(workspace)] == ["user", "assistant", "tool"]
    server.add(text_reply("resumed"))
    result = _cli(server, workspace, "run", "go on")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "resumed\n"


# A tool that says it is inside its call (the file `entered`) and then waits for ever.
WAITING_PLUGIN = """
import asyncio, pathlib
from nanobot_core import Tool, hookimpl

class Waits(Tool):
    name = "waits"
    description = "Says it has started, then waits for ever."
    parameters = {"type": "object", "properties": {}}

    async def execute(self):
        pathlib.Path("entered").write_text("yes")
        await asyncio.Event().wait()
        return "never"

@hookimpl
def nanobot_tools(ctx):
    return [Waits]
"""


def test_kill_9_during_a_tool_then_resume_backfills_the_dangling_call(
    server: FakeChatServer, workspace: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Killed while a tool runs, the call has no result; the next run sends a backfilled one."""
    # The tool writes `entered` once inside its call, then waits: the kill lands between the
    # stored call and its result.
    site = install_plugin(tmp_path_factory.mktemp("site") / "plugin", "waitplug", WAITING_PLUGIN)
    settings = {k: v for k, v in cli_env(server).items() if k.startswith("NANOBOT_")}
    del settings["NANOBOT_DISABLE_PLUGIN_AUTOLOAD"]
    server.add(Reply(body=tool_call_reply([("stuck", "waits", "{}")]).body))
    entered = workspace / "entered"
    with cli_process(
        "run", "wait", cwd=workspace, env=plugin_env(site, "waitplug", **settings)
    ) as process:
        deadline = time.monotonic() + TIMEOUT
        while not entered.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert entered.exists(), "the tool was never entered"
        os.kill(process.pid, signal.SIGKILL)
        process.communicate(timeout=TIMEOUT)
    before = _session_lines(workspace)
    assert [m["role"] for m in before] == ["user", "assistant"]
    assert before[1]["tool_calls"][0]["id"] == "stuck"

    server.add(text_reply("recovered"))
    result = _cli(server, workspace, "run", "what happened?")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "recovered\n"
    sent = server.requests[-1].body["messages"]
    assert check_tool_pairing(sent) == []
    index = next(i for i, m in enumerate(sent) if m.get("tool_calls"))
    assert sent[index + 1]["role"] == "tool" and sent[index + 1]["tool_call_id"] == "stuck"
    after = _session_lines(workspace)
    assert after[:2] == before  # the dangling call stays as it was in the file
    assert [m["role"] for m in after[2:]] == ["user", "assistant"]


def test_a_second_run_on_a_busy_session_fails_at_once(
    server: FakeChatServer, workspace: Path
) -> None:
    """While one run waits for the model, a second run on its session exits 1 without waiting."""
    received, release = threading.Event(), threading.Event()
    server.add(Reply(body=text_reply("first wins").body, received=received, release=release))
    shared = ("--session", "shared")
    with cli_process("run", "one", *shared, cwd=workspace, env=cli_env(server)) as first:
        try:
            assert received.wait(TIMEOUT), "the first run never reached the server"
            second = _cli(server, workspace, "run", "two", *shared)
            assert second.returncode == 1
            assert "session 'shared' is in use by another process" in second.stderr
            assert f"pid {first.pid}" in second.stderr
            assert len(server.requests) == 1
        finally:
            release.set()
        out, err = first.communicate(timeout=TIMEOUT)
    assert first.returncode == 0, err
    assert API_KEY not in out and API_KEY not in err
    assert out == "first wins\n"
    assert [m["role"] for m in _session_lines(workspace, "shared")] == ["user", "assistant"]
