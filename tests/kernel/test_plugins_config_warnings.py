"""`nanobot-core plugins` warns once of each piece of config that names nothing it has."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from nanobot_core.config import Config, PluginsConfig, ToolsConfig
from nanobot_core.hookspecs import hookimpl
from nanobot_core.kernel.manager import PluginManager
from tests.helpers import clean_env, install_plugin, plugin_env, run_cli

# Config naming a stage, sections and a tool no plugin has: each is a warning when the
# governor, the prompt builder or the tool registry is built.
STALE = """\
[tools]
disabled = ["gone_tool"]

[governance]
disabled = ["no_such_stage"]

[governance.stages.gone_stage]
limit = 3

[prompt]
disabled = ["gone_section"]

[prompt.order]
moved_section = 5
"""

WARNINGS = {
    ("unknown stage name in governance.disabled", "no_such_stage"),
    ("options for an unknown stage in governance.stages", "gone_stage"),
    ("unknown section name in prompt config", "gone_section"),
    ("unknown section name in prompt config", "moved_section"),
    ("unknown tool name in tools.disabled", "gone_tool"),
}


@pytest.mark.parametrize("as_json", [False, True])
def test_each_stale_config_warning_is_logged_once(tmp_path: Path, as_json: bool) -> None:
    """A real `plugins` run (text or --json) logs each stale-config warning exactly once."""
    (tmp_path / "nanobot.toml").write_text(STALE, encoding="utf-8")
    args = ["--log-format", "json", "plugins", *(["--json"] if as_json else [])]
    result = run_cli(*args, cwd=tmp_path, env=clean_env(NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1"))
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stderr.splitlines() if line.strip()]
    said = Counter(
        (record["event"], record["name"])
        for record in records
        if record["level"] == "warning" and "name" in record
    )
    assert said == dict.fromkeys(WARNINGS, 1)
    if not as_json:
        assert "governance pipeline: strip_placeholders -> " in result.stdout


# Every key a name in which may match nothing, each naming something no plugin has; the
# allow-list names no installed plugin either, so whatever is installed stays out.
EVERY_STALE_KEY = (
    """\
[plugins]
block = ["gone_plugin"]
allow = ["gone_allowed"]
disabled_builtins = ["builtin:gone"]

[plugins.overrides]
gone_override = ["read_file"]
"""
    + "\n"
    + STALE
)

# The same names, each set by an environment variable: (event, name) -> the variable.
BY_VARIABLE = {
    ("plugin name in block/allow list matches no installed plugin", "gone_plugin"): (
        "NANOBOT_BLOCK",
        "gone_plugin",
    ),
    ("plugin name in block/allow list matches no installed plugin", "gone_allowed"): (
        "NANOBOT_PLUGINS",
        "gone_allowed",
    ),
    ("unknown built-in plugin in plugins.disabled_builtins", "builtin:gone"): (
        "NANOBOT_PLUGINS__DISABLED_BUILTINS",
        '["builtin:gone"]',
    ),
    ("plugin name in plugins.overrides matches no installed plugin", "gone_override"): (
        "NANOBOT_PLUGINS__OVERRIDES__GONE_OVERRIDE",
        '["read_file"]',
    ),
    ("unknown tool name in tools.disabled", "gone_tool"): (
        "NANOBOT_TOOLS__DISABLED",
        '["gone_tool"]',
    ),
    ("unknown stage name in governance.disabled", "no_such_stage"): (
        "NANOBOT_GOVERNANCE__DISABLED",
        '["no_such_stage"]',
    ),
    ("options for an unknown stage in governance.stages", "gone_stage"): (
        "NANOBOT_GOVERNANCE__STAGES__GONE_STAGE__LIMIT",
        "3",
    ),
    ("unknown section name in prompt config", "gone_section"): (
        "NANOBOT_PROMPT__DISABLED",
        '["gone_section"]',
    ),
    ("unknown section name in prompt config", "moved_section"): (
        "NANOBOT_PROMPT__ORDER__MOVED_SECTION",
        "5",
    ),
}


def _sources(tmp_path: Path, **env: str) -> dict[tuple[str, str], list[str | None]]:
    """What a real `plugins --json` run's warnings say set each name, by (event, name)."""
    args = ["--log-format", "json", "plugins", "--json"]
    result = run_cli(*args, cwd=tmp_path, env=clean_env(**env))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    said: dict[tuple[str, str], list[str | None]] = {}
    for line in result.stderr.splitlines():
        record = json.loads(line)
        if record["level"] == "warning" and "name" in record:
            said.setdefault((record["event"], record["name"]), []).append(record.get("source"))
    return said


def test_each_stale_config_warning_names_the_file_that_set_it(tmp_path: Path) -> None:
    """Each warning about a name that matches nothing names the config file that set it."""
    (tmp_path / "nanobot.toml").write_text(EVERY_STALE_KEY, encoding="utf-8")
    config_file = str(tmp_path / "nanobot.toml")
    assert _sources(tmp_path) == {key: [config_file] for key in BY_VARIABLE}


def test_each_stale_config_warning_names_the_variable_that_set_it(tmp_path: Path) -> None:
    """Each such warning, the name set by an environment variable, names the variable."""
    said = _sources(tmp_path, **dict(BY_VARIABLE.values()))
    assert said == {key: [f"environment variable {var}"] for key, (var, _) in BY_VARIABLE.items()}


# The config key each warning names, as its `key` field: a list by its key, an entry of a
# table by the entry's key (what a file or a NANOBOT_* variable sets).
KEYS = {
    ("plugin name in block/allow list matches no installed plugin", "gone_plugin"): (
        "plugins.block"
    ),
    ("plugin name in block/allow list matches no installed plugin", "gone_allowed"): (
        "plugins.allow"
    ),
    ("unknown built-in plugin in plugins.disabled_builtins", "builtin:gone"): (
        "plugins.disabled_builtins"
    ),
    ("plugin name in plugins.overrides matches no installed plugin", "gone_override"): (
        "plugins.overrides.gone_override"
    ),
    ("unknown tool name in tools.disabled", "gone_tool"): "tools.disabled",
    ("unknown stage name in governance.disabled", "no_such_stage"): "governance.disabled",
    ("options for an unknown stage in governance.stages", "gone_stage"): (
        "governance.stages.gone_stage"
    ),
    ("unknown section name in prompt config", "gone_section"): "prompt.disabled",
    ("unknown section name in prompt config", "moved_section"): "prompt.order.moved_section",
}


def test_each_stale_config_warning_names_the_key_in_one_field(tmp_path: Path) -> None:
    """Every warning about a name that matches nothing names its config key as `key`."""
    (tmp_path / "nanobot.toml").write_text(EVERY_STALE_KEY, encoding="utf-8")
    args = ["--log-format", "json", "plugins", "--json"]
    result = run_cli(*args, cwd=tmp_path, env=clean_env())
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stderr.splitlines()]
    said = {
        (record["event"], record["name"]): record.get("key")
        for record in records
        if record["level"] == "warning" and "name" in record
    }
    assert said == KEYS
    assert not [record for record in records if "setting" in record]


# -- a tools.disabled name when a plugin failed ---------------------------------------------

FAILED_EVENT = (
    "tool name in tools.disabled not contributed by any loaded plugin; a plugin failed to load"
)


class _RaisesInTools:
    """A plugin whose tools hook raises: it fails as a whole, and no tool of it is known."""

    @hookimpl
    def nanobot_tools(self, ctx: Any) -> list[Any]:
        raise RuntimeError("the search index is gone")


def _tool_warnings(
    names: list[str], tmp_path: Path, *plugins: object
) -> list[MutableMapping[str, Any]]:
    """The warnings about `tools.disabled` logged as the registry is built, `plugins` registered."""
    config = Config(plugins=PluginsConfig(disable_autoload=True), tools=ToolsConfig(disabled=names))
    manager = PluginManager(config, workspace=tmp_path).load()
    for index, plugin in enumerate(plugins):
        manager.register(plugin, f"breaker{index}", distribution="nb-breaker", version="2.0")
    with capture_logs() as logs:
        manager.tool_registry()
    return [e for e in logs if e.get("key") == "tools.disabled" and e["log_level"] == "warning"]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(names=st.lists(st.text(min_size=1, max_size=12), max_size=4, unique=True))
def test_a_disabled_name_matching_no_tool_names_the_plugin_that_failed(
    tmp_path: Path, names: list[str]
) -> None:
    """With a plugin failed in its tools hook, each name no tool has names it, not "unknown"."""
    builtin = {c.name for c in _loaded_tools(tmp_path)}
    warned = _tool_warnings(names, tmp_path, _RaisesInTools())
    expected = sorted(set(names) - builtin)
    assert [e["name"] for e in warned] == expected
    for entry in warned:
        assert entry["event"] == FAILED_EVENT
        assert entry["failed_plugins"] == ["plugin 'breaker0' from nb-breaker 2.0"]
    # Without the failed plugin, the same names are unknown, as they were.
    plain = _tool_warnings(names, tmp_path)
    assert [(e["event"], e["name"]) for e in plain] == [
        ("unknown tool name in tools.disabled", name) for name in expected
    ]


def _loaded_tools(tmp_path: Path) -> list[Any]:
    """The tools of the built-in plugins, none disabled."""
    config = Config(plugins=PluginsConfig(disable_autoload=True))
    return PluginManager(config, workspace=tmp_path).load().contributions("tool")


BROKEN_ON_IMPORT = """\
raise RuntimeError("cannot start: the search index is gone")
"""


def test_a_disabled_name_when_a_plugin_fails_on_import_names_it_with_its_version(
    tmp_path: Path,
) -> None:
    """A real `tools` run with an installed plugin that raises on import names it in the warning."""
    site = install_plugin(tmp_path / "site", "brokensearch", BROKEN_ON_IMPORT)
    work = tmp_path / "work"
    work.mkdir()
    config_file = work / "nanobot.toml"
    config_file.write_text('[tools]\ndisabled = ["web_search"]\n', encoding="utf-8")
    result = run_cli(
        "--log-format", "json", "tools", "--json", cwd=work, env=plugin_env(site, "brokensearch")
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    records = [json.loads(line) for line in result.stderr.splitlines()]
    (failed,) = [r for r in records if r["event"] == "plugin failed"]
    assert failed["plugin"] == "brokensearch" and failed["version"] == "0.1"
    (warning,) = [r for r in records if r.get("key") == "tools.disabled"]
    assert warning == {
        "event": FAILED_EVENT,
        "level": "warning",
        "timestamp": warning["timestamp"],
        "name": "web_search",
        "key": "tools.disabled",
        "source": str(config_file),
        "failed_plugins": ["plugin 'brokensearch' from brokensearch 0.1"],
    }
