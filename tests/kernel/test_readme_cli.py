"""The README's command table names every command and every flag of every command."""

from __future__ import annotations

import re

import click

from nanobot_core.cli import COMMANDS, cli
from tests.helpers import REPO_ROOT

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


def _flags(command: click.Command) -> set[str]:
    return {
        opt
        for param in command.params
        if isinstance(param, click.Option)
        for opt in (*param.opts, *param.secondary_opts)
        if opt.startswith("--") and opt != "--help"
    }


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
        path: sorted(flag for flag in _flags(command) if flag not in rows.get(path, ""))
        for path, command in _commands().items()
    }
    assert {path: flags for path, flags in missing.items() if flags} == {}


def test_every_global_option_is_in_the_cli_section() -> None:
    """The global options of `nanobot-core` itself are named in the README's CLI section."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split(GLOBAL_OPTIONS_HEADING, 1)[1].split("\n## ", 1)[0]
    assert sorted(flag for flag in _flags(cli) if f"`{flag}" not in section) == []


def test_the_row_reader_keeps_subcommands_apart() -> None:
    """A row's command path is its leading words, so `sessions show` is not `sessions`."""
    rows = _table_rows()
    assert "--workspace" in rows["sessions show"]
    assert rows["sessions"].startswith("sessions [")
