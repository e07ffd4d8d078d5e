"""The README's install listing and configuration, through the commands a user runs."""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path

import pytest
from nanobot_core.testing import run_cli

README = Path(__file__).resolve().parents[1] / "README.md"
VERSION = metadata.version("nanobot-redact")


def _readme_toml() -> str:
    (block,) = re.findall(r"```toml\n(.*?)```", README.read_text("utf-8"), re.DOTALL)
    return str(block)


@pytest.mark.usefixtures("nanobot_workspace")
def test_the_plugins_command_shows_the_stage_before_offload_results() -> None:
    """``nanobot-core plugins`` lists the stage, placed just before offload_results."""
    listed = run_cli("--strict", "plugins")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    at = lines.index(f"redact_secrets (nanobot-redact {VERSION}) [nanobot.plugins] loaded")
    assert lines[at + 1] == "    stage redact_secrets"
    (pipeline,) = [line for line in lines if line.startswith("governance pipeline: ")]
    assert "merge_user_turns -> redact_secrets -> offload_results" in pipeline


def test_the_readme_configuration_skips_and_adds_kinds(nanobot_workspace: Path) -> None:
    """The README's table: url_password is left, internal_token's secret group is replaced."""
    (nanobot_workspace / "nanobot.toml").write_text(_readme_toml(), encoding="utf-8")
    text = "db https://app:hunter2@db.example/x and itk=0123456789abcdef, ghp_" + "a" * 36
    (nanobot_workspace / "session.jsonl").write_text(
        json.dumps({"role": "user", "content": text}) + "\n", encoding="utf-8"
    )
    governed = run_cli("--strict", "govern", "session.jsonl", "--json")
    assert governed.returncode == 0, governed.stderr
    (message,) = json.loads(governed.stdout)["messages"]
    assert message["content"] == (
        "db https://app:hunter2@db.example/x and itk=[REDACTED:internal_token], "
        "[REDACTED:github_token]"
    )


_BAD_OPTIONS = [
    (
        'disabled_kinds = ["jwts"]',
        "governance.stages.redact_secrets.disabled_kinds: unknown kind(s) ['jwts'] (known: ",
    ),
    (
        'disabled_kinds = "jwt"',
        "governance.stages.redact_secrets.disabled_kinds: expected a list of strings",
    ),
    (
        'extra_patterns = { x = "(" }',
        "governance.stages.redact_secrets.extra_patterns: entry 'x': invalid regex",
    ),
    ("colour = 1", "governance.stages.redact_secrets.colour: unknown option of stage"),
]
_COMMANDS = [
    *(["plugins", *bad] for bad in _BAD_OPTIONS),
    ["govern", *_BAD_OPTIONS[0]],
    ["run", *_BAD_OPTIONS[0]],
]


@pytest.mark.parametrize(("command", "table", "says"), _COMMANDS)
def test_a_bad_option_stops_every_command_that_builds_a_governor(
    nanobot_workspace: Path, monkeypatch: pytest.MonkeyPatch, command: str, table: str, says: str
) -> None:
    """Another key, a wrong type, an unknown kind or a bad regex: exit 2, naming key and plugin."""
    (nanobot_workspace / "nanobot.toml").write_text(
        f"[governance.stages.redact_secrets]\n{table}\n", encoding="utf-8"
    )
    (nanobot_workspace / "session.jsonl").write_text('{"role": "user", "content": "hi"}\n', "utf-8")
    # A provider that would refuse the connection: `run` must stop before it tries one.
    monkeypatch.setenv("NANOBOT_API_KEY", "none")
    monkeypatch.setenv("NANOBOT_BASE_URL", "http://127.0.0.1:9/v1")
    arguments = {"plugins": [], "govern": ["session.jsonl"], "run": ["hello"]}[command]
    stopped = run_cli(command, *arguments)
    assert stopped.returncode == 2, stopped.stderr
    assert stopped.stdout == ""
    assert says in stopped.stderr
    assert f"stage 'redact_secrets' (plugin 'redact_secrets' from nanobot-redact {VERSION})" in (
        stopped.stderr
    )
