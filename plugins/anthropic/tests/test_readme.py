"""The README's examples and settings table, run against the local Messages API server."""

from __future__ import annotations

import asyncio
import re
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from messages_server import API_KEY, MessagesServer, text_reply
from nanobot_core import ConfigError, ProviderError
from nanobot_core.config import ProviderConfig, load_config
from nanobot_core.testing import run_cli

from nanobot_anthropic.provider import AnthropicProvider

README = Path(__file__).resolve().parents[1] / "README.md"
PLUGIN = f"nanobot-anthropic {metadata.version('nanobot-anthropic')}"


def _readme_block(language: str) -> str:
    (block,) = re.findall(rf"```{language}\n(.*?)```", README.read_text("utf-8"), re.DOTALL)
    return str(block)


@pytest.mark.usefixtures("nanobot_workspace")
def test_the_readme_command_reaches_the_messages_api(
    server: MessagesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's ``nanobot-core run`` line, ANTHROPIC_BASE_URL aimed at the local server."""
    (install, export, run) = _readme_block("bash").splitlines()
    assert install.startswith("pip install ./plugins/anthropic")
    assert export == "export ANTHROPIC_API_KEY=..."
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
    server.add(text_reply("notes.txt is not there."))
    arguments = [part.strip('"') for part in re.findall(r'"[^"]*"|\S+', run)]
    assert arguments[:2] == ["nanobot-core", "run"]
    result = run_cli(*arguments[1:])
    assert result.returncode == 0, result.stderr
    assert "notes.txt is not there." in result.stdout
    (request,) = server.requests
    assert request.problems == []
    assert request.headers["x-api-key"] == API_KEY
    assert request.body["model"] == "claude-sonnet-4-5"
    assert request.body["messages"][-1]["content"][-1]["text"].startswith("What is in notes.txt?")


def test_the_readme_toml_gives_the_documented_settings(nanobot_workspace: Path) -> None:
    """The README's [provider] table loads, and its values are the provider's defaults."""
    (nanobot_workspace / "nanobot.toml").write_text(_readme_block("toml"), encoding="utf-8")
    provider_config = load_config(cwd=nanobot_workspace, environ={}).provider
    assert provider_config.name == "anthropic"
    keyed = {"ANTHROPIC_API_KEY": API_KEY}
    configured = AnthropicProvider(provider_config, environ=keyed)
    default = AnthropicProvider(ProviderConfig(), environ=keyed)
    for provider in (configured, default):
        assert provider.model == "claude-sonnet-4-5"
        assert provider.cache == "5m"
        assert provider.max_tokens == 8192
        assert provider.endpoint == "https://api.anthropic.com/v1/messages"
        assert "anthropic-beta" not in provider.headers()


def test_the_base_url_comes_from_the_settings_before_the_environment() -> None:
    """provider.base_url wins over ANTHROPIC_BASE_URL, which wins over api.anthropic.com."""
    environ = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:8/"}
    assert AnthropicProvider(ProviderConfig(), environ=environ).endpoint == (
        "http://127.0.0.1:8/v1/messages"
    )
    configured = ProviderConfig(base_url="http://127.0.0.1:9/proxy/v1")
    assert AnthropicProvider(configured, environ=environ).endpoint == (
        "http://127.0.0.1:9/proxy/v1/messages"
    )


def _call(arguments: str) -> list[dict[str, Any]]:
    call = {"id": "call_9", "type": "function", "function": {"name": "f", "arguments": arguments}}
    return [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_9", "content": "done"},
    ]


def _nested(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        (
            _call("not json"),
            f"{PLUGIN} sends no request: messages[1]: the arguments of call 'call_9' "
            "are not JSON (Expecting value: line 1 column 1 (char 0))",
        ),
        (
            _call("[" + "0," * 100_000 + "0]"),
            f"{PLUGIN} sends no request: messages[1]: the arguments of call 'call_9' "
            "hold more than 100,000 values (each comma, [ and { counts one)",
        ),
        (
            [
                {"role": "user", "content": "q"},
                {"role": "user", "content": [{"type": "text", "text": "a", "x": _nested(100_000)}]},
            ],
            f"{PLUGIN} sends no request: messages[1] nests 100003 levels deep "
            "(a session line may nest 100)",
        ),
    ],
)
def test_the_readme_refusals_are_worded_as_shown(
    server: MessagesServer, messages: list[dict[str, Any]], message: str
) -> None:
    """The README's example refusals, word for word; nothing reaches the server."""
    config = ProviderConfig(base_url=server.base_url, api_key=API_KEY)
    provider = AnthropicProvider(config, environ={})
    with pytest.raises(ProviderError) as raised:
        asyncio.run(provider.complete(messages, []))
    assert str(raised.value) == message
    assert server.requests == []


def test_the_readme_temperature_refusal_is_worded_as_shown(nanobot_workspace: Path) -> None:
    """The README's refusal of a temperature past 1, set by its variable, word for word."""
    config = load_config(environ={"NANOBOT_PROVIDER__TEMPERATURE": "1.5"}).provider
    with pytest.raises(ConfigError) as refused:
        AnthropicProvider(config, environ={"ANTHROPIC_API_KEY": API_KEY})
    shown = " ".join(README.read_text("utf-8").split())
    assert f"`Error: configuration: {refused.value}`" in shown
