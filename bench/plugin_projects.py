"""Thirty trivial tool plugins, each its own distribution with one ``nanobot.tools`` entry point.

They are written the way ``nanobot-core new-plugin`` writes a tool plugin, so the
CLI start-up benchmark discovers, imports and lists real installed distributions.
"""

from __future__ import annotations

from pathlib import Path

PLUGIN_COUNT = 30

_PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "nanobot-bench-tool-{index:02d}"
version = "0.1.0"
description = "Benchmark plugin {index:02d}: one trivial tool."
requires-python = ">=3.11"
dependencies = ["nanobot-core"]

[project.entry-points."nanobot.tools"]
bench_tool_{index:02d} = "nanobot_bench_tool_{index:02d}:BenchTool{index:02d}"

[tool.hatch.build.targets.wheel]
packages = ["nanobot_bench_tool_{index:02d}"]
"""

_MODULE = '''\
"""Benchmark plugin {index:02d}: one trivial tool."""

from __future__ import annotations

from nanobot_core import Tool


class BenchTool{index:02d}(Tool):
    """Echo a text back."""

    name = "bench_tool_{index:02d}"
    description = "Echo the text back unchanged (benchmark plugin {index:02d})."
    parameters = {{
        "type": "object",
        "properties": {{"text": {{"type": "string", "description": "The text to echo."}}}},
        "required": ["text"],
    }}
    read_only = True

    async def execute(self, text: str) -> str:
        return text
'''


def write_plugin_projects(root: Path, count: int = PLUGIN_COUNT) -> list[Path]:
    """Write `count` plugin projects under `root` (overwriting) and return their directories."""
    projects: list[Path] = []
    for index in range(1, count + 1):
        project = root / f"nanobot-bench-tool-{index:02d}"
        package = project / f"nanobot_bench_tool_{index:02d}"
        package.mkdir(parents=True, exist_ok=True)
        (project / "pyproject.toml").write_text(_PYPROJECT.format(index=index), encoding="utf-8")
        (package / "__init__.py").write_text(_MODULE.format(index=index), encoding="utf-8")
        projects.append(project)
    return projects
