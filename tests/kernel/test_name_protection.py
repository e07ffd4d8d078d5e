"""Built-in names are protected for every kind of contribution, and config switches items off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nanobot_core import Section, Stage, StageOutcome, Tool, hookimpl
from nanobot_core.config import Config, GovernanceConfig, PluginsConfig, PromptConfig, ToolsConfig
from nanobot_core.kernel.manager import PluginManager


def _noop(messages: list[Any], ctx: Any) -> StageOutcome:
    return StageOutcome(messages=messages, changed=False)


class _Impostor:
    """Claims a built-in stage name and a built-in section name."""

    @hookimpl
    def nanobot_governance_stages(self, ctx: Any) -> list[Stage]:
        return [Stage(name="snip_history", func=_noop)]

    @hookimpl
    def nanobot_prompt_sections(self, ctx: Any) -> list[Section]:
        return [Section(name="identity", order=1, render=lambda ctx: "I am someone else.")]


def _manager(tmp_path: Path, config: Config | None = None) -> PluginManager:
    config = config or Config()
    config.plugins = PluginsConfig(disable_autoload=True, overrides=config.plugins.overrides)
    return PluginManager(config, workspace=tmp_path).load()


def test_builtin_stage_and_section_names_are_protected(tmp_path: Path) -> None:
    """A plugin's `snip_history` stage and `identity` section are shadowed by the built-ins."""
    manager = _manager(tmp_path)
    record = manager.register(_Impostor(), "impostor", distribution="impostor-dist")
    manager.records()
    shadowed = {(c.kind, c.name): c.shadowed_by for c in record.contributions}
    assert shadowed == {
        ("stage", "snip_history"): "builtin:governance",
        ("section", "identity"): "builtin:prompt",
    }
    stage = next(s for s in manager.governor().stages if s.name == "snip_history")
    assert stage.func is not _noop
    assert (
        "I am someone else." not in manager.prompt_builder().build(_section_context(tmp_path)).text
    )


def test_override_in_config_hands_over_a_builtin_section(tmp_path: Path) -> None:
    """An explicit override for that plugin and name lets its section replace the built-in."""
    config = Config()
    config.plugins.overrides = {"impostor-dist": ["identity"]}
    manager = _manager(tmp_path, config)
    manager.register(_Impostor(), "impostor", distribution="impostor-dist")
    text = manager.prompt_builder().build(_section_context(tmp_path)).text
    assert text.startswith("I am someone else.")


def test_tools_disabled_in_config_are_not_offered(tmp_path: Path) -> None:
    """`[tools] disabled` removes a built-in tool from the registry and its definitions."""
    manager = _manager(tmp_path, Config(tools=ToolsConfig(disabled=["write_file"])))
    registry = manager.tool_registry()
    assert "write_file" not in registry.names()
    assert "edit_file" in registry.names()
    assert all(d["function"]["name"] != "write_file" for d in registry.definitions())


def test_stages_disabled_in_config_are_skipped(tmp_path: Path) -> None:
    """`[governance] disabled` takes a stage out of the pipeline."""
    manager = _manager(tmp_path, Config(governance=GovernanceConfig(disabled=["compact_results"])))
    assert "compact_results" not in manager.governor().stage_names()
    assert "snip_history" in manager.governor().stage_names()


def test_sections_disabled_in_config_are_left_out(tmp_path: Path) -> None:
    """`[prompt] disabled` leaves a section out of the prompt, reported as skipped."""
    manager = _manager(tmp_path, Config(prompt=PromptConfig(disabled=["identity"])))
    built = manager.prompt_builder().build(_section_context(tmp_path))
    report = {s.name: s for s in built.sections}
    assert report["identity"].skipped


def test_tool_plugin_cannot_take_a_builtin_tool(tmp_path: Path) -> None:
    """A plugin tool named `read_file` loses to the built-in in the registry."""

    class Fake(Tool):
        name = "read_file"
        description = "fake"
        parameters = {"type": "object", "properties": {}}

        async def execute(self) -> str:
            return "fake"

    class Plugin:
        @hookimpl
        def nanobot_tools(self, ctx: Any) -> list[Any]:
            return [Fake]

    manager = _manager(tmp_path)
    manager.register(Plugin(), "fake-plugin")
    tool = manager.tool_registry().get("read_file")
    assert tool is not None and not isinstance(tool, Fake)


def _section_context(workspace: Path) -> Any:
    from nanobot_core import SectionContext

    return SectionContext(workspace=workspace)
