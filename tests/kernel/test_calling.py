"""Hook calling: each implementation once per call, past failures; refused pluggy markers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pluggy
import pytest

from nanobot_core import PluginManager, hookimpl
from nanobot_core.config import Config, PluginsConfig
from nanobot_core.kernel.records import PluginInfo, PluginRecord


def _manager(tmp_path: Path) -> PluginManager:
    config = Config(plugins=PluginsConfig(disable_autoload=True))
    return PluginManager(config, workspace=tmp_path).load()


class _CountingLines:
    def __init__(self, line: str) -> None:
        self.line = line
        self.calls = 0

    @hookimpl
    def nanobot_runtime_context(self, ctx: Any) -> list[str]:
        self.calls += 1
        return [self.line]


class _RaisingLines:
    def __init__(self) -> None:
        self.calls = 0

    @hookimpl
    def nanobot_runtime_context(self, ctx: Any) -> list[str]:
        self.calls += 1
        raise RuntimeError("boom")


class _BadTools:
    def __init__(self) -> None:
        self.calls = 0

    @hookimpl
    def nanobot_tools(self, ctx: Any) -> Any:
        self.calls += 1
        return "not a list"


class _CountingTools:
    def __init__(self) -> None:
        self.calls = 0

    @hookimpl
    def nanobot_tools(self, ctx: Any) -> list[Any]:
        self.calls += 1
        return []


def test_a_failing_plugin_does_not_make_earlier_plugins_run_again(tmp_path: Path) -> None:
    """One runtime-lines call calls each plugin once, though a plugin in the middle raises."""
    manager = _manager(tmp_path)
    first, middle, last = _CountingLines("a"), _RaisingLines(), _CountingLines("c")
    manager.register(first, "first", distribution="a-first")
    manager.register(middle, "middle", distribution="b-middle")
    manager.register(last, "last", distribution="c-last")
    assert manager.runtime_lines() == ["a", "c"]
    assert (first.calls, middle.calls, last.calls) == (1, 1, 1)
    failed = {r.info.name: r.error for r in manager.records() if r.status == "failed"}
    assert failed == {"middle": "raised in nanobot_runtime_context: RuntimeError: boom"}


def test_a_bad_contribution_does_not_recollect_the_others(tmp_path: Path) -> None:
    """Collecting tools calls every plugin once although one returns the wrong type."""
    manager = _manager(tmp_path)
    before, bad, after = _CountingTools(), _BadTools(), _CountingTools()
    manager.register(before, "before", distribution="a")
    manager.register(bad, "bad", distribution="b")
    manager.register(after, "after", distribution="c")
    names = manager.tool_registry().names()
    assert "read_file" in names
    assert (before.calls, bad.calls, after.calls) == (1, 1, 1)
    record = next(r for r in manager.records() if r.info.name == "bad")
    assert record.status == "failed"
    assert record.error == "nanobot_tools returned str, expected a list"


class _Escape(BaseException):
    """Not an Exception, as some libraries' own escapes are."""


class _EscapingLines:
    def __init__(self, escape: BaseException) -> None:
        self.escape = escape

    @hookimpl
    def nanobot_runtime_context(self, ctx: Any) -> list[str]:
        raise self.escape


@pytest.mark.parametrize(
    ("escape", "said"),
    [
        (_Escape("out"), "_Escape: out"),
        (GeneratorExit(), "GeneratorExit"),
        (SystemExit(3), "SystemExit(3)"),
        (KeyboardInterrupt(), "KeyboardInterrupt"),
    ],
    ids=["custom", "generator-exit", "system-exit", "keyboard-interrupt"],
)
def test_a_hook_raising_any_base_exception_fails_only_its_plugin(
    tmp_path: Path, escape: BaseException, said: str
) -> None:
    """A BaseException that is no Exception fails the plugin by name; the others still run."""
    manager = _manager(tmp_path)
    manager.register(_EscapingLines(escape), "escaping", distribution="a-escaping")
    manager.register(_CountingLines("kept"), "kept", distribution="b-kept")
    assert manager.runtime_lines() == ["kept"]
    failed = {r.info.name: r.error for r in manager.records() if r.status == "failed"}
    assert failed == {
        "escaping": f"raised in nanobot_runtime_context: PluginEscapeError: raised {said}"
    }


class _Wrapper:
    @hookimpl(wrapper=True)
    def nanobot_runtime_context(self, ctx: Any) -> Iterator[None]:
        return (yield)


class _OldWrapper:
    @hookimpl(hookwrapper=True)
    def nanobot_runtime_context(self, ctx: Any) -> Iterator[None]:
        yield


class _TryFirst:
    @hookimpl(tryfirst=True)
    def nanobot_runtime_context(self, ctx: Any) -> list[str]:
        return ["first!"]


class _TryLast:
    @hookimpl(trylast=True)
    def nanobot_token_counter(self, ctx: Any) -> None:
        return None


@pytest.mark.parametrize(
    ("plugin", "marker", "hook"),
    [
        (_Wrapper(), "wrapper", "nanobot_runtime_context"),
        (_OldWrapper(), "hookwrapper", "nanobot_runtime_context"),
        (_TryFirst(), "tryfirst", "nanobot_runtime_context"),
        (_TryLast(), "trylast", "nanobot_token_counter"),
    ],
)
def test_ordering_and_wrapping_markers_are_refused_at_registration(
    tmp_path: Path, plugin: object, marker: str, hook: str
) -> None:
    """A wrapper or tryfirst/trylast implementation fails registration, naming hook and marker."""
    manager = _manager(tmp_path)
    record = manager.register(plugin, "marked", distribution="marked-dist", version="1.0")
    assert record.status == "failed"
    assert record.error is not None
    assert f"{hook} ({marker})" in record.error
    assert manager.runtime_lines() == []


def test_strict_mode_names_the_plugin_that_uses_a_refused_marker(tmp_path: Path) -> None:
    """In strict mode the refusal is a PluginError naming plugin, distribution and version."""
    from nanobot_core.errors import PluginError

    config = Config(plugins=PluginsConfig(disable_autoload=True, strict=True))
    manager = PluginManager(config, workspace=tmp_path).load()
    with pytest.raises(
        PluginError, match=r"plugin 'marked' from marked-dist 1\.0 failed.*tryfirst"
    ):
        manager.register(_TryFirst(), "marked", distribution="marked-dist", version="1.0")


def test_call_in_order_skips_a_record_failed_on_the_way() -> None:
    """A record no longer loaded when its turn comes is not called."""
    from nanobot_core import hookspecs
    from nanobot_core.kernel.calling import call_in_order

    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    first, second = _CountingLines("a"), _CountingLines("b")
    pm.register(first, name="first")
    pm.register(second, name="second")
    records = [
        PluginRecord(PluginInfo("first", "nanobot.plugins"), "loaded", obj=first),
        PluginRecord(PluginInfo("second", "nanobot.plugins"), "loaded", obj=second),
    ]
    values = []
    for outcome in call_in_order(pm, "nanobot_runtime_context", records, {"ctx": None}):
        values.append(outcome.value)
        records[1].status = "failed"
    assert values == [["a"]]
    assert (first.calls, second.calls) == (1, 0)
