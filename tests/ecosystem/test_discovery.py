"""Plugin discovery with real distributions and entry points, through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.ecosystem.envs import VirtualEnv

pytestmark = pytest.mark.ecosystem


def _json(result: Any) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _plugins(env: VirtualEnv, tmp_path: Path, **extra: str) -> dict[str, dict[str, Any]]:
    rows = _json(env.cli("plugins", "--json", cwd=tmp_path, env=extra))
    return {row["name"]: row for row in rows}


def _tools(env: VirtualEnv, tmp_path: Path, **extra: str) -> dict[str, dict[str, Any]]:
    rows = _json(env.cli("tools", "--json", cwd=tmp_path, env=extra))
    return {row["name"]: row for row in rows}


def test_tools_from_both_groups_are_discovered(plugin_env: VirtualEnv, tmp_path: Path) -> None:
    """Tools come from `nanobot.tools` classes and `nanobot.plugins` hook modules alike."""
    tools = _tools(plugin_env, tmp_path)
    assert tools["alpha"]["distribution"] == "nbtest-alpha"
    assert tools["alpha"]["version"] == "1.2.0"
    assert tools["alpha"]["plugin"] == "alpha"
    assert tools["clash"]["distribution"] == "nbtest-clash-a"
    assert tools["read_file"]["plugin"] == "builtin:tools"


def test_plugin_listing_has_the_documented_fields(plugin_env: VirtualEnv, tmp_path: Path) -> None:
    """Every plugin object carries the documented fields, built-ins first."""
    rows = _json(plugin_env.cli("plugins", "--json", cwd=tmp_path))
    for row in rows:
        assert {
            "name",
            "distribution",
            "version",
            "source",
            "status",
            "error",
            "hooks",
            "contributions",
        } <= set(row)
        assert row["source"] in {"builtin", "nanobot.tools", "nanobot.plugins"}
        assert row["status"] in {"loaded", "failed", "blocked"}
    # Built-ins come first, then external plugins sorted by distribution.
    sources = [row["source"] for row in rows]
    assert sources[: sources.count("builtin")] == ["builtin"] * sources.count("builtin")


def test_builtin_name_is_protected(plugin_env: VirtualEnv, tmp_path: Path) -> None:
    """A plugin claiming `read_file` is shadowed by the built-in, which keeps working."""
    plugins = _plugins(plugin_env, tmp_path)
    fake = plugins["fake_read_file"]
    assert fake["status"] == "loaded"
    assert fake["contributions"] == [
        {"kind": "tool", "name": "read_file", "shadowed_by": "builtin:tools"}
    ]
    (tmp_path / "notes.txt").write_text("hello\n", encoding="utf-8")
    result = plugin_env.cli("call", "read_file", '{"path": "notes.txt"}', cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "hello" in result.stdout and "hijacked" not in result.stdout
    assert "read_file" in result.stderr and "fake_read_file" in result.stderr


def test_builtin_override_needs_explicit_config(plugin_env: VirtualEnv, tmp_path: Path) -> None:
    """With an override for that plugin and that name in config, the plugin's tool wins."""
    (tmp_path / "nanobot.toml").write_text(
        '[plugins.overrides]\n"nbtest-alpha" = ["read_file"]\n', encoding="utf-8"
    )
    tools = _tools(plugin_env, tmp_path)
    assert tools["read_file"]["plugin"] == "fake_read_file"
    plugins = _plugins(plugin_env, tmp_path)
    assert {"kind": "tool", "name": "read_file", "shadowed_by": "fake_read_file"} in plugins[
        "builtin:tools"
    ]["contributions"]


def test_plugin_clash_has_a_specific_winner(plugin_env: VirtualEnv, tmp_path: Path) -> None:
    """Of two plugins claiming `clash`, nbtest-clash-a wins by name, whatever the install order."""
    plugins = {
        (r["distribution"], r["name"]): r
        for r in _json(plugin_env.cli("plugins", "--json", cwd=tmp_path))
    }
    assert plugins[("nbtest-clash-a", "clash")]["contributions"] == [
        {"kind": "tool", "name": "clash"}
    ]
    assert plugins[("nbtest-clash-b", "clash_b")]["contributions"] == [
        {"kind": "tool", "name": "clash", "shadowed_by": "clash"}
    ]
    result = plugin_env.cli("call", "clash", "", "--json", cwd=tmp_path)
    assert json.loads(result.stdout)["result"] == "a"


BROKEN = "nbtest-broken,nbtest-invalid,nbtest-badreturn,nbtest-unbuildable"
TWIN_ERROR = (
    "its name is taken by plugin 'twin' from nbtest-twin-a 0.3.0, registered first (two "
    "plugins cannot share a name, which config and listings know a plugin by): uninstall "
    "nbtest-twin-a or nbtest-twin-b, or block one of them by its distribution name in "
    "plugins.block"
)


def test_two_distributions_of_one_plugin_name_keep_the_first(
    plugin_env: VirtualEnv, tmp_path: Path
) -> None:
    """Of two distributions naming a plugin `twin`, nbtest-twin-a keeps the name whatever the
    install order, whole; the listing says why nbtest-twin-b is refused, naming both."""
    rows = [
        row
        for row in _json(plugin_env.cli("plugins", "--json", cwd=tmp_path))
        if row["name"] == "twin"
    ]
    assert [(r["distribution"], r["version"], r["status"]) for r in rows] == [
        ("nbtest-twin-a", "0.3.0", "loaded"),
        ("nbtest-twin-b", "0.4.0", "failed"),
    ]
    kept, refused = rows
    assert kept["contributions"][0] == {"kind": "tool", "name": "twin_a"}
    assert kept["hooks"] == ["nanobot_tools"] and kept["error"] is None
    assert refused["error"] == TWIN_ERROR
    assert refused["contributions"] == [] and refused["hooks"] == []
    tools = _tools(plugin_env, tmp_path)
    assert tools["twin_a"]["distribution"] == "nbtest-twin-a" and "twin_b" not in tools
    text = plugin_env.cli("plugins", cwd=tmp_path)
    assert (
        f"twin (nbtest-twin-b 0.4.0) [nanobot.plugins] failed\n    error: {TWIN_ERROR}\n"
        in text.stdout
    )
    # The others that fail blocked, so that the first failure strict mode stops at is this one.
    strict = plugin_env.cli("--strict", "plugins", cwd=tmp_path, env={"NANOBOT_BLOCK": BROKEN})
    assert strict.returncode != 0
    assert f"plugin 'twin' from nbtest-twin-b 0.4.0 failed: {TWIN_ERROR}" in strict.stderr
    assert "Traceback" not in strict.stderr


def test_failed_import_is_isolated(plugin_env: VirtualEnv, tmp_path: Path) -> None:
    """A plugin whose import raises is reported with distribution and version; the rest loads."""
    plugins = _plugins(plugin_env, tmp_path)
    broken = plugins["broken"]
    assert broken["status"] == "failed"
    assert broken["distribution"] == "nbtest-broken" and broken["version"] == "0.0.1"
    assert "cannot be imported" in broken["error"]
    assert plugins["alpha"]["status"] == "loaded"


@pytest.mark.parametrize(
    ("plugin", "needle"),
    [
        ("invalid", "validation"),
        ("badreturn", "expected a list"),
        ("unbuildable", "missing credentials file"),
    ],
)
def test_misbehaving_plugins_are_failed_completely(
    plugin_env: VirtualEnv, tmp_path: Path, plugin: str, needle: str
) -> None:
    """Failing validation, returning garbage, or an unbuildable tool fails the whole plugin."""
    plugins = _plugins(plugin_env, tmp_path)
    assert plugins[plugin]["status"] == "failed"
    assert needle in plugins[plugin]["error"]
    assert plugins[plugin]["contributions"] == []
    assert "unbuildable" not in _tools(plugin_env, tmp_path)


def test_disabled_tool_is_not_built(plugin_env: VirtualEnv, tmp_path: Path) -> None:
    """A tool class whose enabled(ctx) is false contributes nothing."""
    assert "sleepy" not in _tools(plugin_env, tmp_path)
    assert _plugins(plugin_env, tmp_path)["sleepy"]["contributions"] == []


def test_duck_typed_tool_loads_through_the_adapter(plugin_env: VirtualEnv, tmp_path: Path) -> None:
    """A HKUDS/nanobot style class that does not subclass Tool is listed and callable."""
    tools = _tools(plugin_env, tmp_path)
    assert tools["quack"]["read_only"] is True
    result = plugin_env.cli("call", "quack", '{"times": "2"}', cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "quack quack"


@pytest.mark.parametrize("name", ["alpha", "nbtest-alpha", "nbtest_alpha"])
def test_block_by_entry_point_or_distribution(
    plugin_env: VirtualEnv, tmp_path: Path, name: str
) -> None:
    """NANOBOT_BLOCK matches an entry-point name or a distribution name."""
    plugins = _plugins(plugin_env, tmp_path, NANOBOT_BLOCK=name)
    assert plugins["alpha"]["status"] == "blocked"
    assert "alpha" not in _tools(plugin_env, tmp_path, NANOBOT_BLOCK=name)
    assert plugins["builtin:tools"]["status"] == "loaded"


def test_block_in_config_file(plugin_env: VirtualEnv, tmp_path: Path) -> None:
    """`plugins.block` in nanobot.toml blocks like the environment variable."""
    (tmp_path / "nanobot.toml").write_text('[plugins]\nblock = ["nbtest-duck"]\n', encoding="utf-8")
    assert _plugins(plugin_env, tmp_path)["duck"]["status"] == "blocked"


def test_unmatched_block_name_warns(plugin_env: VirtualEnv, tmp_path: Path) -> None:
    """A block name that matches nothing gets a warning on stderr."""
    result = plugin_env.cli(
        "tools", "--json", cwd=tmp_path, env={"NANOBOT_BLOCK": "no-such-plugin"}
    )
    assert result.returncode == 0
    assert "no-such-plugin" in result.stderr


def test_allow_list(plugin_env: VirtualEnv, tmp_path: Path) -> None:
    """NANOBOT_PLUGINS loads only the named plugins; built-ins are unaffected."""
    plugins = _plugins(plugin_env, tmp_path, NANOBOT_PLUGINS="nbtest-duck")
    loaded = {name for name, row in plugins.items() if row["status"] == "loaded"}
    assert loaded == {
        "builtin:tools",
        "builtin:governance",
        "builtin:prompt",
        "builtin:providers",
        "builtin:sessions",
        "duck",
    }


def test_empty_allow_list_loads_no_plugin(plugin_env: VirtualEnv, tmp_path: Path) -> None:
    """An empty NANOBOT_PLUGINS loads no external plugin."""
    tools = _tools(plugin_env, tmp_path, NANOBOT_PLUGINS="")
    assert set(tools) == {"edit_file", "find_files", "grep", "list_dir", "read_file", "write_file"}


def test_autoload_off(plugin_env: VirtualEnv, tmp_path: Path) -> None:
    """NANOBOT_DISABLE_PLUGIN_AUTOLOAD=1 imports no external plugin, and nothing fails."""
    plugins = _plugins(plugin_env, tmp_path, NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1")
    external = [row for row in plugins.values() if row["source"] != "builtin"]
    assert external and all(row["status"] == "blocked" for row in external)


@pytest.mark.parametrize("how", ["flag-before", "flag-after", "env"])
def test_strict_mode_fails_on_any_broken_plugin(
    plugin_env: VirtualEnv, tmp_path: Path, how: str
) -> None:
    """Strict mode turns a plugin failure into a non-zero exit naming the plugin."""
    if how == "flag-before":
        result = plugin_env.cli("--strict", "tools", cwd=tmp_path)
    elif how == "flag-after":
        result = plugin_env.cli("tools", "--strict", cwd=tmp_path)
    else:
        result = plugin_env.cli("tools", cwd=tmp_path, env={"NANOBOT_STRICT_PLUGINS": "1"})
    assert result.returncode == 1
    assert "nbtest-" in result.stderr


def test_strict_mode_passes_when_broken_plugins_are_blocked(
    plugin_env: VirtualEnv, tmp_path: Path
) -> None:
    """Strict mode is satisfied once the broken plugins, and one of two of a name, are blocked."""
    result = plugin_env.cli(
        "--strict",
        "tools",
        "--json",
        cwd=tmp_path,
        env={"NANOBOT_BLOCK": f"{BROKEN},nbtest-twin-b"},
    )
    assert result.returncode == 0, result.stderr
    assert {"twin_a", "clash"} <= {row["name"] for row in json.loads(result.stdout)}


def test_section_stage_and_runtime_hooks_from_a_distribution(
    plugin_env: VirtualEnv, tmp_path: Path
) -> None:
    """A third-party section is placed by its order key and its stage joins the transform phase."""
    prompt = _json(plugin_env.cli("prompt", "--json", cwd=tmp_path))
    names = [s["name"] for s in prompt["sections"]]
    assert names.index("bootstrap") < names.index("house_rules") < names.index("tool_contract")
    assert "Always answer in haiku." in prompt["prompt"]
    house = next(s for s in prompt["sections"] if s["name"] == "house_rules")
    assert house["plugin"] == "hooks"
    plugins = _plugins(plugin_env, tmp_path)
    stages = {
        c["name"]: c
        for row in plugins.values()
        for c in row["contributions"]
        if c["kind"] == "stage" and "shadowed_by" not in c
    }
    mine = stages["count_messages"]
    assert mine["phase"] == "transform"
    assert stages["sanitize_content"]["position"] < mine["position"]
    assert mine["position"] < stages["offload_results"]["position"]


def test_a_renamed_copy_of_a_builtin_stage_gives_the_same_result(
    plugin_env: VirtualEnv, tmp_path: Path
) -> None:
    """Installed as a distribution with the built-in's declarations, it governs the same way."""
    history = [
        {"role": "user", "content": "half an emoji \ud83d"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "   "},
        {"role": "tool", "content": "x", "tool_call_ids": ["b"]},
        {"role": "assistant", "content": "done"},
    ]
    session = tmp_path / "session.jsonl"
    session.write_text("".join(json.dumps(m) + "\n" for m in history), encoding="utf-8")
    builtin = _json(
        plugin_env.cli(
            "govern",
            str(session),
            "--json",
            cwd=tmp_path,
            env={"NANOBOT_BLOCK": "nbtest-stagecopy"},
        )
    )
    (tmp_path / "nanobot.toml").write_text(
        '[governance]\ndisabled = ["sanitize_content"]\n', encoding="utf-8"
    )
    copied = _json(plugin_env.cli("govern", str(session), "--json", cwd=tmp_path))
    assert copied["messages"] == builtin["messages"]
    entries = {e["stage"]: e for e in copied["report"]}
    theirs = {e["stage"]: e for e in builtin["report"]}["sanitize_content"]
    assert entries["sanitize_copy"]["changed"] and theirs["changed"]
    assert entries["sanitize_copy"]["details"] == theirs["details"]
    # The disabled built-in is reported as disabled, the same way everywhere, and does nothing.
    assert entries["sanitize_content"]["details"] == ["disabled in config (governance.disabled)"]
    assert not entries["sanitize_content"]["changed"]
    assert not entries["final"]["changed"]
