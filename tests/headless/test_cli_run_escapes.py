"""`nanobot-core run` with plugin code raising SystemExit: no traceback, no silent exit."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers import install_plugin, plugin_env, run_cli

TIMEOUT = 60
PLUGIN = "hangplug"  # the module and distribution `install_plugin` writes, version 0.1
NAMED = f"plugin {PLUGIN!r} from {PLUGIN} 0.1"

# Every part raises SystemExit(3) where the ESCAPE_AT environment variable says; the
# provider asks for the plugin's tool once, then answers with what the tool gave.
ESCAPING = """
import os
from nanobot_core import Section, Tool, hookimpl, stage
from nanobot_core.providers import ProviderReply

def escape(where):
    if os.environ.get("ESCAPE_AT") == where:
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


def _run(site: Path, workspace: Path, at: str) -> subprocess.CompletedProcess[str]:
    env = plugin_env(site, PLUGIN, NANOBOT_PROVIDER__NAME="escaping", ESCAPE_AT=at)
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
