"""`nanobot-core run` with a stderr it cannot write: progress is lost, the turn is not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.headless.conftest import cli_env
from tests.headless.fake_server import FakeChatServer, text_reply, tool_call_reply

TIMEOUT = 60


def _script(server: FakeChatServer) -> None:
    """A turn with progress to show: the model waits, a tool runs, then the model answers."""
    asking = tool_call_reply([("c1", "read_file", json.dumps({"path": "a.txt"}))])
    asking.delay = 2.5  # past the first "waiting for the model" line on a pipe
    server.add(asking, text_reply("the file says hello"))


def _run(
    workspace: Path, server: FakeChatServer, **stderr: Any
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nanobot_core", "run", "read a.txt", "--workspace", str(workspace)],
        env=cli_env(server),
        stdout=subprocess.PIPE,
        text=True,
        timeout=TIMEOUT,
        check=False,
        **stderr,
    )


def _closed_stderr() -> None:
    os.close(2)


STDERRS: dict[str, Callable[[], dict[str, Any]]] = {
    "closed": lambda: {"stderr": None, "preexec_fn": _closed_stderr},
    "full": lambda: {"stderr": open("/dev/full", "w")},  # noqa: SIM115 (closed with the child)
}


@pytest.mark.parametrize("how", sorted(STDERRS))
def test_a_stderr_that_cannot_be_written_does_not_end_the_turn(
    tmp_path: Path, server: FakeChatServer, how: str
) -> None:
    """With stderr closed or on a full disk, the answer still comes and the session is whole."""
    (tmp_path / "a.txt").write_text("hello\n", encoding="utf-8")
    _script(server)
    options = STDERRS[how]()
    try:
        result = _run(tmp_path, server, **options)
    finally:
        if options.get("stderr") is not None:
            options["stderr"].close()
    assert result.returncode == 0
    assert result.stdout == "the file says hello\n"
    session = tmp_path / ".nanobot" / "sessions" / "default.jsonl"
    records = [json.loads(line) for line in session.read_text(encoding="utf-8").splitlines()]
    roles = [record.get("role") for record in records if "role" in record]
    assert roles == ["user", "assistant", "tool", "assistant"]
