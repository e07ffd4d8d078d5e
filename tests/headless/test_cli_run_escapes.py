"""`nanobot-core run` with plugin code raising SystemExit: no traceback, no silent exit."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers import install_plugin, plugin_env, run_cli

TIMEOUT = 60
PLUGIN = "hangplug"  # the module and distribution `install_plugin` writes, version 0.1
NAMED = f"plugin {PLUGIN!r} from {PLUGIN} 0.1"

# Every part raises SystemExit(3) where the ESCAPE_AT environment variable says (or, as
# ESCAPE_HOW says, an exception whose message raises SystemExit(4)); the
# provider asks for the plugin's tool once, then answers with what the tool gave.
ESCAPING = """
import os
from nanobot_core import Section, Tool, hookimpl, stage
from nanobot_core.providers import ProviderReply

class Unreadable(Exception):
    def __str__(self):
        raise SystemExit(4)

class UnreadableEscape(BaseException):
    def __str__(self):
        raise SystemExit(4)

def escape(where):
    if os.environ.get("ESCAPE_AT") == where:
        how = os.environ.get("ESCAPE_HOW")
        if how == "unreadable":
            raise Unreadable()
        if how == "unreadable-escape":
            raise UnreadableEscape()
        raise SystemExit(3)

class Provider:
    name = "escaping"

    def __init__(self, config, progress=None):
        escape("provider-init")

    async def complete(self, messages, tools):
        escape("provider-complete")
        results = [m["content"] for m in messages if m.get("role") == "tool"]
        if results:
            return ProviderReply({"role": "assistant", "content": results[-1]})
        call = {"id": "c1", "type": "function", "function": {"name": "quit", "arguments": "{}"}}
        return ProviderReply({"role": "assistant", "content": None, "tool_calls": [call]})

class Quit(Tool):
    name = "quit"
    description = "Quits."
    parameters = {"type": "object", "properties": {}}

    async def execute(self):
        escape("tool")
        return "stayed"

@stage("quitting", phase="transform")
def quitting(messages, ctx):
    escape("stage")
    return messages

def render(ctx):
    escape("section")
    return "Be brief."

@hookimpl
def nanobot_providers(ctx):
    return [Provider]

@hookimpl
def nanobot_tools(ctx):
    return [Quit]

@hookimpl
def nanobot_governance_stages(ctx):
    return [quitting]

@hookimpl
def nanobot_prompt_sections(ctx):
    return [Section("quitting", 50, render)]

@hookimpl
def nanobot_runtime_context(ctx):
    escape("hook")
    return []
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The escaping plugin, installed in a folder put on PYTHONPATH."""
    return install_plugin(tmp_path_factory.mktemp("escapes") / "site", PLUGIN, ESCAPING)


def _run(
    site: Path, workspace: Path, at: str, how: str = "exit"
) -> subprocess.CompletedProcess[str]:
    env = plugin_env(site, PLUGIN, NANOBOT_PROVIDER__NAME="escaping", ESCAPE_AT=at, ESCAPE_HOW=how)
    return run_cli("run", "go", cwd=workspace, env=env, timeout=TIMEOUT)


@pytest.mark.parametrize(
    ("at", "said"),
    [
        (
            "provider-init",
            f"Error: {NAMED} failed: provider 'escaping' could not be created: "
            "PluginEscapeError: raised SystemExit(3)",
        ),
        ("provider-complete", f"Error: provider 'escaping' of {NAMED} raised SystemExit(3)"),
    ],
)
def test_a_provider_raising_system_exit_fails_the_run_naming_it(
    site: Path, tmp_path: Path, at: str, said: str
) -> None:
    """A provider's SystemExit, made or asked, is exit 1 naming the plugin and its version."""
    result = _run(site, tmp_path, at)
    assert result.returncode == 1, result.stderr
    assert said in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("at", "said"),
    [
        ("hook", "raised in nanobot_runtime_context: PluginEscapeError: raised SystemExit(3)"),
        (
            "section",
            "error='raised SystemExit(3)' plugin=\"plugin 'hangplug' from hangplug 0.1\" "
            "section=quitting",
        ),
        (
            "stage",
            "error=SystemExit(3) plugin=\"plugin 'hangplug' from hangplug 0.1\" stage=quitting",
        ),
    ],
)
def test_a_part_raising_system_exit_is_reported_and_the_run_goes_on(
    site: Path, tmp_path: Path, at: str, said: str
) -> None:
    """A hook, section or stage raising SystemExit is logged by name; the turn ends well."""
    result = _run(site, tmp_path, at)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "stayed\n"
    assert said in result.stderr
    assert "Traceback" not in result.stderr


def test_a_tool_raising_system_exit_is_an_error_result_naming_it(
    site: Path, tmp_path: Path
) -> None:
    """A tool's SystemExit reaches the model as its failure, naming its plugin; the turn goes on."""
    result = _run(site, tmp_path, "tool")
    assert result.returncode == 0, result.stderr
    said = (
        "Error: tool \"quit\" of plugin 'hangplug' from hangplug 0.1 failed: "
        "PluginEscapeError: raised SystemExit(3)"
    )
    assert result.stdout.startswith(said)
    assert "Traceback" not in result.stderr


_UNREAD = "(its message could not be read: SystemExit)"


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("unreadable", f"Unreadable {_UNREAD}"),
        ("unreadable-escape", f"PluginEscapeError: raised UnreadableEscape {_UNREAD}"),
    ],
)
def test_a_tool_whose_exception_message_raises_system_exit_is_an_error_naming_it(
    site: Path, tmp_path: Path, how: str, said: str
) -> None:
    """A tool's exception whose __str__ raises SystemExit is its failure, named by type."""
    result = _run(site, tmp_path, "tool", how)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f'Error: tool "quit" of {NAMED} failed: {said}')
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("at", "logged"),
    [("section", "prompt section raised; left out"), ("stage", "governance stage raised")],
)
@pytest.mark.parametrize("how", ["unreadable", "unreadable-escape"])
def test_a_part_whose_exception_message_raises_system_exit_is_logged_naming_it(
    site: Path, tmp_path: Path, at: str, logged: str, how: str
) -> None:
    """A section's or stage's exception whose __str__ raises SystemExit is logged by plugin."""
    result = _run(site, tmp_path, at, how)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "stayed\n"
    raised = "Unreadable" if how == "unreadable" else "UnreadableEscape"
    lines = [line for line in result.stderr.splitlines() if logged in line]
    assert lines  # once per model call
    for line in lines:
        assert f"{raised} {_UNREAD}" in line
        assert f'plugin="{NAMED}"' in line
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("at", "said"),
    [
        (
            "provider-init",
            f"Error: {NAMED} failed: provider 'escaping' could not be created: "
            f"Unreadable {_UNREAD}",
        ),
        ("provider-complete", f"Error: provider 'escaping' of {NAMED} raised Unreadable {_UNREAD}"),
    ],
)
def test_a_provider_whose_exception_message_raises_system_exit_fails_the_run_naming_it(
    site: Path, tmp_path: Path, at: str, said: str
) -> None:
    """A provider's exception whose __str__ raises SystemExit is exit 1, named by its type."""
    result = _run(site, tmp_path, at, "unreadable")
    assert result.returncode == 1, result.stderr
    assert said in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_a_plugin_whose_import_error_message_raises_system_exit_is_listed_failed(
    tmp_path: Path,
) -> None:
    """A plugin failing to import with an unreadable exception is listed failed, by its type."""
    source = """
    class Unreadable(Exception):
        def __str__(self):
            raise SystemExit(4)

    raise Unreadable()
    """
    site = install_plugin(tmp_path / "site", "badimport", source)
    result = run_cli(
        "plugins", "--json", cwd=tmp_path, env=plugin_env(site, "badimport"), timeout=TIMEOUT
    )
    assert result.returncode == 0, result.stderr
    assert f"failed to import: Unreadable {_UNREAD}" in result.stdout
    assert '"status": "failed"' in result.stdout
    assert "Traceback" not in result.stderr
