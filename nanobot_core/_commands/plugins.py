"""``nanobot-core plugins``: every plugin, built-in or external, with what it contributed."""

from __future__ import annotations

from typing import Any

import attrs
import click

from nanobot_core._exit_codes import EXIT_FAILED
from nanobot_core.cli import get_state, workspace_option
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.kernel.records import PluginRecord


@attrs.frozen
class _Pipelines:
    """The governance pipeline and the prompt sections in order, and where each item sits."""

    stages: list[str]
    sections: list[str]
    positions: dict[tuple[str, str], dict[str, Any]]


def _pipelines(manager: PluginManager) -> _Pipelines:
    """The pipeline and sections from one governor and one prompt builder: each warns, as
    it is built, of config naming nothing it has (``[governance.stages.X]``, ``prompt.order``),
    so building it again would say it all again."""
    positions: dict[tuple[str, str], dict[str, Any]] = {}
    governor = manager.governor()
    disabled_stages = set(manager.config.governance.disabled)
    for index, stage in enumerate(governor.stages):
        positions[("stage", stage.name)] = {"phase": stage.phase, "position": index}
    for name in disabled_stages:
        positions.setdefault(("stage", name), {"disabled": True})
    sections = manager.prompt_builder().section_names()
    disabled_sections = set(manager.config.prompt.disabled)
    for index, name in enumerate(sections):
        entry: dict[str, Any] = {"position": index}
        if name in disabled_sections:
            entry["disabled"] = True
        positions[("section", name)] = entry
    return _Pipelines(governor.stage_names(), sections, positions)


def _settled(manager: PluginManager) -> tuple[list[PluginRecord], _Pipelines]:
    """Every record with its contributions, and the pipelines, once no plugin fails any more.

    Building the governor for the positions calls hooks nothing else here calls (the
    token counter, the result store): a plugin failing in one is unregistered and
    every plugin's contributions are collected again, so the records are read again
    and the pipelines built again from what is left.
    """
    while True:
        records = manager.records()
        failed = sum(r.status == "failed" for r in records)
        pipelines = _pipelines(manager)
        if sum(r.status == "failed" for r in records) == failed:
            return records, pipelines


def _row(record: PluginRecord, positions: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    row = record.to_json()
    for contribution in row["contributions"]:
        if "shadowed_by" not in contribution:
            contribution.update(positions.get((contribution["kind"], contribution["name"]), {}))
    return row


@click.command("plugins")
@workspace_option()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def command(workspace: str | None, as_json: bool) -> None:
    """List plugins: source, status, hooks, contributions, and the pipeline order."""
    state = get_state()
    manager = state.plugin_manager(workspace)
    records, pipelines = _settled(manager)
    # Built as `tools`, `call`, `govern` and `run` build it, so that `plugins` says what they
    # say of the tool config (a `tools.disabled` name no tool has). It calls no hook, so no
    # plugin fails here and the records stand; a tool it leaves out is one of their problems.
    manager.tool_registry()
    rows = [_row(record, pipelines.positions) for record in records]
    if as_json:
        state.echo_json(rows)
    else:
        for row in rows:
            version = f" {row['version']}" if row["version"] else ""
            dist = f" ({row['distribution']}{version})" if row["distribution"] else ""
            click.echo(f"{row['name']}{dist} [{row['source']}] {row['status']}")
            if row["error"]:
                click.echo(f"    error: {row['error']}")
            for item in row["contributions"]:
                lost = f"  (shadowed by {item['shadowed_by']})" if "shadowed_by" in item else ""
                click.echo(f"    {item['kind']} {item['name']}{lost}")
            for problem in row["problems"]:
                click.echo(f"    problem: {problem}")
        click.echo("governance pipeline: " + " -> ".join(pipelines.stages))
        click.echo("prompt sections: " + " -> ".join(pipelines.sections))
    if manager.strict and any(r.status == "failed" for r in records):
        raise click.exceptions.Exit(EXIT_FAILED)
