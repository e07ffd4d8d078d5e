"""Ctrl-C once `nanobot-core run` has printed its answer, while the process finishes.

A session store plugin saves the turn late: its lease keeps the lines it is
given and writes them when it is released, from an atexit callback or from a
thread of its own (once the main thread is done and waits to join it), and only
once the test lets it (a file named ``go``). The answer is printed by then; the
test sends SIGINT while the save waits, then lets it go on.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests import helpers
from tests.headless.conftest import API_KEY
from tests.headless.fake_server import FakeChatServer, text_reply
from tests.helpers import cli_process, plugin_env

TIMEOUT = 60
PLUGIN = "lateplug"

# A store whose lease saves the turn's lines only when released, late (HOW: "thread" or
# "atexit"), and not before the test creates the file `go` in the workspace.
LATE_STORE = """
import atexit, pathlib, threading, time
from nanobot_core import hookimpl
from nanobot_core.jsonl_store import JsonlSessionStore

def wait_for_go():
    deadline = time.monotonic() + 60
    # From a thread: once the main thread is past the command, waiting to join this one.
    while threading.main_thread().is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    pathlib.Path("saving").write_text("yes")
    while not pathlib.Path("go").exists() and time.monotonic() < deadline:
        time.sleep(0.01)

class LateLease:
    def __init__(self, lease):
        self.session = lease.session
        self._lease = lease
        self._lines = []
        self._seq = 0
        self._released = False

    def load(self):
        log = self._lease.load()
        self._seq = log.seq
        return log

    def append(self, lines, *, expected_seq):
        self._lines.extend(lines)
        self._seq += len(lines)
        return self._seq

    def release(self):
        if self._released:
            return
        self._released = True
        lines = self._lines

        def save():
            wait_for_go()
            self._lease.append(lines, expected_seq=self._seq - len(lines))
            self._lease.release()

        if HOW == "thread":
            threading.Thread(target=save).start()
        else:
            atexit.register(save)

class LateStore(JsonlSessionStore):
    name = "late"

    def lease(self, session, *, wait=0.0):
        return LateLease(super().lease(session, wait=wait))

@hookimpl
def nanobot_session_stores(ctx):
    return [LateStore(ctx.workspace)]
"""


@pytest.mark.parametrize("how", ["thread", "atexit"])
def test_ctrl_c_while_the_turn_is_saved_after_the_answer_exits_130_with_the_turn_stored(
    tmp_path: Path, server: FakeChatServer, how: str
) -> None:
    """SIGINT after the answer, while a store still saves: exit 130, Interrupted., turn stored."""
    site = helpers.install_plugin(tmp_path / "site", PLUGIN, LATE_STORE.replace("HOW", repr(how)))
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    server.add(text_reply("the answer"))
    env = plugin_env(
        site,
        PLUGIN,
        NANOBOT_BASE_URL=server.base_url,
        NANOBOT_MODEL="fake-model",
        NANOBOT_API_KEY=API_KEY,
        NANOBOT_PROVIDER__MAX_RETRIES="0",
        NANOBOT_SESSIONS__STORE="late",
    )
    with cli_process("run", "hello", cwd=workspace, env=env) as process:
        assert process.stdout is not None
        assert process.stdout.readline() == "the answer\n"
        deadline = time.monotonic() + TIMEOUT
        while not (workspace / "saving").exists():
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "the store never began to save"
            time.sleep(0.01)
        process.send_signal(signal.SIGINT)
        time.sleep(0.3)  # the signal is handled while the save still waits
        (workspace / "go").touch()
        out, err = process.communicate(timeout=TIMEOUT)
    assert (process.returncode, out) == (130, ""), err
    assert err.endswith("Interrupted.\n") and "Traceback" not in err, err
    stored = (workspace / ".nanobot" / "sessions" / "default.jsonl").read_text(encoding="utf-8")
    messages = [json.loads(line) for line in stored.splitlines()]
    said = [(m.get("role"), m.get("content")) for m in messages if "role" in m]
    assert said[0][0] == "user" and said[0][1].startswith("hello"), said
    assert said[-1] == ("assistant", "the answer"), said


# A plugin whose thread never ends by itself once the command is done (a save that hangs):
# it waits for a file `go` that the test never makes, for longer than the test waits.
HANGING_THREAD = """
import pathlib, threading, time
from nanobot_core import hookimpl

def hang():
    while threading.main_thread().is_alive():
        time.sleep(0.01)
    pathlib.Path("waiting").write_text("yes")
    deadline = time.monotonic() + 120
    while not pathlib.Path("go").exists() and time.monotonic() < deadline:
        time.sleep(0.01)

@hookimpl
def nanobot_tools(ctx):
    threading.Thread(target=hang).start()
    return []
"""


def test_a_second_ctrl_c_while_a_plugin_thread_hangs_at_the_end_exits_130_at_once(
    tmp_path: Path,
) -> None:
    """The first SIGINT after the command waits for a plugin's thread; a second one ends it, 130."""
    site = helpers.install_plugin(tmp_path / "site", "hangplug", HANGING_THREAD)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with cli_process("tools", cwd=workspace, env=plugin_env(site, "hangplug")) as process:
        deadline = time.monotonic() + TIMEOUT
        while not (workspace / "waiting").exists():
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "the plugin's thread never began to wait"
            time.sleep(0.01)
        process.send_signal(signal.SIGINT)
        time.sleep(0.3)
        assert process.poll() is None, "the first Ctrl-C did not wait for the thread"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=15)
    assert process.returncode == 130, err
    assert err.endswith("Interrupted.\n") and "Traceback" not in err, err
    assert "edit_file" in out  # the command's own output was written before
