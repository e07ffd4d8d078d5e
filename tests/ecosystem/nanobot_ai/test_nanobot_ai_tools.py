"""nanobot-ai 0.3.5's own tool classes, registered by a real distribution, through the real CLI.

Runs in an environment of its own (see README.md): nanobot-core's wheel,
nanobot-ai 0.3.5 from PyPI and the `nbtest-hkuds` distribution.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CLI = Path(sys.executable).parent / "nanobot-core"
OVERRIDES = '[plugins]\noverrides = { "nbtest-hkuds" = ["read_file", "list_dir", "find_files"] }\n'


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace with two text files, one in a folder, whose config lets nanobot-ai's tools in."""
    (tmp_path / "notes.txt").write_text("alpha line\nbeta line\n", encoding="utf-8")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("print('hi')\n", encoding="utf-8")
    (tmp_path / "nanobot.toml").write_text(OVERRIDES, encoding="utf-8")
    return tmp_path


def _cli(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}
    return subprocess.run(
        [str(CLI), *args],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _tools(workspace: Path) -> dict[str, dict[str, Any]]:
    done = _cli(workspace, "tools", "--json")
    assert done.returncode == 0, done.stderr
    return {row["name"]: row for row in json.loads(done.stdout)}


def _call(workspace: Path, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    done = _cli(workspace, "call", tool, json.dumps(arguments), "--json")
    assert "Traceback" not in done.stderr, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_the_four_tools_load_from_the_distribution(workspace: Path) -> None:
    """read_file, list_dir, find_files and exec are nanobot-ai's, from nbtest-hkuds."""
    tools = _tools(workspace)
    for name in ("read_file", "list_dir", "find_files", "exec"):
        assert tools[name]["distribution"] == "nbtest-hkuds", name
    assert tools["read_file"]["read_only"] is True
    assert "subagent_list_dir" not in tools


def test_without_an_override_the_builtins_keep_their_names(workspace: Path) -> None:
    """Built-in names stay built-in unless the config lets the distribution have them."""
    (workspace / "nanobot.toml").unlink()
    tools = _tools(workspace)
    assert tools["read_file"]["plugin"] == "builtin:tools"
    assert tools["exec"]["distribution"] == "nbtest-hkuds"


def test_read_file_list_dir_and_find_files_run(workspace: Path) -> None:
    """Each tool runs with the configuration its package expects and reads the workspace."""
    read = _call(workspace, "read_file", {"path": "notes.txt"})
    assert read["ok"], read
    assert "alpha line" in read["result"] and "beta line" in read["result"]
    listed = _call(workspace, "list_dir", {"path": "."})
    assert listed["ok"], listed
    assert "notes.txt" in listed["result"] and "src" in listed["result"]
    found = _call(workspace, "find_files", {"pattern": "*.py"})
    assert found["ok"], found
    assert "app.py" in found["result"]


def test_exec_runs_a_command_in_the_workspace(workspace: Path) -> None:
    """ExecTool runs a shell command with the workspace as its working directory."""
    done = _call(workspace, "exec", {"command": "ls"})
    assert done["ok"], done
    assert "notes.txt" in done["result"]


def test_options_are_merged_over_the_package_defaults(workspace: Path) -> None:
    """[tools.options.exec] reaches ExecTool over nanobot-ai's defaults (here: path_prepend)."""
    before = _call(workspace, "exec", {"command": "echo $PATH"})
    assert before["ok"] and "/opt/from-options/bin" not in before["result"]
    with (workspace / "nanobot.toml").open("a", encoding="utf-8") as config:
        config.write('[tools.options.exec]\npath_prepend = "/opt/from-options/bin"\n')
    after = _call(workspace, "exec", {"command": "echo $PATH"})
    assert after["ok"], after
    assert after["result"].startswith("/opt/from-options/bin:")


def test_their_own_validation_is_used(workspace: Path) -> None:
    """A call missing a required argument is refused with nanobot-ai's own message."""
    done = _call(workspace, "read_file", {})
    assert not done["ok"]
    assert "missing required path" in done["result"]


def test_their_attributes_and_methods_stay_reachable(workspace: Path) -> None:
    """Through the registry the adapter still shows config_key, to_schema, cast_params..."""
    from nanobot_core import PluginManager, load_config

    manager = PluginManager(load_config(cwd=workspace), workspace=workspace).load()
    registry = manager.tool_registry()
    exec_tool: Any = registry.get("exec")
    read_tool: Any = registry.get("read_file")
    assert exec_tool.config_key == "exec" and read_tool.config_key == "file"
    assert exec_tool.to_schema()["function"]["name"] == "exec"
    assert read_tool.cast_params({"path": "notes.txt"}) == {"path": "notes.txt"}
    assert read_tool.validate_params({}) == ["missing required path"]
    assert exec_tool.wrapped.timeout == 60  # ExecToolConfig's own default reached the tool
