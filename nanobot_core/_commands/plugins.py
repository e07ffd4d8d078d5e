"""``nanobot-core plugins``: every plugin, built-in or external, with what it contributed."""

from __future__ import annotations

import click

from nanobot_core.cli import EXIT_FAILED, get_state


@click.command("plugins")
@click.option("--workspace", type=click.Path(file_okay=False), help="Workspace directory.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def command(workspace: str | None, as_json: bool) -> None:
    """List plugins: source, status, hooks, contributions, and the pipeline order."""
    state = get_state()
    manager = state.plugin_manager(workspace)
    records = manager.records()
    if as_json:
        state.echo_json([record.to_json() for record in records])
    else:
        for record in records:
            info = record.info
            version = f" {info.version}" if info.version else ""
            dist = f" ({info.distribution}{version})" if info.distribution else ""
            click.echo(f"{info.name}{dist} [{info.source}] {record.status}")
            if record.error:
                click.echo(f"    error: {record.error}")
            for contribution in record.contributions:
                lost = (
                    f"  (shadowed by {contribution.shadowed_by})"
                    if contribution.shadowed_by
                    else ""
                )
                click.echo(f"    {contribution.kind} {contribution.name}{lost}")
        stages = manager.governor().stage_names() if records else []
        click.echo("governance pipeline: " + " -> ".join(stages))
    if manager.strict and any(r.status == "failed" for r in records):
        raise click.exceptions.Exit(EXIT_FAILED)
