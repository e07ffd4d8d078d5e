"""``nanobot-core call``: call one tool by hand, through the same path a model's call takes."""

from __future__ import annotations

import click

from nanobot_core._exit_codes import EXIT_FAILED, EXIT_USAGE
from nanobot_core.cli import get_state, read_stdin_text, workspace_option


@click.command("call")
@click.argument("tool_name", metavar="TOOL")
@click.argument("raw_arguments", metavar="[ARGS]", required=False)
@workspace_option()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def command(
    tool_name: str, raw_arguments: str | None, workspace: str | None, as_json: bool
) -> None:
    """Call TOOL with ARGS, the argument text exactly as a model would send it ('-' reads stdin).

    The arguments are parsed, repaired, validated and cast as for a model's
    call, and the plugins' tool-call hooks run. Exit codes: 0 the tool
    succeeded, 1 it returned an error, 2 the call itself was invalid (unknown
    tool, arguments that are not a valid object).
    """
    from nanobot_core.tools.executor import Executor, ToolCallRequest, run_calls

    if raw_arguments == "-":
        raw_arguments = read_stdin_text("ARGS")
    state = get_state()
    manager = state.plugin_manager(workspace)
    executor = Executor(
        manager.tool_registry(),
        default_timeout=state.config.tools.timeout,
        hooks=manager.tool_call_hooks(),
    )
    request = ToolCallRequest(id="call-1", name=tool_name, arguments=raw_arguments)
    outcome = run_calls(executor.run([request]))[0]
    if as_json:
        from nanobot_core._json_boundary import viewable

        state.echo_json(
            {
                "tool": tool_name,
                # As a tool's own check returned them, they may hold what JSON cannot.
                "arguments": viewable(outcome.arguments),
                "ok": not outcome.is_error,
                "result": str(outcome.result),
                "repairs": outcome.repairs,
            }
        )
    else:
        for repair in outcome.repairs:
            click.echo(f"note: {repair}", err=True)
        click.echo(str(outcome.result))
    if outcome.is_error:
        # The executor says whether the call itself was refused: preparing it again here
        # would run the tool's own argument check twice (a check may cost, or count).
        raise click.exceptions.Exit(EXIT_USAGE if outcome.invalid else EXIT_FAILED)
