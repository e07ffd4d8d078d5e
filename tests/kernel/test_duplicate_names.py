"""A plugin name is held by one plugin: a second of that name is refused, the first kept whole."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nanobot_core import hookimpl, tool
from nanobot_core.config import Config, PluginsConfig
from nanobot_core.errors import PluginError
from nanobot_core.kernel.manager import PluginManager
from tests.helpers import install_plugin, plugin_env, run_cli, run_python

TAKEN = (
    "its name is taken by {holder}, registered first (two plugins cannot share a name, "
    "which config and listings know a plugin by): {todo}"
)


def _manager(tmp_path: Path, *, strict: bool = False) -> PluginManager:
    config = Config(plugins=PluginsConfig(disable_autoload=True, strict=strict))
    return PluginManager(config, workspace=tmp_path).load()


class _Counter:
    def __init__(self, label: str) -> None:
        self.label = label

    def count_text(self, text: str) -> int:
        return len(text)


class _Whole:
    """A plugin with a line, a tool and a token counter, each carrying its label."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.counter = _Counter(label)

    @hookimpl
    def nanobot_runtime_context(self, ctx: Any) -> list[str]:
        return [self.label]

    @hookimpl
    def nanobot_tools(self, ctx: Any) -> list[Any]:
        @tool(name=f"tool_{self.label}", read_only=True)
        def labelled() -> str:
            """Say whose tool this is."""
            return "ok"

        return [labelled]

    @hookimpl
    def nanobot_token_counter(self, ctx: Any) -> _Counter:
        return self.counter


def test_a_second_registration_of_a_name_is_refused_and_the_first_keeps_everything(
    tmp_path: Path,
) -> None:
    """Registering a taken name again fails the newcomer; the first keeps record, tool, counter."""
    manager = _manager(tmp_path)
    first = manager.register(_Whole("first"), "notes")
    counter = manager.token_counter()
    second = manager.register(_Whole("second"), "notes")
    assert first.status == "loaded"
    assert second.status == "failed"
    assert second.error == TAKEN.format(
        holder="plugin 'notes'", todo="register it under another name"
    )
    assert manager.runtime_lines() == ["first"]
    registry = manager.tool_registry()
    assert "tool_first" in registry and "tool_second" not in registry
    # The first plugin's counter is still the one used, with its memo.
    assert manager.token_counter() is counter
    assert counter.counter.label == "first"
    rows = [(r.info.name, r.status) for r in manager.records() if not r.info.builtin]
    assert rows == [("notes", "loaded"), ("notes", "failed")]
    assert [c.name for c in first.contributions] == ["tool_first"]
    assert second.contributions == [] and second.hooks == []


def test_the_same_object_registered_twice_under_one_name_is_called_once(tmp_path: Path) -> None:
    """One object registered twice under one name stays registered once, under its record."""
    manager = _manager(tmp_path)
    plugin = _Whole("only")
    first = manager.register(plugin, "notes", distribution="nb-notes", version="1.0")
    second = manager.register(plugin, "notes", distribution="nb-notes", version="1.0")
    assert (first.status, second.status) == ("loaded", "failed")
    assert "taken by plugin 'notes' from nb-notes 1.0" in (second.error or "")
    assert manager.runtime_lines() == ["only"]
    assert manager.record_of(first.info) is first


def test_in_strict_mode_the_second_raises_naming_both_distributions(tmp_path: Path) -> None:
    """Strict mode raises PluginError naming both plugins' distributions and versions."""
    manager = _manager(tmp_path, strict=True)
    manager.register(_Whole("first"), "notes", distribution="nb-a", version="1.0")
    with pytest.raises(PluginError) as raised:
        manager.register(_Whole("second"), "notes", distribution="nb-b", version="2.0")
    assert str(raised.value) == "plugin 'notes' from nb-b 2.0 failed: " + TAKEN.format(
        holder="plugin 'notes' from nb-a 1.0",
        todo="register it under another name, or block nb-a in plugins.block",
    )
    assert manager.runtime_lines() == ["first"]


def test_a_builtin_plugin_name_is_refused(tmp_path: Path) -> None:
    """A plugin registered under a built-in plugin's name is refused; the built-in stays."""
    manager = _manager(tmp_path)
    record = manager.register(_Whole("impostor"), "builtin:tools")
    assert record.status == "failed"
    assert "taken by built-in plugin 'builtin:tools' from nanobot-core" in (record.error or "")
    assert "a built-in plugin's name is the core's" in (record.error or "")
    assert "read_file" in manager.tool_registry()
    assert "tool_impostor" not in manager.tool_registry()


class _FailsOnce(_Whole):
    @hookimpl
    def nanobot_runtime_context(self, ctx: Any) -> list[str]:
        raise RuntimeError("boom")


def test_a_name_a_failed_plugin_let_go_of_can_be_registered_again(tmp_path: Path) -> None:
    """A plugin failed (and unregistered) frees its name: one registered again under it loads."""
    manager = _manager(tmp_path)
    broken = manager.register(_FailsOnce("broken"), "notes")
    assert manager.token_counter().counter.label == "broken"
    manager.runtime_lines()
    assert broken.status == "failed"
    again = manager.register(_Whole("again"), "notes")
    assert again.status == "loaded"
    assert manager.runtime_lines() == ["again"]
    assert manager.token_counter().counter.label == "again"
    assert "tool_again" in manager.tool_registry()


SOURCE = """
from nanobot_core import hookimpl

@hookimpl
def nanobot_runtime_context(ctx):
    return [{label!r}]
"""

REGISTER_BY_HAND = """
import json, sys
from nanobot_core import hookimpl
from nanobot_core.kernel.manager import PluginManager

class Mine:
    @hookimpl
    def nanobot_runtime_context(self, ctx):
        return ["by hand"]

manager = PluginManager()
distribution = sys.argv[1] or None
mine = manager.register(Mine(), "shared", distribution=distribution)
print(json.dumps({
    "lines": manager.runtime_lines(),
    "records": [r.to_json() for r in manager.records() if not r.info.builtin],
}))
"""


@pytest.mark.parametrize("distribution", ["", "nbdup_a"])
def test_a_plugin_registered_by_hand_under_an_entry_points_name_is_refused(
    tmp_path: Path, distribution: str
) -> None:
    """An installed plugin keeps its name against one registered by hand, said how to fix."""
    site = install_plugin(
        tmp_path / "site", "nbdup_a", SOURCE.format(label="installed"), plugin="shared"
    )
    result = run_python(REGISTER_BY_HAND, distribution, env=plugin_env(site, "shared"), check=True)
    answer = json.loads(result.stdout)
    assert answer["lines"] == ["installed"]
    # A plugin of no distribution lists first: compared by record, not by place.
    (installed,) = [r for r in answer["records"] if r["status"] == "loaded"]
    (mine,) = [r for r in answer["records"] if r["status"] == "failed"]
    assert installed["distribution"] == "nbdup_a"
    assert mine["distribution"] == (distribution or None)
    assert mine["error"] == TAKEN.format(
        holder="plugin 'shared' from nbdup_a 0.1",
        todo="register it under another name, or block nbdup_a in plugins.block",
    )


def _twins(tmp_path: Path) -> dict[str, str]:
    """Two distributions, each with a `twin` entry point; the second in order found first."""
    a = install_plugin(
        tmp_path / "a", "nbtwin_a", SOURCE.format(label="a"), plugin="twin", version="1.0"
    )
    b = install_plugin(
        tmp_path / "b", "nbtwin_b", SOURCE.format(label="b"), plugin="twin", version="2.0"
    )
    env = plugin_env(b, "twin")
    env["PYTHONPATH"] = os.pathsep.join([str(b), str(a), env["PYTHONPATH"]])
    return env


TWIN_ERROR = TAKEN.format(
    holder="plugin 'twin' from nbtwin_a 1.0",
    todo="uninstall nbtwin_a or nbtwin_b, or block one of them by its distribution name "
    "in plugins.block",
)


def test_two_distributions_of_one_plugin_name_keep_the_first_in_canonical_order(
    tmp_path: Path,
) -> None:
    """Of two installed plugins named alike, the first by distribution loads, found first or not;
    the listing says why the other did not, naming both."""
    env = _twins(tmp_path)
    result = run_cli("plugins", "--json", cwd=tmp_path, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    rows = [row for row in json.loads(result.stdout) if row["source"] != "builtin"]
    assert [(r["distribution"], r["status"]) for r in rows] == [
        ("nbtwin_a", "loaded"),
        ("nbtwin_b", "failed"),
    ]
    assert rows[0]["hooks"] == ["nanobot_runtime_context"]
    assert rows[1]["error"] == TWIN_ERROR
    text = run_cli("plugins", cwd=tmp_path, env=env, timeout=60)
    assert "twin (nbtwin_b 2.0) [nanobot.plugins] failed\n    error: " + TWIN_ERROR in text.stdout


def test_two_distributions_of_one_plugin_name_in_strict_mode_are_an_error(
    tmp_path: Path,
) -> None:
    """With --strict the refusal is fatal, said on one line naming both, without a traceback."""
    result = run_cli("--strict", "plugins", cwd=tmp_path, env=_twins(tmp_path), timeout=60)
    assert result.returncode != 0
    assert "plugin 'twin' from nbtwin_b 2.0 failed: " + TWIN_ERROR in result.stderr
    assert "Traceback" not in result.stderr


def test_blocking_one_of_two_distributions_lets_the_other_load(tmp_path: Path) -> None:
    """The advice works: blocking the first by its distribution name loads the second."""
    env = _twins(tmp_path)
    env["NANOBOT_BLOCK"] = "nbtwin_a"
    result = run_cli("plugins", "--json", cwd=tmp_path, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    rows = [row for row in json.loads(result.stdout) if row["source"] != "builtin"]
    assert [(r["distribution"], r["status"]) for r in rows] == [
        ("nbtwin_a", "blocked"),
        ("nbtwin_b", "loaded"),
    ]


def test_one_distributions_two_entry_points_of_one_name_keep_one(tmp_path: Path) -> None:
    """A distribution's `nanobot.plugins` and `nanobot.tools` entry points of one name: the first
    by group name loads, the other is refused, told to give the two names of their own."""
    site = install_plugin(tmp_path / "site", "nbboth", SOURCE.format(label="hooks"), plugin="both")
    (site / "nbboth.py").write_text(
        SOURCE.format(label="hooks")
        + "\nfrom nanobot_core import tool\n\n@tool(read_only=True)\n"
        + 'def both_tool() -> str:\n    """Say ok."""\n    return "ok"\n',
        encoding="utf-8",
    )
    (site / "nbboth-0.1.dist-info" / "entry_points.txt").write_text(
        "[nanobot.plugins]\nboth = nbboth\n\n[nanobot.tools]\nboth = nbboth:both_tool\n",
        encoding="utf-8",
    )
    result = run_cli("plugins", "--json", cwd=tmp_path, env=plugin_env(site, "both"), timeout=60)
    assert result.returncode == 0, result.stderr
    rows = [row for row in json.loads(result.stdout) if row["source"] != "builtin"]
    assert [(r["source"], r["status"]) for r in rows] == [
        ("nanobot.plugins", "loaded"),
        ("nanobot.tools", "failed"),
    ]
    assert rows[1]["error"] == TAKEN.format(
        holder="plugin 'both' from nbboth 0.1",
        todo="give the entry points of nbboth names of their own",
    )


class _Line:
    def __init__(self, label: str, *, raises: bool) -> None:
        self.label = label
        self.raises = raises

    @hookimpl
    def nanobot_runtime_context(self, ctx: Any) -> list[str]:
        if self.raises:
            raise RuntimeError(self.label)
        return [self.label]


_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("register"), st.sampled_from(["a", "b", "c"]), st.booleans()),
        st.tuples(st.just("call"), st.just(""), st.just(False)),
    ),
    max_size=12,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=_STEPS)
def test_each_name_answers_by_the_plugin_that_took_it_first(
    tmp_path: Path, steps: list[tuple[str, str, bool]]
) -> None:
    """Whatever is registered and fails, in any order, each name's hooks are its first live
    plugin's, called once, and no loaded plugin shares its name."""
    manager = _manager(tmp_path)
    holders: dict[str, _Line] = {}  # the model: each name's live plugin
    for index, (step, name, raises) in enumerate(steps):
        if step == "register":
            plugin = _Line(f"{name}{index}", raises=raises)
            record = manager.register(plugin, name)
            assert record.status == ("failed" if name in holders else "loaded")
            holders.setdefault(name, plugin)
        else:
            lines = manager.runtime_lines()
            assert sorted(lines) == sorted(p.label for p in holders.values() if not p.raises)
            holders = {n: p for n, p in holders.items() if not p.raises}
        loaded = [
            r for r in manager.records_so_far() if r.status == "loaded" and not r.info.builtin
        ]
        assert sorted(r.info.name for r in loaded) == sorted(holders)
        assert all(r.obj is holders[r.info.name] for r in loaded)
