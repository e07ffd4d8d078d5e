"""One command does each piece of its set-up work once: the config check, the tool list."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nanobot_core.config as config_module
from nanobot_core.cli import cli
from nanobot_core.errors import ConfigError
from tests.helpers import install_plugin, plugin_env, run_cli


@pytest.fixture
def counted_checks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., Any]:
    """Run a command in-process in a folder with a nanobot.toml, counting the config checks
    (each check, `load_config`'s or `check_config`'s, checks the ranges once)."""
    monkeypatch.setenv("NANOBOT_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.chdir(tmp_path)
    checks: list[object] = []
    check_ranges = config_module._check_ranges

    def counted(config: Any) -> None:
        checks.append(config)
        check_ranges(config)

    monkeypatch.setattr(config_module, "_check_ranges", counted)

    def run(toml: str, *args: str) -> tuple[int, int, str]:
        """The exit code, the checks made, and stderr (or the error raised, as the CLI says
        it: outside `main`, click leaves a ConfigError to its caller)."""
        (tmp_path / "nanobot.toml").write_text(toml, encoding="utf-8")
        checks.clear()
        result = CliRunner().invoke(cli, list(args))
        said = str(result.exception) if isinstance(result.exception, ConfigError) else ""
        return result.exit_code, len(checks), said or result.stderr

    return run


@pytest.mark.parametrize(
    "args",
    [("tools", "--json"), ("call", "list_dir", "{}"), ("prompt",)],
)
def test_a_command_checks_its_config_once(counted_checks: Callable[..., Any], args: Any) -> None:
    """The config a command loads is checked as it is read, not again when its plugin manager
    is built (it was checked twice per command)."""
    code, checks, stderr = counted_checks("[tools]\ntimeout = 30\n", *args)
    assert (code, checks) == (0, 1), stderr


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(timeout=st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**40), 2**40))
def test_a_value_the_one_check_refuses_is_still_refused_with_its_source(
    counted_checks: Callable[..., Any], timeout: float
) -> None:
    """Whatever a file sets tools.timeout to, the one check refuses what is not above 0,
    naming the file and the key, and lets the rest through."""
    code, checks, said = counted_checks(f"[tools]\ntimeout = {timeout!r}\n", "tools", "--json")
    assert checks == 1
    if timeout > 0:
        assert code == 0, said
    else:
        assert code != 0
        assert said.startswith(f"{Path.cwd() / 'nanobot.toml'}: tools.timeout: must be more than 0")


# A plugin whose tools hook writes down each call, in the working folder.
_COUNTED_TOOLS = """
from pathlib import Path
from typing import Any

from nanobot_core import Tool, hookimpl


class Ping(Tool):
    name = "ping"
    description = "Answers pong."
    parameters: dict[str, Any] = {"type": "object"}

    async def execute(self) -> str:
        return "pong"


@hookimpl
def nanobot_tools(ctx: Any) -> list[Any]:
    with Path("tools-hook.log").open("a", encoding="utf-8") as log:
        log.write("asked\\n")
    return [Ping()]
"""


@pytest.mark.parametrize("args", [("tools", "--json"), ("call", "ping"), ("plugins", "--json")])
def test_a_command_asks_a_plugin_for_its_tools_once(tmp_path: Path, args: Any) -> None:
    """`tools`, `call` and `plugins` each call a plugin's tools hook once: the tool list is
    collected once per command, whatever reads it (registry, owners, listing)."""
    site = install_plugin(tmp_path / "site", "pinger", _COUNTED_TOOLS)
    work = tmp_path / "work"
    work.mkdir()
    done = run_cli(*args, cwd=work, env=plugin_env(site, "pinger"))
    assert done.returncode == 0, done.stderr
    assert (work / "tools-hook.log").read_text(encoding="utf-8") == "asked\n"


def test_a_governance_value_changed_after_the_manager_is_built_is_refused_by_the_governor(
    tmp_path: Path,
) -> None:
    """The manager checks its config when built; one changed afterwards (as code holding the
    manager, or a plugin handed ``ctx.config``, may change it) is refused when the governor is
    built from it, naming the key: the governor's check of its table is no repeat."""
    from nanobot_core.kernel.manager import PluginManager
    from nanobot_core.testing import make_config

    manager = PluginManager(make_config({}), workspace=tmp_path, autoload=False).load()
    manager.config.governance.context_window = "1k"  # type: ignore[assignment]
    with pytest.raises(ConfigError, match=r"^governance\.context_window: expected an integer"):
        manager.governor()
