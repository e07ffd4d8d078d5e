"""A plugin's session store is plugin code: its failures are named, never a traceback or an exit."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from nanobot_core.jsonl_store import JsonlSessionStore
from tests.helpers import install_plugin, plugin_env, run_cli

TIMEOUT = 60
PLUGIN = "hangplug"  # the module and distribution `install_plugin` writes, version 0.1
STORE = f"session store 'flaky' of plugin {PLUGIN!r} from {PLUGIN} 0.1"

# A store over the workspace's JSONL files whose methods (and its leases') fail where
# FAIL_AT says, as FAIL_HOW says; a provider that answers "ok" without a network.
FLAKY = """
import os
from nanobot_core import hookimpl
from nanobot_core.jsonl_store import JsonlSessionStore
from nanobot_core.providers import ProviderReply

def fail(where):
    if where not in os.environ.get("FAIL_AT", "").split(","):
        return
    how = os.environ["FAIL_HOW"]
    if how == "exit":
        raise SystemExit(3)
    if how == "print":
        print("store noise")
        return
    raise RuntimeError("disk on fire")

class Lease:
    def __init__(self, inner):
        self.inner = inner
        self.session = inner.session

    def load(self):
        fail("lease.load")
        return self.inner.load()

    def append(self, lines, *, expected_seq):
        fail("append")
        return self.inner.append(lines, expected_seq=expected_seq)

    def release(self):
        self.inner.release()
        fail("release")

class Store:
    name = "flaky"

    def __init__(self, workspace):
        self.inner = JsonlSessionStore(workspace)

    def describe(self):
        return self.inner.describe()

    def list_sessions(self):
        fail("list_sessions")
        return self.inner.list_sessions()

    def load(self, session):
        fail("load")
        return self.inner.load(session)

    def lease(self, session, *, wait=0.0):
        fail("lease")
        return Lease(self.inner.lease(session, wait=wait))

    def close(self):
        fail("close")

class Provider:
    name = "stub"

    def __init__(self, config, progress=None):
        pass

    async def complete(self, messages, tools):
        return ProviderReply({"role": "assistant", "content": "ok"})

@hookimpl
def nanobot_session_stores(ctx):
    return [Store(ctx.workspace)]

@hookimpl
def nanobot_providers(ctx):
    return [Provider]
"""

KEPT = ['{"role":"user","content":"before"}', '{"role":"assistant","content":"kept"}']


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The flaky store's plugin, installed in a folder put on PYTHONPATH."""
    return install_plugin(tmp_path_factory.mktemp("stores") / "site", PLUGIN, FLAKY)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace whose store holds session 'kept' and an export of it."""
    root = tmp_path / "ws"
    store = JsonlSessionStore(root)
    lease = store.lease("kept")
    try:
        lease.append(KEPT, expected_seq=lease.load().seq)
    finally:
        lease.release()
    lines = [{"nanobot_sessions_export": 1}, *({"session": "new", "line": t} for t in KEPT)]
    (tmp_path / "export.jsonl").write_text("".join(json.dumps(v) + "\n" for v in lines))
    return root


def _cli(
    site: Path, workspace: Path, *args: str, at: str = "", how: str = ""
) -> subprocess.CompletedProcess[str]:
    env = plugin_env(
        site,
        PLUGIN,
        NANOBOT_PROVIDER__NAME="stub",
        NANOBOT_SESSIONS__STORE="flaky",
        FAIL_AT=at,
        FAIL_HOW=how,
    )
    return run_cli(*args, cwd=workspace, env=env, timeout=TIMEOUT)


COMMANDS = {
    "run": ("run", "hi", "--session", "kept", "--json"),
    "sessions": ("sessions", "--json"),
    "show": ("sessions", "show", "kept", "--json"),
    "export": ("sessions", "export", "-o", "../out.jsonl"),
    "import": ("sessions", "import", "../export.jsonl"),
}
# An import names the session whose write failed before the store's error, and after it
# the sessions imported before that one (none: the export holds one session).
FAILED = {"import": "importing session 'new' into the flaky store failed: "}
IMPORTED = {"import": ". Imported before it (0): none; not imported: 'new'. "}


@pytest.mark.parametrize(
    ("command", "at", "method"),
    [
        ("run", "lease", "lease"),
        ("run", "lease.load", "load"),
        ("run", "append", "append"),
        ("run", "release", "release"),
        ("run", "close", "close"),
        ("sessions", "list_sessions", "list_sessions"),
        ("show", "load", "load"),
        ("export", "list_sessions", "list_sessions"),
        ("export", "load", "load"),
        ("import", "lease", "lease"),
        ("import", "append", "append"),
    ],
)
@pytest.mark.parametrize(
    ("how", "raised"), [("exit", "SystemExit(3)"), ("error", "RuntimeError: disk on fire")]
)
def test_a_store_raising_fails_the_command_naming_it(
    site: Path, workspace: Path, command: str, at: str, method: str, how: str, raised: str
) -> None:
    """SystemExit or a RuntimeError in any store call is exit 1 naming store, plugin and version."""
    before = JsonlSessionStore(workspace).path("kept").read_bytes()
    result = _cli(site, workspace, *COMMANDS[command], at=at, how=how)
    assert result.returncode == 1, result.stderr
    failed, imported = FAILED.get(command, ""), IMPORTED.get(command, "")
    assert f"Error: {failed}{STORE}: {method} raised {raised}{imported}" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    after = JsonlSessionStore(workspace).path("kept").read_bytes()
    if at in ("release", "close"):  # after the turn was stored, which stays whole
        assert after.startswith(before) and not JsonlSessionStore(workspace).load("kept").problems
    else:
        assert after == before
    assert not (workspace.parent / "out.jsonl").exists()


@pytest.mark.parametrize(
    ("command", "at"),
    [
        ("run", "append"),
        ("run", "lease.load"),
        ("sessions", "list_sessions"),
        ("show", "load"),
    ],
)
def test_what_a_store_prints_goes_to_the_log_and_json_stays_whole(
    site: Path, workspace: Path, command: str, at: str
) -> None:
    """A store printing under --json: stdout is one JSON document, the print a named warning."""
    result = _cli(site, workspace, *COMMANDS[command], at=at, how="print")
    assert result.returncode == 0, result.stderr
    json.loads(result.stdout)
    assert "store noise" not in result.stdout
    assert "plugin wrote to stdout" in result.stderr and f"from {PLUGIN} 0.1" in result.stderr


def test_a_run_whose_store_prints_stores_the_whole_turn(site: Path, workspace: Path) -> None:
    """The turn of a run whose store prints on every append is stored after the kept lines."""
    result = _cli(site, workspace, *COMMANDS["run"], at="append", how="print")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["answer"] == "ok"
    log = JsonlSessionStore(workspace).load("kept")
    assert log.lines[:2] == KEPT
    user, answer = log.messages()[2:]
    assert user["content"].startswith("hi\n") and answer["content"] == "ok"


@pytest.mark.parametrize(
    ("command", "at", "first", "then"),
    [
        ("run", "append,release,close", "append", "release"),
        ("run", "lease.load,release", "load", "release"),
        ("sessions", "list_sessions,close", "list_sessions", "close"),
        ("show", "load,close", "load", "close"),
        ("export", "load,close", "load", "close"),
        ("import", "append,release,close", "append", "release"),
    ],
)
def test_a_store_failing_to_close_after_an_error_does_not_hide_it(
    site: Path, workspace: Path, command: str, at: str, first: str, then: str
) -> None:
    """The error the user sees is the first one; the store's failure to close is logged."""
    result = _cli(site, workspace, *COMMANDS[command], at=at, how="error")
    assert result.returncode == 1, result.stderr
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("Error:")]
    error = f"{FAILED.get(command, '')}{STORE}: {first} raised RuntimeError: disk on fire"
    assert line.startswith(f"Error: {error}{IMPORTED.get(command, '')}")
    assert command == "import" or line == f"Error: {error}"
    assert "could not close after an error" in result.stderr
    assert f"{then} raised RuntimeError" in result.stderr  # logged, not lost
    assert "Traceback" not in result.stderr
