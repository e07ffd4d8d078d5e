"""The ``nanobot-core`` command line.

Readable output by default, ``--json`` for scripts; logs go to stderr only.
Global options (``--strict``, ``--config PATH``, ``--log-format``,
``--log-level``, ``--version``) are accepted before or after the subcommand.
Exit codes: 0 ok, 1 the operation failed, 2 usage or input error.
Subcommands live in ``nanobot_core._commands`` and are imported only when run.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import stat
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

import click

from nanobot_core import _stop_signals
from nanobot_core._exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from nanobot_core._reading import read_up_to

if TYPE_CHECKING:
    from nanobot_core._stall import StalledCall
    from nanobot_core.config import Config
    from nanobot_core.kernel.manager import PluginManager

__all__ = [
    "MAX_INPUT_BYTES",
    "STDOUT_OUTPUT",
    "CliState",
    "check_output_folder",
    "directory_problem",
    "get_state",
    "main",
    "output_option",
    "read_bounded",
    "read_stdin_text",
    "workspace_option",
    "write_output",
]


# Subcommand name -> module in nanobot_core._commands exposing `command`.
COMMANDS: dict[str, str] = {
    "call": "call",
    "govern": "govern",
    "init": "init",
    "new-plugin": "new_plugin",
    "plugins": "plugins",
    "prompt": "prompt",
    "run": "run",
    "sessions": "sessions",
    "tools": "tools",
}

#: The most read of one input (a history, an export file, a prompt or arguments on
#: stdin): a source that goes on past it (/dev/zero, ``yes |``) is no input, and
#: reading it whole would fill the memory.
MAX_INPUT_BYTES = 1 << 30

_F = TypeVar("_F", bound=Callable[..., Any])

_FLAG_OPTIONS = {"--strict", "--version"}


def workspace_option(
    help: str = "Workspace directory (must exist; default: the working directory).",
) -> Callable[[_F], _F]:
    """The ``--workspace`` option every command shares; `CliState.workspace` checks it."""
    # No file_okay=False: click would refuse a file in its own words ("Directory 'x' is
    # a file."), unlike every other unusable workspace, which CliState.workspace reports.
    return click.option("--workspace", type=click.Path(), help=help)


_VALUE_OPTIONS = {"--config", "--log-format", "--log-level"}


#: The ``--output`` that means standard output, as ``-`` means stdin for an input.
STDOUT_OUTPUT = "-"


def output_option(help: str, *, short: bool = False, required: bool = False) -> Callable[[_F], _F]:
    """The ``--output`` option of every command writing a file; `check_output_folder` checks it.

    ``-`` is standard output (`write_output` writes there): say so in `help`.
    """
    # A plain click.Path: dir_okay=False and writable=True would refuse in click's own
    # words ("File 'x' is a directory.", "... is not writable."), and only some of
    # what cannot be written; check_output_folder says all of it, the same everywhere.
    names = ("--output", "-o") if short else ("--output",)
    return click.option(*names, required=required, type=click.Path(), help=help)


#: Why an ``--output`` is replaced only where its folder can be written.
_ATOMIC_WHY = "the output is replaced atomically, by a new file made in that folder"


def check_output_folder(output: str) -> None:
    """Refuse an ``--output`` that cannot be written before any work is done (exit 2).

    Its folder must be a directory. The path is written as `write_atomic` writes,
    through symbolic links: a link that loops is refused, and so is a link to
    nothing whose file would go in a folder that is not there. A directory is
    refused, and so is a file that is not writable. A regular file (or a new one)
    is replaced by a new file made beside it, so the folder it is in, the one its
    link points into, must be writable; a device or a pipe is written into.
    ``-`` (standard output) is always accepted. A file nanobot-core keeps is refused
    (`_kept_file_problem`): one in a ``jsonl`` store's sessions folder, or a config file,
    or one a loaded plugin declares. Load the command's plugins
    (`CliState.plugin_manager`) before calling this.
    """
    if output == STDOUT_OUTPUT:
        return
    kept = _kept_file_problem(output)
    if kept is not None:
        raise _output_error(kept)
    path = Path(output)
    folder = path.parent
    problem = directory_problem(folder)
    if problem is not None:
        raise _output_error(f"the folder {folder} {problem}")
    try:
        # Through links, as the write goes; the text as given, since Path drops a
        # trailing slash, which asks for a folder (as in a shell redirection).
        status = os.stat(output)
    except FileNotFoundError:
        if output.endswith(("/", os.sep)):
            raise _output_error(
                f"{output} names a folder (it ends with a slash), and the output is a file"
            ) from None
        # A new file, or a link to nothing, which the write creates the file of (as a
        # shell redirection does): that file's folder must be there.
        target = Path(os.path.realpath(path))
        problem = directory_problem(target.parent)
        if problem is not None:
            raise _output_error(
                f"{output} links to {target}, and the folder {target.parent} {problem}"
            ) from None
    except OSError as exc:  # a link loop, a name too long
        raise _output_error(f"{output} cannot be used: {_reason(exc)}") from None
    else:
        if stat.S_ISDIR(status.st_mode):
            raise _output_error(f"{output} is a directory")
        if not os.access(path, os.W_OK):
            if path.is_symlink():
                target = Path(os.path.realpath(path))
                raise _output_error(f"{output} links to {target}, which is not writable")
            raise _output_error(f"{output} is not writable")
        if not stat.S_ISREG(status.st_mode):
            return  # a device or a pipe: written into, no new file beside it
        target = Path(os.path.realpath(path))
    if not os.access(target.parent, os.W_OK | os.X_OK):
        where = (
            f"{output} links to {target}, and the folder {target.parent}"
            if path.is_symlink()
            else f"the folder {folder}"
        )
        raise _output_error(f"{where} is not writable: {_ATOMIC_WHY}")


#: The folder of a workspace that holds the ``jsonl`` store's sessions (`sessions_dir`),
#: named here so that the check of every ``--output`` imports no session machinery.
_SESSIONS_FOLDER = (".nanobot", "sessions")

#: The folder of a workspace that holds the default store's offloaded tool results
#: (`nanobot_core.governance.store.CACHE_DIR`), named here for the same reason.
_CACHE_FOLDER = (".nanobot", "cache", "tool-results")

#: The files of a workspace its system prompt is made of
#: (`nanobot_core.prompt.workspace_files.TEMPLATE_FILES`), and where its skills are
#: (``skills/<name>/SKILL.md``, `nanobot_core.prompt.skills`): named here, so that the
#: check of every ``--output`` imports no prompt machinery.
_PROMPT_FILES = ("AGENTS.md", "SOUL.md", "USER.md", "memory/MEMORY.md")
_SKILLS_FOLDER = "skills"
_SKILL_FILE = "SKILL.md"


def _kept_file_problem(output: str) -> str | None:
    """Why ``--output`` `output` must not be written, for a message naming it; None when it may.

    The one rule of every command's ``--output``, checked by `check_output_folder` before
    any work and by `write_output` again. Refused: a file in a workspace's
    ``.nanobot/sessions/`` folder, whichever workspace and store the command uses, and
    the sessions folder of the working directory or of the command's workspace when it
    is a link elsewhere, written through its target's path (it
    would be read as a new session of the output's lines, or replace a session's file, or
    the lock a ``run`` holds, while it runs); a file in a workspace's tool-result cache
    (``.nanobot/cache/tool-results/``), where it would replace a result a conversation
    points to; a config file this command reads (``--config``, ``nanobot.toml`` or
    ``pyproject.toml`` of the working directory), which the next command could not read;
    and a file the prompt of the working directory or of the command's workspace is made
    of (``AGENTS.md``, ``SOUL.md``, ``USER.md``, ``memory/MEMORY.md``, a skill's
    ``SKILL.md``), which every run would send to the model as the user's rules; and a
    file or a file in a folder a loaded plugin declares it reads or keeps
    (`nanobot_kept_files`: nanobot-mcp's ``.nanobot/mcp.toml``, its cache and logs).
    Looked at as written and through links, as `write_atomic` replaces the file a link
    points to.
    """
    if output == STDOUT_OUTPUT:
        return None
    try:
        written = Path(os.path.abspath(output))
        target = Path(os.path.realpath(output))
    except (OSError, ValueError):  # a path that cannot be looked at: its write says why
        return None
    for folder in dict.fromkeys((target.parent, written.parent)):  # the real one named first
        if _is_sessions_folder(folder) or _is_a_workspace_sessions_folder(folder):
            return (
                f"{output} is in the folder of the jsonl store's sessions ({folder}), where it "
                "would be read as a session, or replace a session's file or lock: write it "
                "elsewhere"
            )
        if _is_cache_folder(folder):
            return (
                f"{output} is in the folder of the tool-result cache ({folder}), where it "
                "would replace a tool result a conversation points to, or be pruned as one: "
                "write it elsewhere"
            )
    for config, named in _config_files():
        if _same_file(target, config):
            return f"{output} is {named}, which this command reads: write it elsewhere"
    prompt_file = _prompt_file(target)
    if prompt_file is not None:
        return (
            f"{output} is the workspace's prompt file {prompt_file}, which every run sends "
            "to the model as the user's rules: write it elsewhere"
        )
    for kept, plugin in _plugin_kept_files():
        if _is_named(target, kept) or _is_named(written, kept):
            return f"{output} is {kept}, which {plugin} reads or keeps: write it elsewhere"
        if _is_in(target, kept) or _is_in(written, kept):
            return f"{output} is in {kept}, where {plugin} keeps its files: write it elsewhere"
    return None


def _plugin_kept_files() -> list[tuple[Path, str]]:
    """The files and folders the plugins of this command declare (`nanobot_kept_files`),
    each with the plugin; only of the plugin managers the command has loaded: a command
    writing an ``--output`` loads its plugins before it checks it (`check_output_folder`),
    so that a file one keeps is refused before any work."""
    state = _running_state()
    if state is None:
        return []
    return [kept for manager in tuple(state._managers.values()) for kept in manager.kept_files()]


def _is_in(path: Path, folder: Path) -> bool:
    """Whether `path` is somewhere below `folder`, by name or as a file system finds it."""
    return any(_is_named(above, folder) for above in path.parents)


def _is_named(path: Path, named: Path) -> bool:
    """Whether `path` is `named`, as a file system that ignores letter case takes it too:
    the same path, the same file (``agents.md`` for ``AGENTS.md`` there), or a name that
    differs from it only in case in its folder (a new ``Agents.md`` would be read as
    ``AGENTS.md`` there). The one rule of every name the ``--output`` check keeps; on a
    file system that tells case apart, the last refuses a name it would not confuse,
    which costs only a name to choose elsewhere."""
    return (
        path == named
        or _same_file(path, named)
        or (
            path.name.casefold() == named.name.casefold()
            and (path.parent == named.parent or _same_file(path.parent, named.parent))
        )
    )


def _is_sessions_folder(folder: Path) -> bool:
    """Whether `folder` is a workspace's ``.nanobot/sessions``, in any letter case a file
    system that ignores case gives it."""
    return _is_named(folder, folder.parent.parent.joinpath(*_SESSIONS_FOLDER))


def _is_cache_folder(folder: Path) -> bool:
    """Whether `folder` is a workspace's ``.nanobot/cache/tool-results``, by name (in any
    letter case a file system that ignores case gives it) or as the cache folder of the
    working directory or of a workspace this command uses, reached by another name."""
    if len(folder.parts) > len(_CACHE_FOLDER) and _is_named(
        folder, folder.parents[len(_CACHE_FOLDER) - 1].joinpath(*_CACHE_FOLDER)
    ):
        return True
    return any(_same_file(folder, root.joinpath(*_CACHE_FOLDER)) for root in _workspaces())


def _workspaces() -> list[Path]:
    """The working directory and every workspace this command uses: whose files no
    ``--output`` may replace."""
    workspaces: list[Path] = []
    with contextlib.suppress(OSError):  # a deleted working directory has no files
        workspaces.append(Path.cwd())
    state = _running_state()
    if state is not None:
        workspaces.extend(state._workspaces_used)
    return list(dict.fromkeys(workspaces))


def _is_a_workspace_sessions_folder(folder: Path) -> bool:
    """Whether `folder` is the sessions folder of the working directory or of a workspace
    this command uses, reached by another name: that folder may be a link elsewhere (to
    shared storage), written through its target's path."""
    return any(_same_file(folder, root.joinpath(*_SESSIONS_FOLDER)) for root in _workspaces())


def _prompt_file(target: Path) -> Path | None:
    """The prompt file of the working directory or of a workspace this command uses that
    an ``--output`` written at `target` (its path through links) would replace or create;
    None when it is none.

    The file itself, or a new one of its name in its folder (a ``memory/MEMORY.md`` not
    written yet, ``memory`` a link too), or a ``SKILL.md`` of any folder in the skills
    folder; a file a prompt file links to is that file. A name is taken as a file system
    that ignores letter case takes it (`_is_named`): ``agents.md`` or a new ``Agents.md``
    is ``AGENTS.md`` where the prompt would read it as that.
    """
    for root in _workspaces():
        for relative in _PROMPT_FILES:
            prompt_file = root / relative
            if _is_named(target, prompt_file):
                return prompt_file
        skills = root / _SKILLS_FOLDER
        if _is_named(target, target.parent / _SKILL_FILE) and _is_named(
            target.parent.parent, skills
        ):
            return skills / target.parent.name / _SKILL_FILE
        with contextlib.suppress(OSError):  # no skills folder (or none to list): no skill
            for entry in os.scandir(skills):
                if _same_file(target, Path(entry.path, _SKILL_FILE)):
                    return Path(entry.path, _SKILL_FILE)
    return None


def _running_state() -> CliState | None:
    """The `CliState` of the command running, if one is (not for a direct call)."""
    context = click.get_current_context(silent=True)
    return context.find_object(CliState) if context is not None else None


#: The config files of the working directory `load_config` reads, when they are there.
_CONFIG_NAMES = ("pyproject.toml", "nanobot.toml")


def _same_file(path: Path, other: Path) -> bool:
    try:
        return os.path.samefile(path, other)
    except (OSError, ValueError):  # either is not there (or cannot be looked at): not the same
        return False


def _config_files() -> list[tuple[Path, str]]:
    """The config files this command reads when they are there (see `load_config`), each
    with how a message names it."""
    files: list[tuple[Path, str]] = []
    try:
        here = Path.cwd()
    except OSError:  # a deleted working directory: no config file is read from it
        pass
    else:
        files += [
            (here / name, f"the working directory's config file {here / name}")
            for name in _CONFIG_NAMES
        ]
    state = _running_state()
    if state is not None and state.config_file is not None:
        files.append((Path(state.config_file), f"the --config file {state.config_file}"))
    return files


def _output_error(message: str) -> click.BadParameter:
    return click.BadParameter(message, param_hint="'--output'")


# Internal: click's way to print an error and exit, as `sessions`' _InputError; not
# public, so outside the error tree.
class _OutputError(click.ClickException):
    """An ``--output`` that passed `check_output_folder` could not be written (exit 1).

    The system failed (a full disk, a folder removed since the check), not the
    command line: printed as ``Error: cannot write --output PATH: REASON``.
    """

    exit_code = EXIT_FAILED


def write_output(output: str, values: Iterable[Any]) -> None:
    """Write `values` as JSON lines to ``--output``: standard output for ``-``, else the file.

    A file is replaced atomically (`nanobot_core._atomic`), after `check_output_folder`
    accepted it; one nanobot-core keeps (`_kept_file_problem`) is refused here again (exit
    2), whoever called; a failure then raises `_OutputError` (exit 1), but a pipe whose reader
    went away ends the command quietly (exit 1), as it does on standard output. Standard output is
    written as the command's other output is: a failure there is the CLI's
    ``cannot write to stdout`` (exit 1); on a terminal, DEL, C1 and the bidirectional
    controls are written as JSON escapes (`nanobot_core._terminal`).
    """
    from nanobot_core.governance.history_file import write_jsonl_atomic

    if output != STDOUT_OUTPUT:
        # Again, however the command came here: a file of nanobot-core's is never written.
        kept = _kept_file_problem(output)
        if kept is not None:
            raise _output_error(kept)
        try:
            write_jsonl_atomic(Path(output), values)
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                # A pipe whose reader went away (``-o /dev/stdout | head``, a named pipe):
                # ended quietly, exit 1, as ``-`` is and as click ends any such command.
                raise
            raise _OutputError(f"cannot write --output {output}: {_reason(exc)}") from None
        return
    from nanobot_core._containment import stdout_failed
    from nanobot_core._jsonl import encode_lines
    from nanobot_core._terminal import escape_json_controls, is_terminal

    # On a terminal, as `CliState.echo_json`: the same values, nothing that drives it.
    # A pipe or a file gets the bytes as they are.
    shown = is_terminal(sys.stdout)
    try:
        sys.stdout.flush()  # what was printed before goes first
        stream = sys.stdout.buffer
        for line in encode_lines(values):
            stream.write(escape_json_controls(line.decode()).encode() if shown else line)
        stream.flush()
    except OSError as exc:
        raise stdout_failed(exc) from None


def directory_problem(path: Path, *, create: bool = False) -> str | None:
    """Why `path` is no usable directory, for a message naming it; None when it is one.

    "does not exist" (None with `create`: the command creates it), "is not a
    directory", or "cannot be used: REASON" for a path that cannot be looked at
    (a symbolic link loop, a name too long, a folder that cannot be searched),
    which `Path.is_dir` and `Path.exists` would call missing.
    """
    try:
        status = path.stat()
    except FileNotFoundError:
        return None if create else "does not exist"
    except OSError as exc:
        return f"cannot be used: {_reason(exc)}"
    return None if stat.S_ISDIR(status.st_mode) else "is not a directory"


def read_bounded(source: BinaryIO) -> bytes:
    """All of `source`; an ``OSError`` (``EFBIG``) once it gives more than `MAX_INPUT_BYTES`."""
    data = read_up_to(source, MAX_INPUT_BYTES)
    if len(data) > MAX_INPUT_BYTES:
        raise OSError(
            errno.EFBIG,
            f"more than {MAX_INPUT_BYTES} bytes, the most read of one input "
            f"(stopped reading there)",
        )
    return data


def read_stdin_text(param_hint: str) -> str:
    """All of stdin as text; a usage error (exit 2) past `MAX_INPUT_BYTES` characters."""
    text: str = read_up_to(sys.stdin, MAX_INPUT_BYTES)  # typeshed's stdin may be Any
    if len(text) > MAX_INPUT_BYTES:
        raise click.BadParameter(
            f"stdin gave more than {MAX_INPUT_BYTES} characters, the most read of one "
            f"input (stopped reading there)",
            param_hint=param_hint,
        )
    return text


def _reason(exc: BaseException) -> str:
    """What went wrong with a path, without repeating the path (the message names it)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def _stop_stalled(call: StalledCall, seconds: float) -> None:
    """End the process: plugin code has held the command past ``plugins.stall_timeout``.

    Called from the stall watch's thread. The held thread cannot be stopped, so the
    process ends as a crash would: what a session store wrote before is kept (its
    writes are crash-safe), what was not written yet is not.
    """
    message = (
        f"Error: {call.plugin} did not return within plugins.stall_timeout "
        f"({seconds:.0f} s; its code is at {call.where}); the command was stopped"
    )
    with contextlib.suppress(Exception):  # no stderr to write to: ending is what counts
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    os._exit(1)


class CliState:
    """What every subcommand shares: global options, the config, the plugin manager."""

    def __init__(
        self,
        *,
        config_file: str | None = None,
        strict: bool = False,
        log_format: str = "console",
    ) -> None:
        self.config_file = config_file
        self.strict = strict
        self.log_format = log_format
        self._overrides: dict[str, Any] = {}
        self._config: Config | None = None
        self._managers: dict[Path, PluginManager] = {}
        #: Every workspace `workspace` gave, whose sessions folder no --output may write in.
        self._workspaces_used: list[Path] = []
        # Every manager this command loaded, for the stall watch (started with the first).
        self._watched: list[PluginManager] = []

    def set_overrides(self, overrides: Mapping[str, Any]) -> None:
        """Add CLI-flag values (a nested mapping), the highest-precedence config layer."""
        from nanobot_core.config import deep_merge

        self._overrides = deep_merge(self._overrides, overrides)
        self._config = None
        self._managers.clear()

    @property
    def config(self) -> Config:
        """The configuration from every source, loaded once."""
        if self._config is None:
            from nanobot_core.config import load_config

            overrides = dict(self._overrides)
            if self.strict:
                overrides.setdefault("plugins", {})
                overrides["plugins"] = {**overrides["plugins"], "strict": True}
            self._config = load_config(config_file=self.config_file, overrides=overrides)
        return self._config

    def workspace(self, path: str | Path | None = None, *, create: bool = False) -> Path:
        """The workspace directory: the given path, else the working directory.

        The one workspace rule of the CLI: a ``--workspace`` that is not an existing
        directory is a usage error (exit 2), except where the command creates it
        (`create`, only ``init``).
        """
        try:
            # realpath, not Path.resolve: on a symbolic link loop resolve raises a
            # RuntimeError on some Pythons and passes it over on others; the loop is
            # then the ELOOP of `directory_problem`, on every Python alike.
            root = Path(os.path.realpath(path)) if path is not None else Path.cwd().resolve()
            what = directory_problem(root, create=create)
        except OSError as exc:  # a deleted working directory
            what = f"cannot be used: {_reason(exc)}"
        if what is None:
            self._workspaces_used.append(root)
            return root
        shown = path if path is not None else "the working directory"
        raise click.BadParameter(f"{shown} {what}", param_hint="'--workspace'")

    def plugin_manager(self, workspace: str | Path | None = None) -> PluginManager:
        """A loaded plugin manager for `workspace` (one per workspace per process)."""
        from nanobot_core.kernel.manager import PluginManager

        root = self.workspace(workspace)
        if root not in self._managers:
            # The config `load_config` read and checked: the manager does not check it again.
            manager = PluginManager._of_loaded(self.config, workspace=root)
            self._watch_stalls(manager)
            self._managers[root] = manager.load()
        return self._managers[root]

    def _watch_stalls(self, manager: PluginManager) -> None:
        """Watch the plugin code of `manager` for stalls (see `_stall`) until the command ends."""
        from nanobot_core._stall import StallWatch, watch_threads_left

        self._watched.append(manager)
        context = click.get_current_context(silent=True)
        plugins = self.config.plugins
        if len(self._watched) > 1 or context is None:
            return
        watched = self._watched
        watch = StallWatch(
            plugins.stall_warning,
            lambda: [record for m in tuple(watched) for record in m.records_so_far()],
            limit=plugins.stall_timeout,
            at_limit=_stop_stalled,
        )
        context.find_root().call_on_close(watch.stop)
        if _ProgramEnd.installed:  # the program: its process waits for those threads at exit
            context.find_root().call_on_close(
                lambda: watch_threads_left(
                    plugins.stall_warning,
                    lambda: [record for m in tuple(watched) for record in m.records_so_far()],
                )
            )
        watch.start()

    def echo_json(self, value: Any) -> None:
        """Print `value` on stdout as strict JSON (no NaN, no lone surrogate: see the boundary).

        On a terminal, DEL, C1 and the bidirectional controls, which JSON leaves raw,
        are written as JSON escapes: the same value, nothing that drives the terminal.
        """
        from nanobot_core._json_boundary import dumps
        from nanobot_core._terminal import escape_json_controls, is_terminal, verbatim

        text = dumps(value, indent=2)
        if is_terminal(sys.stdout):
            text = escape_json_controls(text)
        with verbatim():  # JSON's own escapes (a backslash before x1b) stay as they are
            click.echo(text)


def get_state() -> CliState:
    """The `CliState` of the running command."""
    state = click.get_current_context().find_object(CliState)
    if state is None:  # a command invoked on its own, outside the group (tests, embedding)
        state = CliState()
        click.get_current_context().obj = state
    return state


class LazyGroup(click.Group):
    """A group whose subcommands are imported only when they are used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module_name = COMMANDS.get(cmd_name)
        if module_name is None:
            return None
        module = importlib.import_module(f"nanobot_core._commands.{module_name}")
        command: click.Command = module.command
        return command


def _version() -> str:
    from nanobot_core.kernel.records import core_version

    return core_version()


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"nanobot-core {_version()}")
        ctx.exit(EXIT_OK)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--strict", is_flag=True, help="Any plugin failure is fatal (NANOBOT_STRICT_PLUGINS=1)."
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    help="A TOML config file (between the environment and nanobot.toml in precedence).",
)
@click.option(
    "--log-format",
    type=click.Choice(["console", "json"]),
    default="console",
    show_default=True,
    help="How log lines on stderr are rendered.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="warning",
    show_default=True,
    help="The lowest level logged to stderr.",
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Print the version and exit.",
)
@click.pass_context
def cli(
    ctx: click.Context, strict: bool, config_file: str | None, log_format: str, log_level: str
) -> None:
    """nanobot-core: tools, context governance and the system prompt of an LLM agent."""
    from nanobot_core._logging import configure_logging

    configure_logging(log_format=log_format, level=log_level)
    ctx.obj = CliState(config_file=config_file, strict=strict, log_format=log_format)


def hoist_global_options(argv: Sequence[str]) -> list[str]:
    """Move global options written after the subcommand to the front, so both places work."""
    front: list[str] = []
    rest: list[str] = []
    index = 0
    seen_command = False
    while index < len(argv):
        token = argv[index]
        if token == "--":
            rest.extend(argv[index:])
            break
        name = token.split("=", 1)[0]
        if seen_command and token in _FLAG_OPTIONS:
            front.append(token)
        elif seen_command and name in _VALUE_OPTIONS:
            if "=" not in token and index + 1 == len(argv):
                # The last word and no value: alone at the end, click says it needs one
                # (in front of the subcommand it would take the subcommand's name).
                return [*front, token]
            front.append(token)
            if "=" not in token:
                index += 1
                front.append(argv[index])
        else:
            seen_command = seen_command or token in COMMANDS
            rest.append(token)
        index += 1
    return front + rest


_LENIENT = "nanobot-core-lenient"


def _lenient_errors(exc: UnicodeError) -> tuple[str | bytes, int]:
    """Encode what stdout's encoding cannot carry instead of failing the command.

    The undecodable bytes of a file name (Python holds them as lone surrogates)
    are written as they were, as ``ls`` does; anything else unencodable (a lone
    surrogate of another kind) as a Python escape, as stderr writes it.
    """
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    import codecs

    try:
        return codecs.lookup_error("surrogateescape")(exc)
    except UnicodeEncodeError:
        return codecs.backslashreplace_errors(exc)


def _lenient_stdio() -> None:
    """Text on stdin or stdout the locale's encoding does not fit is never a traceback.

    In a UTF-8 locale (not the C locale, where Python does this itself) stdin
    and stdout are strict: bytes on stdin that are not UTF-8 failed ``run -``
    and ``call TOOL -``, a file name that is not UTF-8 failed the output that
    names it. Stdin now decodes them as Python does file names (the core turns
    them into U+FFFD where it keeps text); stdout encodes with `_lenient_errors`.
    """
    import codecs

    codecs.register_error(_LENIENT, _lenient_errors)
    for stream, errors in ((sys.stdin, "surrogateescape"), (sys.stdout, _LENIENT)):
        if getattr(stream, "errors", None) in ("strict", "surrogateescape"):
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(errors=errors)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the CLI; maps library errors to exit codes and one-line messages on stderr.

    Called without `argv`, as the ``nanobot-core`` script and ``python -m
    nanobot_core`` call it, it is the program, and it also ends the process
    (`_ProgramEnd`): a Ctrl-C once the command is done (while a plugin's thread
    still saves, while atexit callbacks run) is then answered as one during
    the command, exit 130 and ``Interrupted.``, once that saving is done; in
    Python's teardown after that, it is ignored. SIGTERM and SIGHUP are then
    handled as Ctrl-C at every moment, ending with 143 and ``Terminated.``
    or 129 and ``Hung up.`` (`nanobot_core._stop_signals`). Called with `argv` (a host
    running the CLI in its own process), it raises ``SystemExit`` and leaves
    the process alone, but for the stand-ins it puts in place of ``sys.stdout`` (and,
    on a terminal, ``sys.stderr``): what plugin code prints goes to the log, and what
    is written to a terminal is shown escaped (`nanobot_core._terminal`).
    """
    end = _ProgramEnd.install() if argv is None else None
    try:
        code = _run_command(hoist_global_options(list(sys.argv[1:] if argv is None else argv)))
    except KeyboardInterrupt as interrupt:
        # A Ctrl-C outside click's own handling of one (as it returns, while an error is
        # printed): the same answer as within it.
        code = _stop_signals.say_interrupted(interrupt)
    if end is not None:
        end.finishing(code)
    sys.exit(code)


def _run_command(args: list[str]) -> int:
    """Run the command `args` names; its exit code, its errors printed on stderr."""
    from nanobot_core._containment import StdoutError, interrupt_on_sigint
    from nanobot_core._terminal import escape_on_terminals
    from nanobot_core.errors import ConfigError, NanobotError

    interrupt_on_sigint()  # Ctrl-C in a plugin's hook stops the command, not the plugin
    _lenient_stdio()
    # A write to stdout that fails raises StdoutError; on a terminal, stdout and stderr
    # show control characters escaped: text from a model, a tool, a page cannot drive it.
    escape_on_terminals()
    try:
        # With standalone_mode=False click returns the code of `ctx.exit(code)` instead of exiting.
        # color=True: click.echo would strip CSI sequences from what it writes to a pipe or
        # a file, whose bytes must stay as they are (a terminal's are escaped instead).
        code = cli.main(args=args, prog_name="nanobot-core", standalone_mode=False, color=True)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort as exc:
        if isinstance(exc.__context__, KeyboardInterrupt):
            # click turns Ctrl-C into Abort; a caller (a shell, a supervisor) tells an
            # interrupted run from a failed one by the code the signal gives (130 for
            # SIGINT; 143 and 129 for SIGTERM and SIGHUP, handled as Ctrl-C).
            return _stop_signals.say_interrupted(exc)
        click.echo("Aborted.", err=True)
        return EXIT_FAILED
    except StdoutError as exc:
        click.echo(f"Error: cannot write to stdout: {exc.strerror}", err=True)
        _discard_stdout()
        return EXIT_FAILED
    except ConfigError as exc:
        click.echo(f"Error: configuration: {exc}", err=True, color=True)
        return EXIT_USAGE
    except NanobotError as exc:
        click.echo(f"Error: {exc}", err=True, color=True)  # a server's words, as they are
        return EXIT_FAILED
    except MemoryError:
        # Where the address space or the container's memory is capped, a large input
        # can need more than there is: say so, not with a traceback. What a session
        # stored before is on disk already (each line is written whole, or not at all).
        click.echo(
            "Error: out of memory (the input may be too large for the memory this process may use)",
            err=True,
        )
        return EXIT_FAILED
    return code if isinstance(code, int) else EXIT_OK


class _ProgramEnd:
    """How the program ends: a Ctrl-C after the command is noted, and answered at the very end.

    Once the command is done, the process still has work to do: non-daemon
    threads are joined (a plugin's store may be saving in one), atexit
    callbacks run, stdout is flushed, then Python tears itself down. Left to
    Python, a Ctrl-C there raised a ``KeyboardInterrupt`` in the middle of
    that work (a traceback, a thread's save abandoned), or, once Python had
    put the default SIGINT action back for its teardown, ended the process
    by the signal: exit -2 as a parent sees it, nothing said. Here it is
    noted, the work goes on to its end, and the process exits 130 with
    ``Interrupted.``, as a Ctrl-C during the command does. A second Ctrl-C
    ends the process at once, 130 and ``Interrupted.``: the work waited for
    may never end (a plugin's thread that hangs). SIGTERM and SIGHUP reach
    the same handler (`nanobot_core._stop_signals`), with their own status
    and words: 143 and ``Terminated.``, 129 and ``Hung up.``.

    The end is an atexit callback registered before the command runs, so it
    runs after every callback registered while it ran (a plugin's). When
    Ctrl-C was pressed, or stdout could not be flushed, it ends the process
    there with ``os._exit`` and the code that says so: any moment of the
    teardown would be one where a Ctrl-C could not be answered. Otherwise
    Python ends the process as usual, with the command's code, its teardown
    included (finalizers close and flush files a plugin left open); a Ctrl-C
    is ignored for that last part, where there is nothing left to stop.
    """

    #: Whether `install` ran: the CLI is the program, whose end waits for its threads.
    installed = False

    def __init__(self) -> None:
        self.code = EXIT_FAILED  # an exception that escaped main: Python's own code for one
        self.pressed = False

    @classmethod
    def install(cls) -> _ProgramEnd | None:
        """Register the end of the program (main thread only: elsewhere no handler can be set)."""
        import atexit
        import threading

        if threading.current_thread() is not threading.main_thread():
            return None
        _stop_signals.install()  # already, where the entry point loaded the CLI
        cls.installed = True
        end = cls()
        atexit.register(end.exit)
        return end

    def finishing(self, code: int) -> None:
        """The command ended with `code`: from now on a Ctrl-C is only noted."""
        import signal

        self.code = code
        signal.signal(signal.SIGINT, self._note)

    def _note(self, signum: int, frame: object) -> None:
        if self.pressed:
            # Pressed again: what the first one waits for may never end (a plugin's thread
            # or atexit callback that hangs), and Ctrl-C must still stop the process.
            os._exit(_stop_signals.say_interrupted())
        self.pressed = True

    def exit(self) -> None:
        """End the process: its code, or 130 and ``Interrupted.`` if Ctrl-C was pressed.

        (143 and ``Terminated.``, 129 and ``Hung up.``, when SIGTERM or SIGHUP came last.)
        """
        code = self.code
        failed = _flush_stdout()
        if failed is not None:
            click.echo(f"Error: cannot write to stdout: {failed}", err=True)
            code = EXIT_FAILED if code == EXIT_OK else code
        if failed is None and not self.pressed:
            import signal

            # Python's teardown puts the default action back for a handler of its own, not
            # for "ignore": a Ctrl-C now would end the process by the signal, unsaid.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            _stop_signals.ignore_stop_signals()
            return
        if self.pressed and code != _stop_signals.interrupted()[1]:
            code = _stop_signals.say_interrupted()
        with contextlib.suppress(Exception):  # no stderr to flush: ending is what counts
            sys.stderr.flush()
        os._exit(code)


def _flush_stdout() -> str | None:
    """Flush stdout; why it failed (a reader that went away is no failure), or None."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except OSError as exc:
        # A reader that went away is no failure: click ends such a command quietly.
        return None if exc.errno == errno.EPIPE else exc.strerror or str(exc)
    except ValueError:  # closed by the command: nothing left to write
        return None
    return None


def _discard_stdout() -> None:
    """Point stdout at the null device: the output left in its buffer cannot fail again at exit."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):  # no descriptor to replace
        pass
