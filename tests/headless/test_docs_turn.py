"""What docs/headless.md says of a turn and its session: `--json`, the lines, the steps, leases."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from nanobot_core.config import Config
from nanobot_core.governance import Governor, builtin_stages
from nanobot_core.jsonl_store import JsonlSessionStore
from nanobot_core.prompt import PromptBuilder, Section, SectionContext
from nanobot_core.providers import OpenAIProvider
from nanobot_core.runner import Runner
from nanobot_core.tools.executor import Executor
from nanobot_core.tools.registry import ToolRegistry
from tests.headless.conftest import cli_env, provider_config
from tests.headless.fake_server import FakeChatServer, text_reply, tool_call_reply
from tests.helpers import REPO_ROOT, cli_process, run_cli

DOC = (REPO_ROOT / "docs" / "headless.md").read_text(encoding="utf-8")
USAGE = {"prompt_tokens": 1790, "completion_tokens": 40, "total_tokens": 1830}


def _block(language: str, containing: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", DOC, flags=re.DOTALL)
    (block,) = [b for b in blocks if containing in b]
    return block


def _keys(text: str) -> list[str]:
    """The keys of the first JSON object written in `text`, in order (its nested ones left out)."""
    depth, keys = 0, []
    for match in re.finditer(r'[{}\[\]]|"(\w+)":', text):
        token = match.group(0)
        if token in "{[":
            depth += 1
        elif token in "}]":
            depth -= 1
            if depth == 0:
                break
        elif depth == 1:
            keys.append(match.group(1))
    return keys


def _turn(server: FakeChatServer, workspace: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`run --json` of a turn with one tool round: what it printed and the session's lines."""
    (workspace / "notes.txt").write_text("a\nb\n", encoding="utf-8")
    server.add(
        tool_call_reply([("call_1", "read_file", '{"path": "notes.txt"}')], usage=USAGE),
        text_reply("There are 2 lines.", usage=USAGE),
    )
    result = run_cli("run", "count", "--json", cwd=workspace, env=cli_env(server), timeout=60)
    assert result.returncode == 0, result.stderr
    path = workspace / ".nanobot" / "sessions" / "default.jsonl"
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return json.loads(result.stdout), lines


def test_the_json_example_has_the_fields_run_prints(server: FakeChatServer, tmp_path: Path) -> None:
    """`--json` prints the doc example's fields in its order, and its entries hold the same keys."""
    example = _block("json", '"stop_reason"')
    turn, _ = _turn(server, tmp_path)
    assert list(turn) == _keys(example)
    assert list(turn["usage"]) == _keys(example[example.index('"usage"') :])
    for field in ("calls", "tool_calls", "governance"):
        entry = example[example.index(f'"{field}": [') :]
        assert list(turn[field][0]) == _keys(entry[entry.index("{") :]), field
    assert set(re.findall(r"`stop_reason` is `(\w+)`, `(\w+)` or `(\w+)`", DOC)[0]) == {
        "answer",
        "empty_reply",
        "max_iterations",
    }


def _shape(line: dict[str, Any]) -> tuple[Any, ...]:
    """What kind of line it is and which bookkeeping keys (and usage keys) it holds."""
    meta = line["_meta"]
    kind = line.get("role") or meta.get("kind")
    usage = sorted(meta["usage"]) if isinstance(meta.get("usage"), dict) else None
    return kind, sorted(meta), usage


def test_the_session_example_has_the_lines_run_writes(
    server: FakeChatServer, tmp_path: Path
) -> None:
    """The example session lines are, in order, the kinds of line `run` writes, with their keys."""
    example = [json.loads(line) for line in _block("json", '"role":"user"').splitlines()]
    _, lines = _turn(server, tmp_path)
    assert [line.get("role") or line["_meta"]["kind"] for line in lines] == [
        line.get("role") or line["_meta"]["kind"] for line in example
    ]
    # The last two example lines stand for what they hold with "...".
    written = [_shape(line) for line in lines[:-2]]
    assert written == [_shape(line) for line in example[:-2]]
    assert lines[0]["content"].endswith('\nChannel: "cli"\n[/Runtime Context]')
    pattern = r'Current Time: "\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d \(\w+day\)"'
    assert re.search(pattern, example[0]["content"]) and re.search(pattern, lines[0]["content"])


def test_the_system_prompt_and_tools_are_made_once_for_the_turn(
    server: FakeChatServer, tmp_path: Path
) -> None:
    """Every round of a turn sends the prompt built at its start; the next turn builds anew."""
    builds: list[int] = []

    def counted(ctx: SectionContext) -> str:
        builds.append(len(builds) + 1)
        return f"prompt number {len(builds)}"

    config = Config()
    registry = ToolRegistry()
    prompt = PromptBuilder([(Section("count", 1, counted), "test")], config=config)
    (tmp_path / "notes.txt").write_text("a\n", encoding="utf-8")
    server.add(
        tool_call_reply([("c1", "read_file", '{"path": "notes.txt"}')]),
        tool_call_reply([("c2", "read_file", '{"path": "notes.txt"}')]),
        text_reply("done"),
        text_reply("again"),
    )
    with JsonlSessionStore(tmp_path).open("once") as opened:
        runner = Runner(
            OpenAIProvider(provider_config(server.base_url)),
            registry,
            Executor(registry, default_timeout=5.0),
            Governor(builtin_stages(), config=config.governance, workspace=tmp_path),
            prompt,
            opened,
            prompt_context=SectionContext(workspace=tmp_path),
        )
        assert runner.run_turn("first").iterations == 3
        assert runner.run_turn("second").iterations == 1
    systems = [request.body["messages"][0]["content"] for request in server.requests]
    assert systems == ["prompt number 1"] * 3 + ["prompt number 2"]


def test_lease_wait_waits_for_the_holder_and_names_the_wait_when_it_runs_out(
    server: FakeChatServer, tmp_path: Path
) -> None:
    """With `[sessions] lease_wait` run waits for a held session: it goes on once it is let go,
    else fails with exit 1 after the wait, saying it waited."""
    server.add(text_reply("after the wait"))
    store = JsonlSessionStore(tmp_path)
    env = {**cli_env(server), "NANOBOT_SESSIONS__LEASE_WAIT": "0.5"}
    with store.open("busy"):
        started = time.monotonic()
        refused = run_cli("run", "hi", "--session", "busy", cwd=tmp_path, env=env, timeout=60)
        assert time.monotonic() - started >= 0.5
    assert refused.returncode == 1
    assert "session 'busy' is in use by another process" in refused.stderr
    assert "after waiting 0.5s" in refused.stderr and not server.requests
    held = store.open("busy")
    env["NANOBOT_SESSIONS__LEASE_WAIT"] = "30"
    with cli_process("run", "hi", "--session", "busy", cwd=tmp_path, env=env) as waiting:
        try:
            time.sleep(1.0)  # long enough for it to find the session held
            assert waiting.poll() is None and not server.requests
        finally:
            held.close()
        stdout, stderr = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, stderr
    assert stdout == "after the wait\n"
