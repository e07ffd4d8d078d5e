"""Settings the provider cannot work with are refused when it is built, as configuration
errors naming where they were set (exit 2), never at the first request."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from messages_server import API_KEY, MessagesServer, text_reply
from nanobot_core import ConfigError
from nanobot_core.config import ProviderConfig, load_config
from nanobot_core.testing import run_cli

from nanobot_anthropic.provider import AnthropicProvider

SECRET = "hunter2"
URL_HINT = (
    "(set --base-url, NANOBOT_BASE_URL or ANTHROPIC_BASE_URL, e.g. https://api.anthropic.com)"
)
KEY_HINT = (
    "(set ANTHROPIC_API_KEY or NANOBOT_API_KEY, not OPENAI_API_KEY: that is never sent to "
    "Anthropic; NANOBOT_API_KEY=none for a server that needs no key)"
)

#: Base URLs with a typo, and the refusal each gets after ``provider.base_url: ``.
TYPOS = {
    "htps://api.anthropic.com": f"'htps://api.anthropic.com' is not an http(s) URL {URL_HINT}",
    "api.anthropic.com": f"'api.anthropic.com' is not an http(s) URL {URL_HINT}",
    "http://[x": "'http://[x' is not a URL (Invalid IPv6 URL)",
    "http://localhost:4000x": (
        "'http://localhost:4000x' is not a URL (Port could not be cast to integer value as '4000x')"
    ),
    f"https://me:{SECRET}@[::1/v1": "'https://***@[::1/v1' is not a URL (Invalid IPv6 URL)",
    f"htps://me:{SECRET}@api.anthropic.com": (
        f"'htps://***@api.anthropic.com' is not an http(s) URL {URL_HINT}"
    ),
}


def _refusal(workspace: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> str:
    """The stderr of a real ``nanobot-core run --provider anthropic`` refusing its settings:
    exit 2, no traceback, no request made."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("NANOBOT_PROVIDER__MAX_RETRIES", "0")  # a regression fails fast
    done = run_cli("run", "--provider", "anthropic", "hi", cwd=workspace)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    return done.stderr


@pytest.mark.parametrize("url", sorted(TYPOS))
@pytest.mark.parametrize("where", ["nanobot.toml", "NANOBOT_BASE_URL", "ANTHROPIC_BASE_URL"])
def test_a_bad_base_url_is_refused_before_any_request_naming_where_it_was_set(
    nanobot_workspace: Path, monkeypatch: pytest.MonkeyPatch, url: str, where: str
) -> None:
    """A base URL with a typo, from the file or either variable, is exit 2 naming that source
    and provider.base_url, with the password in it masked."""
    if where == "nanobot.toml":
        config_file = nanobot_workspace / "nanobot.toml"
        config_file.write_text(f'[provider]\nbase_url = "{url}"\n', encoding="utf-8")
        said = _refusal(nanobot_workspace, monkeypatch, ANTHROPIC_API_KEY="sk-ant-test")
        source = str(config_file)
    else:
        said = _refusal(
            nanobot_workspace, monkeypatch, ANTHROPIC_API_KEY="sk-ant-test", **{where: url}
        )
        source = f"environment variable {where}"
    assert said == f"Error: configuration: {source}: provider.base_url: {TYPOS[url]}\n"
    assert SECRET not in said


def test_no_key_for_anthropics_api_is_refused_naming_the_variables_to_set(
    nanobot_workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With only OPENAI_API_KEY set (never sent to Anthropic), the run stops at exit 2 saying
    which key is missing, before any request to api.anthropic.com."""
    said = _refusal(nanobot_workspace, monkeypatch, OPENAI_API_KEY="sk-openai")
    assert said == (
        "Error: configuration: provider.api_key is not set, and provider.base_url "
        f"'https://api.anthropic.com' is a remote server {KEY_HINT}\n"
    )


def test_a_key_set_empty_for_a_remote_server_names_both_sources(
    nanobot_workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty NANOBOT_API_KEY and a remote base URL from ANTHROPIC_BASE_URL: both named, the
    password of the URL masked."""
    said = _refusal(
        nanobot_workspace,
        monkeypatch,
        NANOBOT_API_KEY="",
        ANTHROPIC_BASE_URL=f"https://me:{SECRET}@proxy.example/anthropic",
    )
    assert said == (
        "Error: configuration: environment variable NANOBOT_API_KEY, environment variable "
        "ANTHROPIC_BASE_URL: provider.api_key is not set, and provider.base_url "
        f"'https://***@proxy.example/anthropic' is a remote server {KEY_HINT}\n"
    )


def test_a_max_tokens_the_api_refuses_is_refused_at_load_naming_its_file(
    nanobot_workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """provider.max_tokens of 0 (the Messages API wants at least 1) is exit 2 naming the file,
    as the core refuses it for every provider."""
    config_file = nanobot_workspace / "nanobot.toml"
    config_file.write_text("[provider]\nmax_tokens = 0\n", encoding="utf-8")
    said = _refusal(nanobot_workspace, monkeypatch, ANTHROPIC_API_KEY="sk-ant-test")
    assert said == (
        f"Error: configuration: {config_file}: provider.max_tokens: must be a whole number "
        "from 1 to 9223372036854775807 (or unset, for the server's own limit or the "
        "provider's default), got 0\n"
    )


@pytest.mark.parametrize("value", ["1.5", "2", "1.0000001"])
@pytest.mark.parametrize("where", ["nanobot.toml", "NANOBOT_PROVIDER__TEMPERATURE"])
def test_a_temperature_past_1_is_refused_before_any_request_naming_where_it_was_set(
    nanobot_workspace: Path, monkeypatch: pytest.MonkeyPatch, value: str, where: str
) -> None:
    """provider.temperature above 1 (the core takes any from 0; the Messages API only 0 to 1)
    is exit 2 naming the key and where it was set, with no connection to the server, not a
    400 from it in the middle of the turn."""
    settings: dict[str, str] = {"ANTHROPIC_API_KEY": API_KEY}
    if where == "nanobot.toml":
        config_file = nanobot_workspace / "nanobot.toml"
        config_file.write_text(f"[provider]\ntemperature = {value}\n", encoding="utf-8")
        source = str(config_file)
    else:
        settings[where] = value
        source = f"environment variable {where}"
    with MessagesServer() as server:
        server.add(text_reply("ok"))  # what a request would be answered: none may be made
        said = _refusal(
            nanobot_workspace, monkeypatch, ANTHROPIC_BASE_URL=server.base_url, **settings
        )
        assert server.connections == 0 and server.requests == []
    assert said == (
        f"Error: configuration: {source}: provider.temperature: must be from 0 to 1 for "
        f"Anthropic's Messages API, got {float(value)}\n"
    )


def test_a_temperature_within_range_is_sent_as_set(
    nanobot_workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """provider.temperature = 1, the top of the range, reaches the server and the run ends."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("NANOBOT_PROVIDER__TEMPERATURE", "1")
    with MessagesServer() as server:
        server.add(text_reply("ok"))
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        done = run_cli("run", "--provider", "anthropic", "hi", cwd=nanobot_workspace)
        assert done.returncode == 0, done.stderr
        assert [r.body["temperature"] for r in server.requests] == [1]
        assert all(r.problems == [] for r in server.requests)


@settings(max_examples=200, deadline=None)
@given(
    temperature=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    max_tokens=st.one_of(st.none(), st.integers(min_value=-(2**40), max_value=2**40)),
)
def test_sampling_settings_are_built_only_within_the_apis_ranges(
    temperature: float | None, max_tokens: int | None
) -> None:
    """Whatever temperature and max_tokens a ProviderConfig made in code holds, the provider
    is built only with a temperature from 0 to 1 and a max_tokens of at least 1 (or none);
    otherwise it raises a ConfigError naming the key first refused, and no source."""
    config = ProviderConfig(temperature=temperature, max_tokens=max_tokens)
    try:
        provider = AnthropicProvider(config, environ={"ANTHROPIC_API_KEY": "sk-ant-test"})
    except ConfigError as exc:
        bad_temperature = temperature is not None and not 0 <= temperature <= 1
        key = "temperature" if bad_temperature else "max_tokens"
        assert str(exc).startswith(f"provider.{key}: must be ")
        assert bad_temperature or (max_tokens is not None and max_tokens < 1)
        return
    assert temperature is None or 0 <= temperature <= 1
    assert max_tokens is None or max_tokens >= 1
    body = provider.request_body([{"role": "user", "content": "hi"}], [])
    assert body.get("temperature") == temperature and body["max_tokens"] >= 1


def test_a_loaded_provider_table_names_the_source_of_its_settings(tmp_path: Path) -> None:
    """The provider table of a loaded config names where its temperature was set, as the
    refusal of a built provider says it; one made in code names none."""
    (tmp_path / "nanobot.toml").write_text("[provider]\ntemperature = 3\n", encoding="utf-8")
    config = load_config(cwd=tmp_path, environ={}).provider
    with pytest.raises(ConfigError) as refused:
        AnthropicProvider(config, environ={"ANTHROPIC_API_KEY": "sk-ant-test"})
    assert str(refused.value) == (
        f"{tmp_path / 'nanobot.toml'}: provider.temperature: must be from 0 to 1 for "
        "Anthropic's Messages API, got 3.0"
    )
    assert config == ProviderConfig(temperature=3)


def test_a_local_server_needs_no_key() -> None:
    """A server on this machine or a private network is built without any key."""
    for base in ("http://127.0.0.1:8080", "http://localhost:4000/v1", "http://10.0.0.7"):
        provider = AnthropicProvider(ProviderConfig(base_url=base), environ={})
        assert "x-api-key" not in provider.headers()


@settings(max_examples=300, deadline=None)
@given(
    scheme=st.sampled_from(["http", "https", "htps", "ftp", ""]),
    host=st.text(alphabet=st.sampled_from("[]:.@/%ab1\uff03\u2100"), max_size=12),
    tail=st.text(max_size=8),
    from_environment=st.booleans(),
)
def test_any_base_url_is_refused_as_config_or_is_one_httpx_can_send_to(
    scheme: str, host: str, tail: str, from_environment: bool
) -> None:
    """Whatever base URL is configured (as provider.base_url or ANTHROPIC_BASE_URL), building
    the provider either raises ConfigError naming provider.base_url and where it was set,
    never showing the password, or gives an http(s) endpoint the HTTP client can send to."""
    url = f"{scheme}://me:{SECRET}@{host}{tail}" if scheme else f"me:{SECRET}@{host}{tail}"
    environ = {"ANTHROPIC_API_KEY": "sk-ant-test"}
    if from_environment:
        config, environ["ANTHROPIC_BASE_URL"] = ProviderConfig(), url
    else:
        config = ProviderConfig(base_url=url)
    try:
        provider = AnthropicProvider(config, environ=environ)
    except ConfigError as exc:
        source = "environment variable ANTHROPIC_BASE_URL: " if from_environment else ""
        assert str(exc).startswith(f"{source}provider.base_url: ")
        assert SECRET not in str(exc) or SECRET in host + tail
        return
    sent_to = httpx.URL(provider.endpoint)  # what the client makes of it: one it sends to
    assert sent_to.scheme in ("http", "https") and sent_to.host


#: Keys as they get pasted, and what the refusal says of them after ``provider.api_key holds``.
PASTED_KEYS = {
    "sk-ant-api03-Qx7\n": "a line break at character 17",
    "sk-ant-api03-Qx7\u00a0": "a non-breaking space at character 17",
    " sk-ant-api03-Qx7": "a leading space at character 1",
}


@pytest.mark.parametrize("key", sorted(PASTED_KEYS))
@pytest.mark.parametrize("where", ["ANTHROPIC_API_KEY", "NANOBOT_API_KEY"])
def test_a_key_no_header_carries_is_refused_naming_its_variable_never_showing_it(
    nanobot_workspace: Path, monkeypatch: pytest.MonkeyPatch, key: str, where: str
) -> None:
    """A key pasted with a line break, a non-breaking space or a leading space, from either
    variable, is exit 2 naming that variable and where in the key the fault is, before any
    connection to the server, not a plugin failure (exit 1) at the first request; no part of
    the key is shown."""
    with MessagesServer() as server:
        said = _refusal(
            nanobot_workspace, monkeypatch, ANTHROPIC_BASE_URL=server.base_url, **{where: key}
        )
        assert server.connections == 0
    assert said == (
        f"Error: configuration: environment variable {where}: provider.api_key holds "
        f"{PASTED_KEYS[key]}, which cannot be sent in an HTTP header (the key itself is not "
        f"shown; {KEY_HINT[1:]}\n"
    )
    assert "sk-ant" not in said and "Qx7" not in said
