"""The README's command table names every command and every flag of every command."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import pytest

from nanobot_core.cli import COMMANDS, cli
from tests.helpers import REPO_ROOT, clean_env, install_plugin, plugin_env, run_cli

GLOBAL_OPTIONS_HEADING = "## The CLI"


def _commands() -> dict[str, click.Command]:
    """Every command path (``sessions show`` included) and its click command."""
    ctx = click.Context(cli)
    found: dict[str, click.Command] = {}

    def walk(path: str, command: click.Command) -> None:
        found[path] = command
        if isinstance(command, click.Group):
            for sub in command.list_commands(ctx):
                child = command.get_command(ctx, sub)
                assert child is not None
                walk(f"{path} {sub}", child)

    for name in sorted(COMMANDS):
        command = cli.get_command(ctx, name)
        assert command is not None, name
        walk(name, command)
    return found


_HELP_OPTIONS = frozenset(cli.context_settings["help_option_names"])


def _flags(command: click.Command) -> set[str]:
    """Every option name of `command`, short ones (``-o``) included; help is the CLI section's."""
    return {
        opt
        for param in command.params
        if isinstance(param, click.Option)
        for opt in (*param.opts, *param.secondary_opts)
        if opt not in _HELP_OPTIONS
    }


def _names(text: str, flag: str) -> bool:
    """Whether `text` names `flag` as a word of its own (`-o` is not the start of `--output`)."""
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text) is not None


def _table_rows() -> dict[str, str]:
    """Each table row's command path (the words after ``nanobot-core``) and its first cell."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    rows: dict[str, str] = {}
    for cell in re.findall(r"^\| `nanobot-core ([^`]*)`", text, flags=re.MULTILINE):
        words = [w for w in cell.split() if re.fullmatch(r"[a-z][a-z-]*", w)]
        rows[" ".join(words)] = cell
    return rows


def test_every_command_has_a_row() -> None:
    """Each command and subcommand has its own row in the README's command table."""
    rows = _table_rows()
    missing = sorted(path for path in _commands() if path not in rows)
    assert missing == []


def test_every_flag_of_every_command_is_in_its_row() -> None:
    """Each command's row lists every one of its flags."""
    rows = _table_rows()
    missing = {
        path: sorted(flag for flag in _flags(command) if not _names(rows.get(path, ""), flag))
        for path, command in _commands().items()
    }
    assert {path: flags for path, flags in missing.items() if flags} == {}


# How a command's help says that an argument of `-` is read from stdin.
_READS_STDIN = re.compile(r"'-' reads|(?<![\w-])- for stdin")


def _reads_stdin(command: click.Command) -> bool:
    """Whether `command`'s help says it reads an argument given as `-` from stdin."""
    return _READS_STDIN.search(command.help or "") is not None


def test_every_command_that_reads_stdin_says_so_in_its_row() -> None:
    """Each command whose help says `-` reads stdin has a row saying `-` and stdin too."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    cells = _table_rows()
    rows = {  # the whole row, not only its first cell
        path: line
        for line in text.splitlines()
        for path, cell in cells.items()
        if line.startswith(f"| `nanobot-core {cell}`")
    }
    readers = [path for path, command in _commands().items() if _reads_stdin(command)]
    assert sorted(readers) == ["call", "govern", "run", "sessions import"]
    silent = [path for path in readers if "`-`" not in rows[path] or "stdin" not in rows[path]]
    assert silent == []


def test_every_global_option_is_in_the_cli_section() -> None:
    """The global options of `nanobot-core` itself are named in the README's CLI section."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split(GLOBAL_OPTIONS_HEADING, 1)[1].split("\n## ", 1)[0]
    assert sorted(flag for flag in _flags(cli) if f"`{flag}" not in section) == []


def test_every_default_the_help_shows_is_in_the_cli_section() -> None:
    """A global option whose --help shows its default has that default beside it in the README."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = " ".join(text.split(GLOBAL_OPTIONS_HEADING, 1)[1].split("\n## ", 1)[0].split())
    shown = {
        param.opts[0]: str(param.default)
        for param in cli.params
        if isinstance(param, click.Option) and param.show_default
    }
    assert sorted(shown) == ["--log-format", "--log-level"]
    unsaid = {
        flag: default
        for flag, default in shown.items()
        if not re.search(rf"`{re.escape(flag)}[^`]*` \(default `{re.escape(default)}`\)", section)
    }
    assert unsaid == {}


def test_the_help_options_are_in_the_cli_section() -> None:
    """Each name of the help option every command takes (`-h`, `--help`) is in the CLI section."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split(GLOBAL_OPTIONS_HEADING, 1)[1].split("\n## ", 1)[0]
    assert sorted(name for name in _HELP_OPTIONS if f"`{name}`" not in section) == []


def test_every_workspace_option_says_the_folder_must_exist() -> None:
    """The --workspace help of every command but init says, as the README does, it must exist."""
    helps = {
        path: param.help or ""
        for path, command in _commands().items()
        for param in command.params
        if isinstance(param, click.Option) and "--workspace" in param.opts
    }
    assert "created if missing" in helps.pop("init")
    assert sorted(path for path, text in helps.items() if "must exist" not in text) == []


def test_the_row_reader_keeps_subcommands_apart() -> None:
    """A row's command path is its leading words, so `sessions show` is not `sessions`."""
    rows = _table_rows()
    assert "--workspace" in rows["sessions show"]
    assert not _names("--output PATH", "-o")
    assert not _names("--max-output N", "--output")
    assert rows["sessions"].startswith("sessions [")


_DENIER = """
from nanobot_core import hookimpl


@hookimpl
def nanobot_before_tool_call(ctx, call):
    return "not today"
"""

# (arguments of `call`, the exit code it gives, what the row says of that code).
_CALL_CASES = [
    (["list_dir", '{"path": "."}'], 0, "the tool succeeded"),
    (["read_file", '{"path": "missing.txt"}'], 1, "the tool failed"),
    (["list_dir", '{"path": "."}', "--json"], 1, "hook denied the call"),
    (["no_such_tool", "{}"], 2, "an unknown tool"),
    (["list_dir", "[1]"], 2, "not a JSON object"),
    (["read_file", "{}", "--json"], 2, "do not fit the tool's parameters"),
]


def _exit_codes_said(row: str) -> dict[int, str]:
    """Each ``exit N when ...`` clause of a row, by its code."""
    clauses = re.findall(r"exit (\d+) (when [^;|]*)", row)
    said = {int(code): text for code, text in clauses}
    assert len(said) == len(clauses), row
    return said


@pytest.mark.parametrize(("args", "code", "phrase"), _CALL_CASES)
def test_the_call_row_says_the_exit_code_call_gives(
    args: list[str], code: int, phrase: str, tmp_path: Path
) -> None:
    """Each exit code of `call` is the one its README row gives for that case, in those words."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    [row] = [line for line in text.splitlines() if line.startswith("| `nanobot-core call ")]
    said = _exit_codes_said(row)
    assert sorted(said) == sorted({case[1] for case in _CALL_CASES})
    assert phrase in said[code]
    denied = phrase == "hook denied the call"
    if denied:
        env = plugin_env(install_plugin(tmp_path / "site", "denier", _DENIER), "denier")
    else:
        env = clean_env()
    result = run_cli("call", *args, cwd=tmp_path, env=env)
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    if denied:
        assert json.loads(result.stdout)["result"].startswith(
            'Error: call to tool "list_dir" denied: not today'
        )
