"""Stage options: what a stage declares on `Stage.options`, checked once a governor is built."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pytest

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
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.kernel.records import core_version
from tests.governance.builders import turn

BUILTIN = f"built-in plugin 'builtin:governance', nanobot-core {core_version()}"


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
    """Choices, `T | None`, floats (integers accepted) and `dict[str, T]` check like config keys."""
    spy = Stage(
        "spy",
        _noop,
        options={
            "mode": StageOption(Literal["fast", "exact"], "how to look"),
            "label": StageOption(str | None, "a label"),
            "ratio": StageOption(float, "a share", at_least=0.0),
            "weights": StageOption(dict[str, int], "per tool"),
            "raw": StageOption(Any, "anything, checked by the stage"),
        },
    )
    spy.check_options(
        {"mode": "fast", "label": "x", "ratio": 1, "weights": {"a": 1}, "raw": [object()]}
    )
    refused = [
        ({"mode": "slow"}, r"\.mode: expected one of 'fast', 'exact', got str 'slow'"),
        ({"label": 3}, r"\.label: expected a string"),
        ({"ratio": float("nan")}, r"\.ratio: must be at least 0 \(a finite number\), got nan"),
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
        "'find_notes' (plugin 'notes', nanobot-notes 2.1.0): how many passes"
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
    with pytest.raises(ConfigError, match=r"stage 'spy' \(plugin 'p', version 1\.0\); it takes"):
        build_governor(config, stages=[spy], origins={"spy": "plugin 'p', version 1.0"})
