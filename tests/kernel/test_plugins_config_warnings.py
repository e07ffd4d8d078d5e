"""`nanobot-core plugins` warns once of each piece of config that names nothing it has."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import clean_env, run_cli

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
