"""The suite's own helpers (tests/helpers.py)."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

import pytest

from tests.helpers import clean_env, cli_process


def test_cli_process_kills_a_child_still_running_when_the_test_fails(tmp_path: Path) -> None:
    """A `run` waiting on a model that never answers is killed and reaped, its pipes closed,
    when a failed assertion leaves the block."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        silent.settimeout(60)
        port = silent.getsockname()[1]
        env = clean_env(
            NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1",
            NANOBOT_BASE_URL=f"http://127.0.0.1:{port}/v1",
            NANOBOT_API_KEY="test-key",
            NANOBOT_MODEL="silent",
        )
        with (
            pytest.raises(AssertionError, match="the test failed"),
            cli_process("run", "hi", cwd=tmp_path, env=env) as process,
        ):
            connection, _ = silent.accept()  # the run now waits for its answer
            started = time.monotonic()
            raise AssertionError("the test failed")
        connection.close()
    assert process.returncode == -signal.SIGKILL
    assert time.monotonic() - started < 10
    assert process.stdout is not None and process.stdout.closed
    assert process.stderr is not None and process.stderr.closed


def test_cli_process_leaves_a_finished_child_as_it_ended(tmp_path: Path) -> None:
    """A child that ended on its own keeps its exit code and output; nothing is killed."""
    env = clean_env(NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1")
    with cli_process("tools", cwd=tmp_path, env=env) as process:
        out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "read_file" in out
