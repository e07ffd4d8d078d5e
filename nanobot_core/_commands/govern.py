"""``nanobot-core govern``: heal and budget a history file, and say what each stage did.

The input (a JSONL file, a JSON array file, or ``-`` for stdin) is never
written. A session of ``run`` is governed from its newest governance record,
as its next run governs it. The budget counts the tool definitions of the installed tools; the
governed messages go to ``--output`` (JSONL, written atomically; ``-`` for
stdout, the summary then going to stderr) and/or to stdout with ``--json``.
Exit 0 once governed (even when lines were left out), 1 when ``--output``
cannot be written after the work (a full disk), 2 when the input cannot be
read or does not parse (the message names the line and column), or an option
is wrong (a missing --workspace or --output folder, an --output in a sessions
folder or the tool-result cache, or over a config file or a file of the
workspace's prompt: `nanobot_core.cli.check_output_folder`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from nanobot_core.governance.continuity import GovernanceState

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
from nanobot_core.config import MIN_TOOL_RESULT_CHARS

# Detail lines shown per stage in the readable summary (--json has them all).
SHOWN_DETAILS = 8


def _read_input(session: str) -> bytes:
    try:
        if session == "-":
            return read_bounded(sys.stdin.buffer)
        with open(session, "rb") as handle:
            return read_bounded(handle)
    except OSError as exc:
        source = "stdin" if session == "-" else session
        click.echo(f"Error: cannot read {source}: {exc.strerror or exc}", err=True)
        raise click.exceptions.Exit(EXIT_USAGE) from exc


def _same_file(output: Path, session: str) -> bool:
    if session == "-" or str(output) == STDOUT_OUTPUT:
        return False
    try:  # an --output that cannot be looked at is no input file: writing it reports why
        return output.exists() and output.samefile(session)
    except OSError:
        return False


def _load_entry(problems: list[str], count: int, shape: str) -> dict[str, Any]:
    """The report entry for reading the file: what was read, and every line left out."""
    return {
        "stage": "load",
        "changed": bool(problems),
        "details": [f"read {count} entries ({shape})", *problems],
        "tokens_before": None,
        "tokens_after": None,
    }


def _session_state(
    entries: list[Any], lines: list[int], source: str
) -> tuple[list[Any], GovernanceState | None, list[str]]:
    """The history to govern, the governance state to continue from, and what was done.

    `lines` are the line of the file `source` each entry is on (none for a JSON document,
    whose entries are named by their place in it): a record is named ``SOURCE:LINE``, the
    line a run's warning names and an editor opens.

    A session of ``run`` holds record lines (only ``_meta``: what each call cost,
    the governor's decisions), which are no messages: they are set aside, so that
    ``messages[N]`` and the state count the messages alone, as a run counts them.
    The newest governance record is restored, as the session's next run restores
    it, so that the report is what that run would send (the cut sent before kept);
    a damaged one newer than it, or one a newer nanobot-core wrote, is passed over, as the
    run passes it over, and named.
    """
    from nanobot_core.governance.continuity import RECORD_VERSION, newest_state
    from nanobot_core.sessions import is_meta_record

    messages = [e for e in entries if not (isinstance(e, dict) and is_meta_record(e))]
    notes = []
    if len(messages) < len(entries):
        notes.append(
            f"set aside {len(entries) - len(messages)} session record line(s) (only _meta): "
            "messages[N] below counts the messages alone"
        )

    def where(number: int) -> str:
        if lines:
            return f"{source}:{number}"
        return f"{source}, entry {number} of the {len(entries)} read"

    numbered = list(zip(lines, entries, strict=True) if lines else enumerate(entries, start=1))
    restored, line, passed = newest_state(reversed(numbered))
    for record in passed:
        if record.newer_version is not None:
            notes.append(
                f"{where(record.line)}: passed over a governance record written by a newer "
                f"nanobot-core: version {record.newer_version}, this one reads up to version "
                f"{RECORD_VERSION}"
            )
        else:
            notes.append(
                f"{where(record.line)}: passed over a damaged governance record: {record.problem}"
            )
    if restored is not None and line is not None:
        cut = f"the history from messages[{restored.start}]"
        if restored.steps_from is not None:
            cut += f", its steps before messages[{restored.steps_from}] left out"
        notes.append(
            f"{where(line)}: restored the newest governance record: {cut}, "
            f"{len(restored.compacted)} tool result(s) compacted"
        )
    return messages, restored, notes


def _state_json(state: GovernanceState) -> dict[str, Any]:
    """The decisions a run would record after this call (a governance record's fields)."""
    fields: dict[str, Any] = state.to_record()["_meta"]
    return {key: value for key, value in fields.items() if key not in ("kind", "version")}


def _echo_summary(
    report: list[dict[str, Any]], before: int, result: Any, source: str, *, err: bool = False
) -> None:
    width = max(len(entry["stage"]) for entry in report)
    for entry in report:
        state = "changed" if entry["changed"] else "unchanged"
        tokens = ""
        if entry["changed"] and entry["tokens_before"] is not None:
            tokens = f"  tokens {entry['tokens_before']} -> {entry['tokens_after']}"
        click.echo(f"{entry['stage']:<{width}}  {state}{tokens}", err=err)
        details = entry["details"]
        for line in details[:SHOWN_DETAILS]:
            click.echo(f"    - {line}", err=err)
        if len(details) > SHOWN_DETAILS:
            click.echo(f"    ... and {len(details) - SHOWN_DETAILS} more (see --json)", err=err)
    verdict = "fits" if result.fits else "does NOT fit"
    click.echo(
        f"{source}: {before} -> {len(result.messages)} messages; the request takes "
        f"{result.tokens} of {result.budget} tokens ({verdict})",
        err=err,
    )


@click.command("govern")
@click.argument("session")
@click.option("--context-window", type=click.IntRange(min=1), help="Model context window (tokens).")
@click.option("--max-output", type=click.IntRange(min=0), help="Tokens reserved for the reply.")
@click.option(
    "--max-tool-result-chars",
    # No click range: the config's own check refuses a value below its minimum, saying why.
    type=int,
    help=(
        "Tool results longer than this are offloaded to the workspace cache "
        f"(at least {MIN_TOOL_RESULT_CHARS})."
    ),
)
@workspace_option(
    "Workspace for the offload cache and the installed tools (must exist; default: cwd)."
)
@output_option("Write the governed messages here as JSONL (atomically; - for stdout).")
@click.option("--json", "as_json", is_flag=True, help="Print {messages, report, ...} as JSON.")
def command(
    session: str,
    context_window: int | None,
    max_output: int | None,
    max_tool_result_chars: int | None,
    workspace: str | None,
    output: str | None,
    as_json: bool,
) -> None:
    """Heal and budget SESSION (a JSONL file, a JSON array file, or - for stdin).

    Prints what every stage did. The input is never written; offloaded tool
    results go to <workspace>/.nanobot/cache/tool-results/.
    """
    from nanobot_core.governance.history_file import HistoryFormatError, parse_history

    to_stdout = output == STDOUT_OUTPUT
    if to_stdout and as_json:
        raise click.UsageError(
            "--output - and --json both write to stdout: give --output a file, or drop one"
        )
    state = get_state()
    flags = {
        "context_window": context_window,
        "max_output": max_output,
        "max_tool_result_chars": max_tool_result_chars,
    }
    overrides = {key: value for key, value in flags.items() if value is not None}
    if overrides:
        state.set_overrides({"governance": overrides})
    if output is not None:
        # Its plugins first: a file one declares it keeps (the prompt's, a plugin's config)
        # is refused by the check, before any stage runs, as the core's own files are.
        state.plugin_manager(workspace)
        check_output_folder(output)
        if _same_file(Path(output), session):
            raise click.UsageError(
                "--output must not be the input file: the input is never written"
            )
    source = "stdin" if session == "-" else session
    try:
        loaded = parse_history(_read_input(session))
    except HistoryFormatError as exc:
        click.echo(f"Error: {source}: {exc}", err=True)
        raise click.exceptions.Exit(EXIT_USAGE) from None
    manager = state.plugin_manager(workspace)
    tools = manager.tool_registry().definitions()
    messages, restored, notes = _session_state(loaded.messages, loaded.lines, source)
    governor = manager.governor()
    governor.restore(restored)
    result = governor.govern(messages, tools=tools)
    load = _load_entry(loaded.problems(source), len(loaded.messages), loaded.shape)
    load["details"] += notes
    report = [load, *result.report.to_json()]
    if output is not None:
        write_output(output, result.messages)
    if not result.fits:
        from nanobot_core.runner import RequestTooLarge

        click.echo(f"nanobot: {RequestTooLarge(result.tokens, result.budget).describe()}", err=True)
    if as_json:
        state.echo_json(
            {
                "messages": result.messages,
                "report": report,
                "tokens": result.tokens,
                "budget": result.budget,
                "fits": result.fits,
                "prefix": result.prefix.to_json(),
                "state": _state_json(result.state),
            }
        )
        return
    _echo_summary(report, len(loaded.messages), result, source, err=to_stdout)
    if to_stdout:
        click.echo("governed messages written to stdout", err=True)
    elif output is not None:
        click.echo(f"governed messages written to {output}")
    else:
        click.echo("use --output PATH or --json to get the governed messages")
