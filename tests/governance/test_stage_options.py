"""Stage options: what a stage declares on `Stage.options`, checked once a governor is built."""

from __future__ import annotations

import ast
import inspect
import json
import re
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core import ConfigError, StageOption, hookimpl
from nanobot_core.config import Config, GovernanceConfig, PluginsConfig
from nanobot_core.governance import (
    Governor,
    Stage,
    StageContext,
    StageOutcome,
    build_governor,
    builtin_stages,
    stage,
)
from nanobot_core.governance.stages import BUILTIN_TABLE
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.kernel.records import core_version
from tests.governance.builders import turn

BUILTIN = f"built-in plugin 'builtin:governance' from nanobot-core {core_version()}"


def _builtins_with(**tables: dict[str, Any]) -> Governor:
    """A governor over the built-in stages, configured with these stage tables."""
    return Governor(builtin_stages(), config=GovernanceConfig(stages=dict(tables)))


def _manager(tmp_path: Path, **tables: dict[str, Any]) -> PluginManager:
    """A plugin manager without external plugins, configured with these stage tables."""
    config = Config(
        plugins=PluginsConfig(disable_autoload=True),
        governance=GovernanceConfig(stages=dict(tables)),
    )
    return PluginManager(config, workspace=tmp_path).load()


def _noop(messages: list[Any], ctx: StageContext) -> StageOutcome:
    """Hand the history on as it is."""
    return StageOutcome.unchanged(messages)


# -- the built-in stages ----------------------------------------------------------------------


def test_a_typo_names_the_key_the_stage_and_the_plugin(tmp_path: Path) -> None:
    """`kep` for `keep` is refused with its key path, the stage, its plugin and the known names."""
    manager = _manager(tmp_path, compact_results={"kep": 3})
    with pytest.raises(ConfigError) as caught:
        manager.governor()
    assert str(caught.value) == (
        "governance.stages.compact_results.kep: unknown option of stage 'compact_results' "
        f"({BUILTIN}); its options: clear_at_least, exclude_tools, keep, tools"
    )


@pytest.mark.parametrize(
    ("stage_name", "table", "expected"),
    [
        ("compact_results", {"keep": "x"}, r"\.keep: expected an integer \(int\), got str 'x'"),
        ("compact_results", {"keep": True}, r"\.keep: expected an integer \(int\), got bool"),
        ("compact_results", {"keep": 1.5}, r"\.keep: expected an integer \(int\), got float"),
        ("compact_results", {"keep": -1}, r"\.keep: must be at least 0, got -1"),
        ("compact_results", {"clear_at_least": -5}, r"\.clear_at_least: must be at least 0"),
        (
            "compact_results",
            {"exclude_tools": "read_file"},
            r"\.exclude_tools: expected a list of strings \(list\[str\]\), got str 'read_file'",
        ),
        ("compact_results", {"tools": ["grep", 1]}, r"\.tools\[1\]: expected a string"),
        ("offload_results", {"exclude_tools": "cat"}, r"\.exclude_tools: expected a list"),
        ("strip_placeholders", {"patterns": "[omitted]"}, r"\.patterns: expected a list"),
    ],
)
def test_a_value_of_the_wrong_type_or_range_is_refused(
    stage_name: str, table: dict[str, Any], expected: str
) -> None:
    """A string for a list, a bool or float for an integer, a negative count: each is named."""
    with pytest.raises(
        ConfigError, match=rf"^governance\.stages\.{stage_name}{expected}"
    ) as caught:
        _builtins_with(**{stage_name: table})
    assert f"an option of stage {stage_name!r}" in str(caught.value)


def test_a_stage_that_reads_no_options_refuses_any_key() -> None:
    """`snip_history` declares no options: any key is refused, an empty table is fine."""
    with pytest.raises(ConfigError, match=r"snip_history\.keep: .* it takes no options$"):
        _builtins_with(snip_history={"keep": 2})
    _builtins_with(snip_history={})


def test_good_options_are_accepted_and_reach_the_stage() -> None:
    """Every documented option of the built-ins, well typed, builds a governor that uses it."""
    governor = _builtins_with(
        strip_placeholders={"patterns": ["(elided)"]},
        offload_results={"exclude_tools": ["read_file"]},
        compact_results={"keep": 0, "exclude_tools": [], "tools": ["grep"], "clear_at_least": 0},
    )
    history = [*turn(1), {"role": "assistant", "content": "(elided)"}, *turn(2)]
    placeholder = governor.govern(history).report.entry("strip_placeholders")
    assert placeholder is not None and placeholder.changed


def test_a_disabled_stage_has_its_options_checked_too() -> None:
    """Switching a stage off does not hide a typo in its table."""
    config = GovernanceConfig(disabled=["compact_results"], stages={"compact_results": {"kep": 1}})
    with pytest.raises(ConfigError, match=r"compact_results\.kep"):
        Governor(builtin_stages(), config=config)


def test_a_table_that_is_not_a_table_is_refused() -> None:
    """Options given in code as something other than a mapping are refused, naming the table."""
    config = GovernanceConfig(stages={"compact_results": 3})  # type: ignore[dict-item]
    with pytest.raises(
        ConfigError, match=r"^governance\.stages\.compact_results: expected a table"
    ):
        Governor(builtin_stages(), config=config)


def test_a_table_for_a_stage_no_one_has_is_still_only_a_warning() -> None:
    """Options of an unknown stage are warned about, not refused (the plugin may be absent)."""
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        _builtins_with(compact_result={"kep": 1})
    assert ("options for an unknown stage in governance.stages", "compact_result") in [
        (e["event"], e.get("name")) for e in logs
    ]


def _options_read(module: Any) -> set[str]:
    """The names a stage module reads with ``ctx.option("name", ...)``."""
    tree = ast.parse(inspect.getsource(module))
    return {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "option"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    }


@pytest.mark.parametrize("row", BUILTIN_TABLE, ids=lambda row: row.stage.name)
def test_every_builtin_declares_exactly_the_options_it_reads(row: Any) -> None:
    """Each built-in's declared options are the names its module reads with `ctx.option`."""
    module = inspect.getmodule(row.stage.func)
    assert row.stage.options is not None
    assert set(row.stage.options) == _options_read(module)
    assert all(option.description for option in row.stage.options.values())


# -- a stage's declaration --------------------------------------------------------------------


def test_a_stage_that_declares_no_options_accepts_any_table() -> None:
    """Without `options` a stage keeps the old contract: any table, handed on as it is."""
    seen: list[dict[str, Any]] = []

    def spy(messages: list[Any], ctx: StageContext) -> StageOutcome:
        seen.append(dict(ctx.options))
        return StageOutcome.unchanged(messages)

    table = {"anything": "goes", "level": [1, {"x": None}]}
    governor = Governor(
        [*builtin_stages(), Stage("spy", spy)], config=GovernanceConfig(stages={"spy": table})
    )
    governor.govern(turn(1))
    assert seen == [table]


def test_options_are_checked_once_when_the_governor_is_built() -> None:
    """A declared check runs when the governor is built, and never again while it governs."""
    checked: list[Any] = []
    level = StageOption(int, "how hard to look", check=checked.append)
    spy = Stage("spy", _noop, options={"level": level})
    governor = Governor(
        [*builtin_stages(), spy], config=GovernanceConfig(stages={"spy": {"level": 2}})
    )
    for index in range(3):
        governor.govern(turn(index))
    assert checked == [2]


def test_a_check_says_why_it_refuses_a_value() -> None:
    """A check's ValueError follows the key's path; a check that breaks is blamed on the stage."""

    def odd(value: int) -> None:
        if value % 2 == 0:
            raise ValueError(f"must be odd, got {value}")

    def broken(value: int) -> None:
        raise KeyError(value)

    spy = Stage(
        "spy",
        _noop,
        options={
            "step": StageOption(int, "the stride", check=odd),
            "other": StageOption(int, "anything", check=broken),
        },
    )
    with pytest.raises(ConfigError, match=r"^governance\.stages\.spy\.step: must be odd, got 4; "):
        spy.check_options({"step": 4})
    spy.check_options({"step": 3})
    with pytest.raises(
        ConfigError, match=r"spy\.other: the stage's check of this option failed: KeyError"
    ):
        spy.check_options({"other": 1})


def test_literal_optional_float_and_table_types_are_checked() -> None:
    """Choices, `T | None`, numbers and `dict[str, T]` are checked as config keys are."""
    spy = Stage(
        "spy",
        _noop,
        options={
            "mode": StageOption(Literal["fast", "exact"], "how to look"),
            "label": StageOption(str | None, "a label"),
            "ratio": StageOption(float, "a share", at_least=0.0),
            "count": StageOption(int, "a count of any size", at_least=0),
            "weights": StageOption(dict[str, int], "per tool"),
            "raw": StageOption(Any, "anything, checked by the stage"),
        },
    )
    spy.check_options(
        {"mode": "fast", "label": "x", "ratio": 1, "weights": {"a": 1}, "raw": [object()]}
    )
    spy.check_options({"count": 10**400})
    refused = [
        ({"mode": "slow"}, r"\.mode: expected one of 'fast', 'exact', got str 'slow'"),
        ({"label": 3}, r"\.label: expected a string"),
        ({"ratio": float("nan")}, r"\.ratio: must be at least 0 \(a finite number\), got nan"),
        ({"count": -(10**400)}, r"\.count: must be at least 0, got -1000"),
        ({"weights": {"a": "1"}}, r"\.weights\.a: expected an integer"),
    ]
    for table, expected in refused:
        with pytest.raises(ConfigError, match=expected):
            spy.check_options(table)


@pytest.mark.parametrize(
    ("declared", "error"),
    [
        ({"x": StageOption}, r"option 'x' must be declared with a StageOption"),
        ({"": None}, r"an option name must be a non-empty string"),
        (["x"], r"a stage's options must be a mapping"),
    ],
)
def test_a_malformed_declaration_is_refused_when_the_stage_is_made(
    declared: Any, error: str
) -> None:
    """A declaration that is not a mapping of names to `StageOption` fails at once, saying so."""
    with pytest.raises((TypeError, ValueError), match=error):
        Stage("spy", _noop, options=declared)


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ((set[str], "tools"), r"an option's type must be one config keys have"),
        ((list, "tools"), r"an option's type must be one config keys have"),
        ((int | str, "a number or a name"), r"an option's type must be one config keys have"),
        ((dict[int, str], "keyed by numbers"), r"an option's type must be one config keys have"),
        ((int, ""), r"an option's description must be one non-empty line"),
        ((int, "two\nlines"), r"an option's description must be one non-empty line"),
    ],
)
def test_an_option_of_a_type_config_cannot_hold_is_refused(
    arguments: tuple[Any, str], error: str
) -> None:
    """A type the checks cannot tell (a set, a bare list, a union of two) is refused at once."""
    with pytest.raises((TypeError, ValueError), match=error):
        StageOption(*arguments)


def test_the_bound_and_the_check_must_be_usable() -> None:
    """`at_least` is a finite number and `check` a callable, or the declaration is refused."""
    with pytest.raises(TypeError, match="at_least"):
        StageOption(int, "a count", at_least=float("inf"))
    with pytest.raises(TypeError, match="check must be callable"):
        StageOption(int, "a count", check="positive")  # type: ignore[arg-type]


def test_the_decorator_takes_the_options() -> None:
    """`@stage(options=...)` declares them as `Stage(options=...)` does, read-only."""
    level = StageOption(int, "how hard to look")

    @stage(options={"level": level})
    def look(messages: list[Any], ctx: StageContext) -> StageOutcome:
        """Look closely."""
        return StageOutcome.unchanged(messages)

    assert look.options == {"level": level}
    with pytest.raises(TypeError):
        look.options["other"] = level  # type: ignore[index]
    assert Stage("plain", _noop).options is None


# -- a third-party stage, from a plugin -------------------------------------------------------


class _LevelPlugin:
    """A plugin contributing `find_notes`, which declares two options."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    @hookimpl
    def nanobot_governance_stages(self, ctx: Any) -> list[Stage]:
        def find_notes(messages: list[Any], stage_ctx: StageContext) -> StageOutcome:
            self.seen.append((stage_ctx.option("level", 1), stage_ctx.option("mode", "fast")))
            return StageOutcome.unchanged(messages)

        options = {
            "level": StageOption(int, "how many passes", at_least=1),
            "mode": StageOption(Literal["fast", "exact"], "how to compare"),
        }
        return [Stage("find_notes", find_notes, options=options)]


def test_a_plugin_stage_has_its_declared_options_checked(tmp_path: Path) -> None:
    """A plugin's stage declares options the way the built-ins do; the error names the plugin."""
    manager = _manager(tmp_path, find_notes={"level": 0})
    manager.register(_LevelPlugin(), "notes", distribution="nanobot-notes", version="2.1.0")
    with pytest.raises(ConfigError) as caught:
        manager.governor()
    assert str(caught.value) == (
        "governance.stages.find_notes.level: must be at least 1, got 0; an option of stage "
        "'find_notes' (plugin 'notes' from nanobot-notes 2.1.0): how many passes"
    )


def test_a_plugin_stage_gets_the_options_it_declared(tmp_path: Path) -> None:
    """Well-typed options pass the check and reach the plugin's stage."""
    plugin = _LevelPlugin()
    manager = _manager(tmp_path, find_notes={"level": 3, "mode": "exact"})
    manager.register(plugin, "notes", distribution="nanobot-notes", version="2.1.0")
    manager.governor().govern(turn(1))
    assert plugin.seen == [(3, "exact")]


def test_a_stage_built_without_plugins_is_named_without_one() -> None:
    """`build_governor` with no origins names the stage alone; with origins, its plugin."""
    spy = Stage("spy", _noop, options={})
    config = GovernanceConfig(stages={"spy": {"x": 1}})
    with pytest.raises(ConfigError, match=r"unknown option of stage 'spy'; it takes no options$"):
        build_governor(config, stages=[spy])
    with pytest.raises(ConfigError, match=r"stage 'spy' \(plugin 'p' version 1\.0\); it takes"):
        build_governor(config, stages=[spy], origins={"spy": "plugin 'p' version 1.0"})


# -- any table --------------------------------------------------------------------------------

COMPACT_KEYS = ("keep", "exclude_tools", "tools", "clear_at_least")
toml_scalars = (
    st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats()
    | st.booleans()
    | st.text(max_size=8)
)
toml_values = st.recursive(
    toml_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
option_tables = st.dictionaries(
    st.sampled_from(COMPACT_KEYS) | st.text(min_size=1, max_size=10), toml_values, max_size=4
)


def _path(key: str) -> str:
    """The dotted path of `key` in an error: quoted when TOML cannot write it bare."""
    part = key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key, ensure_ascii=False)
    return f"governance.stages.compact_results.{part}"


def _expected_ok(key: str, value: Any) -> bool:
    """What `compact_results` should accept under `key`, worked out independently."""
    if key in ("keep", "clear_at_least"):
        return type(value) is int and value >= 0
    if key in ("exclude_tools", "tools"):
        return isinstance(value, list) and all(isinstance(item, str) for item in value)
    return False


@settings(max_examples=300, deadline=None)
@given(table=option_tables)
def test_any_table_is_accepted_or_refused_naming_a_key(table: dict[str, Any]) -> None:
    """Random compact_results options: accepted exactly when valid, else an error naming a key."""
    config = GovernanceConfig(input_limit=400, stages={"compact_results": table})
    try:
        governor = Governor(builtin_stages(), config=config)
    except ConfigError as exc:
        assert not all(_expected_ok(key, value) for key, value in table.items())
        named = [key for key in table if str(exc).startswith((_path(key) + ":", _path(key) + "["))]
        assert len(named) == 1, str(exc)
        assert not _expected_ok(named[0], table[named[0]])
        assert "stage 'compact_results'" in str(exc)
        return
    assert all(_expected_ok(key, value) for key, value in table.items())
    history = [entry for index in range(6) for entry in turn(index, "result " * 60)]
    report = governor.govern(history).report
    assert not any("raised" in line for entry in report for line in entry.details)
