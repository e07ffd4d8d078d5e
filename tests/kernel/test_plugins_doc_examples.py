"""docs/plugins.md's example runs as written, and what it says of what loads holds."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from nanobot_core import Section, SectionContext, Tool, hookimpl
from nanobot_core.config import Config, PluginsConfig
from nanobot_core.kernel.manager import PluginManager
from nanobot_core.sessions import Lease, SessionStore
from tests.helpers import REPO_ROOT, plugin_env, run_cli

PAGE = (REPO_ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")


class _Remote(Tool):
    """A tool standing for one a bridge builds from a remote definition."""

    name = "remote"
    description = "A remote tool."
    parameters: dict[str, Any] = {"type": "object", "properties": {}}

    def __init__(self, name: str) -> None:
        self.name = name

    async def execute(self) -> str:
        return self.name


def _bridge() -> dict[str, Any]:
    """The page's `report_problem` example, with the helpers it leaves to the reader."""
    (block,) = [
        b for b in re.findall(r"```python\n(.*?)```", PAGE, re.DOTALL) if "report_problem" in b
    ]
    specs = [{"name": "lookup"}, {"name": "broken"}, {"name": "search"}]
    namespace: dict[str, Any] = {
        "remote_specs": lambda: specs,
        "usable": lambda spec: spec["name"] != "broken",
        "why": lambda spec: "its schema has no type",
        "make_tool": lambda spec: _Remote(spec["name"]),
    }
    exec(compile(block, "docs/plugins.md", "exec"), namespace)
    return namespace


def test_the_report_problem_example_lists_the_left_out_tool(tmp_path: Path) -> None:
    """The bridge keeps its usable tools, stays loaded in strict mode, and lists one problem."""
    config = Config(plugins=PluginsConfig(disable_autoload=True, strict=True))
    manager = PluginManager(config, workspace=tmp_path).load()
    bridge = _bridge()
    plugin = type("Bridge", (), {"nanobot_tools": staticmethod(bridge["nanobot_tools"])})()
    manager.register(plugin, "bridge", distribution="nanobot-bridge", version="0.2")
    manager.records()
    manager.register(object(), "other")  # a new plugin: the tools are collected again
    (record,) = [r for r in manager.records() if r.info.name == "bridge"]
    assert record.status == "loaded"
    assert [c.name for c in record.contributions] == ["lookup", "search"]
    assert record.problems == ["remote tool 'broken' left out: its schema has no type"]
    assert bridge["report_problem"]("called outside a hook") is False


class _Identity:
    @hookimpl
    def nanobot_prompt_sections(self, ctx: Any) -> list[Section]:
        return [Section("identity", 100, lambda c: "I am the plugin's identity.")]


def test_a_disabled_builtin_is_blocked_and_frees_its_names(tmp_path: Path) -> None:
    """`[plugins] disabled_builtins` blocks that built-in; its names are then a plugin's to take."""
    config = Config(
        plugins=PluginsConfig(
            disable_autoload=True, disabled_builtins=["builtin:prompt", "builtin:nothing"]
        )
    )
    with capture_logs() as logs:
        manager = PluginManager(config, workspace=tmp_path).load()
    (unknown,) = [e for e in logs if e["event"].startswith("unknown built-in plugin")]
    assert (unknown["log_level"], unknown["name"]) == ("warning", "builtin:nothing")
    manager.register(_Identity(), "identity", distribution="nanobot-identity")
    status = {r.info.name: (r.status, r.error) for r in manager.records()}
    assert status["builtin:prompt"] == ("blocked", "disabled in config")
    assert status["builtin:tools"] == ("loaded", None)
    ctx = SectionContext(workspace=tmp_path, config=config)
    assert manager.prompt_builder().build(ctx).text == "I am the plugin's identity."


def _install_echo(site: Path) -> Path:
    """The page's provider example as distribution my-echo 1.0, entry point `echo`.

    With ECHO_EMPTY set, the same provider is asked with no messages, as the page's error
    line supposes.
    """
    (block,) = [
        b for b in re.findall(r"```python\n(.*?)```", PAGE, re.DOTALL) if "class EchoProvider" in b
    ]
    failing = (
        "\n\nimport os\n\n\n"
        "class _Empty(EchoProvider):\n"
        "    async def complete(self, messages, tools):\n"
        "        return await EchoProvider.complete(self, [], tools)\n\n\n"
        "if os.environ.get('ECHO_EMPTY'):\n"
        "    _Empty.name = 'echo'\n"
        "    nanobot_providers = hookimpl(lambda ctx: [_Empty])\n"
    )
    (site / "my_echo").mkdir(parents=True)
    (site / "my_echo" / "__init__.py").write_text(block + failing, encoding="utf-8")
    info = site / "my_echo-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-echo\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[nanobot.plugins]\necho = my_echo\n")
    return site


def test_the_provider_example_answers_a_run_and_its_error_reads_as_quoted(tmp_path: Path) -> None:
    """`run --provider echo` answers with the prompt's first words; its ProviderError is quoted."""
    site = _install_echo(tmp_path / "site")
    workspace = tmp_path / "work"
    workspace.mkdir()
    env = plugin_env(site, "echo")
    answered = run_cli("run", "tell me a story", "--provider", "echo", cwd=workspace, env=env)
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout == "tell me a\n"
    failed = run_cli(
        "run", "hi", "--provider", "echo", cwd=workspace, env={**env, "ECHO_EMPTY": "1"}
    )
    assert failed.returncode == 1, failed.stderr
    (quoted,) = re.findall(r"`(Error: provider 'echo'[^`]*)`", " ".join(PAGE.split()))
    assert quoted in failed.stderr.splitlines()
    assert "Traceback" not in failed.stderr


def test_the_session_store_section_names_every_method_of_the_protocol() -> None:
    """The session store section names each method a store and its lease need, and hypothesis."""
    section = PAGE[PAGE.index("## A session store") : PAGE.index("Every call into a store")]
    spans = set(re.findall(r"`(\w+)\(", section))
    store_methods = {"describe", "list_sessions", "load", "lease", "close"}
    lease_methods = {"load", "append", "release"}
    assert store_methods | lease_methods <= spans
    assert all(callable(getattr(SessionStore, name)) for name in store_methods)
    assert all(callable(getattr(Lease, name)) for name in lease_methods)
    assert "`hypothesis`" in section
