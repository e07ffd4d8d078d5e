"""``nanobot-core tools``: the active tools, exactly as the model will see them."""

from __future__ import annotations

from typing import Any

import click

from nanobot_core.cli import get_state, workspace_option


@click.command("tools")
@workspace_option()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def command(workspace: str | None, as_json: bool) -> None:
    """List the active tools in the order they are sent to the model."""
    state = get_state()
    manager = state.plugin_manager(workspace)
    registry = manager.tool_registry()
    owners = {c.name: c.plugin for c in manager.contributions("tool")}
    rows: list[dict[str, Any]] = []
    for definition in registry.definitions():
        function = definition["function"]
        # The flags as the registry read them (as plugin code) and checked: a flag
        # property is not run again here, where what it raises would end the command.
        flags = registry.flags_of(function["name"])
        plugin = owners[function["name"]]
        rows.append(
            {
                "name": function["name"],
                "description": function["description"],
                "parameters": function["parameters"],
                "plugin": plugin.name,
                "distribution": plugin.distribution,
                "version": plugin.version,
                "read_only": flags["read_only"],
                "exclusive": flags["exclusive"],
                "concurrency_safe": flags["concurrency_safe"],
            }
        )
    if as_json:
        state.echo_json(rows)
        return
    for row in rows:
        shown = [flag for flag in ("read_only", "exclusive", "concurrency_safe") if row[flag]]
        summary = row["description"].strip().splitlines()[0] if row["description"].strip() else ""
        click.echo(f"{row['name']:<20} {row['plugin']:<24} {','.join(shown) or '-':<28} {summary}")
