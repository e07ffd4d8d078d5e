"""A configuration built in code is checked as a loaded one is, where it is handed over."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nanobot_core import PluginManager
from nanobot_core.config import (
    Config,
    GovernanceConfig,
    PluginsConfig,
    PromptConfig,
    RunnerConfig,
    ToolsConfig,
    check_config,
    load_config,
)
from nanobot_core.errors import ConfigError
from nanobot_core.governance import build_governor


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            Config(governance=GovernanceConfig(context_window="1k")),  # type: ignore[arg-type]
            "governance.context_window: expected an integer (int), got str '1k'",
        ),
        (
            Config(tools=ToolsConfig(timeout="3")),  # type: ignore[arg-type]
            "tools.timeout: expected a number (float), got str '3'",
        ),
        (
            Config(prompt=PromptConfig(order={"memory": "late"})),  # type: ignore[dict-item]
            "prompt.order.memory: expected a number (float), got str 'late'",
        ),
        (
            Config(plugins=PluginsConfig(block=["a", 3])),  # type: ignore[list-item]
            "plugins.block[1]: expected a string (str), got int 3",
        ),
        (
            Config(tools=GovernanceConfig()),  # type: ignore[arg-type]
            "tools: expected a ToolsConfig, got GovernanceConfig",
        ),
        (
            Config(governance=GovernanceConfig(low_watermark=2.0)),
            "governance.low_watermark: expected a share of the budget above 0 and at most 1",
        ),
        (
            Config(tools=ToolsConfig(timeout=float("nan"))),
            "tools.timeout: must be more than 0 (a finite number), got nan",
        ),
        (
            Config(governance=GovernanceConfig(context_window=100, max_output=200)),
            "governance.context_window (100) leaves no room for the conversation",
        ),
    ],
)
def test_plugin_manager_refuses_a_bad_value_naming_its_key(
    config: Config, message: str, tmp_path: Path
) -> None:
    """A wrong type, a value out of range or a budget with no room is refused when built."""
    with pytest.raises(ConfigError) as caught:
        PluginManager(config, workspace=tmp_path, autoload=False)
    assert message in str(caught.value)


def test_governor_refuses_a_bad_governance_config(tmp_path: Path) -> None:
    """build_governor (and so the Governor) checks a GovernanceConfig given alone."""
    with pytest.raises(ConfigError, match=r"governance\.max_output: expected an integer"):
        build_governor(GovernanceConfig(max_output=1.5), tmp_path)  # type: ignore[arg-type]


def test_a_tuple_is_taken_where_a_list_is(tmp_path: Path) -> None:
    """Code that passes a tuple for a list of names keeps working."""
    config = Config(governance=GovernanceConfig(disabled=("snip_history",)))  # type: ignore[arg-type]
    check_config(config)
    assert PluginManager(config, workspace=tmp_path, autoload=False).config is config


def test_check_config_refuses_what_is_no_config() -> None:
    """Anything but a Config or a GovernanceConfig is a TypeError naming what it got."""
    with pytest.raises(TypeError, match="got dict"):
        check_config({"governance": {}})  # type: ignore[arg-type]


def test_a_loaded_config_passes(tmp_path: Path) -> None:
    """What load_config accepts, check_config accepts too (the same rules)."""
    (tmp_path / "nanobot.toml").write_text(
        '[governance]\ncontext_window = 32000\ndisabled = ["snip_history"]\n'
        "[prompt.order]\nmemory = 5\n[tools.options.grep]\nmost = 3\n",
        encoding="utf-8",
    )
    config = load_config(cwd=tmp_path, environ={})
    check_config(config)


_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5), st.lists(st.none())
)


@given(value=_SCALARS)
def test_check_config_agrees_with_load_config(value: Any) -> None:
    """A context_window check_config accepts is one a loaded file's check accepts, and back."""
    from nanobot_core.config import check_budget, structure_config

    built = Config(governance=GovernanceConfig(context_window=value))
    try:
        check_config(built)
        accepted_built = True
    except ConfigError:
        accepted_built = False
    try:
        loaded = structure_config({"governance": {"context_window": value}})
        check_budget(loaded.governance)  # load_config's last check
        accepted_loaded = value is not None
    except ConfigError:
        accepted_loaded = False
    if value is None:  # no key in a file means the default; in code it is a value
        assert not accepted_built
    else:
        assert accepted_built == accepted_loaded


@given(bits=st.integers(min_value=14_300, max_value=40_000))
def test_a_negative_int_too_long_to_write_is_refused_by_its_size(bits: int) -> None:
    """A count built in code below its bound by an int of thousands of digits is refused naming
    the key and the int's size, not with a ValueError from writing it in decimal."""
    with pytest.raises(ConfigError) as caught:
        check_config(Config(runner=RunnerConfig(max_iterations=-(2**bits))))
    assert str(caught.value) == (
        f"runner.max_iterations: must be more than 0, got a negative int of {bits + 1} bits"
    )
