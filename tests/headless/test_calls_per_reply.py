"""`[tools] max_calls_per_reply`: of one reply's tool calls the first N run, the rest are answered.

In process (a `Runner` over real parts) and as `nanobot-core run` subprocesses, both
against the fake chat server on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nanobot_core import clip, tool
from nanobot_core.config import Config, ToolsConfig
from nanobot_core.governance.invariants import check_tool_pairing
from nanobot_core.hookspecs import hookimpl
from nanobot_core.jsonl_store import JsonlSessionStore
from nanobot_core.kernel.context import PluginContext
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.runner import Runner, ToolFinished, ToolStarted, TooManyCalls
from tests.headless.conftest import cli_env, provider_config
from tests.headless.fake_server import FakeChatServer, text_reply, tool_call_reply

TIMEOUT = 120


class _Probe:
    """What the `probe` tool saw: which calls ran, and how many ran at the same time at most."""

    ran: list[int] = []  # reset by each example
    running = 0
    peak = 0


@tool(read_only=True)
async def probe(n: int) -> str:
    """Note that call `n` ran, alongside how many others.

    Args:
        n: The call's number.
    """
    _Probe.ran.append(n)
    _Probe.running += 1
    _Probe.peak = max(_Probe.peak, _Probe.running)
    await asyncio.sleep(0.02)
    _Probe.running -= 1
    return f"probe {n} ran"


class _ProbePlugin:
    @hookimpl
    def nanobot_tools(self, ctx: PluginContext) -> list[Any]:
        return [probe]


def _turn(server: FakeChatServer, workspace: Path, asked: int, limit: int) -> tuple[Any, list[Any]]:
    """One turn whose first reply asks for `asked` probe calls, under `max_calls_per_reply`."""
    config = Config(tools=ToolsConfig(max_calls_per_reply=limit))
    config.provider = provider_config(server.base_url)
    manager = PluginManager(config, workspace=workspace, autoload=False).load()
    manager.register(_ProbePlugin(), "probe-test")
    events: list[Any] = []
    server.add(
        tool_call_reply([(f"c{n}", "probe", json.dumps({"n": n})) for n in range(asked)]),
        text_reply("done"),
    )
    with JsonlSessionStore(workspace).open("default") as opened:
        runner = Runner.from_plugins(manager, session=opened, progress=events.append)
        return runner.run_turn("probe"), events


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(asked=st.integers(1, 40), limit=st.integers(0, 40))
def test_the_first_calls_run_and_each_one_past_the_limit_is_answered_not_run(
    server: FakeChatServer, asked: int, limit: int
) -> None:
    """The first `limit` calls (all of them at 0) run together; each other one gets its error."""
    _Probe.ran, _Probe.running, _Probe.peak = [], 0, 0
    first_request = len(server.requests)
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        result, events = _turn(server, workspace, asked, limit)
        lines = [
            json.loads(line)
            for line in JsonlSessionStore(workspace).path("default").read_text().splitlines()
        ]
    runs = min(asked, limit) if limit else asked
    assert result.answer == "done"
    assert sorted(_Probe.ran) == list(range(runs))
    assert _Probe.peak == runs  # those that run still run all at once
    # One result per call, in call order, in the session and in what the model got back.
    messages = [line for line in lines if set(line) != {"_meta"}]
    assert check_tool_pairing(messages) == []
    sent = server.requests[first_request + 1].body["messages"]
    assert check_tool_pairing(sent) == []
    results = [m for m in messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == [f"c{n}" for n in range(asked)]
    for n, message in enumerate(results):
        if n < runs:
            assert message["content"] == f"probe {n} ran"
            continue
        assert message["content"].startswith(
            f'Error: this call to tool "probe" was not run: the reply asked for {asked} tool '
            f"calls, and at most {limit} run per reply (tools.max_calls_per_reply). Ask for "
            "fewer calls at once"
        )
        assert message["_meta"]["error"] is True
    assert [(c.call_id, c.is_error) for c in result.tool_calls] == [
        (f"c{n}", n >= runs) for n in range(asked)
    ]
    # Said once for the reply; only the calls that run are reported as tools.
    warnings = [e for e in events if isinstance(e, TooManyCalls)]
    assert warnings == ([TooManyCalls(1, asked, limit)] if runs < asked else [])
    assert sum(isinstance(e, ToolStarted) for e in events) == runs
    assert sum(isinstance(e, ToolFinished) for e in events) == runs


def test_a_huge_tool_name_is_quoted_by_its_ends_in_the_results_and_the_progress_lines(
    server: FakeChatServer, tmp_path: Path
) -> None:
    """A 100 KB unknown tool name, run or past the limit, is cut in what the model and user see."""
    huge = "probe" + "x" * 100_000 + "END"
    config = Config(tools=ToolsConfig(max_calls_per_reply=1))
    config.provider = provider_config(server.base_url)
    manager = PluginManager(config, workspace=tmp_path, autoload=False).load()
    manager.register(_ProbePlugin(), "probe-test")
    events: list[Any] = []
    server.add(tool_call_reply([("c0", huge, "{}"), ("c1", huge, "{}")]), text_reply("done"))
    with JsonlSessionStore(tmp_path).open("default") as opened:
        runner = Runner.from_plugins(manager, session=opened, progress=events.append)
        assert runner.run_turn("probe").answer == "done"
    sent = server.requests[-1].body["messages"]
    unknown, not_run = (m["content"] for m in sent if m["role"] == "tool")
    for text in (unknown, not_run):
        assert len(text) < 1_000
        assert 'tool "probexxx' in text and 'xxxEND"' in text
        assert "characters omitted" in text
    assert unknown.startswith('Error: unknown tool "probe')
    assert 'Error: this call to tool "probe' in not_run
    described = [e.describe() for e in events if isinstance(e, ToolStarted | ToolFinished)]
    assert len(described) == 2
    assert all(len(line) < 300 and line.startswith("tool probexxx") for line in described)


def test_a_huge_unknown_tool_name_is_kept_once_in_the_session_its_results_named_by_its_ends(
    server: FakeChatServer, tmp_path: Path
) -> None:
    """The results of calls to a 100 KB tool name carry it clipped, paired with the calls by id."""
    huge = "probe" + "x" * 100_000 + "END"
    config = Config(tools=ToolsConfig(max_calls_per_reply=1))
    config.provider = provider_config(server.base_url)
    manager = PluginManager(config, workspace=tmp_path, autoload=False).load()
    manager.register(_ProbePlugin(), "probe-test")
    server.add(
        tool_call_reply([("c0", huge, "{}"), ("c1", huge, "{}"), ("c2", "nosuch", "{}")]),
        text_reply("done"),
    )
    with JsonlSessionStore(tmp_path).open("default") as opened:
        result = Runner.from_plugins(manager, session=opened).run_turn("probe")
    assert result.answer == "done"
    store = JsonlSessionStore(tmp_path).path("default")
    messages = [
        message
        for message in map(json.loads, store.read_text().splitlines())
        if set(message) != {"_meta"}
    ]
    results = [m for m in messages if m["role"] == "tool"]
    clipped = clip(huge)
    assert len(clipped) <= 200 and clipped.startswith("probexxx") and clipped.endswith("xxxEND")
    # The unknown name and the one past the limit, each by its ends; a short one whole.
    assert [(m["tool_call_id"], m["name"]) for m in results] == [
        ("c0", clipped),
        ("c1", clipped),
        ("c2", "nosuch"),
    ]
    assert [call.name for call in result.tool_calls] == [clipped, clipped, "nosuch"]
    # The results still pair with their calls (by id), in the session and in what was sent.
    assert check_tool_pairing(messages) == []
    sent = server.requests[-1].body["messages"]
    assert check_tool_pairing(sent) == []
    assert [m["name"] for m in sent if m["role"] == "tool"] == [clipped, clipped, "nosuch"]
    # The name is held by the calls the model made (twice) and not again by their results.
    assert store.stat().st_size < 3 * len(huge)


def test_a_negative_limit_is_refused_by_the_runner(tmp_path: Path) -> None:
    """Runner(max_calls_per_reply=-1) is a programming error, caught at construction."""
    with (
        JsonlSessionStore(tmp_path).open() as opened,
        pytest.raises(ValueError, match="max_calls_per_reply must be at least 0"),
    ):
        Runner(None, None, None, None, None, opened, max_calls_per_reply=-1)  # type: ignore[arg-type]


# -- nanobot-core run -------------------------------------------------------------------------


def _run(
    server: FakeChatServer, workspace: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nanobot_core", "run", "list them", "--json"],
        cwd=workspace,
        env={**cli_env(server), **(env or {})},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def _folders(workspace: Path, count: int) -> list[tuple[str, str, str]]:
    """`count` empty folders and a list_dir call of each (arguments differ: none is a repeat)."""
    calls = []
    for n in range(count):
        (workspace / f"d{n:03}").mkdir()
        calls.append((f"c{n}", "list_dir", json.dumps({"path": f"d{n:03}"})))
    return calls


def test_run_answers_the_calls_past_the_default_limit_and_warns_once(
    server: FakeChatServer, tmp_path: Path
) -> None:
    """130 calls under the default of 128: 128 run, 2 refused, one warning, --json shows all."""
    server.add(tool_call_reply(_folders(tmp_path, 130)), text_reply("Listed."))
    done = _run(server, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    warning = (
        "nanobot: warning: the reply to round 1 asked for 130 tool calls, more than "
        "tools.max_calls_per_reply (128): the first 128 run, the other 2 are answered with "
        "an error and not run"
    )
    assert done.stderr.count(warning) == 1
    assert done.stderr.count("tool list_dir: running") == 128
    turn = json.loads(done.stdout)
    assert turn["answer"] == "Listed."
    results = [m["content"] for m in turn["messages"] if m["role"] == "tool"]
    assert len(results) == 130
    assert all(text.endswith("is empty.") for text in results[:128])
    for text in results[128:]:
        assert "not run: the reply asked for 130 tool calls" in text
        assert "at most 128 run per reply (tools.max_calls_per_reply)" in text
    records = turn["tool_calls"]
    assert [r["id"] for r in records] == [f"c{n}" for n in range(130)]
    assert [r["error"] for r in records] == [False] * 128 + [True] * 2
    assert records[-1] == {
        "round": 1,
        "id": "c129",
        "name": "list_dir",
        "arguments": {},
        "error": True,
        "duration": 0.0,
        "repairs": [],
    }
    sent = server.requests[1].body["messages"]
    assert check_tool_pairing(sent) == []
    assert sum(m["role"] == "tool" for m in sent) == 130


@pytest.mark.parametrize(
    ("setting", "asked", "runs"),
    [
        ({"toml": "[tools]\nmax_calls_per_reply = 2\n"}, 3, 2),
        ({"env": "0"}, 130, 130),
        ({"env": "130"}, 130, 130),
    ],
)
def test_run_takes_the_limit_from_the_config(
    server: FakeChatServer, tmp_path: Path, setting: dict[str, str], asked: int, runs: int
) -> None:
    """The limit comes from nanobot.toml or the environment; 0 runs every call."""
    if "toml" in setting:
        (tmp_path / "nanobot.toml").write_text(setting["toml"], encoding="utf-8")
    env = {"NANOBOT_TOOLS__MAX_CALLS_PER_REPLY": setting["env"]} if "env" in setting else {}
    server.add(tool_call_reply(_folders(tmp_path, asked)), text_reply("Listed."))
    done = _run(server, tmp_path, env)
    assert done.returncode == 0, done.stderr
    results = [m["content"] for m in json.loads(done.stdout)["messages"] if m["role"] == "tool"]
    assert sum(text.endswith("is empty.") for text in results) == runs
    assert sum("(tools.max_calls_per_reply)" in text for text in results) == asked - runs
    assert ("tools.max_calls_per_reply" in done.stderr) == (runs < asked)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("-1", "tools.max_calls_per_reply: must be at least 0, got -1"),
        ('"many"', "tools.max_calls_per_reply: expected an integer (int), got str 'many'"),
        ("1.5", "tools.max_calls_per_reply: expected an integer (int), got float 1.5"),
        ("true", "tools.max_calls_per_reply: expected an integer (int), got bool True"),
    ],
)
def test_run_refuses_a_bad_limit_naming_the_key(
    server: FakeChatServer, tmp_path: Path, value: str, said: str
) -> None:
    """A bad value is a config error naming the file and the key: exit 2, nothing sent."""
    (tmp_path / "nanobot.toml").write_text(f"[tools]\nmax_calls_per_reply = {value}\n")
    done = _run(server, tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"nanobot.toml: {said}" in done.stderr
    assert "Traceback" not in done.stderr
    assert server.requests == []
