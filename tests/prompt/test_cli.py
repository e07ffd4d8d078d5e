"""The ``prompt`` and ``init`` commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nanobot_core.cli import cli
from nanobot_core.kernel.records import core_version


@pytest.fixture(autouse=True)
def _isolated(nanobot_workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in an empty directory, with no external plugins and no developer's settings."""
    monkeypatch.setenv("NANOBOT_DISABLE_PLUGIN_AUTOLOAD", "1")


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout


def test_prompt_json_lists_the_prompt_and_every_section(tmp_path: Path) -> None:
    """--json prints the prompt and one report per section, in prompt order."""
    (tmp_path / "USER.md").write_text("Prefers short answers.")
    code, out = _run("prompt", "--workspace", str(tmp_path), "--json")
    assert code == 0
    data = json.loads(out)
    assert set(data) == {"prompt", "sections"}
    assert "Prefers short answers." in data["prompt"]
    assert [s["name"] for s in data["sections"]] == [
        "identity",
        "bootstrap",
        "tool_contract",
        "memory",
        "skills",
    ]
    first = data["sections"][0]
    assert set(first) == {"name", "plugin", "version", "chars", "skipped", "reason"}
    assert (first["plugin"], first["version"]) == ("builtin:prompt", core_version())
    memory = data["sections"][3]
    assert memory["skipped"] is True and memory["chars"] == 0


def test_prompt_prints_the_same_text_without_json(tmp_path: Path) -> None:
    """Readable output is the prompt itself, identical to the JSON prompt field."""
    _, as_json = _run("prompt", "--workspace", str(tmp_path), "--json")
    code, plain = _run("prompt", "--workspace", str(tmp_path))
    assert code == 0
    assert plain == json.loads(as_json)["prompt"] + "\n"


def test_prompt_honours_the_prompt_config(tmp_path: Path) -> None:
    """prompt.disabled in nanobot.toml leaves a section out of the printed prompt."""
    (tmp_path / "nanobot.toml").write_text('[prompt]\ndisabled = ["tool_contract"]\n')
    code, out = _run("prompt", "--json")
    assert code == 0
    data = json.loads(out)
    contract = next(s for s in data["sections"] if s["name"] == "tool_contract")
    assert contract["skipped"] is True and contract["reason"] == "disabled in config"
    assert "# Using tools" not in data["prompt"]


def test_prompt_rejects_a_missing_workspace(tmp_path: Path) -> None:
    """A workspace that does not exist is a usage error (exit 2)."""
    code, _ = _run("prompt", "--workspace", str(tmp_path / "nope"))
    assert code == 2


def test_init_reports_written_then_kept_files(tmp_path: Path) -> None:
    """init says which files it wrote; a second run says each was kept."""
    workspace = tmp_path / "ws"
    code, out = _run("init", "--workspace", str(workspace))
    assert code == 0
    assert "wrote memory/MEMORY.md" in out
    code, out = _run("init", "--workspace", str(workspace), "--json")
    assert code == 0
    assert json.loads(out) == {
        "workspace": str(workspace.resolve()),
        "written": [],
        "kept": ["AGENTS.md", "SOUL.md", "USER.md", "memory/MEMORY.md"],
        "failed": {},
    }


def test_init_fails_cleanly_when_the_workspace_cannot_be_created(tmp_path: Path) -> None:
    """A workspace under a regular file cannot be created: exit 2 naming the option."""
    (tmp_path / "file").write_text("")
    result = CliRunner().invoke(cli, ["init", "--workspace", str(tmp_path / "file" / "ws")])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "'--workspace'" in result.stderr
    assert "Not a directory" in result.stderr
    assert (tmp_path / "file").read_text() == ""
