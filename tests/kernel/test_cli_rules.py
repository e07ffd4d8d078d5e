"""CLI rules, through the installed `nanobot-core` script: workspaces, history and output errors."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import clean_env, install_plugin, plugin_env, run_cli


def nanobot(
    *args: str, cwd: Path, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the installed `nanobot-core` script with autoload off and no NANOBOT_* leaking in."""
    script = shutil.which("nanobot-core")
    assert script is not None, "the nanobot-core script is not on PATH"
    base = clean_env(**{"NANOBOT_DISABLE_PLUGIN_AUTOLOAD": "1", **(env or {})})
    return subprocess.run(
        [script, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=base,
        input=stdin,
        check=False,
        timeout=120,
    )


HISTORY = [{"role": "user", "content": "hello"}]

COMMANDS_WITH_A_WORKSPACE = [
    ["tools"],
    ["plugins"],
    ["prompt"],
    ["call", "list_dir", "{}"],
    ["sessions"],
    ["sessions", "show", "default"],
    ["govern", "history.jsonl"],
    ["run", "hello", "--base-url", "http://127.0.0.1:9/v1"],
    ["sessions", "export", "--output", "export.jsonl"],
    ["sessions", "import", "history.jsonl"],
]


@pytest.mark.parametrize("command", COMMANDS_WITH_A_WORKSPACE, ids=" ".join)
def test_a_missing_workspace_is_a_usage_error_everywhere(
    tmp_path: Path, command: list[str]
) -> None:
    """Every command but init refuses a --workspace that does not exist: exit 2, named."""
    (tmp_path / "history.jsonl").write_text(json.dumps(HISTORY[0]) + "\n", encoding="utf-8")
    missing = tmp_path / "no-such-dir"
    result = nanobot(*command, "--workspace", str(missing), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "--workspace" in result.stderr
    assert f"{missing} does not exist" in result.stderr
    assert "Traceback" not in result.stderr
    assert not missing.exists()


def test_a_workspace_that_is_a_file_is_a_usage_error(tmp_path: Path) -> None:
    """A --workspace naming a file is refused with exit 2 saying it is not a directory."""
    target = tmp_path / "file.txt"
    target.write_text("x", encoding="utf-8")
    result = nanobot("tools", "--workspace", str(target), cwd=tmp_path)
    assert result.returncode == 2
    assert f"Invalid value for '--workspace': {target} is not a directory" in result.stderr


def test_init_creates_a_missing_workspace(tmp_path: Path) -> None:
    """init is the one command that creates its --workspace."""
    target = tmp_path / "new" / "ws"
    result = nanobot("init", "--workspace", str(target), "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["workspace"] == str(target.resolve())
    assert (target / "AGENTS.md").is_file()


def test_govern_output_in_a_missing_folder_is_a_usage_error(tmp_path: Path) -> None:
    """`govern --output /missing/dir/out.jsonl` exits 2 naming --output, without a traceback."""
    (tmp_path / "h.jsonl").write_text(json.dumps(HISTORY[0]) + "\n", encoding="utf-8")
    output = tmp_path / "missing" / "out.jsonl"
    result = nanobot("govern", "h.jsonl", "--output", str(output), cwd=tmp_path)
    assert result.returncode == 2
    assert "--output" in result.stderr
    assert f"the folder {output.parent} does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_govern_output_that_cannot_be_written_is_a_usage_error(tmp_path: Path) -> None:
    """An --output that names a directory cannot be written: exit 2, named, no traceback."""
    (tmp_path / "h.jsonl").write_text(json.dumps(HISTORY[0]) + "\n", encoding="utf-8")
    (tmp_path / "out").mkdir()
    result = nanobot("govern", "h.jsonl", "--output", "out/", cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("folder", "problem"), [("missing", "does not exist"), ("a-file", "is not a directory")]
)
def test_sessions_export_to_a_folder_that_is_not_one_is_a_usage_error(
    tmp_path: Path, folder: str, problem: str
) -> None:
    """`sessions export --output` into a missing folder (or a file) exits 2 naming --output."""
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    output = tmp_path / folder / "out.jsonl"
    result = nanobot("sessions", "export", "--output", str(output), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert f"--output': the folder {output.parent} {problem}" in result.stderr
    assert "Traceback" not in result.stderr


def _output_command(command: str, tmp_path: Path, output: Path | str) -> list[str]:
    """The arguments of `command` (govern or sessions export) writing to `output`."""
    if command == "govern":
        history = tmp_path / "h.jsonl"
        history.write_text(json.dumps(HISTORY[0]) + "\n", encoding="utf-8")
        return ["govern", str(history), "--workspace", str(tmp_path), "--output", str(output)]
    return ["sessions", "export", "--workspace", str(tmp_path), "--output", str(output)]


OUTPUT_COMMANDS = ["govern", "sessions export"]


@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_an_output_that_cannot_be_written_is_a_failure_with_its_reason(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    """An --output the system refuses to write (a full disk) is exit 1 with its reason, alike."""
    import errno

    from nanobot_core.cli import main
    from nanobot_core.governance import history_file

    def full_disk(path: Path, lines: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(history_file, "write_jsonl_atomic", full_disk)
    monkeypatch.setenv("NANOBOT_DISABLE_PLUGIN_AUTOLOAD", "1")
    output = tmp_path / "out.jsonl"
    with pytest.raises(SystemExit) as exited:
        main(_output_command(command, tmp_path, output))
    assert exited.value.code == 1
    stderr = capsys.readouterr().err
    assert f"Error: cannot write --output {output}: No space left on device\n" in stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_an_output_folder_removed_after_the_check_is_a_failure_naming_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    """The folder of --output gone between the check and the write: exit 1, named, no file."""
    import importlib

    from nanobot_core.cli import check_output_folder, main

    module = importlib.import_module(
        "nanobot_core._commands." + ("govern" if command == "govern" else "sessions")
    )

    def check_then_remove(output: str) -> None:
        check_output_folder(output)
        shutil.rmtree(Path(output).parent)

    monkeypatch.setattr(module, "check_output_folder", check_then_remove)
    monkeypatch.setenv("NANOBOT_DISABLE_PLUGIN_AUTOLOAD", "1")
    output = tmp_path / "gone" / "out.jsonl"
    output.parent.mkdir()
    with pytest.raises(SystemExit) as exited:
        main(_output_command(command, tmp_path, output))
    assert exited.value.code == 1
    stderr = capsys.readouterr().err
    assert stderr.endswith(f"Error: cannot write --output {output}: No such file or directory\n")
    assert not output.parent.exists()


@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_output_dash_writes_to_stdout_what_a_file_would_hold(tmp_path: Path, command: str) -> None:
    """`--output -` is standard output, as `-` is stdin for an input: no file named `-`."""
    written = tmp_path / "out.jsonl"
    to_file = nanobot(*_output_command(command, tmp_path, written), cwd=tmp_path)
    assert to_file.returncode == 0, to_file.stderr
    to_stdout = nanobot(*_output_command(command, tmp_path, "-"), cwd=tmp_path)
    assert to_stdout.returncode == 0, to_stdout.stderr
    assert to_stdout.stdout == written.read_text(encoding="utf-8")
    assert [json.loads(line) for line in to_stdout.stdout.splitlines()]
    assert not (tmp_path / "-").exists()
    assert "to stdout" in to_stdout.stderr


def _run_main(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int | str | None, str]:
    """`nanobot-core ARGS` run in this process: its exit code and its stderr."""
    from nanobot_core.cli import main

    with pytest.raises(SystemExit) as exited:
        main(args)
    return exited.value.code, capsys.readouterr().err


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (links not followed), by path relative to it, with its bytes."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


_IN_THE_SESSIONS_FOLDER = [
    ".nanobot/sessions/live.jsonl",  # a live session's own file
    ".nanobot/sessions/new.jsonl",  # a new session, of the output's lines
    ".nanobot/sessions/live.lock",  # the lock a run takes: replaced, two runs could hold one
    "link/new.jsonl",  # through a link to the folder
    "to-live.jsonl",  # a link to a session's file
    "other/.nanobot/sessions/new.jsonl",  # another workspace's sessions
]


@pytest.mark.parametrize("output", _IN_THE_SESSIONS_FOLDER)
@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_an_output_in_a_sessions_folder_is_refused_alike_and_nothing_is_written(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    output: str,
) -> None:
    """Every command's --output into a jsonl store's sessions folder (a session's file, its
    lock, a new one, through a link, another workspace's) is exit 2 naming --output and the
    folder, in the same words, before anything is written."""
    sessions = tmp_path / ".nanobot" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "live.jsonl").write_text('{"role":"user","content":"kept"}\n', encoding="utf-8")
    (sessions / "live.lock").write_text("pid 1\n", encoding="utf-8")
    (tmp_path / "other" / ".nanobot" / "sessions").mkdir(parents=True)
    (tmp_path / "link").symlink_to(sessions)
    (tmp_path / "to-live.jsonl").symlink_to(sessions / "live.jsonl")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NANOBOT_DISABLE_PLUGIN_AUTOLOAD", "1")
    args = _output_command(command, tmp_path, output)
    before = _files(tmp_path)
    code, stderr = _run_main(args, capsys)
    assert code == 2, stderr
    folder = (tmp_path / output).resolve().parent
    assert (
        f"Error: Invalid value for '--output': {output} is in the folder of the jsonl store's "
        f"sessions ({folder}), where it would be read as a session, or replace a session's "
        "file or lock: write it elsewhere\n"
    ) in stderr
    assert "Traceback" not in stderr
    assert _files(tmp_path) == before


@pytest.mark.parametrize("cwd_is_workspace", [True, False])
@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_an_output_in_a_linked_sessions_folder_written_by_its_own_path_is_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    cwd_is_workspace: bool,
) -> None:
    """A workspace whose .nanobot/sessions is a link to shared storage: an --output
    written by the storage's own path, which names no sessions folder, is still refused
    (the command's --workspace, or the working directory), and the session kept."""
    shared = tmp_path / "shared-storage"
    shared.mkdir()
    (shared / "live.jsonl").write_text('{"role":"user","content":"kept"}\n', encoding="utf-8")
    workspace = tmp_path / "ws"
    (workspace / ".nanobot").mkdir(parents=True)
    (workspace / ".nanobot" / "sessions").symlink_to(shared)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(workspace if cwd_is_workspace else elsewhere)
    monkeypatch.setenv("NANOBOT_DISABLE_PLUGIN_AUTOLOAD", "1")
    before = _files(shared)
    for name in ("live.jsonl", "new.jsonl"):
        output = shared / name
        code, stderr = _run_main(_output_command(command, workspace, output), capsys)
        assert code == 2, stderr
        assert f"{output} is in the folder of the jsonl store's sessions ({shared})" in stderr
    assert _files(shared) == before


@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_an_output_beside_the_sessions_folder_is_written(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    """The folders above and below the sessions folder hold no session: an --output there
    is written."""
    sub = tmp_path / ".nanobot" / "sessions" / "sub"
    sub.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NANOBOT_DISABLE_PLUGIN_AUTOLOAD", "1")
    for output in (tmp_path / ".nanobot" / "out.jsonl", sub / "out.jsonl"):
        code, stderr = _run_main(_output_command(command, tmp_path, output), capsys)
        assert code == 0, stderr
        assert output.read_bytes().startswith(b"{")


@pytest.mark.parametrize("config", ["pyproject.toml", "nanobot.toml", "--config"])
@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_an_output_over_a_config_file_the_command_reads_is_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    config: str,
) -> None:
    """An --output that is a config file the command reads (the working directory's
    pyproject.toml or nanobot.toml, the --config file, through a link too) is exit 2
    naming it, and the file is left as it is: the next command could not read it."""
    name = "settings.toml" if config == "--config" else config
    path = tmp_path / name
    path.write_text("[tool.nanobot]\n" if name == "pyproject.toml" else "", encoding="utf-8")
    (tmp_path / "to-config").symlink_to(path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NANOBOT_DISABLE_PLUGIN_AUTOLOAD", "1")
    named = (
        f"the --config file {name}"
        if config == "--config"
        else f"the working directory's config file {path}"
    )
    front = ["--config", name] if config == "--config" else []
    for output in (name, "to-config"):
        before = path.read_bytes()
        code, stderr = _run_main([*front, *_output_command(command, tmp_path, output)], capsys)
        assert code == 2, stderr
        assert (
            f"Error: Invalid value for '--output': {output} is {named}, which this command "
            "reads: write it elsewhere\n"
        ) in stderr
        assert path.read_bytes() == before


_PROMPT_OUTPUTS = [
    "AGENTS.md",  # the file itself
    "USER.md",  # not there yet: the prompt would read the new file
    "memory/MEMORY.md",
    "skills/review/SKILL.md",
    "skills/new/SKILL.md",  # a skill folder with no SKILL.md yet
    "to-soul.md",  # a link to a prompt file
    "docs/rules.md",  # the file SOUL.md links to
]


@pytest.mark.parametrize("cwd_is_workspace", [True, False])
@pytest.mark.parametrize("output", _PROMPT_OUTPUTS)
@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_an_output_over_a_prompt_file_of_the_workspace_is_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    output: str,
    cwd_is_workspace: bool,
) -> None:
    """An --output that is a file the workspace's prompt is made of (AGENTS.md, SOUL.md,
    USER.md, memory/MEMORY.md, a skill's SKILL.md; there or not yet; through a link, or the
    file one links to) is exit 2 naming it, and nothing is written: every run would send
    the JSON lines to the model as the user's rules."""
    workspace = tmp_path / "ws"
    (workspace / "memory").mkdir(parents=True)
    (workspace / "skills" / "review").mkdir(parents=True)
    (workspace / "skills" / "new").mkdir()
    (workspace / "docs").mkdir()
    (workspace / "AGENTS.md").write_text("my rules", encoding="utf-8")
    (workspace / "memory" / "MEMORY.md").write_text("my notes", encoding="utf-8")
    (workspace / "skills" / "review" / "SKILL.md").write_text("---\n", encoding="utf-8")
    (workspace / "docs" / "rules.md").write_text("be brief", encoding="utf-8")
    (workspace / "SOUL.md").symlink_to("docs/rules.md")
    (workspace / "to-soul.md").symlink_to("SOUL.md")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(workspace if cwd_is_workspace else elsewhere)
    monkeypatch.setenv("NANOBOT_DISABLE_PLUGIN_AUTOLOAD", "1")
    args = _output_command(command, workspace, workspace / output)
    before = _files(workspace)
    code, stderr = _run_main(args, capsys)
    assert code == 2, stderr
    named = {"to-soul.md": "SOUL.md", "docs/rules.md": "SOUL.md"}.get(output, output)
    assert (
        f"Error: Invalid value for '--output': {workspace / output} is the workspace's prompt "
        f"file {workspace / named}, which every run sends to the model as the user's rules: "
        "write it elsewhere\n"
    ) in stderr
    assert "Traceback" not in stderr
    assert _files(workspace) == before


_PROMPT_OUTPUTS_IN_ANOTHER_CASE = [
    ("agents.md", "AGENTS.md"),  # AGENTS.md is there: the same file where case is ignored
    ("Soul.md", "SOUL.md"),  # not there yet: a new Soul.md is read as SOUL.md there
    ("memory/memory.md", "memory/MEMORY.md"),
    ("skills/review/skill.md", "skills/review/SKILL.md"),
    ("Skills/new/SKILL.md", "skills/new/SKILL.md"),  # the skills folder in another case
]


@pytest.mark.parametrize(("output", "named"), _PROMPT_OUTPUTS_IN_ANOTHER_CASE)
@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_an_output_named_like_a_prompt_file_in_another_case_is_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    output: str,
    named: str,
) -> None:
    """An --output whose name is a prompt file's in other letters' case (agents.md, a new
    Soul.md, memory/memory.md, a skill's skill.md) is exit 2 naming the prompt file, and
    nothing is written: on a file system that ignores case the prompt reads it as that."""
    workspace = tmp_path / "ws"
    (workspace / "memory").mkdir(parents=True)
    (workspace / "skills" / "review").mkdir(parents=True)
    (workspace / "skills" / "new").mkdir()
    (workspace / "AGENTS.md").write_text("my rules", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NANOBOT_DISABLE_PLUGIN_AUTOLOAD", "1")
    args = _output_command(command, workspace, workspace / output)
    before = _files(workspace)
    code, stderr = _run_main(args, capsys)
    assert code == 2, stderr
    assert (
        f"Error: Invalid value for '--output': {workspace / output} is the workspace's prompt "
        f"file {workspace / named}, which every run sends to the model as the user's rules: "
        "write it elsewhere\n"
    ) in stderr
    assert _files(workspace) == before


@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_an_output_in_the_working_directory_named_like_a_prompt_file_is_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    """The working directory is every command's workspace by default: its AGENTS.md, given
    as a relative --output while the command's --workspace is elsewhere, is refused too."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "AGENTS.md").write_text("my rules", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NANOBOT_DISABLE_PLUGIN_AUTOLOAD", "1")
    code, stderr = _run_main(_output_command(command, workspace, "AGENTS.md"), capsys)
    assert code == 2, stderr
    assert f"AGENTS.md is the workspace's prompt file {tmp_path / 'AGENTS.md'}" in stderr
    assert (tmp_path / "AGENTS.md").read_text(encoding="utf-8") == "my rules"


_IN_THE_CACHE = [
    ".nanobot/cache/tool-results/" + "a" * 64 + ".txt",  # an offloaded result
    ".nanobot/cache/tool-results/new.jsonl",
    "cache-link/new.jsonl",  # through a link to the folder
    "to-result.txt",  # a link to an offloaded result
    "other/.nanobot/cache/tool-results/new.jsonl",  # another workspace's cache
]


@pytest.mark.parametrize("output", _IN_THE_CACHE)
@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_an_output_in_the_tool_result_cache_is_refused_and_nothing_is_written(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    output: str,
) -> None:
    """An --output in a workspace's .nanobot/cache/tool-results/ (an offloaded result, a new
    file, through a link, another workspace's) is exit 2 naming --output and the folder,
    before anything is written: it would replace a result a conversation points to."""
    cache = tmp_path / ".nanobot" / "cache" / "tool-results"
    cache.mkdir(parents=True)
    result = cache / ("a" * 64 + ".txt")
    result.write_text("the full tool result", encoding="utf-8")
    (tmp_path / "other" / ".nanobot" / "cache" / "tool-results").mkdir(parents=True)
    (tmp_path / "cache-link").symlink_to(cache)
    (tmp_path / "to-result.txt").symlink_to(result)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NANOBOT_DISABLE_PLUGIN_AUTOLOAD", "1")
    args = _output_command(command, tmp_path, output)
    before = _files(tmp_path)
    code, stderr = _run_main(args, capsys)
    assert code == 2, stderr
    folder = (tmp_path / output).resolve().parent
    assert (
        f"Error: Invalid value for '--output': {output} is in the folder of the tool-result "
        f"cache ({folder}), where it would replace a tool result a conversation points to, "
        "or be pruned as one: write it elsewhere\n"
    ) in stderr
    assert "Traceback" not in stderr
    assert _files(tmp_path) == before


@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_an_output_beside_the_prompt_files_and_the_cache_is_written(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    """Files the prompt does not read (TOOLS.md, a skill's other file, a SKILL.md outside
    the skills folder) and the folders above and below the cache are written."""
    (tmp_path / "skills" / "review").mkdir(parents=True)
    (tmp_path / "notes").mkdir()
    below = tmp_path / ".nanobot" / "cache" / "tool-results" / "sub"
    below.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NANOBOT_DISABLE_PLUGIN_AUTOLOAD", "1")
    for output in (
        tmp_path / "TOOLS.md",
        tmp_path / "skills" / "review" / "notes.md",
        tmp_path / "notes" / "SKILL.md",
        tmp_path / ".nanobot" / "cache" / "out.jsonl",
        below / "out.jsonl",
    ):
        code, stderr = _run_main(_output_command(command, tmp_path, output), capsys)
        assert code == 0, stderr
        assert output.read_bytes().startswith(b"{")


_KEEPER = """
from nanobot_core import hookimpl

@hookimpl
def nanobot_kept_files(ctx):
    return ["notes.toml", ctx.workspace / ".notes"]
"""

_KEPT_OUTPUTS = [
    ("notes.toml", "is {kept}, which {plugin} reads or keeps"),
    ("Notes.toml", "is {kept}, which {plugin} reads or keeps"),  # in another case, new
    ("to-notes.toml", "is {kept}, which {plugin} reads or keeps"),  # a link to it
    (".notes/new.jsonl", "is in {kept}, where {plugin} keeps its files"),
    (".notes/deeper/new.jsonl", "is in {kept}, where {plugin} keeps its files"),
]


@pytest.mark.parametrize(("output", "said"), _KEPT_OUTPUTS)
@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_an_output_over_a_file_a_plugin_declares_is_refused_naming_the_plugin(
    tmp_path: Path, command: str, output: str, said: str
) -> None:
    """An --output that is a file a plugin declares it reads (nanobot_kept_files; in another
    case, through a link), or in a folder it declares, is exit 2 naming the file and the
    plugin with its version, and nothing is written."""
    site = install_plugin(tmp_path / "site", "keeper", _KEEPER, version="2.5")
    workspace = tmp_path / "ws"
    (workspace / ".notes" / "deeper").mkdir(parents=True)
    (workspace / "notes.toml").write_text("[notes]\n", encoding="utf-8")
    (workspace / "to-notes.toml").symlink_to("notes.toml")
    args = _output_command(command, workspace, workspace / output)
    before = _files(workspace)
    result = run_cli(*args, cwd=workspace, env=plugin_env(site, "keeper"), timeout=120)
    assert result.returncode == 2, result.stderr
    kept = workspace / ("notes.toml" if output.endswith("toml") else ".notes")
    plugin = "plugin 'keeper' from keeper 2.5"
    assert (
        f"Error: Invalid value for '--output': {workspace / output} "
        f"{said.format(kept=kept, plugin=plugin)}: write it elsewhere"
    ) in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr
    assert _files(workspace) == before


_RECORDING_KEEPER = """
from pathlib import Path

from nanobot_core import hookimpl
from nanobot_core.governance import Stage, StageOutcome

RAN = Path({ran!r})


def record(messages, ctx):
    RAN.write_text("ran", encoding="utf-8")
    return StageOutcome(messages)


@hookimpl
def nanobot_kept_files(ctx):
    return ["notes.toml"]


@hookimpl
def nanobot_governance_stages(ctx):
    return [Stage(name="record", func=record)]
"""


def test_govern_refuses_a_file_a_plugin_declares_before_it_governs(tmp_path: Path) -> None:
    """govern with an --output a plugin declares is refused (exit 2) before any stage runs."""
    ran = tmp_path / "ran.txt"
    source = _RECORDING_KEEPER.format(ran=str(ran))
    site = install_plugin(tmp_path / "site", "keeper", source, version="2.5")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    args = _output_command("govern", workspace, workspace / "notes.toml")
    result = run_cli(*args, cwd=workspace, env=plugin_env(site, "keeper"), timeout=120)
    assert result.returncode == 2, result.stderr
    assert "which plugin 'keeper' from keeper 2.5 reads or keeps" in " ".join(result.stderr.split())
    assert not ran.exists()
    assert not (workspace / "notes.toml").exists()


def test_govern_with_an_output_no_plugin_declares_runs_the_plugins_stages(tmp_path: Path) -> None:
    """The recording stage of the refusal test runs when the --output is no plugin's file."""
    ran = tmp_path / "ran.txt"
    source = _RECORDING_KEEPER.format(ran=str(ran))
    site = install_plugin(tmp_path / "site", "keeper", source)
    args = _output_command("govern", tmp_path, tmp_path / "out.jsonl")
    result = run_cli(*args, cwd=tmp_path, env=plugin_env(site, "keeper"), timeout=120)
    assert result.returncode == 0, result.stderr
    assert ran.read_text(encoding="utf-8") == "ran"


def test_a_plugin_declaring_no_list_of_paths_fails_and_the_output_is_written(
    tmp_path: Path,
) -> None:
    """A nanobot_kept_files that returns a str is the plugin's failure, named; the output the
    command was given is written as usual."""
    source = "from nanobot_core import hookimpl\n\n@hookimpl\ndef nanobot_kept_files(ctx):\n"
    site = install_plugin(tmp_path / "site", "keeper", source + "    return 'notes.toml'\n")
    args = _output_command("govern", tmp_path, tmp_path / "out.jsonl")
    result = run_cli(*args, cwd=tmp_path, env=plugin_env(site, "keeper"), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "nanobot_kept_files returned str, not a list of paths" in result.stderr
    assert json.loads((tmp_path / "out.jsonl").read_text(encoding="utf-8")) == HISTORY[0]


def test_the_files_every_output_check_names_are_those_the_core_keeps() -> None:
    """The names the --output check keeps without importing the prompt and the store are
    the prompt's files, its skills folder and the default store's folder."""
    from nanobot_core import cli
    from nanobot_core.governance.store import CACHE_DIR
    from nanobot_core.prompt.skills import SKILL_FILE, SKILLS_DIR
    from nanobot_core.prompt.workspace_files import TEMPLATE_FILES

    assert cli._PROMPT_FILES == TEMPLATE_FILES
    assert (cli._SKILLS_FOLDER, cli._SKILL_FILE) == (SKILLS_DIR, SKILL_FILE)
    assert CACHE_DIR.parts == cli._CACHE_FOLDER


_FILE_NAMES = st.text(
    st.characters(blacklist_characters="/\\\x00", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=12,
).filter(lambda name: name not in (".", ".."))


@given(name=_FILE_NAMES, through_link=st.booleans())
@settings(max_examples=60, deadline=None, database=None)
def test_write_output_never_writes_into_a_sessions_folder(name: str, through_link: bool) -> None:
    """Whatever file name an --output gives in a sessions folder (written there or through
    a link to it), `write_output` itself refuses it, exit 2 naming the folder, and writes
    nothing; the same name beside the workspace is written."""
    import click

    from nanobot_core.cli import write_output

    with tempfile.TemporaryDirectory() as temporary:
        root = Path(temporary)
        sessions = root / ".nanobot" / "sessions"
        sessions.mkdir(parents=True)
        (root / "link").symlink_to(sessions)
        output = str((root / "link" if through_link else sessions) / name)
        with pytest.raises(click.BadParameter) as refused:
            write_output(output, [{"role": "user", "content": "x"}])
        assert refused.value.exit_code == 2
        assert f"is in the folder of the jsonl store's sessions ({sessions})" in str(refused.value)
        assert list(sessions.iterdir()) == []
        beside = root / name
        write_output(str(beside), [{"role": "user", "content": "x"}])
        assert json.loads(beside.read_bytes()) == {"role": "user", "content": "x"}


@given(name=_FILE_NAMES, through_link=st.booleans())
@settings(max_examples=60, deadline=None, database=None)
def test_write_output_never_writes_into_a_tool_result_cache(name: str, through_link: bool) -> None:
    """Whatever file name an --output gives in a workspace's tool-result cache (written
    there or through a link to it), `write_output` itself refuses it, exit 2 naming the
    folder, and writes nothing; the same name in the folder above is written."""
    import click

    from nanobot_core.cli import write_output

    with tempfile.TemporaryDirectory() as temporary:
        root = Path(temporary)
        cache = root / ".nanobot" / "cache" / "tool-results"
        cache.mkdir(parents=True)
        (root / "link").symlink_to(cache)
        output = str((root / "link" if through_link else cache) / name)
        with pytest.raises(click.BadParameter) as refused:
            write_output(output, [{"role": "user", "content": "x"}])
        assert refused.value.exit_code == 2
        assert f"is in the folder of the tool-result cache ({cache})" in str(refused.value)
        assert list(cache.iterdir()) == []
        beside = cache.parent / name
        write_output(str(beside), [{"role": "user", "content": "x"}])
        assert json.loads(beside.read_bytes()) == {"role": "user", "content": "x"}


def test_govern_output_dash_with_json_is_a_usage_error(tmp_path: Path) -> None:
    """`govern --output - --json` would write two things to stdout: exit 2, nothing written."""
    args = _output_command("govern", tmp_path, "-")
    result = nanobot(*args, "--json", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "--output - and --json both write to stdout" in result.stderr
    assert not (tmp_path / "-").exists()


def test_new_plugin_in_a_directory_under_a_file_is_a_usage_error(tmp_path: Path) -> None:
    """`new-plugin --directory` under a file (however deep) exits 2 naming the file in the way."""
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    for directory in ("a-file/acme", "a-file/deeper/acme"):
        result = nanobot("new-plugin", "acme-words", "--directory", directory, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert result.stderr.endswith(
            f"Error: cannot use {directory}: a-file is not a directory; "
            f"choose another --directory\n"
        ), result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["a-file"]


def test_new_plugin_in_a_directory_that_is_a_file_says_it_is_taken(tmp_path: Path) -> None:
    """`new-plugin --directory FILE` is exit 2 in the CLI's words, not click's "is a file"."""
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    result = nanobot("new-plugin", "acme-words", "--directory", "a-file", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.endswith("Error: a-file already exists; choose another --directory\n")


def test_a_json_array_with_a_trailing_comma_is_refused_naming_the_position(
    tmp_path: Path,
) -> None:
    """A JSON array that does not parse is exit 2 naming line and column, never read as JSONL."""
    text = '[\n  {"role": "user", "content": "hello"},\n]\n'
    (tmp_path / "h.json").write_text(text, encoding="utf-8")
    result = nanobot("govern", "h.json", "--json", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    # The reason and its place are the standard library's: from 3.13 it names the comma.
    reason = (
        "Illegal trailing comma before end of array at line 2 column 39"
        if sys.version_info >= (3, 13)
        else "Expecting value at line 3 column 1"
    )
    assert f"h.json: the JSON array does not parse: not JSON ({reason})" in result.stderr


def test_jsonl_where_no_line_parses_is_refused_naming_the_first_line(tmp_path: Path) -> None:
    """JSONL in which no line is JSON is exit 2 naming the first bad line."""
    (tmp_path / "h.jsonl").write_text('{"role": "user",\nnope\n', encoding="utf-8")
    result = nanobot("govern", "h.jsonl", cwd=tmp_path)
    assert result.returncode == 2
    assert "h.jsonl: no line is JSON; line 1: not JSON" in result.stderr


def test_jsonl_with_one_bad_line_is_governed_and_the_line_reported(tmp_path: Path) -> None:
    """A JSONL file with some good lines stays lenient: exit 0, the bad line reported."""
    lines = [json.dumps(HISTORY[0]), "not json"]
    (tmp_path / "h.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = nanobot("govern", "h.jsonl", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    load = json.loads(result.stdout)["report"][0]
    assert load["stage"] == "load"
    assert any(d.startswith("h.jsonl:2: left out, not JSON") for d in load["details"])


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("nanobot-core", "is nanobot-core's own name"),
        ("Nanobot_Core", "is nanobot-core's own name"),
        ("click", "is the name of the installed distribution click"),
        ("json", "would install the package 'json', which is already importable"),
        ("class", "is a Python keyword: its package 'class' could not be imported"),
        ("winreg", "is the name of the standard library module 'winreg'"),
        ("dist", "would install the package 'dist', a folder hatchling leaves out of the wheel"),
    ],
)
def test_new_plugin_refuses_a_name_that_is_taken(tmp_path: Path, name: str, reason: str) -> None:
    """new-plugin exits 2, writing nothing, for a name taken or whose project could not work."""
    result = nanobot("new-plugin", name, cwd=tmp_path)
    assert result.returncode == 2
    assert f"plugin name {name!r} {reason}" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_new_plugin_warns_when_a_tool_takes_a_builtin_name(tmp_path: Path) -> None:
    """A tool plugin named like a built-in tool is created, with a warning that it loses."""
    result = nanobot("new-plugin", "read_file", "--kind", "tool", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "the tool name 'read_file' is a built-in tool's" in result.stderr
    assert (tmp_path / "read_file" / "pyproject.toml").is_file()


def test_new_plugin_refuses_a_stage_named_like_a_builtin_stage(tmp_path: Path) -> None:
    """A stage project named like a built-in stage (whose own tests would fail) is exit 2."""
    result = nanobot("new-plugin", "snip_history", "--kind", "stage", cwd=tmp_path)
    assert result.returncode == 2
    assert "would name its stage 'snip_history', a built-in stage's" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_new_plugin_warns_when_a_section_takes_a_builtin_name(tmp_path: Path) -> None:
    """A section plugin named like a built-in section is created, with a warning that it loses."""
    result = nanobot("new-plugin", "memory", "--kind", "section", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "the section name 'memory' is a built-in section's" in result.stderr
    assert (tmp_path / "memory" / "pyproject.toml").is_file()


def test_new_plugin_says_to_install_the_test_extra(tmp_path: Path) -> None:
    """The printed next step and the project's README install the [test] extra (pytest)."""
    result = nanobot("new-plugin", "acme-words", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "pip install -e '" in result.stdout
    assert "acme-words[test]'" in result.stdout
    readme = (tmp_path / "acme-words" / "README.md").read_text(encoding="utf-8")
    assert "pip install -e '.[test]'" in readme
    pyproject = (tmp_path / "acme-words" / "pyproject.toml").read_text(encoding="utf-8")
    assert 'test = ["pytest"]' in pyproject


def test_govern_help_gives_the_smallest_max_tool_result_chars_the_config_takes(
    tmp_path: Path,
) -> None:
    """`govern --help` states the real minimum of --max-tool-result-chars; one below is exit 2."""
    from nanobot_core.config import MIN_TOOL_RESULT_CHARS

    shown = " ".join(nanobot("govern", "--help", cwd=tmp_path).stdout.split())
    assert f"(at least {MIN_TOOL_RESULT_CHARS})" in shown
    assert "x>=1" not in shown.split("--max-tool-result-chars", 1)[1].split("--workspace")[0]
    (tmp_path / "history.jsonl").write_text(json.dumps(HISTORY[0]) + "\n", encoding="utf-8")
    small = str(MIN_TOOL_RESULT_CHARS - 1)
    result = nanobot("govern", "history.jsonl", "--max-tool-result-chars", small, cwd=tmp_path)
    assert result.returncode == 2
    assert f"governance.max_tool_result_chars: {small} is below {MIN_TOOL_RESULT_CHARS}" in (
        result.stderr
    )


@pytest.mark.parametrize("directory", ["it's a $HOME dir", "-x", "two  spaces"])
def test_new_plugin_says_next_steps_a_shell_runs_as_written(tmp_path: Path, directory: str) -> None:
    """The "next:" line quotes the project folder, so a shell hands pip and pytest that folder."""
    result = nanobot("new-plugin", "acme-words", "--directory", directory, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("next: ")]
    folder = directory if not directory.startswith("-") else f"./{directory}"
    assert shlex.split(line.removeprefix("next: ")) == [
        *("pip", "install", "-e", f"{folder}[test]", "&&"),
        *("nanobot-core", "plugins", "&&", "pytest", folder),
    ]
    assert (tmp_path / directory / "pyproject.toml").is_file()


def test_new_plugin_that_fails_part_of_the_way_leaves_nothing_behind(tmp_path: Path) -> None:
    """A project whose inner files cannot be written (a path too long) is exit 1, nothing left."""
    # Just short of PATH_MAX (4096 on Linux): the folder is made, a file inside it is not.
    directory = "/".join(["d" * 250] * 17)[:4080]
    result = nanobot("new-plugin", "acme-words", "--directory", directory, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        f"Error: cannot create the project in {directory}: File name too long; nothing was "
        "left there; choose another --directory or remove the cause\n"
    )
    assert list(tmp_path.iterdir()) == []
