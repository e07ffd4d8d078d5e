"""Sections contributed through the hook reach the prompt with their plugin's name."""

from __future__ import annotations

from pathlib import Path

from nanobot_core.config import Config
from nanobot_core.hookspecs import hookimpl
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.prompt import Section, SectionContext


class _HouseRules:
    @hookimpl
    def nanobot_prompt_sections(self, ctx: object) -> list[Section]:
        return [
            Section(name="house_rules", order=250, render=lambda c: "Answer in haiku."),
            Section(name="identity", order=1, render=lambda c: "I am an impostor."),
        ]


def test_a_plugin_section_is_placed_by_its_order_key_and_labelled(tmp_path: Path) -> None:
    """A section with key 250 lands between bootstrap and tool_contract, named by its plugin."""
    manager = PluginManager(Config(), workspace=tmp_path, autoload=False).load()
    manager.register(_HouseRules(), "house")
    built = manager.prompt_builder().build(SectionContext(workspace=tmp_path))
    names = [r.name for r in built.sections]
    assert names.index("bootstrap") < names.index("house_rules") < names.index("tool_contract")
    house = next(r for r in built.sections if r.name == "house_rules")
    assert (house.plugin, house.skipped) == ("house", False)
    assert "Answer in haiku." in built.text


def test_a_plugin_cannot_replace_a_builtin_section(tmp_path: Path) -> None:
    """A plugin section named identity does not displace the built-in one."""
    manager = PluginManager(Config(), workspace=tmp_path, autoload=False).load()
    manager.register(_HouseRules(), "house")
    built = manager.prompt_builder().build(SectionContext(workspace=tmp_path))
    assert "I am an impostor." not in built.text
    assert built.text.startswith("# Identity\n")
    identity = [r for r in built.sections if r.name == "identity" and not r.skipped]
    assert [r.plugin for r in identity] == ["builtin:prompt"]


class _Answers:
    """A section plugin whose hook returns what it is given."""

    def __init__(self, answer: object) -> None:
        self.answer = answer

    @hookimpl
    def nanobot_prompt_sections(self, ctx: object) -> object:
        return self.answer


def test_none_is_no_sections_and_a_tuple_is_taken_as_a_list(tmp_path: Path) -> None:
    """A hook may return None (nothing) or a tuple of sections, and stays loaded either way."""
    manager = PluginManager(Config(), workspace=tmp_path, autoload=False).load()
    manager.register(_Answers(None), "quiet")
    section = Section(name="tupled", order=250, render=lambda c: "From a tuple.")
    manager.register(_Answers((section,)), "tupled_plugin")
    built = manager.prompt_builder().build(SectionContext(workspace=tmp_path))
    assert "From a tuple." in built.text
    statuses = {r.info.name: r.status for r in manager.records()}
    assert statuses["quiet"] == statuses["tupled_plugin"] == "loaded"


def test_a_hook_answer_that_is_no_list_marks_the_plugin_failed(tmp_path: Path) -> None:
    """A section hook returning a single Section, not a list, fails its plugin, named."""
    manager = PluginManager(Config(), workspace=tmp_path, autoload=False).load()
    section = Section(name="lonely", order=250, render=lambda c: "Alone.")
    manager.register(_Answers(section), "lonely_plugin")
    built = manager.prompt_builder().build(SectionContext(workspace=tmp_path))
    assert "Alone." not in built.text
    record = next(r for r in manager.records() if r.info.name == "lonely_plugin")
    assert record.status == "failed"
    assert "expected a list" in (record.error or "")
