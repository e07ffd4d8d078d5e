"""The settings table of docs/headless.md: its defaults, variables and flags are the code's."""

from __future__ import annotations

import json
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal

from nanobot_core import Config, load_config
from tests.headless.conftest import cli_env
from tests.headless.fake_server import FakeChatServer, tool_call_reply
from tests.helpers import REPO_ROOT, run_cli


def _stated_defaults() -> dict[str, str]:
    """Each config key of the settings table and the default it states in parentheses."""
    text = (REPO_ROOT / "docs" / "headless.md").read_text(encoding="utf-8")
    section = text.split("## Pointing it at a model", 1)[1].split("**OpenAI**", 1)[0]
    table = "\n".join(line for line in section.splitlines() if line.startswith("| "))
    return dict(re.findall(r"`([a-z_]+\.[a-z_]+)` \((?:default )?`?([^`,)]+)`?[,)]", table))


def test_the_settings_table_states_the_code_defaults() -> None:
    """Every default in the table of settings equals the `Config` default of its key."""
    stated = _stated_defaults()
    assert {"provider.name", "provider.timeout", "runner.max_iterations"} <= set(stated)
    config = Config()
    for key, text in stated.items():
        value: Any = config
        for part in key.split("."):
            value = getattr(value, part)
        if text.startswith("unset"):  # "(unset: the server's own)": no value by default
            assert value is None, key
            continue
        assert text == (value if isinstance(value, str) else f"{value:.15g}"), key


def _table_rows() -> list[list[str]]:
    """The rows of the settings table, each as its four cells."""
    text = (REPO_ROOT / "docs" / "headless.md").read_text(encoding="utf-8")
    section = text.split("## Pointing it at a model", 1)[1].split("**OpenAI**", 1)[0]
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row] for row in rows[1:]]


def _value_for(default: Any, tp: Any = None) -> tuple[str, Any]:
    """A value unlike `default`, of its key's type `tp`: as an environment variable holds it,
    and loaded (one of the choices of a ``Literal``, a number for an unset number)."""
    if typing.get_origin(tp) is Literal:
        choice = next(c for c in typing.get_args(tp) if c != default)
        return choice, choice
    if default is None and typing.get_origin(tp) in (typing.Union, types.UnionType):
        number = next((t for t in typing.get_args(tp) if t in (int, float)), None)
        if number is not None:
            return _value_for(number(1))
    if isinstance(default, bool) or default is None or isinstance(default, str):
        return "from-the-environment", "from-the-environment"
    if isinstance(default, int):
        return str(default + 3), default + 3
    return f"{default + 2.5}", default + 2.5


def test_each_variable_of_the_settings_table_sets_its_key(tmp_path: Path) -> None:
    """Every environment variable the table names sets the config key of its row."""
    rows = _table_rows()
    assert len(rows) >= 12
    for _setting, _flag, variables, key_cell in rows:
        (key,) = re.findall(r"`([a-z_]+\.[a-z_]+)`", key_cell)
        section, name = key.split(".")
        default = getattr(getattr(Config(), section), name)
        tp = typing.get_type_hints(type(getattr(Config(), section)))[name]
        text, expected = _value_for(default, tp)
        names = re.findall(r"`(NANOBOT_\w+|OPENAI_\w+)`", variables)
        assert names, key
        for variable in names:
            loaded = load_config(cwd=tmp_path, environ={variable: text})
            assert getattr(getattr(loaded, section), name) == expected, (variable, key)


def test_each_flag_of_the_settings_table_beats_its_variable(
    tmp_path: Path, server: FakeChatServer
) -> None:
    """The table's five flags each set their row's key for `run`, over the environment."""
    flags = [flag.strip("`") for _s, flag, _v, _k in _table_rows() if flag.startswith("`")]
    assert flags == ["--provider", "--base-url", "--model", "--max-iterations", "--session"]
    server.add(tool_call_reply([("c1", "list_dir", "{}")]))
    env = {
        **cli_env(server),
        "NANOBOT_PROVIDER": "no-such-provider",
        "NANOBOT_BASE_URL": "http://127.0.0.1:9/v1",
        "NANOBOT_MODEL": "model-from-env",
        "NANOBOT_RUNNER__MAX_ITERATIONS": "5",
        "NANOBOT_RUNNER__SESSION": "from-env",
    }
    values = ["openai", server.base_url, "model-from-flag", "1", "from-flag"]
    args = [part for pair in zip(flags, values, strict=True) for part in pair]
    result = run_cli("run", "hi", "--json", *args, cwd=tmp_path, env=env, timeout=60)
    assert result.returncode == 1, result.stderr  # stopped by --max-iterations 1
    assert "stopped after 1 round(s)" in result.stderr
    (request,) = server.requests
    assert request.body["model"] == "model-from-flag"
    assert json.loads(result.stdout)["session"] == "from-flag"
    assert (tmp_path / ".nanobot" / "sessions" / "from-flag.jsonl").is_file()
    assert not (tmp_path / ".nanobot" / "sessions" / "from-env.jsonl").exists()
