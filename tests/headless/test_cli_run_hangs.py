"""`nanobot-core run` with plugin code that never returns: the process still ends, and says why."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path

import attrs
import pytest

from tests import helpers
from tests.headless.conftest import API_KEY
from tests.headless.fake_server import FakeChatServer, text_reply, tool_call_reply
from tests.helpers import cli_process, plugin_env

TIMEOUT = 60
# Generous: the hangs below would last forever; a run that ends at all ends in a few seconds.
PROMPT_EXIT = 20.0

PLUGIN = "hangplug"
# As logs name it: with its distribution and version (`install_plugin` writes 0.1).
NAMED = f"plugin=\"plugin '{PLUGIN}' from {PLUGIN} 0.1\""

# A tool that blocks forever in a thread of the event loop's default executor.
STUCK_TOOL = """
import asyncio, pathlib, threading
from nanobot_core import Tool, hookimpl

class Stuck(Tool):
    name = "stuck"
    description = "Blocks forever in a thread."
    parameters = {"type": "object", "properties": {}}
    timeout = TOOL_TIMEOUT

    async def execute(self):
        pathlib.Path("entered").write_text("yes")
        forever = threading.Event().wait
        if HOW == "to_thread":
            await asyncio.to_thread(forever)
        else:
            await asyncio.get_running_loop().run_in_executor(None, forever)
        return "never"

@hookimpl
def nanobot_tools(ctx):
    return [Stuck]
"""


def install_plugin(folder: Path, source: str) -> Path:
    """Write module `hangplug` and a distribution naming it a ``nanobot.plugins`` entry point."""
    return helpers.install_plugin(folder, PLUGIN, source)


def _env(server: FakeChatServer, plugin: Path) -> dict[str, str]:
    return plugin_env(
        plugin,
        PLUGIN,
        NANOBOT_BASE_URL=server.base_url,
        NANOBOT_MODEL="fake-model",
        NANOBOT_API_KEY=API_KEY,
        NANOBOT_PROVIDER__MAX_RETRIES="0",
    )


def _start(
    server: FakeChatServer, plugin: Path, workspace: Path
) -> AbstractContextManager[subprocess.Popen[str]]:
    """``nanobot-core run go`` with the plugin; killed if still running when the block is left."""
    return cli_process("run", "go", cwd=workspace, env=_env(server, plugin))


def _interrupted(process: subprocess.Popen[str], workspace: Path) -> tuple[str, str]:
    """Once the plugin is entered, SIGINT the run: it ends promptly, exit 130, "Interrupted."."""
    _wait_until_entered(process, workspace)
    process.send_signal(signal.SIGINT)
    started = time.monotonic()
    out, err = _finish(process)
    assert time.monotonic() - started < PROMPT_EXIT, err
    assert process.returncode == 130, err
    assert "Interrupted." in err and "Traceback" not in err
    return out, err


def _interrupted_twice(process: subprocess.Popen[str]) -> tuple[str, str]:
    """SIGINT a run blocked in a turn twice (the first asks the turn to stop): exit 130."""
    process.send_signal(signal.SIGINT)
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    out, err = _finish(process)
    assert process.returncode == 130, err
    assert "Interrupted." in err and "Traceback" not in err
    return out, err


def _finish(process: subprocess.Popen[str]) -> tuple[str, str]:
    try:
        return process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
        pytest.fail(f"the run did not end within {TIMEOUT}s; stderr:\n{err}")


def _wait_until_entered(process: subprocess.Popen[str], workspace: Path) -> None:
    """Wait until the plugin code under test has written ``entered`` (it then blocks)."""
    deadline = time.monotonic() + TIMEOUT
    while not (workspace / "entered").exists():
        assert process.poll() is None, process.communicate()[1]
        assert time.monotonic() < deadline, "the plugin code never started"
        time.sleep(0.05)


def _stuck_tool(tmp_path: Path, how: str, timeout: float) -> Path:
    source = STUCK_TOOL.replace("TOOL_TIMEOUT", repr(timeout)).replace("HOW", repr(how))
    return install_plugin(tmp_path / "site", source)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty workspace folder."""
    folder = tmp_path / "workspace"
    folder.mkdir()
    return folder


@pytest.mark.parametrize("how", ["to_thread", "run_in_executor"])
def test_a_tool_stuck_in_a_default_executor_thread_does_not_hold_the_process(
    tmp_path: Path, workspace: Path, server: FakeChatServer, how: str
) -> None:
    """The turn ends, a warning names the tool and its plugin, and the run exits 0 promptly."""
    plugin = _stuck_tool(tmp_path, how, timeout=0.5)
    server.add(tool_call_reply([("c1", "stuck", "{}")]), text_reply("gave up on it"))
    started = time.monotonic()
    with _start(server, plugin, workspace) as process:
        out, err = _finish(process)
    assert time.monotonic() - started < PROMPT_EXIT, err
    assert out == "gave up on it\n", err
    assert "left work running in a thread" in err and "tool=stuck" in err
    assert NAMED in err
    result = server.requests[1].body["messages"][-1]
    assert result["role"] == "tool"
    assert "timed out after 0.5s" in result["content"]
    assert "worker thread was abandoned" in result["content"]
    assert "Traceback" not in err


def test_ctrl_c_while_a_tool_is_stuck_in_a_thread_exits_130_promptly(
    tmp_path: Path, workspace: Path, server: FakeChatServer
) -> None:
    """SIGINT during a tool blocked in ``asyncio.to_thread`` ends the run with 130 at once."""
    plugin = _stuck_tool(tmp_path, "to_thread", timeout=600)
    server.add(tool_call_reply([("c1", "stuck", "{}")]))
    with _start(server, plugin, workspace) as process:
        _, err = _interrupted(process, workspace)
    assert "tool=stuck" in err and NAMED in err


# A plugin whose tools hook blocks: the run hangs at load, before any model request.
STUCK_HOOK = """
import pathlib, time
from nanobot_core import hookimpl

@hookimpl
def nanobot_tools(ctx):
    pathlib.Path("entered").write_text("yes")
    time.sleep(600)
    return []
"""


def test_ctrl_c_while_a_hook_hangs_at_load_stops_the_run(
    tmp_path: Path, workspace: Path, server: FakeChatServer
) -> None:
    """One SIGINT in a hook that blocks stops the command with 130 instead of failing the plugin."""
    plugin = install_plugin(tmp_path / "site", STUCK_HOOK)
    server.add(text_reply("should not be asked"))
    with _start(server, plugin, workspace) as process:
        out, _ = _interrupted(process, workspace)
    assert out == "" and server.requests == []


# A plugin whose governance stage blocks: the run hangs before its first model request.
STUCK_STAGE = """
import pathlib, time
from nanobot_core import Stage, hookimpl

def wait_long():
    time.sleep(600)

def stuck(messages, ctx):
    pathlib.Path("entered").write_text("yes")
    wait_long()

@hookimpl
def nanobot_governance_stages(ctx):
    return [Stage("stuck", stuck)]
"""


def test_a_stage_that_blocks_is_named_by_a_warning_while_it_blocks(
    tmp_path: Path, workspace: Path, server: FakeChatServer
) -> None:
    """Past ``plugins.stall_warning`` the log names the plugin and its function; Ctrl-C ends it."""
    plugin = install_plugin(tmp_path / "site", STUCK_STAGE)
    server.add(text_reply("should not be asked"))
    env = _env(server, plugin) | {"NANOBOT_PLUGINS__STALL_WARNING": "0.3"}
    with cli_process("run", "go", cwd=workspace, env=env) as process:
        _wait_until_entered(process, workspace)
        time.sleep(1.5)  # the warning is due 0.3 s after the stage was entered
        out, err = _interrupted_twice(process)
    assert out == "" and server.requests == []
    warned = [line for line in err.splitlines() if "plugin code has not returned" in line]
    assert len(warned) == 1, err
    assert NAMED in warned[0] and "at='hangplug.wait_long, line 6'" in warned[0], err
    assert "plugin code finished" in err


def test_a_stage_that_blocks_past_the_stall_timeout_ends_the_run_named(
    tmp_path: Path, workspace: Path, server: FakeChatServer
) -> None:
    """``plugins.stall_timeout = 1``: exit 1 naming the plugin and its code; the session goes on."""
    plugin = install_plugin(tmp_path / "site", STUCK_STAGE)
    env = _env(server, plugin) | {"NANOBOT_PLUGINS__STALL_TIMEOUT": "1"}
    with cli_process("run", "go", cwd=workspace, env=env) as process:
        out, err = _finish(process)
    assert process.returncode == 1, err
    assert out == "" and server.requests == [] and "Traceback" not in err
    assert err.splitlines()[-1] == (
        "Error: plugin 'hangplug' from hangplug 0.1 did not return within "
        "plugins.stall_timeout (1 s; its code is at hangplug.wait_long, line 6); "
        "the command was stopped"
    )
    # The session kept the prompt, and a later run (without the plugin) takes it up.
    server.add(text_reply("done"))
    again = helpers.run_cli(
        "run", "again", cwd=workspace, env=_env(server, plugin) | {"NANOBOT_PLUGINS": ""}
    )
    assert again.returncode == 0, again.stderr
    # The two prompts in a row are one user message to the model (the repairs merge them).
    sent = [m["content"] for m in server.requests[0].body["messages"] if m["role"] == "user"]
    assert len(sent) == 1 and sent[0].startswith("go\n\nagain"), sent


def test_a_stage_that_blocks_is_not_warned_of_when_the_warning_is_off(
    tmp_path: Path, workspace: Path, server: FakeChatServer
) -> None:
    """``plugins.stall_warning = 0``: the same hang says nothing until Ctrl-C."""
    plugin = install_plugin(tmp_path / "site", STUCK_STAGE)
    env = _env(server, plugin) | {"NANOBOT_PLUGINS__STALL_WARNING": "0"}
    with cli_process("run", "go", cwd=workspace, env=env) as process:
        _wait_until_entered(process, workspace)
        time.sleep(1.0)
        _, err = _interrupted_twice(process)
    assert "plugin code" not in err


# A provider whose call never returns.
SILENT_PROVIDER = """
import asyncio
from nanobot_core import hookimpl

class Silent:
    name = "silent"

    def __init__(self, config, progress=None):
        pass

    async def complete(self, messages, tools, **options):
        await asyncio.Event().wait()

@hookimpl
def nanobot_providers(ctx):
    return [Silent]
"""


def test_a_provider_that_never_answers_fails_at_its_deadline(
    tmp_path: Path, workspace: Path, server: FakeChatServer
) -> None:
    """A plugin's provider past provider.timeout (per attempt) ends the run with exit 1, named."""
    plugin = install_plugin(tmp_path / "site", SILENT_PROVIDER)
    env = _env(server, plugin) | {"NANOBOT_PROVIDER__TIMEOUT": "1"}
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "nanobot_core", "run", "go", "--provider", "silent"],
        cwd=workspace, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    assert time.monotonic() - started < PROMPT_EXIT, result.stderr
    assert result.returncode == 1, result.stderr
    assert "Error: provider 'silent' of plugin 'hangplug'" in result.stderr
    assert "did not answer within 3s" in result.stderr  # 1 s, and the margin
    assert "Traceback" not in result.stderr


def test_the_built_in_provider_past_its_timeout_reports_its_own_error(
    tmp_path: Path, workspace: Path, server: FakeChatServer
) -> None:
    """A server that never answers in time: the built-in provider gives up on its own, named.

    The runner's bound on a model call is the built-in provider's own, and a margin:
    its last attempt times out first, so the user reads which attempt timed out, not
    that the provider "did not answer".
    """
    server.add(attrs.evolve(text_reply("too late"), delay=10))
    env = helpers.plugin_env(
        tmp_path,
        "none",
        NANOBOT_BASE_URL=server.base_url,
        NANOBOT_MODEL="fake-model",
        NANOBOT_API_KEY=API_KEY,
        NANOBOT_PROVIDER__MAX_RETRIES="0",
        NANOBOT_PROVIDER__TIMEOUT="1",
    )
    result = helpers.run_cli("run", "go", cwd=workspace, env=env, timeout=TIMEOUT)
    assert result.returncode == 1, result.stderr
    assert "Error: provider 'openai': " in result.stderr
    assert "gave up after 1 attempt(s); last error: timed out after 1s" in result.stderr
    assert "did not answer" not in result.stderr
