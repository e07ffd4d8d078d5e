"""Configuration: sources, precedence, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from nanobot_core.config import Config, load_config
from nanobot_core.errors import ConfigError


def test_defaults_without_any_source(tmp_path: Path) -> None:
    """With no file and no environment the documented defaults apply."""
    config = load_config(cwd=tmp_path, environ={})
    assert config == Config()
    assert config.governance.context_window == 128_000
    assert config.governance.max_output == 8_192
    assert config.governance.safety_margin == 1_024
    assert config.governance.max_tool_result_chars == 16_000


def test_precedence_of_every_layer(tmp_path: Path) -> None:
    """CLI flags beat env, which beats --config, which beats nanobot.toml, which beats pyproject."""
    (tmp_path / "pyproject.toml").write_text(
        "[tool.nanobot.governance]\ncontext_window = 1\nmax_output = 1\n"
        "safety_margin = 1\nmax_tool_result_chars = 1001\ninput_limit = 1\n",
        encoding="utf-8",
    )
    (tmp_path / "nanobot.toml").write_text(
        "[governance]\ncontext_window = 2\nmax_output = 2\nsafety_margin = 2\n"
        "max_tool_result_chars = 1002\n",
        encoding="utf-8",
    )
    extra = tmp_path / "extra.toml"
    extra.write_text(
        "[governance]\ncontext_window = 3\nmax_output = 3\nsafety_margin = 3\n", encoding="utf-8"
    )
    config = load_config(
        cwd=tmp_path,
        config_file=extra,
        environ={"NANOBOT_GOVERNANCE__CONTEXT_WINDOW": "4", "NANOBOT_GOVERNANCE__MAX_OUTPUT": "4"},
        overrides={"governance": {"context_window": 5}},
    )
    g = config.governance
    assert (
        g.context_window,
        g.max_output,
        g.safety_margin,
        g.max_tool_result_chars,
        g.input_limit,
    ) == (5, 4, 3, 1002, 1)


def test_named_environment_variables(tmp_path: Path) -> None:
    """NANOBOT_BLOCK, NANOBOT_PLUGINS and the autoload/strict switches map onto [plugins]."""
    config = load_config(
        cwd=tmp_path,
        environ={
            "NANOBOT_BLOCK": "a, b,,",
            "NANOBOT_PLUGINS": "",
            "NANOBOT_DISABLE_PLUGIN_AUTOLOAD": "1",
            "NANOBOT_STRICT_PLUGINS": "true",
        },
    )
    assert config.plugins.block == ["a", "b"]
    assert config.plugins.allow == []
    assert config.plugins.disable_autoload is True
    assert config.plugins.strict is True


def test_api_key_falls_back_to_openai_variable(tmp_path: Path) -> None:
    """NANOBOT_API_KEY wins over OPENAI_API_KEY, which is used when it is absent."""
    assert load_config(cwd=tmp_path, environ={"OPENAI_API_KEY": "o"}).provider.api_key == "o"
    both = {"OPENAI_API_KEY": "o", "NANOBOT_API_KEY": "n"}
    assert load_config(cwd=tmp_path, environ=both).provider.api_key == "n"


def test_api_key_is_not_in_repr(tmp_path: Path) -> None:
    """The API key never shows up in the repr of the config."""
    config = load_config(cwd=tmp_path, environ={"NANOBOT_API_KEY": "sk-secret-value"})
    assert "sk-secret-value" not in repr(config)


def test_unknown_key_names_its_path(tmp_path: Path) -> None:
    """An unknown key fails with its full dotted path and the file it came from."""
    (tmp_path / "nanobot.toml").write_text("[governance]\ncontext_windw = 5\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"nanobot\.toml.*governance\.context_windw"):
        load_config(cwd=tmp_path, environ={})


@pytest.mark.parametrize(
    ("toml", "path", "expected"),
    [
        ('[governance]\ncontext_window = "big"\n', "governance.context_window", "int"),
        ("[plugins]\nstrict = 1\n", "plugins.strict", "bool"),
        ('[plugins]\nblock = "x"\n', "plugins.block", "list"),
        ("[tools]\ntimeout = true\n", "tools.timeout", "float"),
        ("governance = 3\n", "governance", "table"),
    ],
)
def test_wrong_type_names_key_and_expected_type(
    tmp_path: Path, toml: str, path: str, expected: str
) -> None:
    """A wrong type fails with the key's path and the expected type."""
    (tmp_path / "nanobot.toml").write_text(toml, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path, environ={})
    assert path in str(info.value) and expected in str(info.value)


def test_wrong_type_in_environment(tmp_path: Path) -> None:
    """An environment value of the wrong type names the variable's key."""
    with pytest.raises(ConfigError, match=r"governance\.max_output"):
        load_config(cwd=tmp_path, environ={"NANOBOT_GOVERNANCE__MAX_OUTPUT": "lots"})


def test_bad_boolean_switch(tmp_path: Path) -> None:
    """A boolean switch with a value that is not a boolean is an error naming the variable."""
    with pytest.raises(ConfigError, match="NANOBOT_STRICT_PLUGINS"):
        load_config(cwd=tmp_path, environ={"NANOBOT_STRICT_PLUGINS": "maybe"})


def test_malformed_toml(tmp_path: Path) -> None:
    """A file that is not TOML fails with its path."""
    (tmp_path / "nanobot.toml").write_text("[governance\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"not valid TOML"):
        load_config(cwd=tmp_path, environ={})


def test_missing_config_file(tmp_path: Path) -> None:
    """--config naming a missing file fails clearly."""
    with pytest.raises(ConfigError, match=r"cannot read"):
        load_config(cwd=tmp_path, config_file=tmp_path / "nope.toml", environ={})


def test_per_stage_options_table(tmp_path: Path) -> None:
    """Stage options are free-form tables under [governance.stages.NAME]."""
    (tmp_path / "nanobot.toml").write_text(
        "[governance.stages.compact_results]\nkeep = 2\nexclude_tools = ['grep']\n",
        encoding="utf-8",
    )
    config = load_config(cwd=tmp_path, environ={})
    assert config.governance.stages == {"compact_results": {"keep": 2, "exclude_tools": ["grep"]}}
