"""Warnings about a plugin's contributions and hook results name the plugin's version."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from nanobot_core.config import Config, PluginsConfig
from nanobot_core.governance import Stage, StageOutcome
from nanobot_core.hookspecs import hookimpl
from nanobot_core.kernel.context import ToolCallEvent
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.prompt import Section


class _Rules:
    @hookimpl
    def nanobot_prompt_sections(self, ctx: object) -> list[Section]:
        return [Section(name="rules", order=250, render=lambda c: "rules")]


class _Shaky:
    @hookimpl
    def nanobot_governance_stages(self, ctx: object) -> list[Stage]:
        return [Stage("snip_history", lambda m, c: StageOutcome.unchanged(m))]


class _Odd:
    @hookimpl
    def nanobot_runtime_context(self, ctx: object) -> int:
        return 42


class _Jumpy:
    @hookimpl
    def nanobot_before_tool_call(self, ctx: object, call: ToolCallEvent) -> str | None:
        raise RuntimeError(f"no {call.tool} today")

    @hookimpl
    def nanobot_after_tool_call(self, ctx: object, call: ToolCallEvent, result: object) -> None:
        raise ValueError("after")


def _manager(tmp_path: Path, config: Config | None = None) -> PluginManager:
    return PluginManager(config or Config(), workspace=tmp_path, autoload=False).load()


def _warned(logs: list[dict[str, Any]], event: str) -> dict[str, Any]:
    (entry,) = [e for e in logs if e["event"] == event]
    return entry


def test_a_section_name_clash_names_both_plugins_with_their_versions(tmp_path: Path) -> None:
    """Of two plugins' sections with one name, the warning gives winner and loser with versions."""
    manager = _manager(tmp_path)
    manager.register(_Rules(), "b", distribution="nanobot-b", version="2.0")
    manager.register(_Rules(), "a", distribution="nanobot-a", version="1.0")
    with capture_logs() as logs:
        manager.contributions("section")
    clash = _warned(logs, "name clash: first contribution wins")
    assert (clash["kind"], clash["name"]) == ("section", "rules")
    assert clash["winner"] == "plugin 'a' from nanobot-a 1.0"
    assert clash["loser"] == "plugin 'b' from nanobot-b 2.0"


def test_a_stage_shadowed_by_a_builtin_names_the_plugin_version(tmp_path: Path) -> None:
    """A plugin's stage named as a built-in's is reported with both plugins' versions."""
    manager = _manager(tmp_path)
    manager.register(_Shaky(), "shaky", distribution="nanobot-shaky", version="1.2.3")
    with capture_logs() as logs:
        manager.contributions("stage")
    clash = _warned(logs, "name clash: first contribution wins")
    assert clash["winner"].startswith("built-in plugin 'builtin:governance' from nanobot-core ")
    assert clash["loser"] == "plugin 'shaky' from nanobot-shaky 1.2.3"


def test_a_builtin_stage_overridden_by_config_names_the_plugin_version(tmp_path: Path) -> None:
    """`plugins.overrides` letting a plugin take a built-in stage's name: said with its version."""
    config = Config(plugins=PluginsConfig(overrides={"nanobot-shaky": ["snip_history"]}))
    manager = _manager(tmp_path, config)
    manager.register(_Shaky(), "shaky", distribution="nanobot-shaky", version="1.2.3")
    with capture_logs() as logs:
        manager.contributions("stage")
    overridden = _warned(logs, "built-in overridden by configuration")
    assert overridden["plugin"] == "plugin 'shaky' from nanobot-shaky 1.2.3"


def test_runtime_lines_of_the_wrong_type_name_the_plugin_version(tmp_path: Path) -> None:
    """The error for a runtime-context hook returning no list of strings names the version."""
    manager = _manager(tmp_path)
    manager.register(_Odd(), "odd", distribution="nanobot-odd", version="0.3")
    with capture_logs() as logs:
        assert manager.runtime_lines() == []
    dropped = _warned(logs, "runtime-context hook returned non-strings; lines dropped")
    assert (dropped["plugin"], dropped["returned"]) == ("plugin 'odd' from nanobot-odd 0.3", "int")


class _Unspeakable:
    def __str__(self) -> str:
        raise SystemExit(3)


class _Denies:
    def __init__(self, answer: object) -> None:
        self.answer = answer

    @hookimpl
    def nanobot_before_tool_call(self, ctx: object, call: ToolCallEvent) -> object:
        return self.answer


_NOT_REASONS = st.one_of(
    st.booleans(),
    st.integers(),
    st.floats(),
    st.binary(max_size=4),
    st.lists(st.text(max_size=4), max_size=2),
    st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2),
    st.builds(_Unspeakable),
)


@given(answer=_NOT_REASONS)
@example(answer=_Unspeakable())
@settings(max_examples=40, deadline=None, database=None)
def test_a_before_hook_answering_no_string_denies_naming_the_plugin_version(answer: object) -> None:
    """A before-tool-call answer that is not None nor a string denies the call with a reason
    naming the plugin's version and the type, never running the answer's own __str__."""
    with tempfile.TemporaryDirectory() as folder:
        manager = _manager(Path(folder))
        manager.register(_Denies(answer), "guard", distribution="nanobot-guard", version="1.1")
        with capture_logs() as logs:
            reason = manager.tool_call_hooks().before(ToolCallEvent(tool="grep", arguments={}))
    kind = type(answer).__name__
    assert reason == (
        f"its hook returned {kind}, not a reason (denied by plugin 'guard' from nanobot-guard 1.1)"
    )
    said = _warned(logs, "tool-call hook returned no reason string; call denied")
    assert (said["plugin"], said["returned"]) == ("plugin 'guard' from nanobot-guard 1.1", kind)


def test_a_before_hook_reason_string_denies_naming_the_plugin_version(tmp_path: Path) -> None:
    """A reason string denies the call, quoted with the plugin's name and version."""
    manager = _manager(tmp_path)
    manager.register(_Denies("not on Sundays"), "guard", distribution="nanobot-guard", version="1")
    reason = manager.tool_call_hooks().before(ToolCallEvent(tool="grep", arguments={}))
    assert reason == "not on Sundays (denied by plugin 'guard' from nanobot-guard 1)"


def test_a_raising_tool_call_hook_is_logged_naming_the_plugin_version(tmp_path: Path) -> None:
    """A before or after tool-call hook that raises is logged with its plugin's version and
    ignored: the call is allowed."""
    manager = _manager(tmp_path)
    manager.register(_Jumpy(), "jumpy", distribution="nanobot-jumpy", version="4.5")
    hooks = manager.tool_call_hooks()
    call = ToolCallEvent(tool="read_file", arguments={"path": "a"})
    with capture_logs() as logs:
        assert hooks.before(call) is None
        hooks.after(call, None)
    raised = [e for e in logs if e["event"] == "tool-call hook raised; ignored"]
    assert [(e["hook"], e["plugin"], e["error"]) for e in raised] == [
        (
            "nanobot_before_tool_call",
            "plugin 'jumpy' from nanobot-jumpy 4.5",
            "RuntimeError: no read_file today",
        ),
        ("nanobot_after_tool_call", "plugin 'jumpy' from nanobot-jumpy 4.5", "ValueError: after"),
    ]
    assert all("distribution" not in e and e["log_level"] == "error" for e in raised)
    assert {r.info.name: r.status for r in manager.records()}["jumpy"] == "loaded"


class _Unreadable(RuntimeError):
    def __str__(self) -> str:
        raise SystemExit(4)


class _Unreadably:
    @hookimpl
    def nanobot_before_tool_call(self, ctx: object, call: ToolCallEvent) -> str | None:
        raise _Unreadable


def test_a_tool_call_hook_whose_error_message_exits_is_logged_by_its_type(tmp_path: Path) -> None:
    """A hook's exception whose __str__ raises SystemExit is logged by type, naming the plugin."""
    manager = _manager(tmp_path)
    manager.register(_Unreadably(), "jumpy", distribution="nanobot-jumpy", version="4.5")
    call = ToolCallEvent(tool="read_file", arguments={"path": "a"})
    with capture_logs() as logs:
        assert manager.tool_call_hooks().before(call) is None
    (raised,) = [e for e in logs if e["event"] == "tool-call hook raised; ignored"]
    assert raised["plugin"] == "plugin 'jumpy' from nanobot-jumpy 4.5"
    assert raised["error"] == "_Unreadable (its message could not be read: SystemExit)"
