"""``nanobot-core prompt``: the system prompt that would be sent, section by section."""

from __future__ import annotations

import click

from nanobot_core.cli import get_state, workspace_option


@click.command("prompt")
@workspace_option()
@click.option("--channel", default=None, help="Channel name given to the sections.")
@click.option(
    "--session",
    default=None,
    help="Session name given to the sections (default: runner.session from config).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help=(
        'Print {"prompt", "sections": '
        '[{"name", "plugin", "version", "chars", "skipped", "reason"}]}.'
    ),
)
def command(workspace: str | None, channel: str | None, session: str | None, as_json: bool) -> None:
    """Print the system prompt that would be sent to the model."""
    from nanobot_core.prompt import SectionContext

    state = get_state()
    root = state.workspace(workspace)
    builder = state.plugin_manager(root).prompt_builder()
    ctx = SectionContext(
        workspace=root,
        channel=channel,
        session=session if session is not None else state.config.runner.session,
        config=state.config,
    )
    built = builder.build(ctx)
    if as_json:
        state.echo_json(
            {
                "prompt": built.text,
                "sections": [report.to_json() for report in built.sections],
            }
        )
        return
    click.echo(built.text)
