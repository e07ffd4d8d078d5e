"""``nanobot-core new-plugin``: scaffold a plugin project that installs and passes its tests."""

from __future__ import annotations

from pathlib import Path

import click

from nanobot_core.scaffold import KINDS, PluginProject, validate_name, write_project


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
    type=click.Path(file_okay=False),
    help="Where to create the project (default: ./NAME).",
)
def command(name: str, kind: str, directory: str | None) -> None:
    """Create a ready plugin project NAME: pyproject with entry point, code, README, tests."""
    problem = validate_name(name)
    if problem:
        raise click.UsageError(f"plugin name {name!r} {problem}")
    target = Path(directory) if directory else Path.cwd() / name
    if target.exists():
        raise click.UsageError(f"{target} already exists; choose another --directory")
    written = write_project(PluginProject(distribution=name, kind=kind), target)
    for path in written:
        click.echo(f"created {path}")
    click.echo(f"next: pip install -e {target} && nanobot-core plugins")
