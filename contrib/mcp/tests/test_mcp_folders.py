"""The files nanobot-mcp writes in the workspace: never through a link to elsewhere."""

from __future__ import annotations

import os
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from nanobot_core import NotRegularFileError
from nanobot_core.testing import run_cli

from nanobot_mcp import FailureMemory, ServerConfig, ToolListCache
from nanobot_mcp.connection import _open_log

if TYPE_CHECKING:
    from conftest import Workspace

SERVER = ServerConfig(name="s", command="c", retry_after=60)
TOOLS = [{"name": "t", "inputSchema": {"type": "object"}}]


def _tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, links not followed, with its bytes."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


@pytest.mark.parametrize("linked", [".nanobot", ".nanobot/cache", ".nanobot/cache/mcp"])
def test_a_cache_folder_that_is_a_link_is_neither_written_nor_read_nor_emptied(
    tmp_path: Path, linked: str
) -> None:
    """With a folder on the way to .nanobot/cache/mcp a link to elsewhere, no record is
    written there, none found there is read, and none there is removed."""
    workspace, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    workspace.mkdir()
    below = Path(*Path(".nanobot/cache/mcp").parts[len(Path(linked).parts) :])
    (elsewhere / below).mkdir(parents=True)
    (workspace / linked).parent.mkdir(parents=True, exist_ok=True)
    (workspace / linked).symlink_to(elsewhere)
    cache, failures = ToolListCache.for_workspace(workspace), FailureMemory.for_workspace(workspace)
    # Records of this very config, placed where the link leads.
    ToolListCache(elsewhere / below).store(SERVER, TOOLS)
    FailureMemory(elsewhere / below).record(SERVER, "placed there")
    before = _tree(elsewhere)
    cache.store(SERVER, [*TOOLS, {"name": "u", "inputSchema": {"type": "object"}}])
    failures.record(SERVER, "it broke")
    assert cache.load(SERVER) is None
    assert failures.recent(SERVER) is None
    failures.forget(SERVER)
    assert _tree(elsewhere) == before


def test_a_cache_in_the_workspace_itself_is_written_and_read(tmp_path: Path) -> None:
    """The folders made from the workspace down hold the records, read back and forgotten."""
    cache, failures = ToolListCache.for_workspace(tmp_path), FailureMemory.for_workspace(tmp_path)
    cache.store(SERVER, TOOLS)
    failures.record(SERVER, "it broke")
    assert cache.load(SERVER) == TOOLS
    assert failures.recent(SERVER) is not None
    failures.forget(SERVER)
    assert failures.recent(SERVER) is None
    assert sorted(p.name for p in (tmp_path / ".nanobot" / "cache" / "mcp").iterdir()) == ["s.json"]


def _log(workspace: Path) -> Path:
    return workspace / ".nanobot" / "logs" / "mcp" / "s.log"


@pytest.mark.parametrize("target", ["outside.txt", "ws/.nanobot/sessions/chat.jsonl", "absent"])
def test_a_log_that_links_to_a_file_is_refused_naming_it_and_the_file_is_kept(
    tmp_path: Path, target: str
) -> None:
    """A server's stderr log that is a link to a file (outside the workspace, a session's)
    or to nothing is refused, naming the log and where it leads; nothing is emptied or made."""
    workspace = tmp_path / "ws"
    (workspace / ".nanobot" / "sessions").mkdir(parents=True)
    (tmp_path / "outside.txt").write_text("keep me", encoding="utf-8")
    (workspace / ".nanobot" / "sessions" / "chat.jsonl").write_text("{}\n", encoding="utf-8")
    log = _log(workspace)
    log.parent.mkdir(parents=True)
    log.symlink_to(tmp_path / target)
    before = _tree(tmp_path)
    with pytest.raises(NotRegularFileError) as refused:
        _open_log(log, workspace)
    assert refused.value.filename == str(log)
    assert str(refused.value) == (
        f"{log} is a symbolic link, which leads to {tmp_path / target}: a log is written "
        f"through a link only to a device or a pipe ({os.devnull} silences the server); "
        "remove the link, and the log is made anew"
    )
    assert _tree(tmp_path) == before


def test_a_log_with_another_name_is_refused_and_kept(tmp_path: Path) -> None:
    """A log that is a hard link to another file is refused, and that file is not emptied."""
    log = _log(tmp_path)
    log.parent.mkdir(parents=True)
    (tmp_path / "notes.txt").write_text("keep me", encoding="utf-8")
    os.link(tmp_path / "notes.txt", log)
    with pytest.raises(NotRegularFileError, match="other names"):
        _open_log(log, tmp_path)
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "keep me"


def test_a_log_folder_that_is_a_link_is_refused_naming_it(tmp_path: Path) -> None:
    """With .nanobot/logs a link to elsewhere, the log is refused naming that folder, and
    nothing is made or emptied where it leads."""
    workspace, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    (workspace / ".nanobot").mkdir(parents=True)
    (elsewhere / "mcp").mkdir(parents=True)
    (elsewhere / "mcp" / "s.log").write_text("keep me", encoding="utf-8")
    (workspace / ".nanobot" / "logs").symlink_to(elsewhere)
    with pytest.raises(OSError) as refused:
        _open_log(_log(workspace), workspace)
    assert refused.value.filename == str(_log(workspace))
    assert refused.value.strerror == (
        f"{workspace / '.nanobot' / 'logs'} is a symbolic link or not a folder, which is not "
        "gone through"
    )
    assert _tree(elsewhere) == {"mcp/s.log": b"keep me"}


def test_a_log_of_its_own_is_emptied_and_one_linked_to_dev_null_is_written_there(
    tmp_path: Path,
) -> None:
    """The log's own file (its folders made) is emptied for the new stderr; a log linked to
    /dev/null takes it there."""
    log = _log(tmp_path)
    with _open_log(log, tmp_path) as stream:
        stream.write("first start")
    with _open_log(log, tmp_path) as stream:
        stream.write("again")
    assert log.read_text(encoding="utf-8") == "again"
    log.unlink()
    log.symlink_to(os.devnull)
    with _open_log(log, tmp_path) as stream:
        stream.write("silenced")
    assert log.is_symlink()


def test_a_server_whose_log_links_to_a_session_fails_alone_and_the_session_is_kept(
    workspace: Workspace,
) -> None:
    """Through the CLI: the server whose log links to a session's file is left out with a
    problem naming the log, the session keeps its lines, and the other server runs."""
    workspace.configure(linked={}, plain={})
    session = workspace.root / ".nanobot" / "sessions" / "chat.jsonl"
    session.parent.mkdir(parents=True)
    session.write_text('{"role": "user", "content": "hi"}\n', encoding="utf-8")
    logs = workspace.root / ".nanobot" / "logs" / "mcp"
    logs.mkdir(parents=True)
    (logs / "linked.log").symlink_to(session)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}
    listed = run_cli("plugins", cwd=workspace.root, env=env, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert (
        f"MCP server 'linked' failed to start: its stderr log '{logs / 'linked.log'}' cannot "
        f"be written: a symbolic link, which leads to {session}"
    ) in " ".join(listed.stdout.split())
    assert session.read_text(encoding="utf-8") == '{"role": "user", "content": "hi"}\n'
    assert workspace.spawns() == 1


@pytest.mark.parametrize(
    ("output", "said"),
    [
        (".nanobot/mcp.toml", "is {root}/.nanobot/mcp.toml, which {plugin} reads or keeps"),
        ("servers.toml", "is {root}/servers.toml, which {plugin} reads or keeps"),
        (".nanobot/cache/mcp/x.json", "is in {root}/.nanobot/cache/mcp, where {plugin} keeps"),
        (".nanobot/logs/mcp/old.log", "is in {root}/.nanobot/logs/mcp, where {plugin} keeps"),
    ],
)
def test_an_output_over_the_server_list_the_cache_or_a_log_is_refused(
    workspace: Workspace, output: str, said: str
) -> None:
    """`govern --output` over the server list (.nanobot/mcp.toml, or the file
    $NANOBOT_MCP_CONFIG names), the tool-list cache or a server's log is exit 2 naming the
    file and nanobot-mcp, and the file is kept."""
    config = workspace.configure(notes={})
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}
    if output == "servers.toml":
        config = config.rename(workspace.root / output)
        env["NANOBOT_MCP_CONFIG"] = str(config)
    for folder in ("cache", "logs"):
        (workspace.root / ".nanobot" / folder / "mcp").mkdir(parents=True)
    history = workspace.root / "history.jsonl"
    history.write_text('{"role": "user", "content": "hi"}\n', encoding="utf-8")
    target = workspace.root / output
    if not target.exists():
        target.write_text("kept\n", encoding="utf-8")
    before = target.read_bytes()
    result = run_cli(
        "govern", str(history), "--output", str(target), cwd=workspace.root, env=env, timeout=120
    )
    assert result.returncode == 2, result.stderr
    shown = " ".join(result.stderr.split())
    plugin = f"plugin 'mcp' from nanobot-mcp {version('nanobot-mcp')}"
    assert said.format(root=workspace.root, plugin=plugin) in shown
    assert target.read_bytes() == before
