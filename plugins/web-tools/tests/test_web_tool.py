"""The `web_fetch` tool as the agent sees it: contract, config, results and discovery."""

from __future__ import annotations

import asyncio
import json
import re
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from nanobot_core import Config, ConfigError, PluginContext, clip, load_config
from nanobot_core.testing import assert_tool_contract, make_config, run_cli, run_tool

from nanobot_web_tools import ALLOW_LOOPBACK_ENV, FetchedPage, FetchLimits, PinnedFetcher, WebFetch
from nanobot_web_tools.tool import render_page

if TYPE_CHECKING:
    from conftest import LocalSite


README = Path(__file__).resolve().parents[1] / "README.md"


def readme_toml() -> str:
    """The README's ``[tools.options.web_fetch]`` example."""
    (block,) = re.findall(r"```toml\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    return str(block)


def context(tmp_path: Path, **options: object) -> PluginContext:
    config = make_config({"tools": {"options": {"web_fetch": dict(options)}}})
    return PluginContext(workspace=tmp_path, config=config)


def test_the_tool_meets_the_contract() -> None:
    """web_fetch has a valid name, description, schema and async execute, and is read-only."""
    assert_tool_contract(WebFetch)
    assert WebFetch.read_only
    assert WebFetch().concurrency_safe


def test_a_local_page_through_the_agent_path(
    site: LocalSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the test switch set, a call as the model sends it returns the page with a header."""
    monkeypatch.setenv(ALLOW_LOOPBACK_ENV, "1")
    result = run_tool(WebFetch, f'{{"url": "http://127.0.0.1:{site.port}/page.html"}}')
    assert not result.is_error
    header, _, text = str(result).partition("\n\n")
    assert header.splitlines() == [
        f"URL: http://127.0.0.1:{site.port}/page.html",
        "Status: 200",
        "Content-Type: text/html",
    ]
    assert text.startswith("Local test page")


def test_loopback_is_an_error_result_without_the_switch(
    site: LocalSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the switch, fetching 127.0.0.1 is an error result naming the reason."""
    monkeypatch.delenv(ALLOW_LOOPBACK_ENV, raising=False)
    result = run_tool(WebFetch, {"url": f"http://127.0.0.1:{site.port}/page.html"})
    assert result.is_error
    assert "refused" in result
    assert "loopback" in result
    assert site.hits == {}


def test_the_switch_must_be_exactly_one(site: LocalSite, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the value "1" turns the test switch on."""
    monkeypatch.setenv(ALLOW_LOOPBACK_ENV, "true")
    result = run_tool(WebFetch, {"url": f"http://127.0.0.1:{site.port}/page.html"})
    assert result.is_error


def test_metadata_endpoint_is_an_error_result() -> None:
    """The classic SSRF target comes back as an error, not a page."""
    result = run_tool(WebFetch, {"url": "http://169.254.169.254/latest/meta-data/"})
    assert result.is_error
    assert "cloud metadata" in result


def test_missing_url_is_an_argument_error() -> None:
    """A call without a URL is rejected by validation with an error result."""
    result = run_tool(WebFetch, "{}")
    assert result.is_error


def test_options_come_from_tools_options(tmp_path: Path) -> None:
    """[tools.options.web_fetch] sets the limits and the default text size."""
    tool = WebFetch.create(
        context(tmp_path, max_bytes=1000, timeout=3, max_redirects=1, max_chars=500)
    )
    assert tool.fetcher.limits == FetchLimits(max_bytes=1000, timeout=3, max_redirects=1)
    assert tool.max_chars == 500
    assert tool.timeout == 8.0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_byte": 10}, "unknown option"),
        ({"timeout": "fast"}, "timeout"),
        ({"max_redirects": -1}, "max_redirects"),
        ({"max_bytes": 2e6}, "'max_bytes' must be a positive integer"),
        ({"max_bytes": 0}, "'max_bytes' must be a positive integer"),
        ({"timeout": 2**1100}, "'timeout' must be a positive number .a finite number."),
        ({"max_chars": 0}, "max_chars"),
    ],
)
def test_bad_options_are_config_errors(
    tmp_path: Path, options: dict[str, object], message: str
) -> None:
    """A misspelt key or a wrong value fails the tool's creation with a ConfigError."""
    with pytest.raises(ConfigError, match=message):
        WebFetch.create(context(tmp_path, **options))


def test_render_cuts_to_max_chars_and_says_so() -> None:
    """Text longer than max_chars is cut, and the header says what was cut and why."""
    page = FetchedPage(
        url="https://example.com/",
        status=200,
        content_type="text/plain",
        text="x" * 250,
        truncated=True,
    )
    rendered = render_page(page, 100)
    header, _, text = rendered.partition("\n\n")
    assert text == "x" * 100
    assert header.splitlines()[-1] == (
        "Truncated: the download stopped at the size limit; showing 100 of 250 characters"
    )


def test_the_entry_point_contributes_web_fetch(tmp_path: Path) -> None:
    """Installed, the distribution contributes web_fetch through the nanobot.tools entry point."""
    from nanobot_core import PluginManager

    manager = PluginManager(Config(), workspace=tmp_path).load()
    tools = {c.name: c for c in manager.contributions("tool")}
    assert "web_fetch" in tools
    assert tools["web_fetch"].plugin.distribution == "nanobot-web-tools"


def test_the_model_may_ask_for_fewer_or_more_characters_within_bounds(site: LocalSite) -> None:
    """max_chars from the model sets the cut (100 to 200000); outside that it is refused."""
    local = PinnedFetcher(allow_loopback=True)
    url = f"http://127.0.0.1:{site.port}/big.txt"
    small = run_tool(WebFetch(local, max_chars=20_000), {"url": url, "max_chars": 150})
    assert not small.is_error
    header, _, text = str(small).partition("\n\n")
    assert len(text) == 150
    assert header.endswith(f"showing 150 of {len(site.BIG)} characters")
    more = run_tool(WebFetch(local, max_chars=100), {"url": url, "max_chars": 200_000})
    assert str(more).partition("\n\n")[2] == site.BIG.decode()
    for bad in (99, 200_001):
        refused = run_tool(WebFetch(local), {"url": url, "max_chars": bad})
        assert refused.is_error
        assert "max_chars" in refused
    assert site.hits["/big.txt"] == 2


def test_the_readme_configuration_is_valid_and_states_the_defaults(tmp_path: Path) -> None:
    """The README's [tools.options.web_fetch] table loads and its values are the defaults."""
    options = tomllib.loads(readme_toml())["tools"]["options"]["web_fetch"]
    configured = WebFetch.create(context(tmp_path, **options))
    default = WebFetch.create(context(tmp_path))
    assert configured.fetcher.limits == default.fetcher.limits == FetchLimits()
    assert configured.max_chars == default.max_chars == options["max_chars"]


@pytest.mark.parametrize("where", ["nanobot.toml", "pyproject.toml"])
def test_the_tools_command_lists_web_fetch_configured_in_either_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """``nanobot-core tools`` lists web_fetch from nanobot-web-tools, with the README's options."""
    table = readme_toml()
    if where == "pyproject.toml":
        table = table.replace("[tools.options.web_fetch]", "[tool.nanobot.tools.options.web_fetch]")
    (tmp_path / where).write_text(table, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    listed = run_cli("--strict", "tools")
    assert listed.returncode == 0, listed.stderr
    (line,) = [ln for ln in listed.stdout.splitlines() if ln.startswith("web_fetch ")]
    assert line.split()[:3] == ["web_fetch", "web_fetch", "read_only,concurrency_safe"]
    rows = json.loads(run_cli("--strict", "tools", "--json").stdout)
    (row,) = [r for r in rows if r["name"] == "web_fetch"]
    assert row["distribution"] == "nanobot-web-tools"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("max_byte = 10", "unknown option(s) ['max_byte']"),
        ('timeout = "fast"', "option 'timeout' must be a positive number"),
        ("timeout = nan", "option 'timeout' must be a positive number (a finite number)"),
        ("timeout = inf", "option 'timeout' must be a positive number (a finite number)"),
        ("max_chars = 1.5", "'max_chars' must be a positive integer"),
    ],
)
def test_a_bad_option_is_a_failed_plugin_in_the_plugins_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: str, message: str
) -> None:
    """An unknown key or a wrong type makes ``nanobot-core plugins`` list web_fetch as failed."""
    (tmp_path / "nanobot.toml").write_text(
        f"[tools.options.web_fetch]\n{table}\n", encoding="utf-8"
    )
    monkeypatch.chdir(tmp_path)
    listed = run_cli("plugins")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    at = lines.index("web_fetch (nanobot-web-tools 0.1.0) [nanobot.tools] failed")
    assert lines[at + 1].startswith("    error: ")
    source = tmp_path / "nanobot.toml"
    assert f"ConfigError: {source}: tools.options.web_fetch: " in lines[at + 1]
    assert message in lines[at + 1]


#: Per bad table: where it is written (a file, else a variable and its value), how the
#: refusal names that source, and what it says after ``tools.options.web_fetch: ``.
SOURCED = {
    "nanobot.toml": (
        "timeout = -1",
        "web_fetch option 'timeout' must be a positive number (a finite number)",
    ),
    "pyproject.toml": (
        "max_byte = 10",
        "unknown option(s) ['max_byte'] (known: max_bytes, max_chars, max_redirects, timeout)",
    ),
    "NANOBOT_TOOLS__OPTIONS__WEB_FETCH__MAX_CHARS": (
        "0",
        "'max_chars' must be a positive integer",
    ),
}


@pytest.mark.parametrize("where", sorted(SOURCED))
def test_a_bad_option_names_the_file_or_variable_that_set_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """``nanobot-core plugins`` shows the refusal beginning with where the option was set:
    the file by its path, ``[tool.nanobot]`` in pyproject.toml, or the variable."""
    written, said = SOURCED[where]
    monkeypatch.chdir(tmp_path)
    if where == "nanobot.toml":
        (tmp_path / where).write_text(f"[tools.options.web_fetch]\n{written}\n")
        source = str(tmp_path / where)
    elif where == "pyproject.toml":
        (tmp_path / where).write_text(f"[tool.nanobot.tools.options.web_fetch]\n{written}\n")
        source = f"{tmp_path / where} [tool.nanobot]"
    else:
        # A good value in the file, beaten by the variable: it is the variable that is named.
        (tmp_path / "nanobot.toml").write_text("[tools.options.web_fetch]\nmax_chars = 500\n")
        monkeypatch.setenv(where, written)
        source = f"environment variable {where}"
    listed = run_cli("plugins")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    at = lines.index("web_fetch (nanobot-web-tools 0.1.0) [nanobot.tools] failed")
    assert lines[at + 1] == (
        f"    error: nanobot_tools item 0 (WebFetch): ConfigError: {source}: "
        f"tools.options.web_fetch: {said}"
    )


_OPTION = st.sampled_from(["max_bytes", "timeout", "max_redirects", "max_chars", "max_byte"])
_TEXT = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]))


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(option=_OPTION, text=_TEXT)
# A whole number of seconds too large for a float: taken, it failed the plugin with OverflowError.
@example(option="timeout", text=hex(2**1100))
def test_any_option_from_a_variable_is_taken_or_refused_naming_that_variable(
    tmp_path: Path, option: str, text: str
) -> None:
    """Whatever a variable gives an option (read as a TOML literal), the tool is built or its
    refusal begins with that variable and the table, never with another source."""
    variable = f"NANOBOT_TOOLS__OPTIONS__WEB_FETCH__{option.upper()}"
    (tmp_path / "nanobot.toml").write_text("[tools.options.web_fetch]\nmax_chars = 500\n")
    try:
        config = load_config(cwd=tmp_path, environ={variable: text})
    except ConfigError:  # the core's own refusal of the variable (a key segment, say)
        return
    try:
        WebFetch.create(PluginContext(workspace=tmp_path, config=config))
    except ConfigError as exc:
        assert str(exc).startswith(f"environment variable {variable}: tools.options.web_fetch: ")


def test_a_port_out_of_range_is_a_refusal_not_a_crash(site: LocalSite) -> None:
    """The model's URL with port 99999 is refused naming the port, not an ExceptionGroup."""
    result = run_tool(
        WebFetch(PinnedFetcher(allow_loopback=True)), {"url": "http://127.0.0.1:99999/"}
    )
    assert result.is_error
    assert str(result).splitlines()[0] == (
        "Error: web_fetch refused http://127.0.0.1:99999/: "
        "port 99999 is not a TCP port (1 to 65535)"
    )


def test_a_url_with_credentials_is_refused_and_they_are_never_shown(site: LocalSite) -> None:
    """A user:password@ URL, given or redirected to, is refused (httpx sent it as Basic
    authentication) and the password appears in no result."""
    tool = WebFetch(PinnedFetcher(allow_loopback=True))
    given_url = f"http://user:s3cr3t@127.0.0.1:{site.port}/host"
    given = run_tool(tool, {"url": given_url})
    assert given.is_error
    assert str(given).splitlines()[0] == (
        f"Error: web_fetch refused http://***@127.0.0.1:{site.port}/host: "
        "the URL holds credentials (user:password@), and web_fetch sends none"
    )
    assert "s3cr3t" not in given
    # The redirect's target, credentials and all, is in this URL's query: it is the model's own.
    start = f"http://127.0.0.1:{site.port}/redirect?to={quote(given_url, safe='')}"
    redirected = run_tool(tool, {"url": start})
    assert redirected.is_error
    reason = str(redirected).removeprefix(f"Error: web_fetch refused {start}: ")
    assert reason.startswith("the URL holds credentials (user:password@)")
    assert "s3cr3t" not in reason
    assert site.hits == {"/redirect": 1}


_URL_TEXT = st.text(alphabet=st.characters(exclude_characters="\x00/?#@"), max_size=20)


@settings(max_examples=150, deadline=None)
@given(
    user=_URL_TEXT,
    password=_URL_TEXT,
    host=st.sampled_from(["example.com", "127.0.0.1:99999", "[::1", "", "exa mple.com"]),
    scheme=st.sampled_from(["http", "https", "ftp", "HTTP", ""]),
    rest=st.sampled_from(["/", "/a@b", "?x=1", "\x00", ""]),
)
def test_no_error_shows_the_password_of_a_url(
    user: str, password: str, host: str, scheme: str, rest: str
) -> None:
    """Whatever else is wrong with a URL, its error never shows the password it holds."""
    secret = "PW-" + password
    url = f"{scheme}://{user}:{secret}@{host}{rest}"
    fetcher = PinnedFetcher(resolver=lambda host, port: ["10.0.0.1"])
    result = asyncio.run(WebFetch(fetcher).execute(url))
    assert result.is_error
    assert secret not in str(result)


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("type=image/" + "x" * 30_000, "refused"),
        ("type=text/plain&encoding=" + "x" * 30_000, "refused"),
        ("type=text/" + "x" * 30_000, "Content-Type: text/xxx"),
    ],
)
def test_a_server_header_of_any_length_is_shown_cut(site: LocalSite, query: str, said: str) -> None:
    """A 30,000-character Content-Type or Content-Encoding is quoted by its ends, in a
    refusal or in the page's header, so the result stays near its header and max_chars."""
    tool = WebFetch(PinnedFetcher(allow_loopback=True), max_chars=100)
    url = f"http://127.0.0.1:{site.port}/typed?{query}"
    result = str(run_tool(tool, {"url": url}))
    assert said in result
    assert len(result) < 2_000 + 600  # the model's own URL, cut at 2,000 in a page's header


def test_a_redirect_to_a_very_long_url_is_shown_cut_in_the_header(site: LocalSite) -> None:
    """The final URL a server chose (here 40,000 characters) is shown by its ends."""
    long_path = "/data.json?" + "a" * 40_000
    url = f"http://127.0.0.1:{site.port}/redirect?to={quote(long_path, safe='')}"
    result = run_tool(WebFetch(PinnedFetcher(allow_loopback=True)), {"url": url})
    header, _, text = str(result).partition("\n\n")
    assert text == '{"answer": 42}'
    assert (
        header.splitlines()[0] == f"URL: {clip(f'http://127.0.0.1:{site.port}{long_path}', 2_000)}"
    )
    assert len(header) < 2_200


def test_spaces_or_a_line_break_around_the_url_are_dropped(site: LocalSite) -> None:
    """A URL the model wrote with a space before it or a line break after it is fetched."""
    url = f"http://127.0.0.1:{site.port}/data.json"
    result = run_tool(WebFetch(PinnedFetcher(allow_loopback=True)), {"url": f"  {url}\n"})
    assert not result.is_error, str(result)
    assert str(result).startswith(f"URL: {url}\n")


@pytest.mark.parametrize("url", ["example.com", "example.com:8080/page", "//example.com/x", ""])
def test_a_url_without_a_scheme_is_refused_saying_what_it_lacks(url: str) -> None:
    """A URL with no http:// or https:// is refused saying so, not naming its host a scheme."""
    result = run_tool(
        WebFetch(PinnedFetcher(resolver=lambda host, port: ["10.0.0.1"])), {"url": url}
    )
    assert str(result).splitlines()[0] == (
        f"Error: web_fetch refused {url}: the URL must begin with http:// or https://"
    )
