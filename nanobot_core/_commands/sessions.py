"""``nanobot-core sessions``: list the sessions of a workspace; ``sessions show NAME`` prints one.

Both only read: no lock is taken and nothing is healed, so they are safe to
run while ``run`` writes. Lines that cannot be loaded are reported on stderr
(and under ``problems`` with ``--json``). Exit codes: 0 ok, 2 an invalid or
unknown session name.
"""

from __future__ import annotations

import json
from typing import Any

import click

from nanobot_core.cli import EXIT_USAGE, get_state

_PREVIEW_CHARS = 200


class _InputError(click.ClickException):
    """A bad or unknown session name: printed as ``Error: ...``, exit code 2."""

    exit_code = EXIT_USAGE


@click.group("sessions", invoke_without_command=True)
@click.option("--workspace", type=click.Path(file_okay=False), help="Workspace directory.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_context
def command(ctx: click.Context, workspace: str | None, as_json: bool) -> None:
    """List sessions: name, messages, size in bytes, last modified (UTC)."""
    # `sessions --workspace W show NAME` works as well as `sessions show NAME --workspace W`.
    ctx.meta["sessions.workspace"] = workspace
    ctx.meta["sessions.json"] = as_json
    if ctx.invoked_subcommand is not None:
        return
    from nanobot_core.sessions import SessionStore

    state = get_state()
    infos = SessionStore(state.workspace(workspace)).list_sessions()
    if as_json:
        state.echo_json([info.to_json() for info in infos])
        return
    if not infos:
        click.echo("no sessions", err=True)
        return
    click.echo(f"{'NAME':<24} {'MESSAGES':>8} {'SIZE':>10}  MODIFIED")
    for info in infos:
        modified = info.modified.isoformat(timespec="seconds")
        click.echo(f"{info.name:<24} {info.messages:>8} {info.size:>10}  {modified}")


@command.command("show")
@click.argument("name")
@click.option("--workspace", type=click.Path(file_okay=False), help="Workspace directory.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_context
def show(ctx: click.Context, name: str, workspace: str | None, as_json: bool) -> None:
    """Print session NAME: every message, with its bookkeeping under `_meta` in JSON."""
    from nanobot_core.errors import SessionError
    from nanobot_core.sessions import SessionStore

    state = get_state()
    root = state.workspace(workspace or ctx.meta.get("sessions.workspace"))
    try:
        session = SessionStore(root).read(name)
    except SessionError as exc:
        raise _InputError(str(exc)) from None
    for problem in session.problems:
        click.echo(
            f"warning: {session.path}:{problem.line}: {problem.kind} line skipped: "
            f"{problem.detail}",
            err=True,
        )
    if as_json or ctx.meta.get("sessions.json"):
        state.echo_json(
            {
                "name": session.name,
                "path": str(session.path),
                "messages": session.records,
                "problems": [problem.to_json() for problem in session.problems],
            }
        )
        return
    for index, record in enumerate(session.records, start=1):
        click.echo(_render(index, record))


def _render(index: int, message: dict[str, Any]) -> str:
    """One message as a few readable lines."""
    role = message.get("role", "?")
    head = f"[{index}] {role}"
    if role == "tool":
        head += f" ({message.get('name') or '?'} {message.get('tool_call_id', '?')})"
    lines = [head]
    content = message.get("content")
    if isinstance(content, str) and content:
        lines.append("    " + _preview(content).replace("\n", "\n    "))
    elif content not in (None, ""):
        lines.append("    " + _preview(json.dumps(content, ensure_ascii=False)))
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        call = call if isinstance(call, dict) else {}
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        arguments = _preview(str(function.get("arguments")))
        lines.append(f"    -> {function.get('name')}({arguments}) [{call.get('id')}]")
    return "\n".join(lines)


def _preview(text: str) -> str:
    if len(text) <= _PREVIEW_CHARS:
        return text
    return text[:_PREVIEW_CHARS] + f"... ({len(text)} characters)"
