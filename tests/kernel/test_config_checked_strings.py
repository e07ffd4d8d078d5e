"""Config strings checked once plugins are loaded (``sessions.store``, ``provider.name``,
``provider.base_url``): their errors name where the value came from, as load errors do."""

from __future__ import annotations

import copy
import pickle
import re
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nanobot_core.config import load_config, source_of, source_prefix, variable_source
from nanobot_core.errors import ConfigError
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.providers import check_endpoint
from nanobot_core.runner import Runner
from nanobot_core.sessions import select_session_store
from nanobot_core.testing import make_config
from nanobot_core.testing_http import LoopbackRequest, LoopbackResponse, LoopbackServer
from tests.helpers import clean_env, run_cli

HINT = "(set --base-url or NANOBOT_BASE_URL, e.g. http://localhost:11434/v1)"
#: The hints the built-in provider gives `check_endpoint`.
HINTS = {"base_url_hint": HINT[1:-1], "api_key_hint": "set NANOBOT_API_KEY"}

#: Per key: the nanobot.toml setting it, the variable setting it, the command, the error's tail.
CASES = {
    "sessions.store": (
        '[sessions]\nstore = "nope"\n',
        ("NANOBOT_SESSIONS__STORE", "nope"),
        ("sessions",),
        "sessions.store: no session store named 'nope' (known: jsonl)",
    ),
    "provider.name": (
        '[provider]\nname = "nope"\n',
        ("NANOBOT_PROVIDER", "nope"),
        ("run", "hi"),
        "provider.name: no provider named 'nope' (available: openai)",
    ),
    "provider.base_url": (
        '[provider]\nbase_url = "ftp://127.0.0.1/v1"\n',
        ("NANOBOT_BASE_URL", "ftp://127.0.0.1/v1"),
        ("run", "hi"),
        f"provider.base_url: 'ftp://127.0.0.1/v1' is not an http(s) URL {HINT}",
    ),
}


def _refusal(tmp_path: Path, *args: str, **env: str) -> str:
    """The stderr of a real `nanobot-core ARGS` refusing its config (exit 2, no traceback)."""
    done = run_cli(
        *args,
        cwd=tmp_path,
        env=clean_env(NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1", NANOBOT_API_KEY="sk-test", **env),
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr


@pytest.mark.parametrize("key", sorted(CASES))
def test_a_value_refused_after_loading_names_the_file_that_set_it(tmp_path: Path, key: str) -> None:
    """Set in nanobot.toml, the value is refused through the CLI naming that file first."""
    text, _, command, tail = CASES[key]
    config_file = tmp_path / "nanobot.toml"
    config_file.write_text(text, encoding="utf-8")
    said = _refusal(tmp_path, *command)
    assert said == f"Error: configuration: {config_file}: {tail}\n"


@pytest.mark.parametrize("key", sorted(CASES))
def test_a_value_refused_after_loading_names_the_variable_that_set_it(
    tmp_path: Path, key: str
) -> None:
    """Set by an environment variable (over a file's value), it is that variable that is named."""
    _, (variable, value), command, tail = CASES[key]
    (tmp_path / "nanobot.toml").write_text("[provider]\nmodel = 'm'\n", encoding="utf-8")
    said = _refusal(tmp_path, *command, **{variable: value})
    assert said == f"Error: configuration: environment variable {variable}: {tail}\n"


def test_a_provider_flag_is_named_as_the_command_line(tmp_path: Path) -> None:
    """--provider and --base-url beat the file and the variable, and are named `command line`."""
    (tmp_path / "nanobot.toml").write_text('[provider]\nname = "other"\n', encoding="utf-8")
    said = _refusal(tmp_path, "run", "hi", "--provider", "nope", NANOBOT_PROVIDER="also")
    assert said == f"Error: configuration: command line: {CASES['provider.name'][3]}\n"
    said = _refusal(tmp_path, "run", "hi", "--provider", "openai", "--base-url", "ftp://x")
    assert said == (
        "Error: configuration: command line: provider.base_url: 'ftp://x' is not an http(s) "
        f"URL {HINT}\n"
    )


def test_a_remote_server_without_a_key_names_where_both_were_set(tmp_path: Path) -> None:
    """An empty key from a variable and a remote base URL from a file: both sources named."""
    config_file = tmp_path / "nanobot.toml"
    config_file.write_text('[provider]\nbase_url = "https://example.com/v1"\n', encoding="utf-8")
    done = run_cli(
        "run",
        "hi",
        cwd=tmp_path,
        env=clean_env(NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1", NANOBOT_API_KEY=""),
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(
        f"Error: configuration: environment variable NANOBOT_API_KEY, {config_file}: "
        "provider.api_key is not set, and provider.base_url 'https://example.com/v1' is a "
        "remote server"
    )


def test_a_default_value_refused_names_no_source(tmp_path: Path) -> None:
    """No key set and no default to blame on a source: the message begins with the key."""
    done = run_cli("run", "hi", cwd=tmp_path, env=clean_env(NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("Error: configuration: provider.api_key is not set, and ")


_NAMES = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1).filter(
    lambda name: name not in ("jsonl", "openai")
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(store=_NAMES, provider=_NAMES)
def test_any_unknown_store_or_provider_from_the_environment_names_its_variable(
    tmp_path: Path, store: str, provider: str
) -> None:
    """Whatever text a variable gives sessions.store or provider.name, the refusal names it."""
    environ = {"NANOBOT_SESSIONS__STORE": store, "NANOBOT_PROVIDER__NAME": provider}
    config = load_config(cwd=tmp_path, environ=environ)
    manager = PluginManager(config, workspace=tmp_path, autoload=False).load()
    if config.sessions.store != "jsonl":
        with pytest.raises(ConfigError) as caught:
            select_session_store(manager)
        assert str(caught.value).startswith(
            "environment variable NANOBOT_SESSIONS__STORE: sessions.store: no session store "
            f"named {config.sessions.store!r}"
        )
    if config.provider.name != "openai":
        with pytest.raises(ConfigError) as refused:
            Runner.prepare_from_plugins(manager)
        assert str(refused.value).startswith(
            "environment variable NANOBOT_PROVIDER__NAME: provider.name: no provider named "
            f"{config.provider.name!r}"
        )


def test_a_checked_string_knows_its_source_and_stays_a_plain_equal_string(
    tmp_path: Path,
) -> None:
    """The loaded string equals, hashes and pickles as the text, keeps its source when copied,
    and a value the program sets in its place has none."""
    (tmp_path / "nanobot.toml").write_text('[sessions]\nstore = "db"\n', encoding="utf-8")
    config = load_config(cwd=tmp_path, environ={"NANOBOT_PROVIDER": "p"})
    assert config == make_config({"sessions": {"store": "db"}, "provider": {"name": "p"}})
    store = config.sessions.store
    assert store == "db" and hash(store) == hash("db") and repr(store) == "'db'"
    assert source_of(store) == {"source": str(tmp_path / "nanobot.toml")}
    for copied in (copy.deepcopy(store), pickle.loads(pickle.dumps(store))):
        assert copied == "db" and source_of(copied) == source_of(store)
    assert source_prefix(config.provider.name, store) == (
        f"environment variable NANOBOT_PROVIDER, {tmp_path / 'nanobot.toml'}: "
    )
    assert source_prefix(config.provider.base_url, "plain") == ""
    with pytest.raises(ConfigError, match=r"^provider\.base_url: 'ftp://x' is not"):
        check_endpoint("ftp://x", None, **HINTS)


@pytest.mark.parametrize("where", ["file", "variable"])
def test_a_base_url_no_parser_reads_is_a_config_error_naming_its_source(
    tmp_path: Path, where: str
) -> None:
    """A base URL urlsplit refuses (an open '[') is exit 2 naming the source, not a plugin
    failure (exit 1), and the password in it is not shown."""
    url = "http://me:hunter2@[::1/v1"
    config_file = tmp_path / "nanobot.toml"
    if where == "file":
        config_file.write_text(f'[provider]\nbase_url = "{url}"\n', encoding="utf-8")
        said = _refusal(tmp_path, "run", "hi")
        source = str(config_file)
    else:
        said = _refusal(tmp_path, "run", "hi", NANOBOT_PROVIDER__BASE_URL=url)
        source = "environment variable NANOBOT_PROVIDER__BASE_URL"
    assert said == (
        f"Error: configuration: {source}: provider.base_url: 'http://***@[::1/v1' is not a "
        "URL (Invalid IPv6 URL)\n"
    )


_SECRET = "hunter2"


@settings(max_examples=300, deadline=None)
@given(
    scheme=st.sampled_from(["http", "https", "ftp", ""]),
    host=st.text(alphabet=st.sampled_from("[]:.@/%ab1\uff03\u2100"), max_size=12),
    tail=st.text(max_size=8),
)
@example(scheme="http", host="\u2100", tail="\r@")
def test_any_base_url_is_taken_or_refused_as_config_never_showing_its_password(
    scheme: str, host: str, tail: str
) -> None:
    """Whatever base URL is configured, check_endpoint passes it or raises ConfigError naming
    provider.base_url or provider.api_key, and the password in it never shows."""
    url = f"{scheme}://me:{_SECRET}@{host}{tail}" if scheme else f"me:{_SECRET}@{host}{tail}"
    try:
        check_endpoint(url, "sk-test", **HINTS)
    except ConfigError as exc:
        assert str(exc).startswith("provider.base_url: ")
        assert _SECRET not in str(exc) or _SECRET in host + tail
        return
    sent_to = httpx.URL(url)  # what the client makes of it: a URL it can send to
    assert sent_to.scheme in ("http", "https") and sent_to.host
    assert urlsplit(url).port == sent_to.port


#: Base URLs the http(s) check passes that the HTTP client cannot send to, and why.
UNSENDABLE = {
    "http://localhost:11434x/v1": "Port could not be cast to integer value as '11434x'",
    "http://127.0.0.1:114340/v1": "Port out of range 0-65535",
    "http://me:hunter2@local\x1fhost/v1": (
        "Invalid non-printable ASCII character in URL, '\\x1f' at position 23."
    ),
    "http://\u0080/v1": "Invalid IDNA hostname: '\\x80'",
}


@pytest.mark.parametrize("url", sorted(UNSENDABLE))
def test_a_base_url_the_client_cannot_send_to_is_refused_as_config(
    tmp_path: Path, url: str
) -> None:
    """A port that is no number or past 65535, a control character or a host name IDNA refuses
    is exit 2 naming the variable, not a plugin failure (exit 1) at the first request."""
    said = _refusal(tmp_path, "run", "hi", NANOBOT_BASE_URL=url)
    shown = url.replace("me:hunter2@", "***@")
    assert said == (
        "Error: configuration: environment variable NANOBOT_BASE_URL: provider.base_url: "
        f"{shown!r} is not a URL ({UNSENDABLE[url]})\n"
    )
    assert _SECRET not in said


#: Base URLs the API path cannot be appended to, and the refusal after ``provider.base_url: ``.
NO_PATH_AFTER = {
    "http://127.0.0.1:0/v1": (
        f"'http://127.0.0.1:0/v1' has port 0, which no server listens on {HINT}"
    ),
    "https://me:hunter2@proxy.example:00/v1": (
        f"'https://***@proxy.example:00/v1' has port 0, which no server listens on {HINT}"
    ),
    "https://proxy.example/v1?token=hunter2": (
        "'https://proxy.example/v1' is followed by a query ('?...'), after which the API path "
        f"would be appended; a base URL ends with its path {HINT}"
    ),
    "http://localhost:8080/v1?": (
        "'http://localhost:8080/v1' is followed by a query ('?...'), after which the API path "
        f"would be appended; a base URL ends with its path {HINT}"
    ),
    "http://me:hunter2@localhost/v1#hunter2?x": (
        "'http://***@localhost/v1' is followed by a fragment ('#...'), after which the API "
        f"path would be appended; a base URL ends with its path {HINT}"
    ),
}


@pytest.mark.parametrize("url", sorted(NO_PATH_AFTER))
def test_a_base_url_with_port_0_a_query_or_a_fragment_is_refused_as_config(
    tmp_path: Path, url: str
) -> None:
    """Port 0, or a query or fragment the API path would land in, is exit 2 naming the
    variable, showing neither the password nor the query or fragment (it may hold a token)."""
    said = _refusal(tmp_path, "run", "hi", NANOBOT_BASE_URL=url, NANOBOT_PROVIDER__MAX_RETRIES="0")
    assert said == (
        "Error: configuration: environment variable NANOBOT_BASE_URL: provider.base_url: "
        f"{NO_PATH_AFTER[url]}\n"
    )
    assert _SECRET not in said


KEY_HINT = (
    "(the key itself is not shown; set NANOBOT_API_KEY or OPENAI_API_KEY; NANOBOT_API_KEY=none "
    "for a server that needs no key)"
)
#: A key's start, as real ones look, which no refusal may show.
_KEY_HEAD = "sk-proj-Zq8vT3kd"

#: Keys as they get pasted, and what the refusal says of them after ``provider.api_key holds``.
PASTED_KEYS = {
    f"{_KEY_HEAD}x3\n": "a line break at character 19",
    f"{_KEY_HEAD}\r\nx": "a line break at character 17",
    f"{_KEY_HEAD}\u00a0x": "a non-breaking space at character 17",
    f" {_KEY_HEAD}": "a leading space at character 1",
    f"{_KEY_HEAD} ": "a trailing space at character 17",
    f"{_KEY_HEAD}\tx": "a tab at character 17",
    f"\ufeff{_KEY_HEAD}": "an invisible formatting character at character 1",
    f"{_KEY_HEAD}\u2014x": "a non-ASCII character at character 17",
    f"{_KEY_HEAD}\x7f": "a control character at character 17",
}


def _toml_string(text: str) -> str:
    """`text` as a TOML basic string, every character TOML wants escaped given as ``\\uXXXX``."""
    escaped = (
        f"\\u{ord(char):04X}" if char in '"\\' or char < " " or char == "\x7f" else char
        for char in text
    )
    return '"' + "".join(escaped) + '"'


def _answer(request: LoopbackRequest) -> LoopbackResponse:
    """A chat completion saying "ok", for a request that should never be made."""
    message = {"role": "assistant", "content": "ok"}
    return LoopbackResponse(200, {"choices": [{"message": message, "finish_reason": "stop"}]})


def _key_refusal(tmp_path: Path, key: str, where: str) -> subprocess.CompletedProcess[str]:
    """A real ``nanobot-core run`` with `key` set in nanobot.toml or the variable `where`,
    against a real server on this machine, which it must not have connected to."""
    config_file = tmp_path / "nanobot.toml"
    config_file.unlink(missing_ok=True)
    with LoopbackServer(_answer) as server:
        env = clean_env(
            NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1",
            NANOBOT_BASE_URL=f"{server.url}/v1",
            NANOBOT_PROVIDER__MAX_RETRIES="0",
        )
        if where == "nanobot.toml":
            text = f"[provider]\napi_key = {_toml_string(key)}\n"
            config_file.write_text(text, encoding="utf-8")
        else:
            env[where] = key
        done = run_cli("run", "hi", cwd=tmp_path, env=env)
        assert server.connections == 0, done.stderr
    return done


def _source(tmp_path: Path, where: str) -> str:
    """How a refusal names `where` (the file by its path)."""
    return str(tmp_path / where) if where == "nanobot.toml" else f"environment variable {where}"


@pytest.mark.parametrize("key", sorted(PASTED_KEYS))
@pytest.mark.parametrize("where", ["nanobot.toml", "NANOBOT_API_KEY", "OPENAI_API_KEY"])
def test_a_key_an_http_header_cannot_carry_is_refused_naming_its_source_not_its_text(
    tmp_path: Path, key: str, where: str
) -> None:
    """A key pasted with a line break, a non-breaking space, a space at an end or another
    character no header carries is exit 2 naming where it was set, what is wrong and where
    in the key, not a plugin failure (exit 1) at the first request; no part of it is shown."""
    done = _key_refusal(tmp_path, key, where)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr == (
        f"Error: configuration: {_source(tmp_path, where)}: provider.api_key holds "
        f"{PASTED_KEYS[key]}, which cannot be sent in an HTTP header {KEY_HINT}\n"
    )
    assert _KEY_HEAD not in done.stderr and _KEY_HEAD[3:9] not in done.stderr


_PRINTABLE = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1)
#: What a header cannot carry: anything but printable ASCII (a lone surrogate stands for a
#: byte of an environment variable that is not UTF-8, as Python reads one).
_UNSENDABLE = st.characters(
    blacklist_categories=("Cs",), blacklist_characters=[chr(c) for c in range(0x20, 0x7F)]
) | st.characters(min_codepoint=0xDC80, max_codepoint=0xDCFF)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    tail=_PRINTABLE,
    bad=_UNSENDABLE,
    where=st.sampled_from(["nanobot.toml", "NANOBOT_API_KEY", "OPENAI_API_KEY"]),
)
@example(tail="0", bad="\n", where="nanobot.toml")  # a line break is in every message too
def test_any_key_with_a_character_no_header_carries_is_refused_without_showing_it(
    tmp_path: Path, tail: str, bad: str, where: str
) -> None:
    """Whatever character past printable ASCII a key holds, from the file or a variable,
    `run` stops at exit 2 naming the source and the character's position, and neither
    stdout nor stderr holds the key or its parts."""
    if where == "nanobot.toml" and "\udc80" <= bad <= "\udcff":
        where = "NANOBOT_API_KEY"  # a file is read as UTF-8: no such character in it
    if where != "nanobot.toml" and bad == "\x00":
        where = "nanobot.toml"  # no variable can hold it
    key = f"{_KEY_HEAD}{bad}{tail}"
    done = _key_refusal(tmp_path, key, where)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.startswith(
        f"Error: configuration: {_source(tmp_path, where)}: provider.api_key holds "
    )
    assert f" at character {len(_KEY_HEAD) + 1}, which cannot be sent" in done.stderr
    assert done.stderr.endswith(f"{KEY_HINT}\n")
    # The bad character is looked for with its neighbours: alone, a line break or a space is
    # in any message.
    shown = (_KEY_HEAD, _KEY_HEAD[3:9], _KEY_HEAD[-4:] + bad, bad + tail[:4])
    for part in (*shown, tail if len(tail) > 5 else None):
        assert part is None or part not in done.stderr + done.stdout


@settings(max_examples=500, deadline=None)
@given(key=st.text(min_size=1))
def test_any_key_is_refused_as_config_or_is_one_a_header_carries(key: str) -> None:
    """check_endpoint refuses a key, as ConfigError naming provider.api_key and never holding
    the key, or the key goes into an HTTP/1.1 header as Bearer token and as a value alone."""
    import h11

    try:
        check_endpoint("http://127.0.0.1:9/v1", key, **HINTS)
    except ConfigError as exc:
        # Words of its own only: nothing of the key can be in it.
        assert re.fullmatch(
            r"provider\.api_key holds an? [a-zA-Z -]+ at character [0-9]+, which cannot be "
            r"sent in an HTTP header \(the key itself is not shown; set NANOBOT_API_KEY\)",
            str(exc),
        ), str(exc)
        return
    for value in (f"Bearer {key}", key):  # as the openai and anthropic providers send it
        h11.Request(method="POST", target="/", headers=[("Host", "x"), ("X-Key", value)])


@pytest.mark.parametrize("dropped", ["\r", "\n", "\t"])
def test_a_password_the_parser_shows_without_a_line_break_is_still_masked(dropped: str) -> None:
    """The parser drops tabs and line breaks before reading a URL, so the password it shows in
    its reason lacks them: it is masked as shown."""
    url = f"http://me:{_SECRET}@\u2100{dropped}@"
    with pytest.raises(ConfigError) as raised:
        check_endpoint(url, "sk-test", **HINTS)
    assert _SECRET not in str(raised.value)
    assert "contains invalid characters under NFKC normalization" in str(raised.value)


def test_source_prefix_names_the_last_source_of_each_key_of_a_loaded_config(
    tmp_path: Path,
) -> None:
    """A number, a boolean or an option a plugin checks is named by the source whose value is
    used (the last giving it), each source once; a default or a program's config names none."""
    config_file = tmp_path / "nanobot.toml"
    config_file.write_text(
        "[sessions.postgres]\npool_size = 3\nresults = false\n"
        "[tools.options.web_fetch]\ntimeout = 5\n",
        encoding="utf-8",
    )
    config = load_config(
        cwd=tmp_path,
        environ={"NANOBOT_SESSIONS__POSTGRES__POOL_SIZE": "1"},
        overrides={"tools": {"options": {"web_fetch": {"max_chars": 9}}}},
    )
    keys = ["sessions.postgres.pool_size", "sessions.postgres.results"]
    assert source_prefix(config=config, keys=keys) == (
        f"environment variable NANOBOT_SESSIONS__POSTGRES__POOL_SIZE, {config_file}: "
    )
    assert source_prefix(config=config, keys=["tools.options.web_fetch.max_chars"]) == (
        "command line: "
    )
    assert source_prefix(config=config, keys=["tools.options.web_fetch.timeout"]) == (
        f"{config_file}: "
    )
    assert source_prefix(config=config, keys=["sessions.postgres.connect_timeout"]) == ""
    made = make_config(
        {
            "sessions": {"postgres": {"pool_size": 1, "results": False}},
            "tools": {"options": {"web_fetch": {"timeout": 5, "max_chars": 9}}},
        }
    )
    assert made == config and source_prefix(config=made, keys=keys) == ""
    for copied in (copy.deepcopy(config), pickle.loads(pickle.dumps(config))):
        assert source_prefix(config=copied, keys=keys) == source_prefix(config=config, keys=keys)


def test_the_provider_table_alone_names_the_sources_of_its_keys(tmp_path: Path) -> None:
    """A provider, built from ``config.provider`` alone, names where each of its settings was
    set with `source_prefix` as a plugin names a key of the whole config; copies keep it,
    and a table made in code, equal to it, names none."""
    config_file = tmp_path / "nanobot.toml"
    config_file.write_text("[provider]\ntemperature = 1.5\nmax_tokens = 9\n", encoding="utf-8")
    config = load_config(cwd=tmp_path, environ={"NANOBOT_PROVIDER__MAX_TOKENS": "7"})
    provider = config.provider
    assert source_prefix(config=provider, keys=["provider.temperature"]) == f"{config_file}: "
    assert source_prefix(config=provider, keys=["provider.max_tokens", "provider.timeout"]) == (
        "environment variable NANOBOT_PROVIDER__MAX_TOKENS: "
    )
    for copied in (copy.deepcopy(provider), pickle.loads(pickle.dumps(provider))):
        assert source_prefix(config=copied, keys=["provider.temperature"]) == f"{config_file}: "
    made = make_config({"provider": {"temperature": 1.5, "max_tokens": 7}}).provider
    assert made == provider and source_prefix(config=made, keys=["provider.temperature"]) == ""
    with pytest.raises(ConfigError, match=r"unknown key 'provider._key_sources' \(known keys"):
        load_config(cwd=tmp_path, environ={"NANOBOT_PROVIDER___KEY_SOURCES": "{}"})


def test_the_record_of_sources_is_no_key_a_source_can_set(tmp_path: Path) -> None:
    """The loaded config's record of where keys were set cannot be given as a key."""
    with pytest.raises(ConfigError, match=r"unknown key '_key_sources' \(known keys here: gov"):
        load_config(cwd=tmp_path, environ={"NANOBOT__KEY_SOURCES": "{}"})


def test_a_variable_a_plugin_read_itself_is_named_as_the_core_names_its_own(
    tmp_path: Path,
) -> None:
    """`variables` are named in the wording of the variables load_config reads, after the
    config's sources and each once."""
    config = load_config(cwd=tmp_path, environ={"NANOBOT_PROVIDER__MODEL": "m"})
    assert source_prefix(variables=["NANOBOT_X"]) == "environment variable NANOBOT_X: "
    assert source_prefix(
        config=config, keys=["provider.model"], variables=["NANOBOT_X", "NANOBOT_X"]
    ) == ("environment variable NANOBOT_PROVIDER__MODEL, environment variable NANOBOT_X: ")


@given(name=st.from_regex(r"[A-Z][A-Z0-9_]{0,30}", fullmatch=True))
def test_a_variable_is_named_by_one_rule_bare_or_at_the_start_of_an_error(name: str) -> None:
    """`variable_source` is the bare name of a variable as a source (what `check_endpoint`
    takes for a value a provider read itself), and `source_prefix` starts an error with it."""
    assert variable_source(name) == f"environment variable {name}"
    assert source_prefix(variables=[name]) == f"{variable_source(name)}: "
    config = load_config(environ={name: "x", "NANOBOT_MODEL": "m"})
    assert source_prefix(config=config, keys=["provider.model"]) == (
        f"{variable_source('NANOBOT_MODEL')}: "
    )
