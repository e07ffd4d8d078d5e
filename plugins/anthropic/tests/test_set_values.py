"""A value the user set is sent as set, even one equal to the core's default (which is
OpenAI's); only a value nobody set gets the plugin's own default."""

from __future__ import annotations

import asyncio
import contextlib
import os
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from messages_server import API_KEY, MessagesServer, error_reply, text_reply
from nanobot_core import ConfigError, ProviderError
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


#: The core's default base URL: OpenAI's API, which serves no Messages API.
CORE_BASE_URL = ProviderConfig().base_url
_REFUSED = (
    f"provider.base_url: '{CORE_BASE_URL}' is OpenAI's API, which does not serve Anthropic's "
    "Messages API, so no request is sent there"
)


@pytest.mark.parametrize("where", ["nanobot.toml", "NANOBOT_BASE_URL", "--base-url"])
def test_the_core_default_base_url_set_by_the_user_is_refused_not_replaced(
    server: MessagesServer, tmp_path: Path, where: str
) -> None:
    """OpenAI's URL set on purpose stops the run naming where it was set (exit 2); the request
    is not sent elsewhere in its stead (ANTHROPIC_BASE_URL's server receives nothing)."""
    server.add(text_reply("hello"))
    args: list[str] = []
    environ = {"ANTHROPIC_BASE_URL": server.base_url}
    if where == "nanobot.toml":
        config = f'[provider]\nbase_url = "{CORE_BASE_URL}"\n'
        (tmp_path / "nanobot.toml").write_text(config, encoding="utf-8")
        source = str(tmp_path / "nanobot.toml")
    elif where == "NANOBOT_BASE_URL":
        environ[where] = CORE_BASE_URL
        source = f"environment variable {where}"
    else:
        args = [where, CORE_BASE_URL]
        source = "command line"
    result = run_cli(
        "run", "--provider", "anthropic", *args, "hi", cwd=tmp_path, env=_environment(**environ)
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"Error: configuration: {source}: {_REFUSED} (set ")
    assert len(result.stderr.splitlines()) == 1 and API_KEY not in result.stderr
    assert server.requests == []


def test_a_base_url_nobody_set_is_anthropic_base_url_then_anthropics(
    server: MessagesServer, tmp_path: Path
) -> None:
    """No base URL in any file, variable or flag: ANTHROPIC_BASE_URL's server gets the turn."""
    server.add(text_reply("hello"))
    result = run_cli(
        "run",
        "--provider",
        "anthropic",
        "hi",
        cwd=tmp_path,
        env=_environment(ANTHROPIC_BASE_URL=server.base_url),
    )
    assert result.returncode == 0, result.stderr
    assert [r.problems for r in server.requests] == [[]]
    unset = AnthropicProvider(
        load_config(cwd=tmp_path, environ={}).provider, environ={"ANTHROPIC_API_KEY": API_KEY}
    )
    assert unset.endpoint == "https://api.anthropic.com/v1/messages"


def test_openais_url_in_anthropic_base_url_is_refused_naming_it() -> None:
    """ANTHROPIC_BASE_URL set to OpenAI's API is named as the source of the refusal."""
    environ = {"ANTHROPIC_BASE_URL": CORE_BASE_URL, "ANTHROPIC_API_KEY": API_KEY}
    with pytest.raises(ConfigError) as raised:
        AnthropicProvider(ProviderConfig(), environ=environ)
    assert str(raised.value).startswith(f"environment variable ANTHROPIC_BASE_URL: {_REFUSED}")
    assert "set ANTHROPIC_BASE_URL to Anthropic's API" in str(raised.value)


_SECRET = "pw-Zq81vLm"
_PATH_CHARS = st.text(string.ascii_letters + string.digits + "/-._~%", max_size=20)


@settings(max_examples=40, deadline=None)
@given(
    scheme=st.sampled_from(["http", "https", "HTTPS"]),
    host=st.sampled_from(
        ["api.openai.com", "API.OpenAI.com", "eu.api.openai.com", "api.openai.com."]
    ),
    credentials=st.booleans(),
    port=st.none() | st.integers(1, 65535),
    path=_PATH_CHARS,
)
def test_any_url_of_openais_api_a_variable_sets_is_refused_naming_it(
    empty_folder: Path, scheme: str, host: str, credentials: bool, port: int | None, path: str
) -> None:
    """Whatever scheme, port, path or password a base URL on OpenAI's API host (a regional one,
    a final dot) has, building the provider refuses it, naming NANOBOT_BASE_URL and never
    showing the password."""
    userinfo = f"me:{_SECRET}@" if credentials else ""
    url = f"{scheme}://{userinfo}{host}{'' if port is None else f':{port}'}/{path}"
    config = load_config(
        cwd=empty_folder, environ={"NANOBOT_BASE_URL": url, "NANOBOT_API_KEY": API_KEY}
    )
    with pytest.raises(ConfigError) as raised:
        AnthropicProvider(config.provider, environ={})
    said = str(raised.value)
    assert said.startswith("environment variable NANOBOT_BASE_URL: provider.base_url: ")
    assert "is OpenAI's API" in said and _SECRET not in said and API_KEY not in said


def _key_sent(server: MessagesServer, folder: Path, **environ: str) -> str | None:
    """The x-api-key the server received from a provider loaded from `environ` (None: none)."""
    server.add(text_reply("hello"))
    config = load_config(cwd=folder, environ={"NANOBOT_BASE_URL": server.base_url, **environ})
    provider = AnthropicProvider(config.provider, environ=environ)
    with contextlib.suppress(ProviderError):  # a request without the key is refused: 400
        asyncio.run(provider.complete([{"role": "user", "content": "hi"}], []))
    (request,) = server.requests
    return request.headers.get("x-api-key")


@pytest.mark.parametrize("variable", ["NANOBOT_API_KEY", "NANOBOT_PROVIDER__API_KEY"])
def test_a_key_set_for_nanobot_is_sent_even_when_it_is_openais_too(
    server: MessagesServer, tmp_path: Path, variable: str
) -> None:
    """A key a NANOBOT_ variable set is the user's, even one OPENAI_API_KEY holds as well."""
    assert _key_sent(server, tmp_path, OPENAI_API_KEY=API_KEY, **{variable: API_KEY}) == API_KEY


def test_a_key_only_openai_api_key_gave_is_not_sent(server: MessagesServer, tmp_path: Path) -> None:
    """The key the core took from OPENAI_API_KEY alone never reaches Anthropic's server."""
    assert _key_sent(server, tmp_path, OPENAI_API_KEY=API_KEY) is None


def test_a_key_a_program_puts_in_a_loaded_config_is_sent_though_openai_api_key_gave_one(
    server: MessagesServer, tmp_path: Path
) -> None:
    """A key a program sets on a config loaded while OPENAI_API_KEY was set is its own: sent."""
    server.add(text_reply("hello"))
    environ = {"OPENAI_API_KEY": "sk-openai-not-for-anthropic"}
    config = load_config(cwd=tmp_path, environ={"NANOBOT_BASE_URL": server.base_url, **environ})
    config.provider.api_key = API_KEY  # from the program's own secret store, say
    provider = AnthropicProvider(config.provider, environ=environ)
    asyncio.run(provider.complete([{"role": "user", "content": "hi"}], []))
    (request,) = server.requests
    assert request.headers.get("x-api-key") == API_KEY
