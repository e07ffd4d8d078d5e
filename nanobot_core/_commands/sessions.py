"""``nanobot-core sessions``: list the sessions of the store; ``sessions show NAME`` prints one.

The store is the one ``[sessions] store`` names (default ``jsonl``, the files
of the workspace). Listing, ``show`` and ``export`` only read: no lease is
taken and nothing is healed, so they are safe to run while ``run`` writes.
Lines that cannot be loaded are reported on stderr (and under ``problems``
with ``--json``). ``sessions export [NAME...] --output PATH`` (``-`` for
stdout) and ``sessions import PATH [--resume]`` (``-`` for stdin) move
sessions between stores, byte for byte. Exit codes: 0 ok, 1 import refused
(a session exists), a store failed (half-way through an import: the error
names the sessions imported) or the export could not be written, 2 an invalid
or unknown session name, a file that is not an export, or an export
``--output`` in the ``jsonl`` store's own folder, the tool-result cache, or over
a config file or a file of the workspace's prompt (refused as every command's
``--output`` is: `nanobot_core.cli.check_output_folder`).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from nanobot_core._exit_codes import EXIT_USAGE
from nanobot_core.cli import (
    STDOUT_OUTPUT,
    check_output_folder,
    get_state,
    output_option,
    read_bounded,
    workspace_option,
    write_output,
)

if TYPE_CHECKING:
    from nanobot_core.sessions import ContainedStore

_PREVIEW_CHARS = 200


# Internal: click's way to print an error and exit 2, raised and handled within the
# command; not public, so outside the tree (the NanobotError it wraps is).
class _InputError(click.ClickException):
    """A bad or unknown session name: printed as ``Error: ...``, exit code 2."""

    exit_code = EXIT_USAGE


@click.group("sessions", invoke_without_command=True)
@workspace_option()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_context
def command(ctx: click.Context, workspace: str | None, as_json: bool) -> None:
    """List sessions: name, messages, size in bytes, last modified (UTC)."""
    # `sessions --workspace W show NAME` works as well as `sessions show NAME --workspace W`.
    ctx.meta["sessions.workspace"] = workspace
    ctx.meta["sessions.json"] = as_json
    if ctx.invoked_subcommand is not None:
        return
    state = get_state()
    from nanobot_core.sessions import closing_store

    store = _store(state.workspace(workspace))
    with closing_store(store):
        infos = store.list_sessions()
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
@workspace_option()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_context
def show(ctx: click.Context, name: str, workspace: str | None, as_json: bool) -> None:
    """Print session NAME: every message, with its bookkeeping under `_meta` in JSON."""
    from nanobot_core.errors import SessionError, SessionNotFoundError
    from nanobot_core.sessions import closing_store, validate_session_name

    state = get_state()
    root = state.workspace(workspace or ctx.meta.get("sessions.workspace"))
    try:
        validate_session_name(name)
    except SessionError as exc:
        raise _InputError(str(exc)) from None
    store = _store(root)
    try:
        with closing_store(store):
            session = store.load(name)
    except SessionNotFoundError as exc:  # bad input; any other SessionError is a store failure
        raise _InputError(str(exc)) from None
    for problem in session.problems:
        click.echo(
            f"warning: {session.location}:{problem.line}: {problem.kind} line skipped: "
            f"{problem.detail}",
            err=True,
        )
    if as_json or ctx.meta.get("sessions.json"):
        state.echo_json(
            {
                "name": session.name,
                "path": session.location,
                "messages": session.records,
                "problems": [problem.to_json() for problem in session.problems],
            }
        )
        return
    for index, record in enumerate(session.records, start=1):
        click.echo(_render(index, record))


@command.command("export")
@click.argument("names", nargs=-1)
@output_option(
    "The export file to write (replaced atomically; - for stdout).", short=True, required=True
)
@workspace_option()
@click.pass_context
def export(ctx: click.Context, names: tuple[str, ...], output: str, workspace: str | None) -> None:
    """Write sessions NAME... (default: all) of the store to an export file."""
    from nanobot_core.errors import SessionError, SessionNotFoundError
    from nanobot_core.session_transfer import ExportStream
    from nanobot_core.sessions import closing_store, validate_session_name

    state = get_state()
    root = state.workspace(workspace or ctx.meta.get("sessions.workspace"))
    try:
        for name in names:
            validate_session_name(name)
    except SessionError as exc:
        raise _InputError(str(exc)) from None
    state.plugin_manager(root)  # its plugins first: a file one keeps is refused by the check
    check_output_folder(output)
    store = _store(root)
    try:
        with closing_store(store):
            # One session read at a time, as it is written: memory does not grow with the
            # store. A reader of stdout that goes away ends the command as click ends any.
            stream = ExportStream(store, names)
            write_output(output, stream)
    except SessionNotFoundError as exc:  # bad input; any other SessionError is a store failure
        raise _InputError(str(exc)) from None
    for left_out in stream.problems:
        # Named as `sessions show` names it: the file and line, to open in an editor.
        problem = left_out.problem
        click.echo(
            f"warning: {left_out.location}:{problem.line}: {problem.kind} line not exported "
            f"(session {left_out.session!r}): {problem.detail}",
            err=True,
        )
    where = "stdout" if output == STDOUT_OUTPUT else output
    click.echo(
        f"exported {stream.sessions} session(s), {stream.lines} line(s) to {where}", err=True
    )


@command.command("import")
# A plain click.Path: exists=True would call a symbolic link loop missing; opening the
# file below says what is wrong with it ("cannot read PATH: REASON"), as govern does.
@click.argument("path", type=click.Path())
@workspace_option()
@click.option(
    "--resume",
    is_flag=True,
    help="Finish an import of PATH that stopped half-way: a session the store holds with "
    "exactly the file's lines is left as it is, one with no line is filled.",
)
@click.pass_context
def import_(ctx: click.Context, path: str, workspace: str | None, resume: bool) -> None:
    """Write every session of the export file PATH (- for stdin) into the store (none may
    exist there)."""
    from pathlib import Path

    from nanobot_core.errors import SessionError
    from nanobot_core.session_transfer import import_sessions, read_export
    from nanobot_core.sessions import closing_store

    state = get_state()
    root = state.workspace(workspace or ctx.meta.get("sessions.workspace"))
    # `-` is stdin, as for every other input, so `export -o - | import -` moves sessions
    # between machines; the whole export is still read and checked before any write.
    source = "stdin" if path == "-" else path
    try:
        if path == "-":
            data = read_bounded(sys.stdin.buffer)
        else:
            with Path(path).open("rb") as handle:
                data = read_bounded(handle)
        sessions = read_export(data, source)
    except OSError as exc:
        raise _InputError(f"cannot read {source}: {exc.strerror or exc}") from None
    except SessionError as exc:
        raise _InputError(str(exc)) from None
    store = _store(root)
    with closing_store(store):
        done = import_sessions(
            store, sessions, wait=state.config.sessions.lease_wait, resume=resume
        )
    lines = sum(len(s.lines) for s in done.imported)
    already = f"; {len(done.already)} already there, left as they are" if resume else ""
    click.echo(
        f"imported {len(done.imported)} session(s), {lines} line(s) into the {store.name} "
        f"store{already}",
        err=True,
    )


def _store(root: Any) -> ContainedStore:
    """The session store ``[sessions] store`` names, from the plugins of workspace `root`."""
    from nanobot_core.sessions import select_session_store

    return select_session_store(get_state().plugin_manager(root))


def _render(index: int, message: dict[str, Any]) -> str:
    """One message as a few readable lines; a bookkeeping record as its kind and what it holds."""
    meta = message.get("_meta")
    if "role" not in message and isinstance(meta, dict):
        details = {key: value for key, value in meta.items() if key != "kind"}
        summary = _preview(json.dumps(details, ensure_ascii=False)) if details else ""
        return f"[{index}] ({meta.get('kind', '?')} record) {summary}".rstrip()
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
