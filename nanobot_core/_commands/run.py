"""``nanobot-core run "PROMPT"``: one agent turn against an OpenAI-compatible endpoint.

The final answer goes to stdout (``--json``: the whole turn); progress (the
time spent waiting for the model, tools running and their times, provider
retries) goes to stderr. Exit codes: 0 the model answered, 1 the provider
failed (the server's message is shown), the turn hit ``--max-iterations``, or
the session is held by another writer (its lease; ``[sessions] lease_wait``
seconds are waited first), 2 bad input (an empty prompt, an invalid session
name, an unknown provider, a malformed config, a base URL that is not http(s),
a remote server and no API key).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from nanobot_core._exit_codes import EXIT_FAILED
from nanobot_core.cli import get_state, read_stdin_text, workspace_option


def _flag_overrides(
    provider: str | None,
    base_url: str | None,
    model: str | None,
    session: str | None,
    max_iterations: int | None,
) -> dict[str, Any]:
    """The flags given on the command line, as the highest-precedence config layer."""
    provider_keys = {"name": provider, "base_url": base_url, "model": model}
    runner_keys = {"session": session, "max_iterations": max_iterations}
    overrides: dict[str, Any] = {}
    if any(v is not None for v in provider_keys.values()):
        overrides["provider"] = {k: v for k, v in provider_keys.items() if v is not None}
    if any(v is not None for v in runner_keys.values()):
        overrides["runner"] = {k: v for k, v in runner_keys.items() if v is not None}
    return overrides


@click.command("run")
@click.argument("prompt")
@click.option("--provider", help="Provider name (default: provider.name, 'openai').")
@click.option("--base-url", help="Base URL of the chat-completions API (NANOBOT_BASE_URL).")
@click.option("--model", help="Model name (NANOBOT_MODEL).")
@click.option("--session", help="Session name: letters, digits, '.', '_', '-' (default 'default').")
@workspace_option()
@click.option("--max-iterations", type=click.IntRange(min=1), help="Most model calls in this turn.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole turn as JSON.")
def command(
    prompt: str,
    provider: str | None,
    base_url: str | None,
    model: str | None,
    session: str | None,
    workspace: str | None,
    max_iterations: int | None,
    as_json: bool,
) -> None:
    """Run one agent turn for PROMPT ('-' reads it from stdin) and print the answer."""
    from nanobot_core._commands._waiting import WaitDisplay
    from nanobot_core.errors import SessionError
    from nanobot_core.runner import IterationLimitReached, Runner
    from nanobot_core.sessions import (
        closing_store,
        open_session,
        select_session_store,
        validate_session_name,
    )

    text = read_stdin_text("PROMPT") if prompt == "-" else prompt
    if not text.strip():
        raise click.BadParameter("the prompt is empty", param_hint="PROMPT")
    if session is not None:  # a name from a file or the environment is checked at load
        try:
            validate_session_name(session)
        except SessionError as exc:
            raise click.BadParameter(str(exc), param_hint="--session") from None
    state = get_state()
    state.set_overrides(_flag_overrides(provider, base_url, model, session, max_iterations))
    config = state.config
    root = state.workspace(workspace)
    manager = state.plugin_manager(root)
    display = WaitDisplay(sys.stderr)

    def progress(event: Any) -> None:
        if not isinstance(event, IterationLimitReached):  # said once, as the error below
            display(event)

    # Every part is built before the session is opened: a config that fails them
    # (a provider, its base URL, a stage's options) leaves no session file or lock.
    build = Runner.prepare_from_plugins(manager, progress=progress)
    store = select_session_store(manager)
    # SessionLockedError and ProviderError propagate: the CLI prints them and exits 1.
    try:
        with (
            closing_store(store),
            open_session(store, config.runner.session, wait=config.sessions.lease_wait) as opened,
        ):
            runner = build(opened)
            result = runner.run_turn(text)
    finally:
        display.stop()
    if as_json:
        state.echo_json(result.to_json())
    elif not result.max_iterations_reached:
        click.echo(result.answer)
    if result.max_iterations_reached:
        limit = IterationLimitReached(runner.max_iterations).describe()
        click.echo(f"Error: {limit}", err=True)
        raise click.exceptions.Exit(EXIT_FAILED)
