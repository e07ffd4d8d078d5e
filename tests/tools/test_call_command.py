"""`nanobot-core call`: one tool call by hand, through the model's path, with exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from nanobot_core.cli import cli
from tests.helpers import clean_env, install_plugin, plugin_env, run_cli


@pytest.fixture(autouse=True)
def _no_plugin_autoload(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the built-in plugins load, whatever is installed in the environment."""
    monkeypatch.setenv("NANOBOT_DISABLE_PLUGIN_AUTOLOAD", "1")


def _call(workspace: Path, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    runner = CliRunner()
    result = runner.invoke(cli, ["call", *args, "--workspace", str(workspace)], input=stdin)
    return result.exit_code, result.stdout, result.stderr


def test_call_prints_the_result(workspace: Path) -> None:
    """A successful call prints the tool's text and exits 0."""
    code, out, _ = _call(workspace, "read_file", '{"path": "notes.txt", "limit": 1}')
    assert code == 0
    assert out.startswith("     1\talpha\n")


def test_call_repairs_arguments_like_a_model_call(workspace: Path) -> None:
    """Broken JSON and loose types are repaired and cast; --json shows what was done."""
    code, out, _ = _call(workspace, "read_file", "{'path': 'notes.txt', 'offset': '3',}", "--json")
    assert code == 0
    assert json.loads(out) == {
        "tool": "read_file",
        "arguments": {"path": "notes.txt", "offset": 3},
        "ok": True,
        "result": "     3\tgamma",
        "repairs": ["repaired malformed JSON", 'cast $.offset: "3" -> 3'],
    }


def test_call_reads_arguments_from_stdin(workspace: Path) -> None:
    """ARGS '-' reads the argument text from standard input."""
    code, out, _ = _call(workspace, "list_dir", "-", stdin='{"path": "src"}')
    assert (code, out) == (0, "main.py  (15 bytes)\n")


def test_tool_error_exits_1(workspace: Path) -> None:
    """A tool that returns an error exits 1, with the Error text on stdout."""
    code, out, _ = _call(workspace, "read_file", '{"path": "missing.txt"}')
    assert code == 1
    assert out.startswith("Error: file not found: missing.txt")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("reed_file", "{}"), 'Error: unknown tool "reed_file". Did you mean "read_file"?'),
        (("read_file", "[1]"), 'Error: arguments for tool "read_file" must be a JSON object'),
        (("read_file", "{}"), 'Error: invalid arguments for tool "read_file": $: "path"'),
    ],
)
def test_invalid_call_exits_2(workspace: Path, args: tuple[str, str], message: str) -> None:
    """An unknown tool or unusable arguments is an input error: exit 2."""
    code, out, _ = _call(workspace, *args)
    assert code == 2
    assert out.startswith(message)


def test_json_output_of_a_failure(workspace: Path) -> None:
    """--json reports ok false and the error text."""
    code, out, _ = _call(workspace, "grep", '{"pattern": "("}', "--json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False
    assert report["result"].startswith("Error: invalid regular expression")


def test_exit_codes_through_the_real_entry_point(workspace: Path) -> None:
    """`python -m nanobot_core call` exits 0, 1 and 2 for success, tool error and bad call."""
    env = clean_env(NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1")

    def code(*args: str) -> int:
        command = [sys.executable, "-m", "nanobot_core", "call", *args]
        return subprocess.run(command, cwd=workspace, env=env, capture_output=True).returncode

    assert code("read_file", '{"path": "notes.txt"}') == 0
    assert code("read_file", '{"path": "missing.txt"}') == 1
    assert code("nope", "{}") == 2


# A tool whose own check hands back values no JSON holds, as its `execute` wants them.
_OWN_CHECK = """
from pathlib import PurePosixPath
from typing import Any

from nanobot_core import Tool, hookimpl


class Where(Tool):
    name = "where"
    description = "Its own check makes the path a PurePosixPath and the tags a set."
    parameters: dict[str, Any] = {"type": "object", "properties": {"path": {}, "tags": {}}}

    def validate_arguments(self, arguments: dict[str, Any]) -> Any:
        return {"path": PurePosixPath(arguments["path"]), "tags": set(arguments["tags"])}, []

    async def execute(self, path: PurePosixPath, tags: set[str]) -> str:
        return f"{path.name} {sorted(tags)}"


@hookimpl
def nanobot_tools(ctx: Any) -> list[Any]:
    return [Where()]
"""


def test_call_json_names_argument_values_json_cannot_hold(tmp_path: Path) -> None:
    """--json shows what a tool's own check returned that is not JSON by its type, instead of
    ending with a traceback (``TypeError: Object of type PurePosixPath is not JSON
    serializable``)."""
    site = install_plugin(tmp_path / "site", "owncheck", _OWN_CHECK)
    work = tmp_path / "work"
    work.mkdir()
    sent = '{"path": "a/b.txt", "tags": ["x"]}'
    done = run_cli("call", "where", sent, "--json", cwd=work, env=plugin_env(site, "owncheck"))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert json.loads(done.stdout) == {
        "tool": "where",
        "arguments": {"path": "<a PurePosixPath>", "tags": "<a set>"},
        "ok": True,
        "result": "b.txt ['x']",
        "repairs": [],
    }


# A tool whose own check costs something: each run of it is written down, in the working folder.
_COUNTED_CHECK = """
from pathlib import Path
from typing import Any

from nanobot_core import Tool, hookimpl


class Priced(Tool):
    name = "priced"
    description = "Its own check is paid for per run (a quota, a lookup): each run is logged."
    parameters: dict[str, Any] = {"type": "object", "properties": {"n": {}}}

    def validate_arguments(self, arguments: dict[str, Any]) -> Any:
        with Path("checks.log").open("a", encoding="utf-8") as log:
            log.write("checked\\n")
        n = arguments.get("n")
        return arguments, ([] if isinstance(n, int) else [f"$.n: {n!r} is no whole number"])

    async def execute(self, n: int) -> str:
        return f"Error: {n} is odd" if n % 2 else f"{n} is even"


@hookimpl
def nanobot_tools(ctx: Any) -> list[Any]:
    return [Priced()]
"""


@pytest.mark.parametrize(
    ("sent", "exit_code", "printed"),
    [
        ('{"n": 2}', 0, "2 is even"),
        ('{"n": 3}', 1, "Error: 3 is odd"),
        ('{"n": "two"}', 2, "Error: invalid arguments for tool \"priced\": $.n: 'two'"),
    ],
)
def test_call_runs_a_tools_own_check_once(
    tmp_path: Path, sent: str, exit_code: int, printed: str
) -> None:
    """`call` runs the tool's own argument check once, whether the call succeeds, the tool
    fails (exit 1) or the check refuses the arguments (exit 2): it was run a second time
    only to choose the exit code."""
    site = install_plugin(tmp_path / "site", "priced", _COUNTED_CHECK)
    work = tmp_path / "work"
    work.mkdir()
    done = run_cli("call", "priced", sent, cwd=work, env=plugin_env(site, "priced"))
    assert (done.returncode, done.stdout[: len(printed)]) == (exit_code, printed), done.stderr
    assert (work / "checks.log").read_text(encoding="utf-8") == "checked\n"
