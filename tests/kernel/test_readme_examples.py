"""The README's tool, stage and section examples run as written."""

from __future__ import annotations

import json
import os
import re
import tomllib
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nanobot_core import SectionContext
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.testing import assert_tool_contract, govern_and_check, run_tool
from tests.helpers import REPO_ROOT, clean_env, run_cli


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


def test_the_tool_examples_entry_points_load_every_tool_as_written(tmp_path: Path) -> None:
    """Installed with the README's entry points, the example gives `weather` and `word_count`."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("class Weather(Tool)")
    block = re.findall(
        r"```python\n(.*?)```", text[text.rindex("```python", 0, start) :], re.DOTALL
    )
    entry_points = tomllib.loads(re.findall(r"```toml\n(.*?)```", text[start:], re.DOTALL)[0])
    tools = entry_points["project"]["entry-points"]["nanobot.tools"]
    site = tmp_path / "site"
    (site / "my_package").mkdir(parents=True)
    (site / "my_package" / "__init__.py").write_text(block[0], encoding="utf-8")
    info = site / "my_package-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-package\nVersion: 1.0\n")
    lines = "".join(f"{name} = {target}\n" for name, target in tools.items())
    (info / "entry_points.txt").write_text(f"[nanobot.tools]\n{lines}", encoding="utf-8")
    env = clean_env(
        PYTHONPATH=os.pathsep.join([str(site), str(REPO_ROOT)]), NANOBOT_PLUGINS="my-package"
    )
    listed = run_cli("--strict", "tools", "--json", cwd=tmp_path, env=env)
    assert listed.returncode == 0, listed.stderr
    mine = [row["name"] for row in json.loads(listed.stdout) if row["distribution"] == "my-package"]
    assert mine == ["weather", "word_count"]


def test_the_builtin_stage_table_is_the_pipeline_order() -> None:
    """The README's table of built-in stages gives each phase's built-ins in the order they run."""
    from nanobot_core.governance import builtin_stages

    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(repair|transform|budget)` \| (.*) \|$", text, re.MULTILINE))
    shown = {phase: re.findall(r"`([a-z_]+)`", cell) for phase, cell in rows.items()}
    expected: dict[str, list[str]] = {"repair": [], "transform": [], "budget": []}
    for stage in builtin_stages():
        expected[stage.phase].append(stage.name)
    assert shown == expected


def test_the_builtin_sections_are_named_with_their_order() -> None:
    """The README names every built-in prompt section with its order, as `name` (order)."""
    from nanobot_core.prompt import builtin_sections

    text = " ".join((REPO_ROOT / "README.md").read_text(encoding="utf-8").split())
    sentence = text.split("The built-in sections are ", 1)[1].split(";", 1)[0]
    shown = {name: float(order) for name, order in re.findall(r"`(\w+)` \((\d+)\)", sentence)}
    assert shown == {section.name: section.order for section in builtin_sections()}
