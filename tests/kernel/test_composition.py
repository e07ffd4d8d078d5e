"""One composition root: the manager and the plain builders agree on disabled items."""

from __future__ import annotations

from pathlib import Path

from nanobot_core import Governor, PluginManager, PromptBuilder, ToolRegistry
from nanobot_core.config import Config, GovernanceConfig, PluginsConfig, PromptConfig, ToolsConfig
from nanobot_core.governance import build_governor
from nanobot_core.prompt import build_default_prompt_builder


def _manager(tmp_path: Path, config: Config) -> PluginManager:
    return PluginManager(config, workspace=tmp_path).load()


def _config(**parts: object) -> Config:
    return Config(plugins=PluginsConfig(disable_autoload=True), **parts)  # type: ignore[arg-type]


def test_a_disabled_stage_is_reported_the_same_by_both_roots(tmp_path: Path) -> None:
    """`Governor.from_plugins` and `build_governor` both report a disabled stage as disabled."""
    config = _config(governance=GovernanceConfig(disabled=["sanitize_content"]))
    history = [{"role": "user", "content": "hi"}]
    from_plugins = Governor.from_plugins(_manager(tmp_path, config)).govern(history)
    plain = build_governor(config, tmp_path).govern(history)
    assert from_plugins.report.to_json() == plain.report.to_json()
    entry = next(e for e in plain.report.to_json() if e["stage"] == "sanitize_content")
    assert entry["details"] == ["disabled in config (governance.disabled)"]


def test_the_manager_governor_is_the_composition_root(tmp_path: Path) -> None:
    """`pm.governor()` keeps disabled stages out of `stages` and reports them, like the root."""
    config = _config(governance=GovernanceConfig(disabled=["snip_history"]))
    manager = _manager(tmp_path, config)
    governor = manager.governor()
    assert "snip_history" not in governor.stage_names()
    report = governor.govern([{"role": "user", "content": "hi"}]).report.to_json()
    entry = next(e for e in report if e["stage"] == "snip_history")
    assert entry["details"] == ["disabled in config (governance.disabled)"]


def test_a_disabled_tool_is_left_out_and_named(tmp_path: Path) -> None:
    """`ToolRegistry.from_plugins` leaves a disabled tool out and lists it in `disabled`."""
    config = _config(tools=ToolsConfig(disabled=["grep"]))
    manager = _manager(tmp_path, config)
    registry = ToolRegistry.from_plugins(manager)
    assert "grep" not in registry.names()
    assert registry.disabled == ["grep"]
    assert manager.tool_registry().names() == registry.names()


def test_a_disabled_section_is_reported_the_same_by_both_roots(tmp_path: Path) -> None:
    """`PromptBuilder.from_plugins` and the default builder skip a disabled section alike."""
    from nanobot_core.prompt import SectionContext

    config = _config(prompt=PromptConfig(disabled=["memory"]))
    ctx = SectionContext(workspace=tmp_path, config=config)
    from_plugins = PromptBuilder.from_plugins(_manager(tmp_path, config)).build(ctx)
    plain = build_default_prompt_builder(config).build(ctx)
    assert from_plugins.text == plain.text
    memory = [r for r in from_plugins.sections if r.name == "memory"]
    assert memory == [r for r in plain.sections if r.name == "memory"]
    assert [(r.skipped, r.reason) for r in memory] == [(True, "disabled in config")]
