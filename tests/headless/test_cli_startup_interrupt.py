"""Ctrl-C while the CLI's modules load, and what the CLI's end leaves to Python's teardown."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

from nanobot_core import __main__ as entry
from nanobot_core._exit_codes import EXIT_INTERRUPTED
from nanobot_core.testing_sessions import restore_stop_signals
from tests import helpers
from tests.helpers import clean_env, plugin_env

TIMEOUT = 60

# Loaded by `site` at start-up (first on PYTHONPATH): sends this process SIGINT as the CLI
# imports click, so the KeyboardInterrupt lands inside the import, at the same spot each run.
SITECUSTOMIZE = """
import os, signal, sys

class InterruptAtClick:
    def find_spec(self, name, path=None, target=None):
        if name == "click":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, InterruptAtClick())
"""


def _interrupted_at_click(tmp_path: Path, command: list[str]) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    env = clean_env()
    env["PYTHONPATH"] = str(site)
    return subprocess.run(
        command,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        preexec_fn=restore_stop_signals,
    )


def test_ctrl_c_while_the_cli_loads_is_exit_130_without_a_traceback(tmp_path: Path) -> None:
    """A SIGINT while `python -m nanobot_core` imports click exits 130 with Interrupted. alone."""
    done = _interrupted_at_click(tmp_path, [sys.executable, "-m", "nanobot_core", "tools"])
    assert (done.returncode, done.stdout) == (EXIT_INTERRUPTED, ""), done.stderr
    assert done.stderr == "Interrupted.\n"


def test_the_script_enters_where_a_ctrl_c_while_loading_is_answered() -> None:
    """The `nanobot-core` script's entry point is the one that loads the CLI inside its guard."""
    (script,) = [
        point
        for point in importlib.metadata.entry_points(group="console_scripts")
        if point.name == "nanobot-core"
    ]
    assert script.value == "nanobot_core.__main__:main"
    assert script.load() is entry.main


# A plugin that writes to a file it never flushes nor closes: Python's teardown (a file's
# finalizer) is what writes it.
UNFLUSHED = """
from nanobot_core import hookimpl

_LOG = None

@hookimpl
def nanobot_tools(ctx):
    global _LOG
    _LOG = open("plugin.log", "w", encoding="utf-8")
    _LOG.write("written at exit")
    return []
"""


def test_a_command_that_ends_normally_leaves_the_teardown_to_python(tmp_path: Path) -> None:
    """A plugin's file left open and unflushed is still written when a command ends normally."""
    site = helpers.install_plugin(tmp_path / "site", "unflushed", UNFLUSHED)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "nanobot_core", "tools"],
        cwd=workspace,
        env=plugin_env(site, "unflushed"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert (workspace / "plugin.log").read_text(encoding="utf-8") == "written at exit"
