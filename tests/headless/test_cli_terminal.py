"""Text from a model, a tool, a file or a plugin cannot drive the user's terminal.

Every command runs for real, once with stdout and stderr on pseudo-terminals
(`run_cli_in_terminal`, the bytes exactly as written) and once through pipes:
on a terminal the hostile text is shown escaped, through a pipe its bytes are
kept as they are.
"""

from __future__ import annotations

import json
import os
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest

from nanobot_core.cli import COMMANDS
from nanobot_core.testing import TerminalRun, run_cli_in_terminal
from tests.headless.conftest import cli_env
from tests.headless.fake_server import FakeChatServer, text_reply, tool_call_reply
from tests.helpers import install_plugin, plugin_env, run_cli

TIMEOUT = 60

# OSC 52 (write the clipboard), an OSC 8 link, clear-screen and cursor moves, a carriage
# return, an 8-bit CSI, a bidirectional override and isolate; then a literal escape of
# the terminal rule and Python's repr of one, which must read apart from a real one.
HOSTILE = (
    "hi \x1b]52;c;SGk=\x07 \x1b]8;;http://evil/\x1b\\link\x1b]8;;\x1b\\ \x1b[2J\x1b[H\r"
    "\x1b[1A \x9b31m \u202eevil\u2066 \\x{1b} 'a\\x1b' end"
)
# HOSTILE as a terminal shows it, written out by hand.
SHOWN = (
    r"hi \x{1b}]52;c;SGk=\x{07} \x{1b}]8;;http://evil/\x{1b}\link\x{1b}]8;;\x{1b}\ "
    r"\x{1b}[2J\x{1b}[H\x{0d}\x{1b}[1A \x{9b}31m \x{202e}evil\x{2066} \x{5c}x{1b} 'a\x1b' end"
)
# One line of it, as a file holds it: read_file numbers the lines a carriage return
# starts, and the prompt's workspace files leave C1 out.
LINE = (
    "hi \x1b]52;c;SGk=\x07 \x1b]8;;http://evil/\x1b\\link\x1b]8;;\x1b\\ \x1b[2J\x1b[H\x1b[1A "
    "\u202eevil\u2066 \\x{1b} 'a\\x1b' end"
)
LINE_SHOWN = (
    r"hi \x{1b}]52;c;SGk=\x{07} \x{1b}]8;;http://evil/\x{1b}\link\x{1b}]8;;\x{1b}\ "
    r"\x{1b}[2J\x{1b}[H\x{1b}[1A \x{202e}evil\x{2066} \x{5c}x{1b} 'a\x1b' end"
)
ERASE_LINE = b"\r\x1b[2K"  # the live progress line's own sequence, the one let through
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def _assert_drives_nothing(data: bytes) -> None:
    """`data` holds no control character but newline and tab, and no bidirectional control."""
    text = data.replace(ERASE_LINE, b"").decode("utf-8")
    bad = [c for c in text if c not in "\n\t" and (unicodedata.category(c) == "Cc" or c in BIDI)]
    assert not bad, f"raw controls {bad!r} in {text!r}"


def _terminal(*args: str, cwd: Path, env: dict[str, str]) -> TerminalRun:
    return run_cli_in_terminal(*args, cwd=cwd, env=env, timeout=TIMEOUT)


def _piped(*args: str, cwd: Path, env: dict[str, str]) -> tuple[bytes, bytes]:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "nanobot_core", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    return done.stdout, done.stderr


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace holding a file of hostile text, as a fetched page or a repository may."""
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "evil.txt").write_text(LINE, encoding="utf-8")
    return folder


def _script_turn(server: FakeChatServer) -> None:
    """A model that reads the hostile file, calls a tool of a hostile name, then answers it."""
    server.add(
        tool_call_reply(
            [("c1", "read_file", '{"path": "evil.txt"}'), ("c2", "no\x1b[2Jtool", "{}")]
        ),
        text_reply(HOSTILE),
    )


def test_run_on_a_terminal_shows_the_answer_and_progress_escaped(
    server: FakeChatServer, workspace: Path
) -> None:
    """The model's answer reaches the terminal escaped, and so does what stderr shows."""
    _script_turn(server)
    shown = _terminal("run", "read it", cwd=workspace, env=cli_env(server))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == SHOWN.encode() + b"\n"
    assert b"nanobot: tool no\\x{1b}[2Jtool: running\n" in shown.stderr
    _assert_drives_nothing(shown.stderr)


def test_run_through_a_pipe_keeps_the_answer_byte_for_byte(
    server: FakeChatServer, workspace: Path
) -> None:
    """A script reading the answer from a pipe gets the model's text exactly."""
    _script_turn(server)
    stdout, _ = _piped("run", "read it", cwd=workspace, env=cli_env(server))
    assert stdout == HOSTILE.encode() + b"\n"


def test_run_json_on_a_terminal_is_the_same_value_and_drives_nothing(
    server: FakeChatServer, workspace: Path
) -> None:
    """``--json`` on a terminal holds the answer exactly, every control written as a JSON escape."""
    _script_turn(server)
    shown = _terminal("run", "read it", "--json", cwd=workspace, env=cli_env(server))
    assert json.loads(shown.stdout)["answer"] == HOSTILE
    _assert_drives_nothing(shown.stdout)
    assert b"\\u202e" in shown.stdout and b"\\u009b" in shown.stdout


def test_sessions_show_escapes_on_a_terminal_and_keeps_bytes_in_a_pipe(
    server: FakeChatServer, workspace: Path
) -> None:
    """A stored answer and tool result are shown escaped, and piped as they are."""
    _script_turn(server)
    assert run_cli("run", "read it", cwd=workspace, env=cli_env(server)).returncode == 0
    shown = _terminal("sessions", "show", "default", cwd=workspace, env=cli_env(server))
    assert f"    {SHOWN}\n".encode() in shown.stdout
    _assert_drives_nothing(shown.stdout + shown.stderr)
    stdout, _ = _piped("sessions", "show", "default", cwd=workspace, env=cli_env(server))
    assert f"    {HOSTILE}\n".encode() in stdout


def test_sessions_export_and_govern_output_to_a_pipe_are_the_files_bytes(
    server: FakeChatServer, workspace: Path
) -> None:
    """``sessions export -o -`` and ``govern --output -`` write to a pipe what they write to a
    file, byte for byte; on a terminal, the same values, nothing that drives it."""
    _script_turn(server)
    env = cli_env(server)
    assert run_cli("run", "read it", cwd=workspace, env=env).returncode == 0
    session = workspace / ".nanobot" / "sessions" / "default.jsonl"
    for args in (("sessions", "export", "-o"), ("govern", str(session), "--output")):
        assert run_cli(*args, "out.jsonl", cwd=workspace, env=env).returncode == 0
        written = (workspace / "out.jsonl").read_bytes()
        assert "\u202e".encode() in written  # JSON leaves a bidirectional override raw
        assert _piped(*args, "-", cwd=workspace, env=env)[0] == written
        shown = _terminal(*args, "-", cwd=workspace, env=env)
        _assert_drives_nothing(shown.stdout)
        assert [json.loads(line) for line in shown.stdout.splitlines()] == [
            json.loads(line) for line in written.splitlines()
        ]


def test_call_shows_a_tool_result_escaped(workspace: Path) -> None:
    """A file read by hand is shown escaped on a terminal, and piped as it is."""
    env = plugin_env(workspace, "none")
    shown = _terminal("call", "read_file", '{"path": "evil.txt"}', cwd=workspace, env=env)
    assert shown.stdout == f"     1\t{LINE_SHOWN}\n".encode()
    stdout, _ = _piped("call", "read_file", '{"path": "evil.txt"}', cwd=workspace, env=env)
    assert stdout == f"     1\t{LINE}\n".encode()


def test_prompt_shows_a_workspace_files_text_escaped(workspace: Path) -> None:
    """A section's text (AGENTS.md) is shown escaped on a terminal, and piped as it is."""
    (workspace / "AGENTS.md").write_text(LINE, encoding="utf-8")
    env = plugin_env(workspace, "none")
    shown = _terminal("prompt", cwd=workspace, env=env)
    assert LINE_SHOWN.encode() in shown.stdout
    _assert_drives_nothing(shown.stdout + shown.stderr)
    assert LINE.encode() in _piped("prompt", cwd=workspace, env=env)[0]


def test_govern_shows_a_hostile_file_name_escaped(workspace: Path) -> None:
    """The name of the history governed, quoted in the summary, is shown escaped."""
    name = "h\x1b]0;owned\x07.jsonl"
    (workspace / name).write_text('{"role": "user", "content": "hi"}\n', encoding="utf-8")
    shown = _terminal("govern", name, cwd=workspace, env=plugin_env(workspace, "none"))
    assert b"h\\x{1b}]0;owned\\x{07}.jsonl: 1 -> 1 messages" in shown.stdout
    _assert_drives_nothing(shown.stdout + shown.stderr)


def test_init_and_new_plugin_show_a_hostile_path_escaped(tmp_path: Path) -> None:
    """The folders they name (a name another program chose) are shown escaped."""
    env = plugin_env(tmp_path, "none")
    folder = "w\x1b[2J\u202e"
    shown = _terminal("init", "--workspace", folder, cwd=tmp_path, env=env)
    assert shown.stdout.startswith(b"workspace: ") and b"w\\x{1b}[2J\\x{202e}\n" in shown.stdout
    _assert_drives_nothing(shown.stdout + shown.stderr)
    shown = _terminal("new-plugin", "shoutplug", "--directory", folder + "p", cwd=tmp_path, env=env)
    assert b"created w\\x{1b}[2J\\x{202e}p" in shown.stdout
    _assert_drives_nothing(shown.stdout + shown.stderr)


def test_init_shows_a_hostile_link_target_escaped(tmp_path: Path) -> None:
    """Where a link to nothing points (a name a cloned workspace chose), named in the error
    of `init`, is shown escaped on a terminal."""
    env = plugin_env(tmp_path, "none")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "AGENTS.md").symlink_to("gone\x1b[2J\u202e.md")
    shown = _terminal("init", "--workspace", str(workspace), cwd=tmp_path, env=env)
    assert b"AGENTS.md is a link to nothing (" in shown.stderr
    assert b"gone\\x{1b}[2J\\x{202e}.md): nothing is written through it" in shown.stderr
    _assert_drives_nothing(shown.stdout + shown.stderr)


HOSTILE_PLUGIN = f"""
from nanobot_core import Tool, hookimpl, report_problem

HOSTILE = {HOSTILE!r}

class Shout(Tool):
    name = "shout"
    description = HOSTILE
    parameters = {{"type": "object", "properties": {{}}}}

    async def execute(self):
        return HOSTILE

@hookimpl
def nanobot_tools(ctx):
    report_problem("left out: " + HOSTILE)
    return [Shout()]
"""

BROKEN_PLUGIN = f"""
from nanobot_core import hookimpl

@hookimpl
def nanobot_tools(ctx):
    raise RuntimeError({HOSTILE!r})
"""


@pytest.fixture
def plugins_env(tmp_path: Path) -> dict[str, str]:
    """A plugin whose tool, description and problem are hostile, and one failing with it."""
    hostile = install_plugin(tmp_path / "site-a", "hostileplug", HOSTILE_PLUGIN)
    broken = install_plugin(tmp_path / "site-b", "brokenplug", BROKEN_PLUGIN)
    env = plugin_env(hostile, "hostileplug,brokenplug")
    env["PYTHONPATH"] = os.pathsep.join([str(broken), env["PYTHONPATH"]])
    return env


def test_tools_and_plugins_show_a_plugins_words_escaped(
    workspace: Path, plugins_env: dict[str, str]
) -> None:
    """A tool's description, a plugin's problem and error, and a tool's result: escaped."""
    shown = _terminal("tools", cwd=workspace, env=plugins_env)
    assert b"shout" in shown.stdout and b"hi \\x{1b}]52;c;SGk=\\x{07}" in shown.stdout
    _assert_drives_nothing(shown.stdout + shown.stderr)
    shown = _terminal("plugins", cwd=workspace, env=plugins_env)
    assert b"    problem: " in shown.stdout and b"    error: " in shown.stdout
    assert shown.stdout.count(b"\\x{1b}]52;c;SGk=\\x{07}") >= 2
    _assert_drives_nothing(shown.stdout + shown.stderr)
    shown = _terminal("call", "shout", cwd=workspace, env=plugins_env)
    assert shown.stdout == SHOWN.encode() + b"\n"
    _assert_drives_nothing(shown.stderr)
    stdout, _ = _piped("call", "shout", cwd=workspace, env=plugins_env)
    assert stdout == HOSTILE.encode() + b"\n"


# Each command, and the test that runs it on a terminal with text from outside.
ON_A_TERMINAL: dict[str, Callable[..., None]] = {
    "call": test_call_shows_a_tool_result_escaped,
    "govern": test_govern_shows_a_hostile_file_name_escaped,
    "init": test_init_and_new_plugin_show_a_hostile_path_escaped,
    "new-plugin": test_init_and_new_plugin_show_a_hostile_path_escaped,
    "plugins": test_tools_and_plugins_show_a_plugins_words_escaped,
    "prompt": test_prompt_shows_a_workspace_files_text_escaped,
    "run": test_run_on_a_terminal_shows_the_answer_and_progress_escaped,
    "sessions": test_sessions_show_escapes_on_a_terminal_and_keeps_bytes_in_a_pipe,
    "tools": test_tools_and_plugins_show_a_plugins_words_escaped,
}


def test_every_command_is_run_on_a_terminal_here() -> None:
    """A new command is not missed: each one has its terminal test above."""
    assert sorted(ON_A_TERMINAL) == sorted(COMMANDS)
