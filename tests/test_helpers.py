"""The suite's own helpers (tests/helpers.py)."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_core import testing
from tests.helpers import clean_env, cli_process

_NAME_TAIL = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_", min_size=1, max_size=12)


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


def test_cli_process_children_take_ctrl_c_where_the_suite_ignores_it(tmp_path: Path) -> None:
    """Run as a shell's background job (SIGINT ignored), the suite's children still take
    Ctrl-C: a `run` waiting on its model ends with 130, "Interrupted."."""
    ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with socket.create_server(("127.0.0.1", 0)) as silent:
            silent.settimeout(60)
            env = clean_env(
                NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1",
                NANOBOT_BASE_URL=f"http://127.0.0.1:{silent.getsockname()[1]}/v1",
                NANOBOT_API_KEY="test-key",
                NANOBOT_MODEL="silent",
            )
            with cli_process("run", "hi", cwd=tmp_path, env=env) as process:
                connection, _ = silent.accept()  # the run now waits for its answer
                process.send_signal(signal.SIGINT)
                _, err = process.communicate(timeout=60)
            connection.close()
    finally:
        signal.signal(signal.SIGINT, ignored)
    assert process.returncode == 130, err
    assert "Interrupted." in err


def test_cli_process_leaves_a_finished_child_as_it_ended(tmp_path: Path) -> None:
    """A child that ended on its own keeps its exit code and output; nothing is killed."""
    env = clean_env(NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1")
    with cli_process("tools", cwd=tmp_path, env=env) as process:
        out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "read_file" in out


@settings(max_examples=50, deadline=None)
@given(
    settings_tails=st.lists(
        st.tuples(st.sampled_from(testing._SETTINGS_PREFIXES), _NAME_TAIL), max_size=4
    ),
    other_tails=st.lists(_NAME_TAIL, max_size=4),
    extra_value=st.text(alphabet="abc123", max_size=5),
)
def test_clean_env_takes_out_what_nanobot_workspace_takes_out(
    settings_tails: list[tuple[str, str]], other_tails: list[str], extra_value: str
) -> None:
    """Every variable with a prefix of the workspace fixture's list (ANTHROPIC_ too) is left
    out, any other is kept, and `extra` is set over what is left."""
    names = [prefix + tail for prefix, tail in settings_tails]
    others = ["NBTEST_OTHER_" + tail for tail in other_tails]
    with pytest.MonkeyPatch.context() as patch:
        for name in [*names, *others]:
            patch.setenv(name, "set by the developer")
        env = clean_env(NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1", NBTEST_EXTRA=extra_value)
        kept_settings = {n for n in env if n.startswith(testing._SETTINGS_PREFIXES)}
        assert kept_settings == {"NANOBOT_DISABLE_PLUGIN_AUTOLOAD"}
        assert env["NANOBOT_DISABLE_PLUGIN_AUTOLOAD"] == "1"
        assert env["NBTEST_EXTRA"] == extra_value
        assert all(env[name] == "set by the developer" for name in others)
        assert env["PATH"] == os.environ["PATH"]


def test_clean_env_leaves_out_a_developers_anthropic_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's ANTHROPIC_API_KEY, like their OPENAI_ and NANOBOT_ settings, is left out."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-developer")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-developer")
    monkeypatch.setenv("NANOBOT_MODEL", "developer-model")
    env = clean_env()
    assert not {"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "NANOBOT_MODEL"} & env.keys()
    assert env["PATH"] == os.environ["PATH"]
