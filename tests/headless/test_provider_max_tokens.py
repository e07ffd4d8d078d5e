"""`provider.max_tokens` on the built-in provider: sent in the field the server takes, or not.

The servers here are real loopback servers. OpenAI's host is reached through one of them
set as the HTTP proxy (the provider honours ``HTTP_PROXY``), so the host rule is checked
on what a server received for ``http://api.openai.com/v1``, never on the network.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core import is_openai_api
from nanobot_core.config import (
    Config,
    GovernanceConfig,
    ProviderConfig,
    check_config,
    load_config,
)
from nanobot_core.errors import ConfigError, ProviderError
from nanobot_core.providers import OpenAIProvider
from nanobot_core.testing_http import LoopbackRequest, LoopbackResponse, LoopbackServer
from tests.headless.conftest import API_KEY, cli_env, provider_config
from tests.headless.fake_server import FakeChatServer, Reply, error_reply, text_reply
from tests.helpers import run_cli

MESSAGES = [{"role": "user", "content": "hi"}]
COMPLETION = {
    "object": "chat.completion",
    "model": "fake-model",
    "choices": [{"message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}],
}
FIELDS = ("max_tokens", "max_completion_tokens")
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


def _sent(server: FakeChatServer, config: ProviderConfig) -> dict[str, Any]:
    """The JSON body `server` received for one completion under `config`."""
    server.add(text_reply("fine"))
    asyncio.run(OpenAIProvider(config).complete(MESSAGES, []))
    body: dict[str, Any] = server.requests[-1].body
    return body


def _limits(body: dict[str, Any]) -> dict[str, Any]:
    """The reply-limit fields of a request body and their values."""
    return {field: body[field] for field in FIELDS if field in body}


def test_unset_sends_no_reply_limit(server: FakeChatServer) -> None:
    """With provider.max_tokens unset the request holds neither field (the server's limit)."""
    assert _limits(_sent(server, provider_config(server.base_url))) == {}


def test_a_server_other_than_openais_gets_max_tokens(server: FakeChatServer) -> None:
    """A limit sent to any server but OpenAI's API goes as max_tokens, and only as it."""
    body = _sent(server, provider_config(server.base_url, max_tokens=321))
    assert _limits(body) == {"max_tokens": 321}


def test_the_setting_names_the_field_for_another_server(server: FakeChatServer) -> None:
    """provider.max_tokens_field = 'max_completion_tokens' sends that field, and only it."""
    config = provider_config(
        server.base_url, max_tokens=77, max_tokens_field="max_completion_tokens"
    )
    assert _limits(_sent(server, config)) == {"max_completion_tokens": 77}


@pytest.fixture
def openai_by_proxy(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A loopback server set as the HTTP proxy: what it receives for OpenAI's host is kept."""
    received: list[LoopbackRequest] = []

    def answer(request: LoopbackRequest) -> LoopbackResponse:
        received.append(request)
        return LoopbackResponse(200, COMPLETION)

    with LoopbackServer(answer) as proxy:
        for name in PROXY_VARIABLES:
            monkeypatch.delenv(name, raising=False)
            monkeypatch.delenv(name.lower(), raising=False)
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        yield received


@pytest.mark.parametrize("host", ["api.openai.com", "eu.api.openai.com", "API.OpenAI.com"])
def test_openais_api_gets_max_completion_tokens(openai_by_proxy: Any, host: str) -> None:
    """OpenAI's API (and a regional host of it) gets max_completion_tokens, never max_tokens."""
    config = provider_config(f"http://{host}/v1", max_tokens=4096)
    asyncio.run(OpenAIProvider(config).complete(MESSAGES, []))
    (request,) = openai_by_proxy
    assert request.headers["host"].lower() == host.lower()
    assert _limits(request.json) == {"max_completion_tokens": 4096}


def test_the_setting_sends_max_tokens_to_openais_host(openai_by_proxy: Any) -> None:
    """provider.max_tokens_field = 'max_tokens' overrides the host rule for OpenAI's API."""
    config = provider_config(
        "http://api.openai.com/v1", max_tokens=9, max_tokens_field="max_tokens"
    )
    asyncio.run(OpenAIProvider(config).complete(MESSAGES, []))
    (request,) = openai_by_proxy
    assert _limits(request.json) == {"max_tokens": 9}


def test_unset_sends_nothing_to_openais_host(openai_by_proxy: Any) -> None:
    """Unset, OpenAI's API gets no reply limit either."""
    asyncio.run(OpenAIProvider(provider_config("http://api.openai.com/v1")).complete(MESSAGES, []))
    (request,) = openai_by_proxy
    assert _limits(request.json) == {}


@settings(max_examples=60, deadline=None)
@given(
    limit=st.integers(min_value=1, max_value=2**63 - 1),
    setting=st.sampled_from(["auto", *FIELDS]),
    host=st.sampled_from(["api.openai.com", "eu.api.openai.com", "localhost", "openrouter.ai"])
    | st.from_regex(r"[a-z][a-z0-9-]{0,20}\.(com|net|ai|local)", fullmatch=True),
)
def test_any_limit_goes_in_exactly_one_field(limit: int, setting: str, host: str) -> None:
    """Any limit loaded from the environment is sent unchanged, in exactly the chosen field."""
    environ = {
        "NANOBOT_BASE_URL": f"https://{host}/v1",
        "NANOBOT_API_KEY": API_KEY,
        "NANOBOT_PROVIDER__MAX_TOKENS": str(limit),
        "NANOBOT_PROVIDER__MAX_TOKENS_FIELD": setting,
    }
    config = load_config(cwd=Path("/nonexistent-nanobot-dir"), environ=environ).provider
    body = OpenAIProvider(config).request_body(MESSAGES, [])
    openai = host == "api.openai.com" or host.endswith(".api.openai.com")
    expected = setting if setting != "auto" else FIELDS[1] if openai else FIELDS[0]
    assert _limits(body) == {expected: limit}
    assert json.loads(json.dumps(body))[expected] == limit


@given(text=st.text(max_size=30))
def test_the_field_setting_takes_only_its_three_names(text: str) -> None:
    """provider.max_tokens_field refuses any other text, naming its variable."""
    environ = {"NANOBOT_PROVIDER__MAX_TOKENS_FIELD": text}
    if text in ("auto", *FIELDS):
        load_config(cwd=Path("/nonexistent-nanobot-dir"), environ=environ)
        return
    with pytest.raises(ConfigError) as caught:
        load_config(cwd=Path("/nonexistent-nanobot-dir"), environ=environ)
    said = str(caught.value)
    assert said.startswith("environment variable NANOBOT_PROVIDER__MAX_TOKENS_FIELD: ")
    assert "provider.max_tokens_field: expected one of 'auto', 'max_tokens'" in said


def test_a_url_that_is_not_one_gets_max_tokens() -> None:
    """The host rule falls back to max_tokens for what it cannot read (check_endpoint refuses
    such a URL anyway)."""
    from nanobot_core.providers.openai import _reply_limit_field

    assert _reply_limit_field("http://[::1/v1") == "max_tokens"
    assert _reply_limit_field("https://api.openai.com./v1") == "max_completion_tokens"
    assert _reply_limit_field("https://api.openai.com.evil.example/v1") == "max_tokens"
    assert _reply_limit_field("https://notapi.openai.com/v1") == "max_tokens"


@given(limit=st.integers(min_value=2**63, max_value=2**80))
def test_a_limit_past_64_bits_from_a_variable_is_refused_when_loaded(limit: int) -> None:
    """A provider.max_tokens no server's JSON parser reads is refused by load_config, naming its
    variable and the range, as a file's (TOML stops at 64 bits) and the provider's are."""
    environ = {"NANOBOT_PROVIDER__MAX_TOKENS": str(limit)}
    with pytest.raises(ConfigError) as caught:
        load_config(cwd=Path("/nonexistent-nanobot-dir"), environ=environ)
    assert str(caught.value) == (
        "environment variable NANOBOT_PROVIDER__MAX_TOKENS: provider.max_tokens: must be a "
        f"whole number from 1 to {2**63 - 1} (or unset, for the server's own limit or the "
        f"provider's default), got {limit}"
    )


@settings(max_examples=30)
@given(bits=st.integers(min_value=1_025, max_value=40_000))
def test_a_limit_too_long_to_write_is_refused_by_its_size(bits: int) -> None:
    """A provider.max_tokens past a float's range (a TOML hex literal of thousands of digits,
    which Python will not write in decimal) is refused naming its size in bits, not with a
    ValueError from writing it."""
    environ = {"NANOBOT_PROVIDER__MAX_TOKENS": hex(2**bits - 1)}
    with pytest.raises(ConfigError) as caught:
        load_config(cwd=Path("/nonexistent-nanobot-dir"), environ=environ)
    assert str(caught.value).startswith(
        "environment variable NANOBOT_PROVIDER__MAX_TOKENS: provider.max_tokens: must be a "
        "whole number from 1"
    )
    assert str(caught.value).endswith(f"got an int of {bits} bits")


@given(limit=st.integers(min_value=-(2**70), max_value=2**70))
def test_check_config_and_the_provider_refuse_the_same_limits(limit: int) -> None:
    """check_config refuses a provider.max_tokens built in code exactly when the provider does,
    in the same words."""
    said: list[str] = []
    for check in (
        lambda: check_config(Config(provider=ProviderConfig(max_tokens=limit))),
        lambda: OpenAIProvider(ProviderConfig(base_url="http://localhost:1/v1", max_tokens=limit)),
    ):
        try:
            check()
        except ConfigError as exc:
            said.append(str(exc))
    assert said == ([] if 1 <= limit <= 2**63 - 1 else [said[0], said[0]])


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"max_tokens": 0}, "provider.max_tokens: must be a whole number from 1"),
        ({"max_tokens": -5}, "provider.max_tokens: must be a whole number from 1"),
        ({"max_tokens": True}, "provider.max_tokens: expected an integer .int., got bool True"),
        ({"max_tokens": "100"}, "provider.max_tokens: expected an integer .int., got str '100'"),
        ({"max_tokens": 2**63}, "provider.max_tokens: must be a whole number from 1"),
        ({"max_tokens_field": "max_tokenz"}, "provider.max_tokens_field: expected one of"),
    ],
)
def test_a_config_made_in_code_is_refused_before_any_request(
    server: FakeChatServer, changes: dict[str, Any], key: str
) -> None:
    """A ProviderConfig built in code with a limit no server takes is a ConfigError at build."""
    with pytest.raises(ConfigError, match=key):
        OpenAIProvider(provider_config(server.base_url, **changes))
    assert server.requests == []


def _refusing(body: Any, status: int = 400) -> Reply:
    """An error reply with `body` as it is (a server's own error shape)."""
    return Reply(status=status, body=body)


UNSUPPORTED = {
    "error": {
        "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
        "Use 'max_completion_tokens' instead.",
        "type": "invalid_request_error",
        "param": "max_tokens",
        "code": "unsupported_parameter",
    }
}


def _refusal(server: FakeChatServer, config: ProviderConfig, reply: Reply) -> str:
    """The provider error a completion under `config` ends with, when `server` answers `reply`."""
    server.add(reply)
    with pytest.raises(ProviderError) as caught:
        asyncio.run(OpenAIProvider(config).complete(MESSAGES, []))
    return str(caught.value)


def test_a_refusal_of_the_field_names_the_setting_and_its_source(
    server: FakeChatServer, tmp_path: Path
) -> None:
    """A 400 about the field ends with where provider.max_tokens was set and which field
    carried it, and how to send the other."""
    (tmp_path / "nanobot.toml").write_text(
        f'[provider]\nbase_url = "{server.base_url}"\nmodel = "o3"\nmax_tokens = 4096\n'
    )
    config = load_config(cwd=tmp_path, environ={"NANOBOT_API_KEY": API_KEY}).provider
    said = _refusal(server, config, _refusing(UNSUPPORTED))
    assert "HTTP 400: Unsupported parameter: 'max_tokens'" in said
    assert said.endswith(
        f"[{tmp_path / 'nanobot.toml'}: provider.max_tokens = 4096, sent as max_tokens, the "
        "field servers other than OpenAI's API take (provider.max_tokens_field = 'auto', the "
        "default; 'max_completion_tokens' sends the other)]"
    )
    assert API_KEY not in said


def test_a_refusal_names_the_field_setting_where_it_was_set(server: FakeChatServer) -> None:
    """With the field set by a variable, the note names that variable and value."""
    environ = {
        "NANOBOT_BASE_URL": server.base_url,
        "NANOBOT_API_KEY": API_KEY,
        "NANOBOT_PROVIDER__MAX_TOKENS": "500",
        "NANOBOT_PROVIDER__MAX_TOKENS_FIELD": "max_completion_tokens",
        "NANOBOT_PROVIDER__MAX_RETRIES": "0",
    }
    config = load_config(cwd=Path("/nonexistent-nanobot-dir"), environ=environ).provider
    detail = {"detail": [{"type": "extra_forbidden", "loc": ["body", "max_completion_tokens"]}]}
    said = _refusal(server, config, _refusing(detail, status=422))
    assert said.endswith(
        "[environment variable NANOBOT_PROVIDER__MAX_TOKENS: provider.max_tokens = 500, sent "
        "as max_completion_tokens (environment variable NANOBOT_PROVIDER__MAX_TOKENS_FIELD: "
        "provider.max_tokens_field = 'max_completion_tokens'; 'auto' or 'max_tokens' change it)]"
    )


def test_a_refusal_of_something_else_is_left_as_the_server_said(server: FakeChatServer) -> None:
    """A 400 that names neither the field nor its param gets no note about the limit."""
    config = provider_config(server.base_url, max_tokens=64)
    said = _refusal(server, config, error_reply(400, "model 'x' not found"))
    assert "provider.max_tokens" not in said
    other = _refusal(server, config, error_reply(400, "'my_max_tokens_x' is unknown"))
    assert "provider.max_tokens" not in other


def test_a_refusal_by_param_alone_names_the_setting(server: FakeChatServer) -> None:
    """OpenAI's ``param`` naming the field is enough, whatever the message says."""
    body = {"error": {"message": "Invalid value.", "param": "max_tokens", "code": "invalid_value"}}
    said = _refusal(server, provider_config(server.base_url, max_tokens=64), _refusing(body))
    assert said.endswith("'max_completion_tokens' sends the other)]")


def test_unset_a_refusal_has_no_note(server: FakeChatServer) -> None:
    """With no limit sent, a message that mentions max_tokens is the server's alone."""
    said = _refusal(server, provider_config(server.base_url), _refusing(UNSUPPORTED))
    assert "provider.max_tokens" not in said


# -- the room the governor keeps for the reply ----------------------------------------------


def test_a_limit_above_max_output_is_warned_about_naming_both_sources(tmp_path: Path) -> None:
    """provider.max_tokens above governance.max_output gives a warning naming each value's
    source and the fix."""
    from nanobot_core.config import reply_room_warning

    (tmp_path / "nanobot.toml").write_text("[provider]\nmax_tokens = 16000\n")
    config = load_config(cwd=tmp_path, environ={})
    said = reply_room_warning(config)
    assert said == (
        f"{tmp_path / 'nanobot.toml'}: provider.max_tokens (16000) is more than "
        "governance.max_output (8192, the default), the room the governor keeps in "
        "governance.context_window for the reply: a request governed to its budget may leave "
        "the reply less than provider.max_tokens, and the server may refuse the request or "
        "cut the reply off at the window; set governance.max_output to 16000 to keep that room"
    )


@pytest.mark.parametrize(
    "governance",
    [
        GovernanceConfig(max_output=16000),
        GovernanceConfig(max_output=20000),
        GovernanceConfig(input_limit=50_000),
    ],
)
def test_no_warning_when_the_room_is_kept_or_the_budget_is_given(
    governance: GovernanceConfig,
) -> None:
    """A limit at most max_output, or a budget set as input_limit, is not warned about."""
    from nanobot_core.config import reply_room_warning

    config = Config(governance=governance, provider=ProviderConfig(max_tokens=16000))
    assert reply_room_warning(config) is None
    assert reply_room_warning(Config()) is None


# -- the command line -----------------------------------------------------------------------


def test_run_sends_the_variables_limit(server: FakeChatServer, tmp_path: Path) -> None:
    """`run` with NANOBOT_PROVIDER__MAX_TOKENS sends it as max_tokens to a local server."""
    server.add(text_reply("done"))
    env = {**cli_env(server), "NANOBOT_PROVIDER__MAX_TOKENS": "256"}
    result = run_cli("run", "hi", cwd=tmp_path, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    (request,) = server.requests
    assert _limits(request.body) == {"max_tokens": 256}
    assert "governance.max_output" not in result.stderr


def test_run_without_a_limit_sends_none(server: FakeChatServer, tmp_path: Path) -> None:
    """`run` with no limit set sends neither field, as before."""
    server.add(text_reply("done"))
    result = run_cli("run", "hi", cwd=tmp_path, env=cli_env(server), timeout=60)
    assert result.returncode == 0, result.stderr
    (request,) = server.requests
    assert _limits(request.body) == {}


def test_run_takes_the_limit_and_field_from_nanobot_toml_and_warns(
    server: FakeChatServer, tmp_path: Path
) -> None:
    """nanobot.toml's limit and field are sent; a limit above max_output is warned about on
    stderr, and the answer still comes."""
    (tmp_path / "nanobot.toml").write_text(
        '[provider]\nmax_tokens = 20000\nmax_tokens_field = "max_completion_tokens"\n'
    )
    server.add(text_reply("done"))
    result = run_cli("run", "hi", cwd=tmp_path, env=cli_env(server), timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done"
    (request,) = server.requests
    assert _limits(request.body) == {"max_completion_tokens": 20000}
    assert "provider.max_tokens (20000) is more than governance.max_output (8192" in result.stderr
    assert "set governance.max_output to 20000" in result.stderr


def test_run_names_the_setting_when_the_server_refuses_it(
    server: FakeChatServer, tmp_path: Path
) -> None:
    """A refusal of the field fails `run` (exit 1), naming the variable that set the limit."""
    server.add(_refusing(UNSUPPORTED))
    env = {**cli_env(server), "NANOBOT_PROVIDER__MAX_TOKENS": "1000"}
    result = run_cli("run", "hi", cwd=tmp_path, env=env, timeout=60)
    assert result.returncode == 1, result.stderr
    assert (
        "[environment variable NANOBOT_PROVIDER__MAX_TOKENS: provider.max_tokens = 1000, sent as "
        "max_tokens" in " ".join(result.stderr.split())
    )
    assert "Traceback" not in result.stderr
    assert API_KEY not in result.stderr


def test_run_refuses_an_unknown_field_naming_the_file(
    server: FakeChatServer, tmp_path: Path
) -> None:
    """A field name that is neither is a config error (exit 2) naming nanobot.toml."""
    (tmp_path / "nanobot.toml").write_text('[provider]\nmax_tokens_field = "n_predict"\n')
    result = run_cli("run", "hi", cwd=tmp_path, env=cli_env(server), timeout=60)
    assert result.returncode == 2, result.stderr
    assert f"{tmp_path / 'nanobot.toml'}: provider.max_tokens_field: expected one of" in (
        " ".join(result.stderr.split())
    )
    assert server.requests == []


def test_a_refusal_nested_past_what_json_walks_is_reported_not_crashed_on(
    server: FakeChatServer,
) -> None:
    """An error body nested 100,000 levels deep is the server's refusal, reported as one."""
    deep = '{"error": {"message": "bad", "param": ' + "[" * 100_000 + "]" * 100_000 + "}}"
    said = _refusal(server, provider_config(server.base_url, max_tokens=64), _refusing(deep))
    assert "refused the request: HTTP 400" in said
    assert "provider.max_tokens" not in said


@given(
    host=st.sampled_from(["api.openai.com", "API.OpenAI.com", "eu.api.openai.com"]),
    final_dot=st.booleans(),
    port=st.none() | st.integers(1, 65535),
    path=st.text("abcdefv1/", max_size=12),
)
def test_is_openai_api_takes_every_spelling_of_openais_host(
    host: str, final_dot: bool, port: int | None, path: str
) -> None:
    """Any case, a regional host, a final dot, a port or a path: still OpenAI's API."""
    netloc = f"{host}{'.' if final_dot else ''}{'' if port is None else f':{port}'}"
    assert is_openai_api(f"https://{netloc}/{path}")


@given(text=st.text(max_size=40))
def test_is_openai_api_answers_any_text_and_needs_openais_host(text: str) -> None:
    """Any text gets an answer, never an error; True only for a URL whose host is OpenAI's."""
    said = is_openai_api(text)
    if said:
        host = (urlsplit(text).hostname or "").rstrip(".")
        assert host == "api.openai.com" or host.endswith(".api.openai.com")


@pytest.mark.parametrize(
    "url",
    [
        "https://api.openai.com.evil.example/v1",
        "https://notapi.openai.com/v1",
        "https://openai.com/v1",
        "http://[::1/v1",
        "not a url",
    ],
)
def test_is_openai_api_refuses_lookalikes(url: str) -> None:
    """A host that only contains or ends like OpenAI's, or no URL at all, is not OpenAI's API."""
    assert not is_openai_api(url)
