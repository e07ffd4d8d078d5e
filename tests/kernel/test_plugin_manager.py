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


class _LabelledCounter:
    def __init__(self, label: str) -> None:
        self.label = label

    def count_text(self, text: str) -> int:
        return len(text)


class _Counter:
    def __init__(self, label: str) -> None:
        self.label = label

    @hookimpl
    def nanobot_token_counter(self, ctx: Any) -> _LabelledCounter:
        return _LabelledCounter(self.label)


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
    assert manager.token_counter().counter.label == "beta"


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


def test_one_object_under_two_entry_points_fails_the_second_naming_the_first(
    tmp_path: Path,
) -> None:
    """A module two entry points load fails the second on one line naming the first plugin."""
    shared = _Lines("from the shared module")
    manager = _manager(tmp_path)
    first = manager.register(shared, "tools-ep", distribution="nb-shared", version="2.0")
    second = manager.register(shared, "plugins-ep", distribution="nb-shared", version="2.0")
    assert first.status == "loaded"
    assert second.status == "failed"
    assert second.error == (
        "loads the same object as plugin 'tools-ep' from nb-shared 2.0, which is registered "
        "already (each entry point needs a plugin object of its own)"
    )
    # The first is untouched: still registered, its hook still called once.
    assert manager.runtime_lines().count("from the shared module") == 1


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


def test_tool_with_an_unusable_timeout_is_left_out_under_its_plugin(tmp_path: Path) -> None:
    """A tool whose timeout is no number is left out, listed under its loaded plugin."""
    manager = _manager(tmp_path)
    manager.register(_TimedTools(), "timed", distribution="timed-dist", version="2.1")
    assert "slow" not in manager.tool_registry()
    assert manager.failures() == []
    (record,) = [r for r in manager.records() if r.info.name == "timed"]
    assert record.status == "loaded" and record.info.describe() == (
        "plugin 'timed' from timed-dist 2.1"
    )
    assert record.problems == [
        "tool 'slow' left out: its timeout is '30', expected a positive number of seconds or None"
    ]


def test_describe_names_the_plugin_its_distribution_and_version() -> None:
    """`PluginInfo.describe` gives the name with what is known of where it comes from."""
    from nanobot_core.kernel.records import PluginInfo

    assert PluginInfo("builtin:governance", "builtin", "nanobot-core", "1.0").describe() == (
        "built-in plugin 'builtin:governance' from nanobot-core 1.0"
    )
    full = PluginInfo("notes", "nanobot.plugins", "nanobot-notes", "2.1.0")
    assert full.describe() == "plugin 'notes' from nanobot-notes 2.1.0"
    assert PluginInfo("notes", "nanobot.plugins", None, "2.1.0").describe() == (
        "plugin 'notes' version 2.1.0"
    )
    assert PluginInfo("notes", "nanobot.plugins", "nanobot-notes").describe() == (
        "plugin 'notes' from nanobot-notes"
    )
    assert PluginInfo("notes", "nanobot.plugins").describe() == "plugin 'notes'"


class _Answers:
    """A plugin whose token counter and result store answer what it is given."""

    def __init__(self, counter: Any = None, store: Any = None) -> None:
        self.counter, self.store = counter, store

    @hookimpl
    def nanobot_token_counter(self, ctx: Any) -> Any:
        return self.counter

    @hookimpl
    def nanobot_result_store(self, ctx: Any) -> Any:
        return self.store


@pytest.mark.parametrize("answer", ["tiktoken", 42, object()])
def test_a_counter_without_count_text_fails_its_plugin(tmp_path: Path, answer: Any) -> None:
    """A counter the budget cannot call fails its plugin by name; the next counter is used."""
    from nanobot_core.governance.tokens import EstimateCounter

    manager = _manager(tmp_path)
    manager.register(_Answers(counter=answer), "odd", distribution="odd-counter", version="0.3")
    assert type(manager.token_counter()) is EstimateCounter
    failed = {r.info.name: r.error for r in manager.failures()}
    assert "nanobot_token_counter returned a" in (failed["odd"] or "")
    assert "has no count_text() method" in (failed["odd"] or "")


def test_a_store_without_put_fails_its_plugin(tmp_path: Path) -> None:
    """A result store without ``put`` fails its plugin; the built-in store is used instead."""
    from nanobot_core.governance.store import DirectoryResultStore

    manager = _manager(tmp_path)
    manager.register(_Answers(store="s3://bucket"), "odd", distribution="odd-store")
    assert isinstance(manager.result_store(), DirectoryResultStore)
    failed = {r.info.name: r.error for r in manager.failures()}
    assert failed["odd"] == "nanobot_result_store returned a str, which has no put() method"


def test_a_plugin_counter_is_checked_and_named(tmp_path: Path) -> None:
    """A plugin's counter comes wrapped in the check that names the plugin and its version."""
    from nanobot_core.governance.tokens import CheckedCounter

    manager = _manager(tmp_path)
    counter = _LabelledCounter("mine")
    manager.register(_Answers(counter=counter), "mine", distribution="my-counter", version="2.0")
    checked = manager.token_counter()
    assert type(checked) is CheckedCounter and checked.counter is counter
    assert checked.owner == "plugin 'mine' from my-counter 2.0"


class _Turns:
    """Answers each turn with the next of `answers`; also offers a tool, to see it go."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.asked = 0

    @hookimpl
    def nanobot_runtime_context(self, ctx: Any) -> Any:
        self.asked += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    @hookimpl
    def nanobot_tools(self, ctx: Any) -> list[Any]:
        from nanobot_core import tool

        @tool(read_only=True)
        def turn_probe() -> str:
            """Say ok."""
            return "ok"

        return [turn_probe]


def test_runtime_lines_that_are_not_strings_cost_only_that_turn(tmp_path: Path) -> None:
    """Lines of the wrong type are dropped for one turn; the plugin stays and is asked again."""
    manager = _manager(tmp_path)
    plugin = _Turns([1, 2], None, ["branch: main"])
    manager.register(plugin, "turns", distribution="turns-dist")
    assert manager.runtime_lines() == []
    assert manager.runtime_lines() == []
    assert manager.runtime_lines() == ["branch: main"]
    assert plugin.asked == 3
    assert manager.failures() == []
    assert "turn_probe" in [c.name for c in manager.contributions("tool")]


def test_a_runtime_context_hook_that_raises_fails_its_whole_plugin(tmp_path: Path) -> None:
    """Raising is no per-turn drop: the plugin is failed, never asked again, its tools gone."""
    manager = _manager(tmp_path)
    plugin = _Turns(RuntimeError("no git"), ["branch: main"])
    manager.register(plugin, "turns", distribution="turns-dist")
    assert "turn_probe" in [c.name for c in manager.contributions("tool")]
    assert manager.runtime_lines() == []
    assert manager.runtime_lines() == []
    assert plugin.asked == 1
    (failed,) = manager.failures()
    assert failed.error == "raised in nanobot_runtime_context: RuntimeError: no git"
    assert "turn_probe" not in [c.name for c in manager.contributions("tool")]


class _SectionsRaise:
    @hookimpl
    def nanobot_prompt_sections(self, ctx: Any) -> list[Any]:
        raise RuntimeError("no sections")


def test_records_after_a_later_kind_fails_a_plugin_keep_the_earlier_kinds(
    tmp_path: Path,
) -> None:
    """A plugin failing while sections are collected leaves the tools and stages in the records."""
    expected = {
        r.info.name: [c.to_json() for c in r.contributions] for r in _manager(tmp_path).records()
    }
    manager = _manager(tmp_path)
    manager.register(_SectionsRaise(), "sections-raise", distribution="sections-raise")
    records = manager.records()
    assert {r.info.name: [c.to_json() for c in r.contributions] for r in records} == {
        **expected,
        "sections-raise": [],
    }
    assert expected["builtin:tools"] and expected["builtin:governance"]
    (failed,) = manager.failures()
    assert failed.error == "raised in nanobot_prompt_sections: RuntimeError: no sections"


def test_a_config_that_is_no_config_is_refused_saying_how_to_make_one() -> None:
    """A dict of settings is a TypeError naming `load_config`, not an AttributeError from inside."""
    with pytest.raises(TypeError, match=r"config must be a Config \(load_config\(\) or Config"):
        PluginManager({"tools": {"timeout": 5}})  # type: ignore[arg-type]


def test_a_workspace_that_is_no_path_is_refused_and_a_str_is_its_path(tmp_path: Path) -> None:
    """A number as the workspace is a TypeError saying a path is expected; a str is a path."""
    with pytest.raises(TypeError, match="workspace must be a path"):
        PluginManager(Config(), workspace=3)  # type: ignore[arg-type]
    assert PluginManager(Config(), workspace=str(tmp_path)).context.workspace == tmp_path.resolve()
