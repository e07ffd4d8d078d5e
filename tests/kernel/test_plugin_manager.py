"""The plugin manager in process: canonical order, isolation, firstresult hooks, strict mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nanobot_core import hookimpl
from nanobot_core.config import Config, PluginsConfig
from nanobot_core.errors import PluginError
from nanobot_core.kernel.manager import PluginManager


def _manager(tmp_path: Path, **plugins: Any) -> PluginManager:
    config = Config(
        plugins=PluginsConfig(disable_autoload=True, strict=plugins.pop("strict", False))
    )
    return PluginManager(config, workspace=tmp_path).load()


class _Lines:
    def __init__(self, *lines: str) -> None:
        self.lines = list(lines)

    @hookimpl
    def nanobot_runtime_context(self, ctx: Any) -> list[str]:
        return self.lines


class _Raises:
    @hookimpl
    def nanobot_runtime_context(self, ctx: Any) -> list[str]:
        raise RuntimeError("boom")


class _Counter:
    def __init__(self, label: str) -> None:
        self.label = label

    @hookimpl
    def nanobot_token_counter(self, ctx: Any) -> str:
        return self.label


def test_builtins_are_registered_first(tmp_path: Path) -> None:
    """The built-in plugins come first in the listing, in their fixed order."""
    manager = _manager(tmp_path)
    manager.register(_Lines("x"), "aaa-first-alphabetically", distribution="aaa")
    names = [r.info.name for r in manager.records()]
    assert names[:5] == [
        "builtin:tools",
        "builtin:governance",
        "builtin:prompt",
        "builtin:providers",
        "builtin:sessions",
    ]
    assert names[5] == "aaa-first-alphabetically"


def test_collecting_order_is_by_distribution_not_registration(tmp_path: Path) -> None:
    """Lines from two plugins come in distribution-name order, whatever the registration order."""
    manager = _manager(tmp_path)
    manager.register(_Lines("from zeta"), "z", distribution="zeta")
    manager.register(_Lines("from alpha"), "a", distribution="alpha")
    assert manager.runtime_lines() == ["from alpha", "from zeta"]


def test_raising_hook_fails_only_that_plugin(tmp_path: Path) -> None:
    """A hook that raises marks its plugin failed and unregistered; the others still answer."""
    manager = _manager(tmp_path)
    manager.register(_Raises(), "bad", distribution="bad-dist", version="9.9")
    manager.register(_Lines("ok"), "good", distribution="good-dist")
    assert manager.runtime_lines() == ["ok"]
    failed = {r.info.name: r for r in manager.failures()}
    assert "boom" in (failed["bad"].error or "")
    assert failed["bad"].info.version == "9.9"
    assert manager.runtime_lines() == ["ok"]


def test_strict_mode_raises_naming_the_plugin(tmp_path: Path) -> None:
    """In strict mode a raising hook becomes a PluginError naming plugin and distribution."""
    manager = _manager(tmp_path, strict=True)
    manager.register(_Raises(), "bad", distribution="bad-dist", version="1.0")
    with pytest.raises(PluginError, match=r"'bad' from bad-dist 1\.0"):
        manager.runtime_lines()


def test_firstresult_asks_plugins_in_canonical_order_before_builtins(tmp_path: Path) -> None:
    """A token counter from a plugin wins over the built-in; between plugins, distribution order."""
    manager = _manager(tmp_path)
    manager.register(_Counter("zeta"), "z", distribution="zeta")
    manager.register(_Counter("beta"), "b", distribution="beta")
    assert manager.token_counter() == "beta"


def test_unknown_hook_name_fails_the_plugin(tmp_path: Path) -> None:
    """A plugin implementing a misspelt nanobot_ hook is failed instead of silently ignored."""

    class Typo:
        @hookimpl
        def nanobot_tool(self, ctx: Any) -> list[Any]:
            return []

    manager = _manager(tmp_path)
    record = manager.register(Typo(), "typo")
    assert record.status == "failed"
    assert "nanobot_tool" in (record.error or "")


class _TimedTools:
    @hookimpl
    def nanobot_tools(self, ctx: Any) -> list[Any]:
        from nanobot_core import Tool

        class Slow(Tool):
            name = "slow"
            description = "Slow."
            parameters: dict[str, Any] = {"type": "object"}
            timeout = "30"  # type: ignore[assignment]

            async def execute(self, **kwargs: Any) -> str:
                return "done"

        return [Slow]


def test_tool_with_an_unusable_timeout_fails_its_plugin_by_name(tmp_path: Path) -> None:
    """A tool whose timeout is no number fails its plugin, reported with name and version."""
    manager = _manager(tmp_path)
    manager.register(_TimedTools(), "timed", distribution="timed-dist", version="2.1")
    assert "slow" not in manager.tool_registry()
    (failed,) = manager.failures()
    assert failed.info.describe() == "plugin 'timed' from timed-dist 2.1"
    assert "tool 'slow': timeout must be a positive number of seconds" in (failed.error or "")


def test_origin_names_the_plugin_its_distribution_and_version() -> None:
    """`PluginInfo.origin` gives the name with what is known of where it comes from."""
    from nanobot_core.kernel.records import PluginInfo

    assert PluginInfo("builtin:governance", "builtin", "nanobot-core", "1.0").origin() == (
        "built-in plugin 'builtin:governance', nanobot-core 1.0"
    )
    full = PluginInfo("notes", "nanobot.plugins", "nanobot-notes", "2.1.0")
    assert full.origin() == "plugin 'notes', nanobot-notes 2.1.0"
    assert PluginInfo("notes", "nanobot.plugins", None, "2.1.0").origin() == (
        "plugin 'notes', version 2.1.0"
    )
    assert PluginInfo("notes", "nanobot.plugins", "nanobot-notes").origin() == (
        "plugin 'notes', nanobot-notes"
    )
    assert PluginInfo("notes", "nanobot.plugins").origin() == "plugin 'notes'"
