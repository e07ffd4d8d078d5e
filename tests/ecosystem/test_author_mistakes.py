"""A plugin author's usual mistakes, installed for real: each is named, the rest keeps working."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.ecosystem.envs import VirtualEnv, build_wheels

pytestmark = pytest.mark.ecosystem

MISTAKES = Path(__file__).resolve().parent / "mistakes"


@pytest.fixture(scope="module")
def mistakes_env(
    tmp_path_factory: pytest.TempPathFactory, wheelhouse: dict[str, Path]
) -> VirtualEnv:
    """A fresh venv with the core, one correct plugin and the plugins of the usual mistakes."""
    out = tmp_path_factory.mktemp("mistakes-wheels")
    wheels = build_wheels(sorted(MISTAKES.iterdir()), out)
    venv = VirtualEnv(tmp_path_factory.mktemp("mistakes-venv") / "env")
    venv.install(wheelhouse["nanobot-core"], *wheels.values())
    return venv


def _plugins(env: VirtualEnv, tmp_path: Path) -> tuple[dict[str, Any], str]:
    result = env.cli("plugins", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return {row["name"]: row for row in json.loads(result.stdout)}, result.stderr


def _one_line(text: str) -> str:
    assert "\n" not in text, text
    return text


def test_a_hook_without_hookimpl_fails_its_plugin(mistakes_env: VirtualEnv, tmp_path: Path) -> None:
    """A `nanobot_` hook function without @hookimpl, never called by pluggy, fails its plugin."""
    rows, _ = _plugins(mistakes_env, tmp_path)
    row = rows["unmarked"]
    assert row["status"] == "failed"
    assert row["version"] == "0.7.0"
    assert _one_line(row["error"]) == (
        "nanobot_prompt_sections is not marked with @nanobot_core.hookimpl, "
        "so it would never be called"
    )


def test_a_misspelt_hookimpl_names_the_hook_it_resembles(
    mistakes_env: VirtualEnv, tmp_path: Path
) -> None:
    """A @hookimpl function no hook has fails its plugin, naming the hook it was meant to be."""
    rows, _ = _plugins(mistakes_env, tmp_path)
    row = rows["misnamed"]
    assert row["status"] == "failed"
    assert _one_line(row["error"]) == (
        "implements unknown hooks: nanobot_prompt_section (did you mean "
        "nanobot_prompt_sections?), nanobt_tools (did you mean nanobot_tools?)"
    )


def test_a_hook_argument_the_hook_lacks_is_named_on_one_line(
    mistakes_env: VirtualEnv, tmp_path: Path
) -> None:
    """A hook asking for an argument no caller passes is named with the arguments it may take."""
    rows, stderr = _plugins(mistakes_env, tmp_path)
    row = rows["badargs"]
    assert row["status"] == "failed"
    assert _one_line(row["error"]) == (
        "failed hook validation: nanobot_before_tool_call asks for 'session_secret', "
        "which the hook does not pass (it passes: ctx, call)"
    )
    # The plugin's name in pluggy's registry is the core's own key, not one the user knows.
    assert "nanobot.plugins:" not in stderr


def _records(stderr: str, event: str) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return [record for record in records if record["event"] == event]


def test_an_entry_point_in_a_misspelt_group_is_warned_about(
    mistakes_env: VirtualEnv, tmp_path: Path
) -> None:
    """An entry point in `nanobot.tool` loads nothing, and every command names the group meant."""
    event = "entry point in a group nanobot-core does not read; not loaded"
    for args in (["plugins", "--json"], ["call", "fine_echo", '{"text": "still here"}']):
        result = mistakes_env.cli("--log-format", "json", *args, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert "typo_echo" not in result.stdout
        [record] = _records(result.stderr, event)
        assert record["level"] == "warning"
        assert record["plugin"] == "plugin 'typo_echo' from nbtest-typogroup 0.7.0"
        assert record["entry_point"] == "typo_echo = nbtest_typogroup:Echo"
        assert record["group"] == "nanobot.tool"
        assert record["did_you_mean"] == "nanobot.tools"
    assert result.stdout.strip() == "still here"


def test_a_schema_that_lost_a_type_is_a_problem_of_its_plugin(
    mistakes_env: VirtualEnv, tmp_path: Path
) -> None:
    """A misspelt type is listed under its plugin by `plugins` and warned of once by `tools`,
    naming the plugin's version; the tool is still offered, without that constraint."""
    problem = (
        "tool 'typotype_echo' kept, its parameters schema changed: #/properties/text: "
        'type "strng" is not a type we know: type constraint dropped'
    )
    rows, _ = _plugins(mistakes_env, tmp_path)
    assert rows["typotype_echo"]["status"] == "loaded"
    assert rows["typotype_echo"]["problems"] == [problem]
    result = mistakes_env.cli("--log-format", "json", "tools", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    [record] = _records(result.stderr, "plugin problem")
    assert record["plugin"] == "plugin 'typotype_echo' from nbtest-typotype 0.7.0"
    assert record["problem"] == problem
    assert _records(result.stderr, "tool schema normalised") == []
    [tool] = [row for row in json.loads(result.stdout) if row["name"] == "typotype_echo"]
    assert tool["parameters"]["properties"]["text"] == {}


def test_the_correct_plugin_keeps_working(mistakes_env: VirtualEnv, tmp_path: Path) -> None:
    """Beside all of these, the correct plugin is loaded and its tool is listed."""
    rows, _ = _plugins(mistakes_env, tmp_path)
    assert rows["fine_echo"]["status"] == "loaded"
    tools = mistakes_env.cli("tools", "--json", cwd=tmp_path)
    assert tools.returncode == 0, tools.stderr
    assert "fine_echo" in {row["name"] for row in json.loads(tools.stdout)}
