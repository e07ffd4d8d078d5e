"""The README's tool, stage and section examples run as written."""

from __future__ import annotations

import re
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nanobot_core import SectionContext
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.testing import assert_tool_contract, govern_and_check, run_tool
from tests.helpers import REPO_ROOT


def _example(marker: str) -> types.ModuleType:
    """The README's one Python block holding `marker`, run as a module."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if marker in b]
    module = types.ModuleType(f"readme_example_{abs(hash(marker))}")
    exec(compile(block, "README.md", "exec"), module.__dict__)
    return module


def test_the_tool_examples_follow_the_contract_and_run() -> None:
    """`Weather` and `word_count` pass the tool contract and run on what a model sends."""
    example = _example("class Weather(Tool)")
    for tool in (example.Weather, example.word_count):
        assert_tool_contract(tool)
    assert run_tool(example.Weather, '{"city": "Oslo", "days": "3"}') == "Oslo: sunny for 3 day(s)"
    assert run_tool(example.word_count, '{"text": "one two three"') == "3"
    assert run_tool(example.Weather, {"city": "Oslo", "days": 0}).is_error


def test_the_stage_example_is_placed_and_drops_debug_notes(
    nanobot_register: Callable[..., Any], nanobot_manager: PluginManager
) -> None:
    """The stage example loads, runs before `offload_results` and drops the debug notes."""
    example = _example("def drop_debug_notes")
    assert nanobot_register(example, "debug-notes").status == "loaded"
    names = nanobot_manager.governor().stage_names()
    assert names.index("drop_debug_notes") < names.index("offload_results")
    (stage,) = example.nanobot_governance_stages(None)
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "[debug] cache warm"},
        {"role": "assistant", "content": "hello"},
    ]
    result = govern_and_check(history, stages=[stage])
    assert [m["content"] for m in result.messages] == ["hi", "hello"]


def test_the_section_example_renders_rules_md(
    nanobot_register: Callable[..., Any], nanobot_manager: PluginManager, tmp_path: Path
) -> None:
    """The section example puts the workspace's RULES.md between bootstrap and tool_contract."""
    example = _example("def render_rules")
    assert nanobot_register(example, "rules").status == "loaded"
    (tmp_path / "RULES.md").write_text("Answer in French.", encoding="utf-8")
    ctx = SectionContext(
        workspace=tmp_path, channel=None, session=None, config=nanobot_manager.config
    )
    built = nanobot_manager.prompt_builder().build(ctx)
    assert [s.name for s in built.sections if not s.skipped] == [
        "identity",
        "rules",
        "tool_contract",
    ]
    assert "Answer in French." in built.text
