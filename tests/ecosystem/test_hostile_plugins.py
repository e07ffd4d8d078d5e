"""Hostile plugins installed for real: the CLI's JSON stays strict and each plugin is named."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.boundary.strict import strict_loads
from tests.ecosystem.envs import VirtualEnv, build_wheels

pytestmark = pytest.mark.ecosystem

HOSTILE = Path(__file__).resolve().parent / "hostile" / "nbtest-hostile"


@pytest.fixture(scope="module")
def hostile_env(
    tmp_path_factory: pytest.TempPathFactory, wheelhouse: dict[str, Path]
) -> VirtualEnv:
    """A fresh venv with the core and the hostile plugins (printing, exiting, bad schemas)."""
    out = tmp_path_factory.mktemp("hostile-wheels")
    wheel = build_wheels([HOSTILE], out)["nbtest-hostile"]
    venv = VirtualEnv(tmp_path_factory.mktemp("hostile-venv") / "env")
    venv.install(wheelhouse["nanobot-core"], wheel)
    return venv


def _strict(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return strict_loads(result.stdout)


def test_plugins_json_is_strict_and_names_the_quitter(
    hostile_env: VirtualEnv, tmp_path: Path
) -> None:
    """Prints go to the log, SystemExit(3) fails only its plugin, bad tools are left out."""
    result = hostile_env.cli("plugins", "--json", cwd=tmp_path)
    rows = {row["name"]: row for row in _strict(result)}
    assert rows["quitter"]["status"] == "failed"
    assert "SystemExit(3)" in rows["quitter"]["error"]
    noisy = rows["noisy"]
    assert noisy["status"] == "loaded" and noisy["version"] == "6.6.6"
    assert {c["name"] for c in noisy["contributions"] if c["kind"] == "tool"} == {"hostile_echo"}
    assert len(noisy["problems"]) == 2
    assert any("hostile_bad_pattern" in p for p in noisy["problems"])
    assert any("hostile_bad_ref" in p for p in noisy["problems"])
    assert "noisy: printed at import" in result.stderr


def test_tools_json_keeps_the_good_tool_and_leaves_out_the_bad(
    hostile_env: VirtualEnv, tmp_path: Path
) -> None:
    """Only the tool with a valid schema reaches the definitions; the built-ins are all there."""
    names = {row["name"] for row in _strict(hostile_env.cli("tools", "--json", cwd=tmp_path))}
    assert "hostile_echo" in names and "read_file" in names
    assert not names & {"hostile_bad_pattern", "hostile_bad_ref"}


def test_call_json_is_strict_when_the_tool_prints(hostile_env: VirtualEnv, tmp_path: Path) -> None:
    """A tool that prints while it runs leaves ``call --json`` one strict JSON document."""
    result = hostile_env.cli("call", "hostile_echo", '{"text": "hi"}', "--json", cwd=tmp_path)
    answer = _strict(result)
    assert "hi" in str(answer)
    assert "noisy: printed by the tool" not in result.stdout


def test_govern_json_is_strict_with_hostile_plugins(
    hostile_env: VirtualEnv, tmp_path: Path
) -> None:
    """govern --json on a history with NaN prints strict JSON although plugins print and exit."""
    history = tmp_path / "h.jsonl"
    history.write_text('{"role": "user", "content": "x \\ud800", "n": NaN}\n', encoding="ascii")
    out = _strict(hostile_env.cli("govern", str(history), "--json", cwd=tmp_path))
    assert out["messages"][0]["content"] == "x \ufffd"
