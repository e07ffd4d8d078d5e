"""``nanobot-core tools``: the listing runs no tool code of its own, so no tool can end it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import install_plugin, plugin_env, run_cli

PLUGIN = "flagreads"  # the module and distribution `install_plugin` writes, version 0.1

# ``read_only`` answers the core's checked reader (`read_tool`, at registration) and
# raises on any other read, as a property with state of its own may on its next read.
SOURCE = """
import sys
from typing import Any

from nanobot_core import Tool, hookimpl


class Flaky(Tool):
    name = "flaky"
    description = "Its read_only raises when read again after registration."
    parameters: dict[str, Any] = {"type": "object", "properties": {}}

    @property
    def read_only(self) -> bool:
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_name == "read_tool":
                return True
            frame = frame.f_back
        raise RuntimeError("read_only read again")

    async def execute(self) -> str:
        return "ran"


@hookimpl
def nanobot_tools(ctx: Any) -> list[Any]:
    return [Flaky()]
"""


def test_tools_lists_the_flags_read_at_registration_when_a_flag_raises_later(
    tmp_path: Path,
) -> None:
    """A flag property that raises when read again ends neither ``tools`` nor ``tools --json``."""
    site = install_plugin(tmp_path / "site", PLUGIN, SOURCE)
    env = plugin_env(site, PLUGIN)
    work = tmp_path / "work"
    work.mkdir()
    listed = run_cli("tools", "--json", cwd=work, env=env, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert "Traceback" not in listed.stderr and "read again" not in listed.stderr
    (row,) = [row for row in json.loads(listed.stdout) if row["name"] == "flaky"]
    assert row["plugin"] == PLUGIN and row["version"] == "0.1"
    assert (row["read_only"], row["exclusive"], row["concurrency_safe"]) == (True, False, True)
    text = run_cli("tools", cwd=work, env=env, timeout=60)
    assert text.returncode == 0, text.stderr
    (line,) = [line for line in text.stdout.splitlines() if line.startswith("flaky ")]
    assert line.split()[1:3] == [PLUGIN, "read_only,concurrency_safe"]


RAISING = "attrraise"

# One tool's ``read_only`` raises whenever it is read; the plugin's other tool is plain.
RAISING_SOURCE = """
from typing import Any

from nanobot_core import Tool, hookimpl


class Broken(Tool):
    name = "broken"
    description = "Its read_only raises."
    parameters: dict[str, Any] = {"type": "object", "properties": {}}

    @property
    def read_only(self) -> bool:
        raise RuntimeError("no flag today")

    async def execute(self) -> str:
        return "ran"


class Plain(Tool):
    name = "plain"
    description = "Plain attributes."
    parameters: dict[str, Any] = {"type": "object", "properties": {}}
    read_only = True

    async def execute(self) -> str:
        return "ran"


@hookimpl
def nanobot_tools(ctx: Any) -> list[Any]:
    return [Broken(), Plain()]
"""


def test_tools_names_a_tool_left_out_for_an_attribute_that_raises(tmp_path: Path) -> None:
    """``tools --json`` lists the plugin's other tools; the one whose read_only raises is left
    out, the warning naming plugin, distribution, version and attribute, with no traceback."""
    site = install_plugin(tmp_path / "site", RAISING, RAISING_SOURCE)
    env = plugin_env(site, RAISING)
    work = tmp_path / "work"
    work.mkdir()
    listed = run_cli("tools", "--json", cwd=work, env=env, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert "Traceback" not in listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert "broken" not in rows and rows["plain"]["plugin"] == RAISING
    (warning,) = [line for line in listed.stderr.splitlines() if "left out" in line]
    assert f"plugin '{RAISING}' from {RAISING} 0.1" in warning
    assert "tool 'broken' left out: reading its read_only raised RuntimeError: no flag today" in (
        warning
    )


CHANGING = "namechange"

# The tool's name is another at each read: ``changing1``, ``changing2``...
CHANGING_SOURCE = """
from typing import Any

from nanobot_core import Tool, hookimpl


class Changing(Tool):
    description = "Its name changes at each read."
    parameters: dict[str, Any] = {"type": "object", "properties": {}}
    reads = 0

    @property
    def name(self) -> str:
        type(self).reads += 1
        return f"changing{type(self).reads}"

    async def execute(self) -> str:
        return "ran"


@hookimpl
def nanobot_tools(ctx: Any) -> list[Any]:
    return [Changing()]
"""


def test_tools_lists_a_tool_whose_name_changes_by_its_one_reading(tmp_path: Path) -> None:
    """A name property answering another name at each read is read once: ``tools --json``
    lists it by that name under its plugin (before, the registry's name was a later
    reading than the contribution's, and the command ended with a KeyError)."""
    site = install_plugin(tmp_path / "site", CHANGING, CHANGING_SOURCE)
    env = plugin_env(site, CHANGING)
    work = tmp_path / "work"
    work.mkdir()
    listed = run_cli("tools", "--json", cwd=work, env=env, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert "Traceback" not in listed.stderr
    rows = [row for row in json.loads(listed.stdout) if row["plugin"] == CHANGING]
    assert [row["name"] for row in rows] == ["changing1"]
