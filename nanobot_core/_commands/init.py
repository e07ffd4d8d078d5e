"""``nanobot-core init``: write the workspace templates, never replacing an existing file."""

from __future__ import annotations

import click

from nanobot_core.cli import get_state, workspace_option


@click.command("init")
@workspace_option("Workspace directory (created if missing; default: the working directory).")
@click.option(
    "--json", "as_json", is_flag=True, help='Print {"workspace", "written": [...], "kept": [...]}.'
)
def command(workspace: str | None, as_json: bool) -> None:
    """Write AGENTS.md, SOUL.md, USER.md and memory/MEMORY.md templates into the workspace."""
    from nanobot_core.prompt.workspace_files import init_workspace

    state = get_state()
    root = state.workspace(workspace, create=True)
    try:
        report = init_workspace(root)
    except OSError as exc:
        raise click.ClickException(f"cannot write templates into {root}: {exc}") from exc
    if as_json:
        state.echo_json({"workspace": str(root), "written": report.written, "kept": report.kept})
        return
    click.echo(f"workspace: {root}")
    for relative in report.written:
        click.echo(f"  wrote {relative}")
    for relative in report.kept:
        click.echo(f"  kept  {relative} (already exists)")
