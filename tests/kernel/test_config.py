"""Configuration: sources, precedence, and errors that name the key."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from nanobot_core.config import Config, GovernanceConfig, load_config, source_prefix
from nanobot_core.errors import ConfigError
from tests.helpers import clean_env, run_cli


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


@pytest.mark.parametrize("where", ["nanobot.toml", "pyproject.toml", "--config"])
def test_a_config_files_api_key_wins_over_openai_variable(tmp_path: Path, where: str) -> None:
    """A provider.api_key a config file sets wins over OPENAI_API_KEY, and is named by its file."""
    body = '[provider]\napi_key = "sk-file"\n'
    if where == "pyproject.toml":
        body = '[tool.nanobot.provider]\napi_key = "sk-file"\n'
    path = tmp_path / ("other.toml" if where == "--config" else where)
    path.write_text(body, encoding="utf-8")
    config = load_config(
        cwd=tmp_path,
        config_file=path if where == "--config" else None,
        environ={"OPENAI_API_KEY": "sk-shell"},
    )
    assert config.provider.api_key == "sk-file"
    assert str(path) in source_prefix(config=config, keys=["provider.api_key"])
    # A NANOBOT_* variable is nanobot's own: it still wins over the file.
    both = {"OPENAI_API_KEY": "sk-shell", "NANOBOT_API_KEY": "sk-nanobot"}
    config = load_config(
        cwd=tmp_path, config_file=path if where == "--config" else None, environ=both
    )
    assert config.provider.api_key == "sk-nanobot"


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


def test_wrong_type_in_environment_names_the_variable_that_set_it(tmp_path: Path) -> None:
    """Of several variables, a type error names the one that set the key, as warnings do."""
    environ = {"NANOBOT_GOVERNANCE__MAX_OUTPUT": "lots", "NANOBOT_MODEL": "m"}
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path, environ=environ)
    assert str(info.value).startswith(
        "environment variable NANOBOT_GOVERNANCE__MAX_OUTPUT: governance.max_output: expected"
    )


def test_a_variable_under_one_that_is_no_table_is_a_config_error(tmp_path: Path) -> None:
    """A variable setting a key inside what another sets to a number names that other one."""
    environ = {"NANOBOT_TOOLS__OPTIONS": "1", "NANOBOT_TOOLS__OPTIONS__WEB__MAX": "2"}
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path, environ=environ)
    assert str(info.value).startswith(
        "environment variable NANOBOT_TOOLS__OPTIONS: tools.options: expected a table"
    )


def test_bad_boolean_switch(tmp_path: Path) -> None:
    """A boolean switch with a value that is not a boolean is an error naming the variable."""
    with pytest.raises(ConfigError, match="NANOBOT_STRICT_PLUGINS"):
        load_config(cwd=tmp_path, environ={"NANOBOT_STRICT_PLUGINS": "maybe"})


def test_malformed_toml(tmp_path: Path) -> None:
    """A file that is not TOML fails with its path."""
    (tmp_path / "nanobot.toml").write_text("[governance\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"not valid TOML"):
        load_config(cwd=tmp_path, environ={})


@settings(max_examples=20, deadline=None)
@given(digits=st.integers(min_value=4_301, max_value=20_000))
def test_an_integer_of_more_digits_than_python_reads_is_a_config_error(digits: int) -> None:
    """A decimal integer of thousands of digits (TOML's stop at 19) in a file or a variable is
    a config error naming the file or the variable, not tomllib's ValueError traceback."""
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "nanobot.toml"
        config.write_text(f"[governance]\ncontext_window = {'9' * digits}\n", encoding="utf-8")
        with pytest.raises(ConfigError) as from_file:
            load_config(cwd=folder, environ={})
        config.unlink()
        environ = {"NANOBOT_GOVERNANCE__CONTEXT_WINDOW": "9" * digits}
        with pytest.raises(ConfigError) as from_variable:
            load_config(cwd=folder, environ=environ)
    assert str(from_file.value) == (
        f"{config}: not valid TOML: an integer of more than {sys.get_int_max_str_digits()} "
        "digits (a TOML integer has 19 at most)"
    )
    assert str(from_variable.value).startswith(
        "environment variable NANOBOT_GOVERNANCE__CONTEXT_WINDOW: governance.context_window: "
        "expected an integer (int), got str '999"
    )


@settings(max_examples=10, deadline=None)
@given(bits=st.integers(min_value=14_300, max_value=40_000))
@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("[provider]\nmodel = {}", "provider.model: expected a string (str), got an int of"),
        ("[tools]\ndisabled = [{}]", "tools.disabled[0]: expected a string (str), got an int of"),
        ("[prompt.order]\nmemory = {}", "prompt.order.memory: expected a number (float), got an"),
        ("[prompt]\norder = [{}]", "prompt.order: expected a table of numbers"),
    ],
)
def test_a_value_holding_an_int_too_long_to_write_is_refused_naming_its_key(
    bits: int, line: str, said: str
) -> None:
    """A TOML hex integer of thousands of digits where another type is wanted (or inside such a
    value) is refused naming the key, not with a ValueError from writing the int in decimal."""
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "nanobot.toml"
        config.write_text(line.format(hex(2**bits - 1)) + "\n", encoding="utf-8")
        with pytest.raises(ConfigError) as caught:
            load_config(cwd=folder, environ={})
    assert str(caught.value).startswith(f"{config}: {said}")
    assert len(str(caught.value)) < 500


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


@pytest.mark.parametrize(
    ("toml", "path", "expected"),
    [
        ("[tools]\noptions = { web_fetch = 3 }\n", "tools.options.web_fetch", "a table"),
        ("[tools]\noptions = 3\n", "tools.options", "a table of tables"),
        ('[prompt]\norder = { memory = "late" }\n', "prompt.order.memory", "a number"),
        ('[plugins]\noverrides = { d = "read_file" }\n', "plugins.overrides.d", "a list"),
        ('[plugins]\noverrides = { d = ["a", 1] }\n', "plugins.overrides.d[1]", "a string"),
    ],
)
def test_a_wrong_type_inside_a_mapping_names_the_entry_and_what_was_expected(
    tmp_path: Path, toml: str, path: str, expected: str
) -> None:
    """Mapping fields name the bad entry and the expected type, never "expected dict, got dict"."""
    (tmp_path / "nanobot.toml").write_text(toml, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path, environ={})
    message = str(info.value)
    assert f"{path}: expected {expected}" in message
    assert "expected dict, got dict" not in message


@pytest.mark.parametrize(
    ("window", "max_output", "margin"), [(9_216, 8_192, 1_024), (1, 0, 1), (100, 50, 50)]
)
def test_a_window_with_no_room_for_the_conversation_is_refused(
    tmp_path: Path, window: int, max_output: int, margin: int
) -> None:
    """context_window <= max_output + safety_margin names the keys and the smallest window."""
    (tmp_path / "nanobot.toml").write_text(
        f"[governance]\ncontext_window = {window}\nmax_output = {max_output}\n"
        f"safety_margin = {margin}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path, environ={})
    message = str(info.value)
    for key in ("governance.context_window", "governance.max_output", "governance.safety_margin"):
        assert key in message
    assert f"smallest window that works with them is {max_output + margin + 1}" in message


def test_the_smallest_window_that_works_is_accepted(tmp_path: Path) -> None:
    """One token more than max_output + safety_margin loads; so does any explicit input_limit."""
    config = load_config(
        cwd=tmp_path,
        environ={"NANOBOT_GOVERNANCE__CONTEXT_WINDOW": str(8_192 + 1_024 + 1)},
    )
    assert config.governance.context_window == 9_217
    limited = load_config(
        cwd=tmp_path,
        environ={
            "NANOBOT_GOVERNANCE__CONTEXT_WINDOW": "10",
            "NANOBOT_GOVERNANCE__INPUT_LIMIT": "5",
        },
    )
    assert limited.governance.input_limit == 5
    with pytest.raises(ConfigError, match=r"governance\.input_limit is 0"):
        load_config(cwd=tmp_path, environ={"NANOBOT_GOVERNANCE__INPUT_LIMIT": "0"})


@pytest.mark.parametrize("command", [["tools"], ["prompt"], ["govern", "-"], ["run", "hi"]])
def test_every_command_refuses_a_too_small_window_with_exit_2(
    tmp_path: Path, command: list[str]
) -> None:
    """A real `nanobot-core` process exits 2 with the message and no traceback, in any command."""
    env = clean_env(NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1", NANOBOT_GOVERNANCE__CONTEXT_WINDOW="9000")
    done = subprocess.run(
        [sys.executable, "-m", "nanobot_core", *command],
        cwd=tmp_path,
        env=env,
        input="[]",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "smallest window that works with them is 9217" in done.stderr
    assert "Traceback" not in done.stderr
    assert (
        "Error: configuration: environment variable NANOBOT_GOVERNANCE__CONTEXT_WINDOW: "
        "governance.context_window (9000) leaves no room"
    ) in done.stderr


def _budget_refusal(tmp_path: Path, *args: str, **env: str) -> str:
    """The stderr of a real `nanobot-core ARGS` refusing the budget (exit 2, no traceback)."""
    done = run_cli(
        *args,
        cwd=tmp_path,
        env=clean_env(NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1", **env),
        stdin="[]",
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr


def test_a_window_with_no_room_names_the_file_that_set_it(tmp_path: Path) -> None:
    """Set in nanobot.toml, the window is refused naming that file, the others as defaults."""
    config_file = tmp_path / "nanobot.toml"
    config_file.write_text("[governance]\ncontext_window = 9000\n", encoding="utf-8")
    assert _budget_refusal(tmp_path, "govern", "-") == (
        f"Error: configuration: {config_file}: governance.context_window (9000) leaves no room "
        "for the conversation after governance.max_output (8192, the default) and "
        "governance.safety_margin (1024, the default); the smallest window that works with "
        "them is 9217 (or lower max_output, or set governance.input_limit)\n"
    )


def test_a_window_with_no_room_names_each_source_of_the_values_it_refuses(
    tmp_path: Path,
) -> None:
    """The window from a file and max_output from a variable: both are named, each by its key."""
    config_file = tmp_path / "nanobot.toml"
    config_file.write_text("[governance]\ncontext_window = 9000\n", encoding="utf-8")
    variable = "environment variable NANOBOT_GOVERNANCE__MAX_OUTPUT"
    said = _budget_refusal(tmp_path, "tools", NANOBOT_GOVERNANCE__MAX_OUTPUT="9000")
    assert said.startswith(
        f"Error: configuration: {config_file}, {variable}: "
        f"governance.context_window (9000, from {config_file}) leaves no room for the "
        f"conversation after governance.max_output (9000, from {variable}) and "
        "governance.safety_margin (1024, the default); the smallest window that works with "
        "them is 10025"
    )
    flagged = _budget_refusal(tmp_path, "govern", "--max-output", "9000", "-")
    assert flagged.startswith(f"Error: configuration: {config_file}, command line: ")
    assert "governance.max_output (9000, from command line)" in flagged


def test_an_input_limit_below_1_names_the_file_or_variable_that_set_it(tmp_path: Path) -> None:
    """governance.input_limit = 0 is refused naming its source, as a number out of range is."""
    config_file = tmp_path / "nanobot.toml"
    config_file.write_text("[governance]\ninput_limit = 0\n", encoding="utf-8")
    assert _budget_refusal(tmp_path, "prompt") == (
        f"Error: configuration: {config_file}: governance.input_limit is 0: it must be at "
        "least 1 (or left out to use context_window)\n"
    )
    variable = "NANOBOT_GOVERNANCE__INPUT_LIMIT"
    assert _budget_refusal(tmp_path, "prompt", **{variable: "-3"}).startswith(
        f"Error: configuration: environment variable {variable}: governance.input_limit is -3"
    )


_BUDGET_VARIABLES = {
    "context_window": "NANOBOT_GOVERNANCE__CONTEXT_WINDOW",
    "max_output": "NANOBOT_GOVERNANCE__MAX_OUTPUT",
    "safety_margin": "NANOBOT_GOVERNANCE__SAFETY_MARGIN",
}


@settings(max_examples=150, deadline=None)
@given(
    given_where=st.fixed_dictionaries(
        {
            key: st.tuples(st.integers(0, 10**12), st.sampled_from(["file", "variable", None]))
            for key in _BUDGET_VARIABLES
        }
    )
)
def test_a_budget_refusal_names_the_source_of_every_value_set(
    tmp_path_factory: pytest.TempPathFactory, given_where: dict[str, tuple[int, str | None]]
) -> None:
    """Whatever a file and variables set, a refused budget names each source and no other."""
    cwd = tmp_path_factory.mktemp("budget")
    config_file = cwd / "nanobot.toml"
    in_file = {key: value for key, (value, where) in given_where.items() if where == "file"}
    lines = "".join(f"{key} = {value}\n" for key, value in in_file.items())
    config_file.write_text(f"[governance]\n{lines}", encoding="utf-8")
    environ = {
        _BUDGET_VARIABLES[key]: str(value)
        for key, (value, where) in given_where.items()
        if where == "variable"
    }
    try:
        config = load_config(cwd=cwd, environ=environ)
    except ConfigError as exc:
        message = str(exc)
    else:
        governance = config.governance
        assert governance.context_window > governance.max_output + governance.safety_margin
        return
    sources = {
        key: str(config_file)
        if where == "file"
        else f"environment variable {_BUDGET_VARIABLES[key]}"
        for key, (_, where) in given_where.items()
        if where is not None
    }
    named = list(dict.fromkeys(sources[key] for key in _BUDGET_VARIABLES if key in sources))
    assert message.startswith(f"{', '.join(named)}: governance.context_window (")
    for key, (value, where) in given_where.items():
        if where is None:
            default = getattr(GovernanceConfig(), key)
            assert f"governance.{key} ({default}, the default)" in message
        elif len(named) > 1:
            assert f"governance.{key} ({value}, from {sources[key]})" in message
        else:
            assert f"governance.{key} ({value})" in message


@pytest.mark.parametrize(
    ("toml", "path"),
    [
        ("[tools]\ntimeout = 0\n", "tools.timeout"),
        ("[tools]\ntimeout = nan\n", "tools.timeout"),
        ("[tools]\nmax_identical_calls = -1\n", "tools.max_identical_calls"),
        ("[tools]\nmax_calls_per_reply = -1\n", "tools.max_calls_per_reply"),
        ("[governance]\nmax_output = -100\n", "governance.max_output"),
        ("[governance]\nsafety_margin = -1\n", "governance.safety_margin"),
        ("[provider]\ntimeout = nan\n", "provider.timeout"),
        ("[provider]\ntimeout = -1\n", "provider.timeout"),
        ("[provider]\nmax_retries = -1\n", "provider.max_retries"),
        ("[provider]\nbackoff_base = inf\n", "provider.backoff_base"),
        ("[provider]\nretry_after_cap = -1\n", "provider.retry_after_cap"),
        ("[provider]\ntemperature = nan\n", "provider.temperature"),
        ("[provider]\nmax_tokens = 0\n", "provider.max_tokens"),
        ("[provider]\nmax_reply_bytes = 0\n", "provider.max_reply_bytes"),
        ("[provider]\nmax_reply_bytes = -1\n", "provider.max_reply_bytes"),
        ("[runner]\nmax_iterations = 0\n", "runner.max_iterations"),
        ("[sessions]\nlease_wait = nan\n", "sessions.lease_wait"),
        ("[plugins]\nstall_warning = -1\n", "plugins.stall_warning"),
        ("[plugins]\nstall_warning = inf\n", "plugins.stall_warning"),
        ("[plugins]\nstall_timeout = -5\n", "plugins.stall_timeout"),
        ("[sessions.postgres]\npool_size = 0\n", "sessions.postgres.pool_size"),
        ("[sessions.postgres]\nquery_timeout = 0\n", "sessions.postgres.query_timeout"),
        ("[sessions.postgres]\nquery_timeout = inf\n", "sessions.postgres.query_timeout"),
        ("[prompt]\norder = { memory = nan }\n", "prompt.order.memory"),
    ],
)
def test_a_number_outside_its_range_names_the_key_and_the_file(
    tmp_path: Path, toml: str, path: str
) -> None:
    """A NaN, infinite, negative or zero value where none works is refused, naming its file."""
    (tmp_path / "nanobot.toml").write_text(toml, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path, environ={})
    assert f"nanobot.toml: {path}: must be" in str(info.value)


@pytest.mark.parametrize("name", ["../x", "a b", "", "..", "x" * 201])
def test_a_session_name_no_store_can_hold_names_the_key_and_the_file(
    tmp_path: Path, name: str
) -> None:
    """runner.session from a file is refused at load, naming the key and the file, not a flag."""
    (tmp_path / "nanobot.toml").write_text(f"[runner]\nsession = {name!r}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"nanobot\.toml: runner\.session: .*session name"):
        load_config(cwd=tmp_path, environ={})
    (tmp_path / "nanobot.toml").write_text("[runner]\nsession = 'ok.name-1'\n", encoding="utf-8")
    assert load_config(cwd=tmp_path, environ={}).runner.session == "ok.name-1"


@settings(max_examples=60, deadline=None)
@given(st.integers(-(10**30), 10**30))
def test_max_calls_per_reply_from_the_environment_is_taken_or_refused_by_its_sign(
    tmp_path_factory: pytest.TempPathFactory, value: int
) -> None:
    """Any integer in NANOBOT_TOOLS__MAX_CALLS_PER_REPLY: at least 0 is taken, below is refused."""
    cwd = tmp_path_factory.mktemp("calls")
    environ = {"NANOBOT_TOOLS__MAX_CALLS_PER_REPLY": str(value)}
    if value >= 0:
        assert load_config(cwd=cwd, environ=environ).tools.max_calls_per_reply == value
        return
    with pytest.raises(ConfigError) as info:
        load_config(cwd=cwd, environ=environ)
    assert str(info.value) == (
        "environment variable NANOBOT_TOOLS__MAX_CALLS_PER_REPLY: "
        f"tools.max_calls_per_reply: must be at least 0, got {value}"
    )


def test_max_calls_per_reply_defaults_to_128(tmp_path: Path) -> None:
    """Without a source, 128 calls of one reply run (the most tools OpenAI takes in a request)."""
    assert load_config(cwd=tmp_path, environ={}).tools.max_calls_per_reply == 128


def test_a_range_error_names_the_layer_that_set_the_value(tmp_path: Path) -> None:
    """Of several sources, the message names the one whose value is used (here a variable)."""
    (tmp_path / "nanobot.toml").write_text("[provider]\nmax_retries = -1\n", encoding="utf-8")
    with pytest.raises(
        ConfigError,
        match=r"^environment variable NANOBOT_PROVIDER__MAX_RETRIES: provider\.max_retries: must",
    ):
        load_config(cwd=tmp_path, environ={"NANOBOT_PROVIDER__MAX_RETRIES": "-2"})
    (tmp_path / "nanobot.toml").write_text("[provider]\nmax_retries = 0\n", encoding="utf-8")
    assert load_config(cwd=tmp_path, environ={}).provider.max_retries == 0


def test_an_integer_too_large_for_a_float_is_a_type_error(tmp_path: Path) -> None:
    """A float key given an integer no float can hold names the key, not an "unknown error"."""
    (tmp_path / "nanobot.toml").write_text(
        "[provider]\ntimeout = 1" + "0" * 400 + "\n", encoding="utf-8"
    )
    with pytest.raises(ConfigError, match=r"provider\.timeout: expected a number"):
        load_config(cwd=tmp_path, environ={})


@settings(max_examples=200, deadline=None)
@given(
    key=st.sampled_from(
        [
            ("tools", "timeout"),
            ("provider", "timeout"),
            ("provider", "backoff_base"),
            ("provider", "retry_after_cap"),
            ("sessions", "lease_wait"),
            ("plugins", "stall_warning"),
            ("plugins", "stall_timeout"),
            ("runner", "max_iterations"),
            ("provider", "max_retries"),
            ("provider", "max_reply_bytes"),
            ("governance", "max_output"),
        ]
    ),
    value=st.one_of(st.floats(), st.integers()),
)
def test_any_number_from_the_environment_loads_or_is_a_config_error(
    key: tuple[str, str], value: float
) -> None:
    """Whatever number a variable holds, loading gives a usable value or a ConfigError naming it."""
    name = f"NANOBOT_{key[0].upper()}__{key[1].upper()}"
    text = {math.inf: "inf", -math.inf: "-inf"}.get(value, repr(value))
    if isinstance(value, float) and math.isnan(value):
        text = "nan"
    try:
        config = load_config(cwd=Path("/nonexistent-nanobot-dir"), environ={name: text})
    except ConfigError as exc:
        assert ".".join(key) in str(exc)
        return
    loaded = getattr(getattr(config, key[0]), key[1])
    assert math.isfinite(loaded) and loaded >= 0


@pytest.mark.parametrize(
    "variable",
    [
        "NANOBOT_PROVIDER__TIMEOUT=nan",
        "NANOBOT_PROVIDER__MAX_RETRIES=-1",
        "NANOBOT_RUNNER__MAX_ITERATIONS=0",
    ],
)
def test_run_refuses_a_number_outside_its_range_with_exit_2(tmp_path: Path, variable: str) -> None:
    """`run` exits 2 naming the key before any request, instead of a traceback mid-turn."""
    name, value = variable.split("=")
    env = clean_env(
        **{name: value},
        NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1",
        NANOBOT_BASE_URL="http://127.0.0.1:9/v1",
    )
    done = subprocess.run(
        [sys.executable, "-m", "nanobot_core", "run", "hi"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    key = name.removeprefix("NANOBOT_").replace("__", ".").lower()
    assert f"Error: configuration: environment variable {name}: {key}: must be" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("NANOBOT_RUNNER__SESSION", "2024-01-01"),
        ("NANOBOT_RUNNER__SESSION", "42"),
        ("NANOBOT_PROVIDER__MODEL", "1.5"),
        ("NANOBOT_PROVIDER__MODEL", "true"),
        ("NANOBOT_PROVIDER__API_KEY", "12345678"),
        ("NANOBOT_PROVIDER__BASE_URL", "inf"),
    ],
)
def test_a_string_key_from_the_environment_keeps_the_text_as_written(
    tmp_path: Path, variable: str, value: str
) -> None:
    """A string key's variable that reads as another TOML literal (a date, a number) is the text."""
    config = load_config(cwd=tmp_path, environ={variable: value})
    section, key = variable.removeprefix("NANOBOT_").lower().split("__")
    assert getattr(getattr(config, section), key) == value


def test_other_keys_from_the_environment_are_still_toml_literals(tmp_path: Path) -> None:
    """Numbers, lists and quoted strings in variables are read as TOML, as before."""
    config = load_config(
        cwd=tmp_path,
        environ={
            "NANOBOT_GOVERNANCE__CONTEXT_WINDOW": "32000",
            "NANOBOT_TOOLS__DISABLED": '["write_file"]',
            "NANOBOT_PROVIDER__MODEL": '"quoted"',
            "NANOBOT_PROVIDER__TEMPERATURE": "0.5",
        },
    )
    assert config.governance.context_window == 32_000
    assert config.tools.disabled == ["write_file"]
    assert config.provider.model == "quoted"
    assert config.provider.temperature == 0.5


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), min_size=1))
def test_a_model_name_from_the_environment_is_taken_as_written(text: str) -> None:
    """Any text that is not a quoted TOML string becomes NANOBOT_PROVIDER__MODEL exactly, and
    blank text is refused naming the variable."""
    assume(not text.lstrip().startswith(('"', "'")))
    environ = {"NANOBOT_PROVIDER__MODEL": text}
    if not text.strip():
        with pytest.raises(ConfigError) as refused:
            load_config(cwd=Path("/nonexistent-nanobot-dir"), environ=environ)
        assert str(refused.value) == (
            "environment variable NANOBOT_PROVIDER__MODEL: provider.model: must name a model, "
            f"got {text!r}"
        )
        return
    config = load_config(cwd=Path("/nonexistent-nanobot-dir"), environ=environ)
    assert config.provider.model == text


@pytest.mark.parametrize(
    ("where", "args", "env"),
    [
        ("nanobot.toml", (), {}),
        ("environment variable NANOBOT_MODEL", (), {"NANOBOT_MODEL": ""}),
        ("environment variable NANOBOT_PROVIDER__MODEL", (), {"NANOBOT_PROVIDER__MODEL": " "}),
        ("command line", ("--model", ""), {}),
    ],
)
def test_run_refuses_a_blank_model_naming_its_source_before_any_request(
    tmp_path: Path, where: str, args: tuple[str, ...], env: dict[str, str]
) -> None:
    """A blank provider.model stops `run` at exit 2 naming where it was set, and the server
    on this machine it would have been sent to is never connected to."""
    from nanobot_core.testing_http import LoopbackResponse, LoopbackServer

    config_file = tmp_path / "nanobot.toml"
    config_file.write_text('[provider]\nmodel = ""\n' if where == "nanobot.toml" else "")
    reply = {"choices": [{"message": {"role": "assistant", "content": "ok"}}]}
    with LoopbackServer(lambda request: LoopbackResponse(200, reply)) as server:
        done = run_cli(
            "run",
            "hi",
            *args,
            cwd=tmp_path,
            env=clean_env(
                **env,
                NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1",
                NANOBOT_API_KEY="sk-test",
                NANOBOT_BASE_URL=f"{server.url}/v1",
            ),
        )
        assert server.connections == 0, done.stderr
    assert done.returncode == 2, done.stderr
    source = str(config_file) if where == "nanobot.toml" else where
    blank = " " if "PROVIDER__" in where else ""
    assert done.stderr == (
        f"Error: configuration: {source}: provider.model: must name a model, got {blank!r}\n"
    )


def test_a_stage_table_from_a_file_leaves_config_equality_alone(tmp_path: Path) -> None:
    """A config whose stage table was read from a file equals one made from the same mapping."""
    from nanobot_core.testing import make_config

    (tmp_path / "nanobot.toml").write_text(
        "[governance.stages.compact_results]\nkeep = 2\n", encoding="utf-8"
    )
    loaded = load_config(cwd=tmp_path, environ={})
    made = make_config({"governance": {"stages": {"compact_results": {"keep": 2}}}})
    assert loaded == made and loaded.governance.stages == made.governance.stages


def test_an_endless_config_file_is_refused_unread(tmp_path: Path) -> None:
    """--config naming an endless input (/dev/zero) fails naming it, not reading 16 MiB of it."""
    with pytest.raises(ConfigError) as caught:
        load_config(cwd=tmp_path, config_file=Path("/dev/zero"), environ={})
    assert str(caught.value) == (
        "/dev/zero: a character device, not a regular file, so it cannot be read as config"
    )


def _loop(tmp_path: Path) -> Path:
    """A link in a loop of two links."""
    (tmp_path / "a.toml").symlink_to(tmp_path / "b.toml")
    (tmp_path / "b.toml").symlink_to(tmp_path / "a.toml")
    return tmp_path / "a.toml"


def _huge(tmp_path: Path) -> Path:
    """A sparse file one byte over the most read of a config file."""
    from nanobot_core.config import MAX_CONFIG_BYTES

    path = tmp_path / "huge.toml"
    with path.open("wb") as handle:
        handle.truncate(MAX_CONFIG_BYTES + 1)
    return path


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "piped.toml"
    os.mkfifo(path)
    return path


def _refusal_within_seconds(pipe: Path, **arguments: Any) -> ConfigError:
    """The `ConfigError` of ``load_config(**arguments)``, which must come within 10 seconds;
    a load still waiting then (on the named pipe `pipe`, if it is one) fails the test."""
    caught: list[BaseException] = []

    def load() -> None:
        try:
            load_config(**arguments)
        except BaseException as exc:  # handed to the test's thread
            caught.append(exc)

    loading = threading.Thread(target=load, daemon=True)
    loading.start()
    loading.join(10)
    if loading.is_alive():
        os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))  # lets the waiting open go
        pytest.fail(f"load_config waited on {pipe}")
    (refused,) = caught
    assert type(refused) is ConfigError, repr(refused)
    return refused


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (_fifo, "a named pipe (FIFO), not a regular file, so it cannot be read as config"),
        (
            lambda tmp_path: tmp_path,
            "a directory, not a regular file, so it cannot be read as config",
        ),
        (_loop, "cannot read config file: Too many levels of symbolic links"),
        (_huge, "larger than 16 MiB, the most read of a config file: not a config file"),
    ],
    ids=["fifo", "folder", "link-loop", "huge"],
)
def test_a_config_file_that_cannot_be_config_is_refused_at_once_naming_it(
    tmp_path: Path, make: Any, said: str
) -> None:
    """--config naming a named pipe (nothing writing to it), a folder, a loop of links or a file
    past the limit fails at once with the path and why; the pipe was waited on for ever."""
    path = make(tmp_path)
    refused = _refusal_within_seconds(path, cwd=tmp_path, config_file=path, environ={})
    assert str(refused) == f"{path}: {said}"


def test_a_nanobot_toml_swapped_for_a_pipe_after_it_is_found_is_not_waited_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A nanobot.toml that is a file when looked for and a named pipe when opened is refused
    naming it, not waited on (the open itself checks what it opened)."""
    import nanobot_core.config as config_module

    local = tmp_path / "nanobot.toml"
    os.mkfifo(local)
    monkeypatch.setattr(config_module, "_found", lambda path: path == local)
    refused = _refusal_within_seconds(local, cwd=tmp_path, environ={})
    assert str(refused) == (
        f"{local}: a named pipe (FIFO), not a regular file, so it cannot be read as config"
    )


def test_a_config_file_at_the_limit_is_read(tmp_path: Path) -> None:
    """A config file of exactly the most read is still read whole."""
    from nanobot_core.config import MAX_CONFIG_BYTES

    line = "# padding\n"
    text = "[runner]\nmax_iterations = 7\n"
    padded = text + line * ((MAX_CONFIG_BYTES - len(text)) // len(line))
    padded += "#" * (MAX_CONFIG_BYTES - len(padded))
    assert len(padded) == MAX_CONFIG_BYTES
    (tmp_path / "nanobot.toml").write_text(padded, encoding="utf-8")
    assert load_config(cwd=tmp_path, environ={}).runner.max_iterations == 7


@pytest.mark.parametrize("kind", ["folder", "dangling link"])
def test_a_nanobot_toml_that_is_not_a_file_is_an_error(tmp_path: Path, kind: str) -> None:
    """A nanobot.toml that is a folder or a link to nothing fails naming it, not ignored."""
    local = tmp_path / "nanobot.toml"
    if kind == "folder":
        local.mkdir()
    else:
        local.symlink_to(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match=r"nanobot\.toml: not a regular file"):
        load_config(cwd=tmp_path, environ={})


def test_a_small_config_file_is_read_without_room_for_the_limit(tmp_path: Path) -> None:
    """Reading a config file of a few bytes sets aside about that much, not 16 MiB."""
    import tracemalloc

    (tmp_path / "nanobot.toml").write_text("[runner]\nmax_iterations = 7\n", encoding="utf-8")
    load_config(cwd=tmp_path, environ={})  # what loading imports is not what is measured
    tracemalloc.start()
    try:
        assert load_config(cwd=tmp_path, environ={}).runner.max_iterations == 7
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, peak


def test_a_list_of_names_is_said_set_by_the_last_source_giving_it(tmp_path: Path) -> None:
    """A list is replaced whole, so only the source whose list applies is named: of
    NANOBOT_BLOCK and NANOBOT_PLUGINS__BLOCK the one applied, of a file and --config the
    later."""
    from nanobot_core.config import source_of

    (tmp_path / "nanobot.toml").write_text('[tools]\ndisabled = ["a"]\n', encoding="utf-8")
    (tmp_path / "other.toml").write_text('[tools]\ndisabled = ["b"]\n', encoding="utf-8")
    environ = {"NANOBOT_BLOCK": "x", "NANOBOT_PLUGINS__BLOCK": '["y"]'}
    config = load_config(cwd=tmp_path, environ=environ, config_file=tmp_path / "other.toml")
    assert config.plugins.block == ["y"]
    assert source_of(config.plugins.block) == {
        "source": "environment variable NANOBOT_PLUGINS__BLOCK"
    }
    assert source_of(config.tools.disabled) == {"source": str(tmp_path / "other.toml")}
    assert source_of(config.governance.disabled) == {}  # left at its default


def test_a_table_entry_is_said_set_by_every_source_giving_it(tmp_path: Path) -> None:
    """Tables merge, so an entry is named with every source that gives it (each must lose
    a stale name for its warning to stop), lowest first, and the others with their own."""
    from nanobot_core.config import source_of
    from nanobot_core.testing import make_config

    (tmp_path / "pyproject.toml").write_text(
        "[tool.nanobot.prompt.order]\nmemory = 1\nskills = 2\n", encoding="utf-8"
    )
    environ = {"NANOBOT_PROMPT__ORDER__MEMORY": "3"}
    config = load_config(cwd=tmp_path, environ=environ)
    assert config.prompt.order == {"memory": 3, "skills": 2}
    pyproject = f"{tmp_path / 'pyproject.toml'} [tool.nanobot]"
    assert source_of(config.prompt.order, "memory") == {
        "source": f"{pyproject}, environment variable NANOBOT_PROMPT__ORDER__MEMORY"
    }
    assert source_of(config.prompt.order, "skills") == {"source": pyproject}
    assert config == make_config({"prompt": {"order": {"memory": 3, "skills": 2}}})
    assert source_of(Config().prompt.order, "memory") == {}


def test_an_option_nested_as_deep_as_a_variable_allows_loads_and_names_its_source(
    tmp_path: Path,
) -> None:
    """``NANOBOT_TOOLS__OPTIONS__X__A__A...`` 3,000 tables deep loads, its source known."""
    name = "NANOBOT_TOOLS__OPTIONS__X" + "__A" * 3_000
    config = load_config(cwd=tmp_path, environ={name: "1"})
    key = "tools.options.x" + ".a" * 3_000
    assert source_prefix(config=config, keys=[key]) == f"environment variable {name}: "


@settings(max_examples=25, deadline=None)
@given(length=st.integers(min_value=1_000, max_value=100_000))
def test_a_long_value_of_the_wrong_type_is_quoted_by_its_ends(length: int) -> None:
    """A long string given where a number goes, from a variable or a file, is quoted cut by
    its ends with the count left out, not echoed whole into the error."""
    value = "a" + "7" * (length - 2) + "z"
    with tempfile.TemporaryDirectory() as folder:
        environ = {"NANOBOT_RUNNER__MAX_ITERATIONS": value}
        with pytest.raises(ConfigError) as from_variable:
            load_config(cwd=folder, environ=environ)
        config = Path(folder) / "nanobot.toml"
        config.write_text(f'[runner]\nmax_iterations = "{value}"\n', encoding="utf-8")
        with pytest.raises(ConfigError) as from_file:
            load_config(cwd=folder, environ={})
    for error in (from_variable.value, from_file.value):
        said = str(error)
        got = said.split("got str ", 1)[1]
        cut = re.fullmatch(r"(.*)\[\.\.\. (\d+) characters omitted \.\.\.\](.*)", got)
        assert cut is not None, said
        head, omitted, tail = cut.groups()
        assert head.startswith("'a777") and tail.endswith("777z'")
        # What is shown and what is said to be left out add up to the quoted value.
        assert len(head) + int(omitted) + len(tail) == length + 2
        assert len(said) < 600
