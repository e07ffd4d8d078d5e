"""`nanobot-core run` (the installed script) on faults no retry can cure, and while it waits."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import attrs
import pytest

from tests.headless.conftest import API_KEY
from tests.headless.fake_server import FakeChatServer, error_reply, text_reply
from tests.helpers import clean_env, run_cli

TIMEOUT = 60


def _run(workspace: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = shutil.which("nanobot-core")
    assert script is not None, "the nanobot-core script is not on PATH"
    base = clean_env(
        NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1",
        NANOBOT_MODEL="fake-model",
        NANOBOT_PROVIDER__MAX_RETRIES="3",
        NANOBOT_PROVIDER__BACKOFF_BASE="0.001",
        **env,
    )
    return run_cli("run", *args, cwd=workspace, env=base, timeout=TIMEOUT, program=[script])


@pytest.mark.parametrize(
    "base_url", ["ftp://127.0.0.1/v1", "localhost:11434/v1", "not a url", "http:///v1"]
)
def test_a_base_url_that_is_not_http_is_a_config_fault(tmp_path: Path, base_url: str) -> None:
    """A base URL that is not http(s) is exit 2 naming provider.base_url, with no retries."""
    result = _run(tmp_path, "hi", "--base-url", base_url, env={"NANOBOT_API_KEY": API_KEY})
    assert result.returncode == 2, result.stderr
    assert "provider.base_url" in result.stderr
    assert "is not an http(s) URL" in result.stderr
    assert "retry" not in result.stderr.lower()
    assert "Traceback" not in result.stderr


def test_a_remote_server_without_a_key_is_a_config_fault(tmp_path: Path) -> None:
    """No key for the default (remote) server is exit 2 naming provider.api_key, no request."""
    result = _run(tmp_path, "hi", env={})
    assert result.returncode == 2, result.stderr
    assert "provider.api_key is not set" in result.stderr
    assert "NANOBOT_API_KEY" in result.stderr
    assert "https://api.openai.com/v1" in result.stderr


BAD_CONFIGS = {
    "invalid TOML": ("x = [\n", {}),
    "unknown key": ("[bogus]\na = 1\n", {}),
    "bad value": ('[runner]\nmax_iterations = "x"\n', {}),
    "unknown provider": ('[provider]\nname = "nope"\n', {}),
    "base URL not http": ('[provider]\nbase_url = "ftp://127.0.0.1/v1"\n', {}),
    "remote server without a key": ("", {"NANOBOT_API_KEY": ""}),
    "unknown session store": ('[sessions]\nstore = "nope"\n', {}),
    "unknown stage option": ("[governance.stages.compact_results]\nkep = 1\n", {}),
}


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under `root`, relative, with a file's bytes (None for a folder)."""
    return {
        str(path.relative_to(root)): None if path.is_dir() else path.read_bytes()
        for path in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("existing", [False, True], ids=["new workspace", "existing session"])
@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_a_bad_config_leaves_the_workspace_as_it_was(
    tmp_path: Path, case: str, existing: bool
) -> None:
    """A run that fails on its config (exit 2) creates no session, lock or folder, changes none."""
    text, env = BAD_CONFIGS[case]
    (tmp_path / "nanobot.toml").write_text(text, encoding="utf-8")
    if existing:
        sessions = tmp_path / ".nanobot" / "sessions"
        sessions.mkdir(parents=True)
        (sessions / "default.jsonl").write_bytes(b'{"role": "user", "content": "kept"}\n')
    before = _tree(tmp_path)
    result = _run(tmp_path, "hi", env={"NANOBOT_API_KEY": API_KEY, **env})
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("Error: configuration: ")
    assert "Traceback" not in result.stderr
    assert _tree(tmp_path) == before


def test_a_local_server_needs_no_key(tmp_path: Path, server: FakeChatServer) -> None:
    """A server on 127.0.0.1 is asked without a key, and no Authorization header is sent."""
    server.add(text_reply("hello there"))
    result = _run(tmp_path, "hi", "--base-url", server.base_url, env={})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hello there\n"
    assert "authorization" not in server.requests[0].headers


def test_a_4xx_is_not_retried_and_shows_the_servers_message(
    tmp_path: Path, server: FakeChatServer
) -> None:
    """A 400 is exit 1 after one request, with the server's own message on stderr."""
    server.add(error_reply(400, "model 'fake-model' does not exist"))
    result = _run(tmp_path, "hi", "--base-url", server.base_url, env={"NANOBOT_API_KEY": API_KEY})
    assert result.returncode == 1
    assert "HTTP 400: model 'fake-model' does not exist" in result.stderr
    assert len(server.requests) == 1


def test_run_shows_elapsed_time_while_the_model_is_slow(
    tmp_path: Path, server: FakeChatServer
) -> None:
    """Off a TTY, a slow reply gets 'waiting for the model' lines with the seconds so far."""
    server.add(attrs.evolve(text_reply("slow answer"), delay=4.5))
    result = _run(tmp_path, "hi", "--base-url", server.base_url, env={"NANOBOT_API_KEY": API_KEY})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "slow answer\n"
    waiting = [line for line in result.stderr.splitlines() if "waiting for the model" in line]
    assert waiting, result.stderr
    assert waiting[0].startswith("nanobot: waiting for the model (round 1): ")
    assert waiting[0].endswith("s")
