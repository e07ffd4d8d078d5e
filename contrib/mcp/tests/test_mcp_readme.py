"""The README's configuration: its example, its bounds, and what a mistake in it does."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from nanobot_core import ConfigError
from nanobot_core.testing import run_cli

from nanobot_mcp.config import ServerConfig, parse_servers

README = Path(__file__).resolve().parents[1] / "README.md"


def _readme_toml() -> str:
    (block,) = re.findall(r"```toml\n(.*?)```", README.read_text("utf-8"), re.DOTALL)
    return str(block)


def _parse(servers: dict[str, Any]) -> list[ServerConfig]:
    return parse_servers({"servers": servers}, workspace=Path("/ws"), source="mcp.toml")


def test_the_readme_example_gives_the_documented_values_and_defaults() -> None:
    """Its notes server has every key as written; the files server gets the stated defaults."""
    data = tomllib.loads(_readme_toml())
    files, notes = parse_servers(data, workspace=Path("/ws"), source="mcp.toml")
    assert notes == ServerConfig(
        name="notes",
        command="python",
        args=("-m", "notes_server"),
        env=(("NOTES_DB", "notes.sqlite"),),
        cwd=Path("/ws/tools"),
        startup_timeout=10.0,
        call_timeout=60.0,
        retry_after=60.0,
        max_line_bytes=16 * 1024 * 1024,
    )
    # The notes server's values are the defaults, which the files server gets by leaving them out.
    assert files == ServerConfig(
        name="files",
        command="uvx",
        args=("some-mcp-filesystem-server", "/srv/data"),
        cwd=Path("/ws"),
        startup_timeout=notes.startup_timeout,
        call_timeout=notes.call_timeout,
        retry_after=notes.retry_after,
        max_line_bytes=notes.max_line_bytes,
    )


@given(st.from_regex(r"[A-Za-z0-9_-]{1,32}", fullmatch=True))
def test_any_server_name_of_1_to_32_allowed_characters_is_accepted(name: str) -> None:
    """Letters, digits, _ and -, 1 to 32 of them, make a server name."""
    assert [server.name for server in _parse({name: {"command": "c"}})] == [name]


@given(st.text(max_size=40).filter(lambda n: not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", n)))
@example("notes\n")  # "$" in a pattern would let a trailing line break through
@example("a" * 33)
@example("")
def test_any_other_server_name_is_refused(name: str) -> None:
    """Empty, 33 characters or more, or any other character: a configuration error."""
    with pytest.raises(ConfigError, match="a server name is 1-32 letters, digits"):
        _parse({name: {"command": "c"}})


def test_retry_after_may_be_0_and_the_timeouts_may_not() -> None:
    """retry_after = 0 retries every time; a timeout of 0 or a negative value is refused."""
    (server,) = _parse({"s": {"command": "c", "retry_after": 0}})
    assert server.retry_after == 0.0
    for key, value in (("retry_after", -1), ("startup_timeout", 0), ("call_timeout", 0)):
        with pytest.raises(ConfigError, match=f"'{key}' must be"):
            _parse({"s": {"command": "c", key: value}})


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ('[servers.x]\ncommand = "c"\ncall_timeout = -1\n', "'call_timeout' must be a positive"),
        ('[servers.x]\ncommand = "c"\nargv = []\n', "unknown key(s) ['argv']"),
        ('[server.x]\ncommand = "c"\n', "unknown top-level key(s) ['server']"),
        (None, "ConfigError: environment variable NANOBOT_MCP_CONFIG: "),
    ],
)
def test_a_config_mistake_fails_the_plugin_in_the_plugins_command(
    nanobot_workspace: Path, monkeypatch: pytest.MonkeyPatch, config: str | None, says: str
) -> None:
    """A bad file, or NANOBOT_MCP_CONFIG naming no file: the plugin is failed (exit 1 strict)."""
    if config is None:
        monkeypatch.setenv("NANOBOT_MCP_CONFIG", str(nanobot_workspace / "missing.toml"))
    else:
        (nanobot_workspace / ".nanobot").mkdir()
        (nanobot_workspace / ".nanobot" / "mcp.toml").write_text(config, encoding="utf-8")
    listed = run_cli("plugins")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    at = next(n for n, line in enumerate(lines) if line.startswith("mcp (nanobot-mcp "))
    assert lines[at].endswith("[nanobot.plugins] failed")
    assert "ConfigError: " in lines[at + 1]
    assert says in lines[at + 1]
    if config is None:  # the variable named as the core names one, then the file it names
        assert lines[at + 1].endswith(f"{nanobot_workspace / 'missing.toml'}: no such file")
    assert run_cli("--strict", "plugins").returncode == 1
