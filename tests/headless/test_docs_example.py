"""docs/headless.md: its Python example honours NANOBOT_* and nanobot.toml, like the CLI, and
its table of settings names every provider and runner key with its variable and default."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import attrs
import pytest

from nanobot_core.config import _NAMED_ENV, ProviderConfig, RunnerConfig
from tests.headless.conftest import API_KEY, cli_env
from tests.headless.fake_server import FakeChatServer, text_reply
from tests.helpers import REPO_ROOT, clean_env, run_cli, run_python


def _example() -> str:
    text = (REPO_ROOT / "docs" / "headless.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    (block,) = [b for b in blocks if "Runner.from_plugins" in b]
    return block


def test_the_python_example_uses_nanobot_toml_and_the_environment(
    tmp_path: Path, server: FakeChatServer
) -> None:
    """Run as written, the example asks the server nanobot.toml names, with the env's key."""
    server.add(text_reply("a summary"))
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("# demo\n", encoding="utf-8")
    (tmp_path / "nanobot.toml").write_text(
        f'[provider]\nbase_url = "{server.base_url}"\nmodel = "model-from-toml"\n',
        encoding="utf-8",
    )
    env = clean_env(NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1", NANOBOT_API_KEY=API_KEY)
    result = run_python(_example(), cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("a summary ")
    (request,) = server.requests
    assert request.body["model"] == "model-from-toml"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"


def _settings_rows() -> dict[str, tuple[str, str]]:
    """Each row of the "Pointing it at a model" table: config key -> (variables, default)."""
    text = (REPO_ROOT / "docs" / "headless.md").read_text(encoding="utf-8")
    rows: dict[str, tuple[str, str]] = {}
    for line in text.split("## Pointing it at a model", 1)[1].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not (found := re.match(r"`([a-z_.]+)`(?: \((.*)\))?$", cells[3])):
            continue
        rows[found.group(1)] = (cells[2], found.group(2) or "")
    return rows


def _documented_default(text: str) -> Any:
    """The value a row's parenthesis starts with (`default `openai``, `120`, `unset: ...`)."""
    first = re.split(r"[,;]|: ", text.removeprefix("default "), maxsplit=1)[0].strip("` ")
    if first.startswith("unset"):
        return None
    return float(first) if re.fullmatch(r"[0-9.]+", first) else first


_KEYS = [f"provider.{f.name}" for f in attrs.fields(ProviderConfig) if f.init] + [
    f"runner.{f.name}" for f in attrs.fields(RunnerConfig) if f.init
]


@pytest.mark.parametrize("key", _KEYS)
def test_the_settings_table_names_every_key_with_its_variable_and_default(key: str) -> None:
    """Each provider and runner key has a row giving the variable that sets it and its default."""
    rows = _settings_rows()
    assert key in rows
    variables, default = rows[key]
    path = tuple(key.split("."))
    named = [name for name, target in _NAMED_ENV.items() if target == path]
    nested = "NANOBOT_" + "__".join(part.upper() for part in path)
    assert any(f"`{name}`" in variables for name in [*named, nested]), variables
    table, field = path
    expected = attrs.fields_dict(ProviderConfig if table == "provider" else RunnerConfig)[field]
    if default:
        assert _documented_default(default) == expected.default


def test_the_openai_provider_sends_the_temperature_and_the_reply_limit(
    tmp_path: Path, server: FakeChatServer
) -> None:
    """As the page says, the built-in provider sends provider.temperature and
    provider.max_tokens, the limit as max_tokens (only) to a server other than OpenAI's API."""
    server.add(text_reply("done"))
    env = {
        **cli_env(server),
        "NANOBOT_PROVIDER__MAX_TOKENS": "77",
        "NANOBOT_PROVIDER__TEMPERATURE": "0.3",
    }
    result = run_cli("run", "hello", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    (request,) = server.requests
    assert request.body["temperature"] == 0.3
    assert request.body["max_tokens"] == 77
    assert "max_completion_tokens" not in request.body
