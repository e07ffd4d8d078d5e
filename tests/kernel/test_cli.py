"""The CLI shell: global options anywhere, exit codes, logs on stderr only."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from nanobot_core.cli import hoist_global_options
from tests.helpers import clean_env, run_cli


def _cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = clean_env(**{"NANOBOT_DISABLE_PLUGIN_AUTOLOAD": "1", **(env or {})})
    return run_cli(*args, cwd=cwd, env=base)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["tools", "--strict"], ["--strict", "tools"]),
        (["tools", "--config", "a.toml", "--json"], ["--config", "a.toml", "tools", "--json"]),
        (["tools", "--log-format=json"], ["--log-format=json", "tools"]),
        (["--strict", "tools"], ["--strict", "tools"]),
        (["call", "x", "--", "--strict"], ["call", "x", "--", "--strict"]),
        (["tools", "--json", "--config"], ["--config"]),
    ],
)
def test_global_options_are_hoisted(argv: list[str], expected: list[str]) -> None:
    """Global options written after the subcommand are moved in front of it."""
    assert hoist_global_options(argv) == expected


def test_version(tmp_path: Path) -> None:
    """--version prints the version and exits 0, before or after a subcommand."""
    for args in (["--version"], ["tools", "--version"]):
        result = _cli(*args, cwd=tmp_path)
        assert result.returncode == 0
        assert result.stdout.startswith("nanobot-core ")


def test_unknown_command_is_a_usage_error(tmp_path: Path) -> None:
    """An unknown subcommand exits 2."""
    assert _cli("frobnicate", cwd=tmp_path).returncode == 2


def test_bad_config_is_a_usage_error_naming_the_key(tmp_path: Path) -> None:
    """A malformed config exits 2 with the key path on stderr."""
    (tmp_path / "nanobot.toml").write_text("[tools]\ntimeout = 'soon'\n", encoding="utf-8")
    result = _cli("tools", cwd=tmp_path)
    assert result.returncode == 2
    assert "tools.timeout" in result.stderr and result.stdout == ""


def test_json_logs_go_to_stderr(tmp_path: Path) -> None:
    """With --log-format json, stdout is pure JSON output and log lines are JSON on stderr."""
    result = _cli(
        "tools",
        "--json",
        "--log-format",
        "json",
        "--log-level",
        "info",
        cwd=tmp_path,
        # Autoload on: only then are the block and allow lists matched, and warned about.
        env={"NANOBOT_BLOCK": "nothing-matches-this", "NANOBOT_DISABLE_PLUGIN_AUTOLOAD": "0"},
    )
    assert result.returncode == 0, result.stderr
    json.loads(result.stdout)
    lines = [json.loads(line) for line in result.stderr.splitlines() if line.strip()]
    assert any(line.get("name") == "nothing-matches-this" for line in lines)
