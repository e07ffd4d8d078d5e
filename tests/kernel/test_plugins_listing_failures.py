"""`nanobot-core plugins` when a plugin fails in a hook: it is listed as failed, the rest intact.

Some hooks are called only while the listing builds the governor (to show each
stage's place in the pipeline): the token counter and the result store. A plugin
failing there, or while the contributions are collected, must leave every other
plugin's contributions listed as they are without it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import install_plugin, plugin_env, run_cli

NAME = "faultyplug"
FAILING_HOOKS = [
    "nanobot_token_counter",
    "nanobot_result_store",
    "nanobot_governance_stages",
    "nanobot_prompt_sections",
]
# Besides the failing hook the plugin contributes a tool of its own, left out with it.
SOURCE = """
from nanobot_core import hookimpl, tool


@tool
def faulty_echo(text: str) -> str:
    \"\"\"Echo the text.\"\"\"
    return text


@hookimpl
def nanobot_tools(ctx):
    return [faulty_echo]


@hookimpl
def {hook}(ctx):
    raise RuntimeError("{hook} cannot start")
"""


def _site(tmp_path: Path, hook: str) -> Path:
    return install_plugin(tmp_path / "site", NAME, SOURCE.format(hook=hook))


def _plugins(tmp_path: Path, site: Path, *args: str, **env: str) -> str:
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    result = run_cli("plugins", *args, cwd=workspace, env=plugin_env(site, NAME, **env), timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _rows(tmp_path: Path, site: Path, **env: str) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in json.loads(_plugins(tmp_path, site, "--json", **env))}


def _builtins(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: row for name, row in rows.items() if row["source"] == "builtin"}


@pytest.mark.parametrize("hook", FAILING_HOOKS)
def test_json_lists_the_failing_plugin_and_every_other_contribution(
    tmp_path: Path, hook: str
) -> None:
    """A plugin failing in `hook`: --json gives the built-ins' rows as with that plugin blocked."""
    site = _site(tmp_path, hook)
    expected = _builtins(_rows(tmp_path, site, NANOBOT_BLOCK=NAME))
    assert {c["name"] for c in expected["builtin:tools"]["contributions"]} >= {"read_file", "grep"}
    rows = _rows(tmp_path, site)
    assert _builtins(rows) == expected
    mine = rows[NAME]
    assert (mine["status"], mine["distribution"], mine["version"]) == ("failed", NAME, "0.1")
    assert mine["error"] == f"raised in {hook}: RuntimeError: {hook} cannot start"
    assert mine["contributions"] == []


@pytest.mark.parametrize("hook", FAILING_HOOKS)
def test_text_lists_the_failing_plugin_and_every_other_contribution(
    tmp_path: Path, hook: str
) -> None:
    """A plugin failing in `hook`: the built-ins' lines are as with that plugin blocked."""
    site = _site(tmp_path, hook)
    blocked = _plugins(tmp_path, site, NANOBOT_BLOCK=NAME).splitlines()
    lines = _plugins(tmp_path, site).splitlines()
    mine = f"{NAME} ({NAME} 0.1) [nanobot.plugins] "
    assert blocked.index(f"{mine}blocked") == lines.index(f"{mine}failed")
    at = lines.index(f"{mine}failed")
    assert lines[:at] == blocked[:at]
    assert "    tool read_file" in lines[:at]
    assert "    stage snip_history" in lines[:at]
    assert "    provider openai" in lines[:at]
    assert "    store jsonl" in lines[:at]
    assert lines[at + 1] == f"    error: raised in {hook}: RuntimeError: {hook} cannot start"
    assert "faulty_echo" not in "\n".join(lines)
    assert lines[-2:] == blocked[-2:]  # the pipeline and the prompt sections
