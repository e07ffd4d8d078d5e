"""A refusal of a setting (``max_tokens`` past the model's limit, a model the API does not know)
names the setting, its value and where it was set, after the server's message and request id."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from conftest import config_for
from hypothesis import given, settings
from hypothesis import strategies as st
from messages_server import API_KEY, MessagesServer, Reply, error_reply
from nanobot_core import ProviderError, variable_source
from nanobot_core.config import ProviderConfig, load_config
from nanobot_core.testing import run_cli

from nanobot_anthropic.provider import AnthropicProvider

REQUEST_ID = "req_011CSHoEeqs5C35K2UUqR7Fy"
TOO_MANY = (
    "max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens for "
    "claude-sonnet-4-5-20250929"
)


def _too_many() -> Reply:
    return error_reply(400, "invalid_request_error", TOO_MANY, {"request-id": REQUEST_ID})


def _unknown_model(model: str) -> Reply:
    return error_reply(404, "not_found_error", f"model: {model}", {"request-id": REQUEST_ID})


def _loaded(server: MessagesServer, folder: Path, **environ: str) -> ProviderConfig:
    """The provider table as `load_config` reads it from `folder` and `environ`."""
    given = {"NANOBOT_BASE_URL": server.base_url, "NANOBOT_API_KEY": API_KEY, **environ}
    return load_config(cwd=folder, environ=given).provider


def _refusal(config: ProviderConfig) -> str:
    provider = AnthropicProvider(config, environ={})
    with pytest.raises(ProviderError) as raised:
        asyncio.run(provider.complete([{"role": "user", "content": "hi"}], []))
    return str(raised.value)


def _refused(server: MessagesServer, message: str) -> str:
    """The error as it starts for every refusal of `server`: URL, status, message, id."""
    return f"{server.base_url}/v1/messages refused the request: HTTP {message} (request id "


def test_max_tokens_past_the_models_limit_names_the_variable_that_set_it(
    server: MessagesServer, tmp_path: Path
) -> None:
    """The server's message and request id, then the setting, its value and the variable."""
    server.add(_too_many())
    config = _loaded(server, tmp_path, NANOBOT_PROVIDER__MAX_TOKENS="100000")
    assert _refusal(config) == (
        f"{_refused(server, f'400: {TOO_MANY} (invalid_request_error)')}{REQUEST_ID}) "
        f"[{variable_source('NANOBOT_PROVIDER__MAX_TOKENS')}: provider.max_tokens = 100000]"
    )
    assert len(server.requests) == 1


def test_a_model_of_another_vendor_names_the_file_that_set_it(
    server: MessagesServer, tmp_path: Path
) -> None:
    """A 404 for ``model: gpt-4o`` names provider.model and the nanobot.toml that gave it."""
    (tmp_path / "nanobot.toml").write_text('[provider]\nmodel = "gpt-4o"\n', encoding="utf-8")
    server.add(_unknown_model("gpt-4o"))
    assert _refusal(_loaded(server, tmp_path)) == (
        f"{_refused(server, '404: model: gpt-4o (not_found_error)')}{REQUEST_ID}) "
        f"[{tmp_path / 'nanobot.toml'}: provider.model = 'gpt-4o']"
    )


def test_a_default_the_model_refuses_is_named_as_the_default_with_how_to_set_it(
    server: MessagesServer,
) -> None:
    """max_tokens nobody set is the plugin's default, 8192: said so, with where to set it."""
    server.add(_too_many())
    assert _refusal(config_for(server)).endswith(
        f"{REQUEST_ID}) [provider.max_tokens = 8192, the default: provider.max_tokens or "
        "NANOBOT_PROVIDER__MAX_TOKENS sets it]"
    )


def test_the_default_model_refused_is_named_as_the_default(
    server: MessagesServer, tmp_path: Path
) -> None:
    """No model set anywhere: the plugin's own default is named, with the ways to set one."""
    server.add(_unknown_model("claude-sonnet-4-5"))
    assert _refusal(_loaded(server, tmp_path)).endswith(
        f"{REQUEST_ID}) [provider.model = 'claude-sonnet-4-5', the default: --model, "
        "NANOBOT_MODEL or provider.model sets it]"
    )


def test_a_setting_made_in_code_is_named_with_its_value(server: MessagesServer) -> None:
    """A ProviderConfig made by a program has no source to name: the setting and value only."""
    server.add(_too_many())
    assert _refusal(config_for(server, max_tokens=100000)).endswith(
        f"{REQUEST_ID}) [provider.max_tokens = 100000]"
    )


def test_a_refusal_of_something_else_names_no_setting(server: MessagesServer) -> None:
    """A 400 about the messages is the server's message and id alone."""
    server.add(error_reply(400, "invalid_request_error", "messages.0.content: Field required"))
    refusal = _refusal(config_for(server, max_tokens=100000))
    assert refusal.endswith("HTTP 400: messages.0.content: Field required (invalid_request_error)")


def test_the_cli_names_the_model_flag_in_one_line_with_no_traceback_or_key(
    server: MessagesServer, tmp_path: Path
) -> None:
    """``run --model gpt-4o``: exit 1, one ``Error:`` line ending with the command line."""
    server.add(_unknown_model("gpt-4o"))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NANOBOT_", "OPENAI_", "ANTHROPIC_"))
    }
    env["ANTHROPIC_API_KEY"] = API_KEY
    result = run_cli(
        "run",
        "--provider",
        "anthropic",
        "--base-url",
        server.base_url,
        "--model",
        "gpt-4o",
        "hi",
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("Error: ") and "HTTP 404: model: gpt-4o (not_found_error)" in line
    assert line.endswith(f"{REQUEST_ID}) [command line: provider.model = 'gpt-4o']")
    assert "Traceback" not in result.stderr and API_KEY not in result.stderr + result.stdout


_FIELDS = ["model", "max_tokens", "messages", "system", "tools.0.name", "max_tokens_x"]


_REST = st.text(max_size=30).filter(lambda rest: not rest.lstrip().startswith(":"))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(_FIELDS), st.sampled_from([":", ": ", " :", ""]), _REST)
def test_the_setting_is_named_exactly_when_the_message_is_about_it(
    field: str, colon: str, rest: str
) -> None:
    """Whatever the server says, a setting is named only when its message starts with that
    body field and a colon, as Anthropic's validation messages do."""
    with MessagesServer([error_reply(400, "invalid_request_error", f"{field}{colon}{rest}")]) as s:
        refusal = _refusal(config_for(s, max_tokens=100000))
    named = {
        "model": "[provider.model = 'claude-sonnet-4-5']",
        "max_tokens": "[provider.max_tokens = 100000]",
    }
    about = field if colon and field in named else None
    for key, note in named.items():
        assert refusal.endswith(f" {note}") == (key == about)
