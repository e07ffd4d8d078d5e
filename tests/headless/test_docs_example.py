"""The Python example in docs/headless.md honours NANOBOT_* and nanobot.toml, like the CLI."""

from __future__ import annotations

import re
from pathlib import Path

from tests.headless.conftest import API_KEY
from tests.headless.fake_server import FakeChatServer, text_reply
from tests.helpers import REPO_ROOT, clean_env, run_python


def _example() -> str:
    text = (REPO_ROOT / "docs" / "headless.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    (block,) = [b for b in blocks if "Runner.from_plugins" in b]
    return block


def test_the_python_example_uses_nanobot_toml_and_the_environment(
    tmp_path: Path, server: FakeChatServer
) -> None:
    """Run as written, the example asks the server nanobot.toml names, with the env's key."""
    server.add(text_reply("a summary"))
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("# demo\n", encoding="utf-8")
    (tmp_path / "nanobot.toml").write_text(
        f'[provider]\nbase_url = "{server.base_url}"\nmodel = "model-from-toml"\n',
        encoding="utf-8",
    )
    env = clean_env(NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1", NANOBOT_API_KEY=API_KEY)
    result = run_python(_example(), cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("a summary ")
    (request,) = server.requests
    assert request.body["model"] == "model-from-toml"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
