"""The block and allow lists: a name that matches no installed plugin is warned about, once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nanobot_core import hookimpl, tool
from nanobot_core.config import Config, PluginsConfig
from nanobot_core.kernel.manager import PluginManager
from tests.helpers import install_plugin, plugin_env, run_cli

WARNING = "plugin name in block/allow list matches no installed plugin"
SOURCE = """
from nanobot_core import hookimpl

@hookimpl
def nanobot_runtime_context(ctx):
    return []
"""


def _plugins(tmp_path: Path, **env: str) -> str:
    site = tmp_path / "site"
    if not site.exists():
        install_plugin(site, "quietplug", SOURCE)
    result = run_cli(
        "plugins", "--json", cwd=tmp_path, env=plugin_env(site, "quietplug", **env), timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stderr


def test_a_blocked_name_that_is_installed_is_not_warned_about(tmp_path: Path) -> None:
    """Blocking an installed plugin blocks it without a warning that it matches nothing."""
    assert WARNING not in _plugins(tmp_path, NANOBOT_BLOCK="quietplug")


def test_a_blocked_name_that_matches_nothing_is_warned_about(tmp_path: Path) -> None:
    """A blocked name no installed plugin has is warned about, naming it."""
    stderr = _plugins(tmp_path, NANOBOT_BLOCK="absentplug")
    assert WARNING in stderr
    assert "absentplug" in stderr


def test_with_autoload_off_the_lists_are_not_warned_about(tmp_path: Path) -> None:
    """With autoload off nothing is matched against the lists, so no name is said to match none."""
    stderr = _plugins(tmp_path, NANOBOT_BLOCK="quietplug", NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1")
    assert WARNING not in stderr


OVERRIDE_WARNING = "plugin name in plugins.overrides matches no installed plugin"


def _with_overrides(tmp_path: Path, overrides: str) -> str:
    (tmp_path / "nanobot.toml").write_text(f"[plugins.overrides]\n{overrides}\n", encoding="utf-8")
    return _plugins(tmp_path)


def test_an_override_of_an_uninstalled_plugin_is_warned_about(tmp_path: Path) -> None:
    """An override left behind by an uninstalled plugin is warned about, naming it and its key."""
    stderr = _with_overrides(tmp_path, 'absentplug = ["read_file"]')
    assert OVERRIDE_WARNING in stderr
    assert "name=absentplug" in stderr and "key=plugins.overrides.absentplug" in stderr


def test_an_override_of_an_installed_plugin_is_not_warned_about(tmp_path: Path) -> None:
    """An override naming an installed plugin is not said to match nothing."""
    assert OVERRIDE_WARNING not in _with_overrides(tmp_path, 'quietplug = ["read_file"]')


def test_an_unmatched_blocked_name_is_warned_about_with_its_key(tmp_path: Path) -> None:
    """The warning about a blocked name that matches nothing says which list holds it."""
    assert "key=plugins.block" in _plugins(tmp_path, NANOBOT_BLOCK="absentplug")


class _OwnReadFile:
    """A plugin an application registers itself, offering its own read_file."""

    @hookimpl
    def nanobot_tools(self, ctx: Any) -> list[Any]:
        @tool
        def read_file(path: str) -> str:
            """Read a file the application's way."""
            return path

        return [read_file]


def test_an_override_of_a_plugin_registered_by_the_application_is_not_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An override naming a plugin registered in process (autoload on) is used, not said stale."""
    settings = PluginsConfig(allow=[], overrides={"appplug": ["read_file"], "goneplug": ["grep"]})
    manager = PluginManager(Config(plugins=settings), workspace=tmp_path)
    manager.load()
    manager.register(_OwnReadFile(), "appplug", distribution="app-tools")
    (winner,) = [c for c in manager.contributions("tool") if c.name == "read_file"]
    assert winner.plugin.name == "appplug"
    manager.records()
    stale = [line for line in capsys.readouterr().err.splitlines() if OVERRIDE_WARNING in line]
    assert len(stale) == 1 and "name=goneplug" in stale[0]
