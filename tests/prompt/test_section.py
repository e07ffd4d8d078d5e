"""The Section value type rejects what could never render."""

from __future__ import annotations

from pathlib import Path

import pytest

from nanobot_core import Config, PluginContext
from nanobot_core.prompt import Section, SectionContext, build_default_prompt_builder


def _text(ctx: object) -> str:
    return "text"


@pytest.mark.parametrize("name", ["", "   ", None, 3])
def test_section_name_must_be_a_non_empty_string(name: object) -> None:
    """A section without a usable name cannot be created."""
    with pytest.raises(ValueError, match="name"):
        Section(name=name, order=1, render=_text)  # type: ignore[arg-type]


@pytest.mark.parametrize("order", [True, float("nan"), float("inf"), "100", None])
def test_section_order_must_be_a_finite_number(order: object) -> None:
    """Booleans, NaN, infinities and strings are refused as order keys."""
    with pytest.raises(ValueError, match="order"):
        Section(name="x", order=order, render=_text)  # type: ignore[arg-type]


def test_section_render_must_be_callable() -> None:
    """A render that is not callable is refused when the section is created."""
    with pytest.raises(TypeError, match="callable"):
        Section(name="x", order=1, render="text")  # type: ignore[arg-type]


def test_integer_order_is_accepted() -> None:
    """An int order key is fine (plugins write order=250)."""
    assert Section(name="x", order=250, render=_text).order == 250


def test_a_workspace_given_as_a_str_renders_the_same_prompt_as_its_path(tmp_path: Path) -> None:
    """`SectionContext(workspace="...")` reads the workspace files, not leaving sections out."""
    (tmp_path / "AGENTS.md").write_text("Answer in French.", encoding="utf-8")
    builder = build_default_prompt_builder(Config())
    as_text = builder.build(SectionContext(workspace=str(tmp_path)))
    assert as_text.text == builder.build(SectionContext(workspace=tmp_path)).text
    assert "Answer in French." in as_text.text
    assert [s.reason for s in as_text.sections if s.reason and s.reason.startswith("raised")] == []


def test_a_plugin_context_takes_a_str_workspace_as_its_path() -> None:
    """`PluginContext(workspace="...")` holds a Path, which hooks join paths onto."""
    assert PluginContext(workspace="somewhere").workspace / "x" == Path("somewhere", "x")


def test_a_workspace_that_is_no_path_is_refused_naming_it() -> None:
    """A number as the workspace is a TypeError saying a path is expected."""
    with pytest.raises(TypeError, match="workspace must be a path"):
        SectionContext(workspace=3)  # type: ignore[arg-type]


def test_section_context_refuses_what_is_no_config(tmp_path: Path) -> None:
    """A config that is not a Config (None, a dict) is refused when the context is made."""
    for wrong in (None, {"prompt": {}}):
        with pytest.raises(TypeError, match="SectionContext: config must be a Config"):
            SectionContext(workspace=tmp_path, config=wrong)  # type: ignore[arg-type]
