"""A value the user set is sent as set, even one equal to the core's default (which is
OpenAI's); only a value nobody set gets the plugin's own default."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from messages_server import API_KEY, MessagesServer, error_reply, text_reply
from nanobot_core.config import ProviderConfig, load_config
from nanobot_core.testing import run_cli

from nanobot_anthropic.provider import DEFAULT_MODEL, AnthropicProvider

#: The core's default model: OpenAI's, which a user may still set on purpose.
CORE_MODEL = ProviderConfig().model


def _environment(**extra: str) -> dict[str, str]:
    """This process's environment without any setting of nanobot-core or either vendor's."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NANOBOT_", "OPENAI_", "ANTHROPIC_"))
    }
    return {**env, "ANTHROPIC_API_KEY": API_KEY, **extra}


def _run(server: MessagesServer, workspace: Path, *args: str, **environ: str) -> str:
    """``nanobot-core run --provider anthropic ... hi`` aimed at `server`; the model it sent."""
    server.add(text_reply("hello"))
    result = run_cli(
        "run",
        "--provider",
        "anthropic",
        "--base-url",
        server.base_url,
        *args,
        "hi",
        cwd=workspace,
        env=_environment(**environ),
    )
    assert result.returncode == 0, result.stderr
    (request,) = server.requests
    assert request.problems == []
    model = request.body["model"]
    assert isinstance(model, str)
    return model


def test_the_core_default_model_set_in_nanobot_toml_is_sent(
    server: MessagesServer, tmp_path: Path
) -> None:
    """``model = "gpt-4o-mini"`` in nanobot.toml reaches the server as it is."""
    config = f'[provider]\nmodel = "{CORE_MODEL}"\n'
    (tmp_path / "nanobot.toml").write_text(config, encoding="utf-8")
    assert _run(server, tmp_path) == CORE_MODEL


@pytest.mark.parametrize("variable", ["NANOBOT_MODEL", "NANOBOT_PROVIDER__MODEL"])
def test_the_core_default_model_set_in_the_environment_is_sent(
    server: MessagesServer, tmp_path: Path, variable: str
) -> None:
    """NANOBOT_MODEL (or NANOBOT_PROVIDER__MODEL) set to the core's default is sent as set."""
    assert _run(server, tmp_path, **{variable: CORE_MODEL}) == CORE_MODEL


def test_the_core_default_model_given_as_model_flag_is_sent(
    server: MessagesServer, tmp_path: Path
) -> None:
    """``--model gpt-4o-mini`` reaches the server as it is."""
    assert _run(server, tmp_path, "--model", CORE_MODEL) == CORE_MODEL


def test_a_model_nobody_set_is_the_plugins_default(server: MessagesServer, tmp_path: Path) -> None:
    """No model in any file, variable or flag: the plugin's Claude model is sent."""
    assert _run(server, tmp_path) == DEFAULT_MODEL == "claude-sonnet-4-5"


def test_a_model_made_in_code_as_the_core_default_is_the_plugins_default() -> None:
    """A ProviderConfig made by a program has no source: the core's default there is unset."""
    provider = AnthropicProvider(ProviderConfig(), environ={"ANTHROPIC_API_KEY": API_KEY})
    assert provider.model == DEFAULT_MODEL


def test_the_core_default_model_refused_names_the_flag_that_set_it(
    server: MessagesServer, tmp_path: Path
) -> None:
    """The server's 404 for a model set on purpose names the command line, not a default."""
    server.add(error_reply(404, "not_found_error", f"model: {CORE_MODEL}"))
    result = run_cli(
        "run",
        "--provider",
        "anthropic",
        "--base-url",
        server.base_url,
        "--model",
        CORE_MODEL,
        "hi",
        cwd=tmp_path,
        env=_environment(),
    )
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.endswith(f"[command line: provider.model = '{CORE_MODEL}']"), line
    assert "Traceback" not in result.stderr and API_KEY not in result.stderr


#: Model names as a user may write them: the core's default among any others it accepts (a
#: blank one is refused when the config is read; an environment value holds no NUL).
_MODELS = st.one_of(
    st.just(CORE_MODEL),
    st.text(st.characters(codec="utf-8", exclude_characters="\x00")).filter(str.strip),
)


@pytest.fixture(scope="module")
def empty_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with no config file, for `load_config` to read the environment alone."""
    return tmp_path_factory.mktemp("empty")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=_MODELS, variable=st.sampled_from(["NANOBOT_MODEL", "NANOBOT_PROVIDER__MODEL"]))
def test_any_model_a_variable_sets_is_the_one_sent(
    empty_folder: Path, model: str, variable: str
) -> None:
    """Whatever name a variable gives provider.model, the request carries exactly it."""
    environ = {variable: model, "NANOBOT_API_KEY": API_KEY}
    with MessagesServer([text_reply("hello")]) as server:
        environ["NANOBOT_BASE_URL"] = server.base_url
        config = load_config(cwd=empty_folder, environ=environ)
        provider = AnthropicProvider(config.provider, environ={})
        reply = asyncio.run(provider.complete([{"role": "user", "content": "hi"}], []))
        (request,) = server.requests
    assert request.body["model"] == model
    assert reply.content == "hello"
