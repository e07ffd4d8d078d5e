"""``nanobot-core init``: write the workspace templates, never replacing an existing file.

Each template is written whole or not at all. Exit 0 once every template is written
or kept; 1 when one could not be written (a file where its folder goes, a full disk,
a link out of the workspace or to nothing, which no template is written through),
after writing every other one, the error naming each and why.
"""

from __future__ import annotations

import click

from nanobot_core._exit_codes import EXIT_FAILED
from nanobot_core.cli import get_state, workspace_option


@click.command("init")
@workspace_option("Workspace directory (created if missing; default: the working directory).")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"workspace", "written": [...], "kept": [...], "failed": {FILE: WHY}}.',
)
def command(workspace: str | None, as_json: bool) -> None:
    """Write AGENTS.md, SOUL.md, USER.md and memory/MEMORY.md templates into the workspace."""
    from nanobot_core.prompt.workspace_files import init_workspace

    state = get_state()
    root = state.workspace(workspace, create=True)
    report = init_workspace(root)
    if as_json:
        state.echo_json(
            {
                "workspace": str(root),
                "written": report.written,
                "kept": report.kept,
                "failed": report.failed,
            }
        )
    else:
        click.echo(f"workspace: {root}")
        for relative in report.written:
            click.echo(f"  wrote {relative}")
        for relative in report.kept:
            click.echo(f"  kept  {relative} (already exists)")
    if report.failed:
        # Every template that could be written was; none was left half-written.
        reasons = "; ".join(f"{relative}: {why}" for relative, why in report.failed.items())
        click.echo(f"Error: cannot write templates into {root}: {reasons}", err=True)
        raise click.exceptions.Exit(EXIT_FAILED)
