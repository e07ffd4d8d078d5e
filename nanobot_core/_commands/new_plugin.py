"""``nanobot-core new-plugin``: scaffold a plugin project that installs and passes its tests."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import click

from nanobot_core._exit_codes import EXIT_USAGE
from nanobot_core.cli import directory_problem
from nanobot_core.scaffold import (
    KINDS,
    PluginProject,
    name_taken,
    shadowed_builtin,
    validate_name,
    write_project,
)


@click.command("new-plugin")
@click.argument("name")
@click.option(
    "--kind",
    type=click.Choice(KINDS),
    default="tool",
    show_default=True,
    help="What the plugin contributes.",
)
@click.option(
    "--directory",
    # No file_okay=False: click would refuse a file in its own words; the check below
    # says it is taken, as it says of anything already there.
    type=click.Path(),
    help="Where to create the project (default: ./NAME).",
)
def command(name: str, kind: str, directory: str | None) -> None:
    """Create a ready plugin project NAME: pyproject with entry point, code, README, tests."""
    problem = validate_name(name) or name_taken(name)
    if problem:
        click.echo(f"Error: plugin name {name!r} {problem}; choose another NAME", err=True)
        raise click.exceptions.Exit(EXIT_USAGE)
    target = Path(directory) if directory else Path.cwd() / name
    try:
        # lstat, not exists: a link there (one to nothing, a link loop) takes the name
        # too, and exists would call a path it cannot look at (a loop above) free.
        target.lstat()
        taken = True
    except FileNotFoundError:  # free: the project's folders are made
        taken = False
    except OSError as exc:  # under a file, a name too long, a folder not searchable, a loop
        raise click.UsageError(
            f"cannot use {target}: {_why_unusable(target, exc)}; choose another --directory"
        ) from None
    if taken:
        raise click.UsageError(f"{target} already exists; choose another --directory")
    project = PluginProject(distribution=name, kind=kind)
    shadowed = shadowed_builtin(project)
    if shadowed and kind == "stage":
        # The project's own test governs with the built-in stages: the built-in would win.
        click.echo(
            f"Error: plugin name {name!r} would name its stage {shadowed!r}, a built-in "
            f"stage's: the built-in runs instead and the project's tests fail; "
            f"choose another NAME",
            err=True,
        )
        raise click.exceptions.Exit(EXIT_USAGE)
    if shadowed:
        click.echo(
            f"Warning: the {kind} name {shadowed!r} is a built-in {kind}'s; the built-in wins "
            f"unless [plugins] overrides names this plugin (see the README)",
            err=True,
        )
    try:
        written = write_project(project, target)
    except OSError as exc:
        # What was written is taken back (`write_project`), unless something kept it there.
        left = "it is left there" if os.path.lexists(target) else "nothing was left there"
        raise click.ClickException(
            f"cannot create the project in {target}: {exc.strerror or exc}; {left}; "
            f"choose another --directory or remove the cause"
        ) from None
    for path in written:
        click.echo(f"created {path}")
    click.echo(f"next: {next_steps(target)}")


def next_steps(target: Path) -> str:
    """The shell line that installs the project at `target` and runs its tests.

    Quoted for a POSIX shell, so that a folder named with a space, a quote or a
    ``$`` is one word; a relative path starting with ``-`` is written ``./-...``,
    which pip and pytest cannot take for an option.
    """
    shown = str(target)
    if shown.startswith("-"):
        shown = f"./{shown}"
    project = shlex.quote(shown)
    return (
        f"pip install -e {shlex.quote(shown + '[test]')} && nanobot-core plugins "
        f"&& pytest {project}"
    )


def _why_unusable(target: Path, exc: OSError) -> str:
    """Why `target` cannot be looked at; under a file, which file is in the way."""
    if isinstance(exc, NotADirectoryError):
        for folder in target.parents:
            if directory_problem(folder) == "is not a directory":
                return f"{folder} is not a directory"
    return exc.strerror or str(exc)
