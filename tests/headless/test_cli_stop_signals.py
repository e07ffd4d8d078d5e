"""SIGTERM and SIGHUP end a command as Ctrl-C does, with exit 143 ``Terminated.`` and 129
``Hung up.``.

A service manager, a container runtime and a closed terminal stop a process with them:
each moment of a ``run`` (the model holding a request, just after an answer, a tool
running, any time), while the CLI's modules load, and once the answer is printed while a
store still saves, with real child processes (`nanobot_core.testing_sessions`).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nanobot_core._exit_codes import EXIT_HUNG_UP, EXIT_INTERRUPTED, EXIT_TERMINATED
from nanobot_core.testing_sessions import (
    MOMENTS,
    RunProcess,
    ScriptedModel,
    ScriptedRun,
    check_appended,
    check_calls_once,
    restore_stop_signals,
)
from tests import helpers
from tests.headless.conftest import API_KEY
from tests.headless.fake_server import FakeChatServer, text_reply
from tests.headless.test_cli_run_finishing import HANGING_THREAD, LATE_STORE
from tests.headless.test_cli_startup_interrupt import SITECUSTOMIZE
from tests.helpers import clean_env, cli_process, plugin_env

TIMEOUT = 30.0
#: Each stop signal, the exit status and the stderr line it ends a command with.
ENDINGS = [
    pytest.param(signal.SIGTERM, EXIT_TERMINATED, "Terminated.\n", id="SIGTERM"),
    pytest.param(signal.SIGHUP, EXIT_HUNG_UP, "Hung up.\n", id="SIGHUP"),
]
SESSION = "s"
LIST_DIR: dict[str, Any] = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "list_dir", "arguments": json.dumps({"path": "."})},
}
SCRIPT: list[dict[str, Any]] = [
    {"role": "assistant", "content": "looking", "tool_calls": [LIST_DIR]},
    {"role": "assistant", "content": "done"},
]


def _session(workspace: Path) -> list[dict[str, Any]]:
    path = workspace / ".nanobot" / "sessions" / f"{SESSION}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _start(model: ScriptedModel[int], run: ScriptedRun[int], workspace: Path) -> RunProcess[int]:
    env = clean_env(
        NANOBOT_DISABLE_PLUGIN_AUTOLOAD="1",
        NANOBOT_MODEL="fake-model",
        NANOBOT_API_KEY=API_KEY,
        NANOBOT_PROVIDER__MAX_RETRIES="0",
    )
    stdout = workspace.parent / f"stdout-{len(model.runs)}"
    return model.start_run(run, cwd=workspace, env=env, stdout=stdout)


@pytest.mark.parametrize("moment", MOMENTS)
@pytest.mark.parametrize(("signum", "status", "words"), ENDINGS)
def test_a_stop_signal_at_each_moment_of_a_run_ends_it_as_ctrl_c_does(
    tmp_path: Path, moment: str, signum: int, status: int, words: str
) -> None:
    """At each moment the signal ends the run with its status and words alone, the session
    holds what the run stored, whole and once, and the next run goes on from it."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    rng = random.Random(f"{moment} {signum}")
    with ScriptedModel(lambda run: len(run.requests), timeout=TIMEOUT) as model:
        run: ScriptedRun[int] = ScriptedRun(
            SESSION, "turn 1: go", list(SCRIPT), moment, hold_at=1, reply_at=0
        )
        _start(model, run, workspace).signal_at(moment, rng, window=(0.05, 0.6), signum=signum)
        stored = _session(workspace)
        if run.returncode != 0:  # at "random", or just after the last answer, it may finish
            assert (run.returncode, run.stdout) == (status, ""), run.stderr
            assert run.stderr.endswith(words) and "Traceback" not in run.stderr, run.stderr
            assert run.stderr.count(words) == 1, run.stderr
        assert check_appended([], stored, [run.turn()]) == []
        again: ScriptedRun[int] = ScriptedRun(
            SESSION, "turn 2: again", [{"role": "assistant", "content": "ok"}]
        )
        _start(model, again, workspace).signal_at(None, rng, window=(0.05, 0.6))
        assert again.returncode == 0, again.stderr
        resumed = _session(workspace)
        assert check_appended(stored, resumed, [again.turn()]) == []
        assert check_calls_once(resumed) == []
        assert model.problems == []


def _started_with(site: Path, command: list[str], signum: int) -> subprocess.CompletedProcess[str]:
    """`command` run with `site` first on its path, whose sitecustomize sends it `signum`."""
    (site / "sitecustomize.py").write_text(
        SITECUSTOMIZE.replace("signal.SIGINT", f"signal.{signal.Signals(signum).name}"),
        encoding="utf-8",
    )
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    return subprocess.run(
        command,
        cwd=site,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        preexec_fn=restore_stop_signals,
    )


@pytest.mark.parametrize(("signum", "status", "words"), ENDINGS)
def test_a_stop_signal_while_the_cli_loads_ends_it_without_a_traceback(
    tmp_path: Path, signum: int, status: int, words: str
) -> None:
    """The signal, while `python -m nanobot_core` imports click, exits with its status and
    its words alone."""
    done = _started_with(tmp_path, [sys.executable, "-m", "nanobot_core", "tools"], signum)
    assert (done.returncode, done.stdout) == (status, ""), done.stderr
    assert done.stderr == words


@pytest.mark.parametrize(("signum", "status", "words"), ENDINGS)
def test_a_stop_signal_while_the_turn_is_saved_after_the_answer_waits_for_the_save(
    tmp_path: Path, server: FakeChatServer, signum: int, status: int, words: str
) -> None:
    """After the answer, while a store's thread still saves the turn, the signal lets the
    save end: the turn is stored once, then the process exits with the signal's status."""
    site = helpers.install_plugin(
        tmp_path / "site", "lateplug", LATE_STORE.replace("HOW", "'thread'")
    )
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    server.add(text_reply("the answer"))
    env = plugin_env(
        site,
        "lateplug",
        NANOBOT_BASE_URL=server.base_url,
        NANOBOT_MODEL="fake-model",
        NANOBOT_API_KEY=API_KEY,
        NANOBOT_PROVIDER__MAX_RETRIES="0",
        NANOBOT_SESSIONS__STORE="late",
    )
    with cli_process("run", "hello", cwd=workspace, env=env) as process:
        assert process.stdout is not None
        assert process.stdout.readline() == "the answer\n"
        _wait_for(workspace / "saving", process)
        process.send_signal(signum)
        time.sleep(0.3)  # the signal is handled while the save still waits
        assert process.poll() is None, "the signal did not wait for the save"
        (workspace / "go").touch()
        out, err = process.communicate(timeout=TIMEOUT)
    assert (process.returncode, out) == (status, ""), err
    assert err.endswith(words) and "Traceback" not in err, err
    stored = (workspace / ".nanobot" / "sessions" / "default.jsonl").read_text(encoding="utf-8")
    said = [
        (m.get("role"), m.get("content"))
        for m in map(json.loads, stored.splitlines())
        if "role" in m
    ]
    assert [role for role, _ in said] == ["user", "assistant"], said
    assert said[-1] == ("assistant", "the answer"), said


@pytest.mark.parametrize(("signum", "status", "words"), ENDINGS)
def test_a_second_stop_signal_while_a_plugin_thread_hangs_at_the_end_ends_at_once(
    tmp_path: Path, signum: int, status: int, words: str
) -> None:
    """The first signal after the command waits for a plugin's thread; a second one ends the
    process at once with the signal's status."""
    site = helpers.install_plugin(tmp_path / "site", "hangplug", HANGING_THREAD)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with cli_process("tools", cwd=workspace, env=plugin_env(site, "hangplug")) as process:
        _wait_for(workspace / "waiting", process)
        process.send_signal(signum)
        time.sleep(0.3)
        assert process.poll() is None, "the first signal did not wait for the thread"
        process.send_signal(signum)
        out, err = process.communicate(timeout=15)
    assert process.returncode == status, err
    assert err.endswith(words) and "Traceback" not in err, err
    assert "edit_file" in out  # the command's own output was written before


# A hook that blocks until the process is stopped: plain code, no event loop to cancel.
BLOCKING_HOOK = """
import pathlib, time
from nanobot_core import hookimpl

@hookimpl
def nanobot_tools(ctx):
    pathlib.Path("entered").write_text("yes")
    time.sleep(120)
    return []
"""


@pytest.mark.parametrize("ctrl_c_ignored", [False, True], ids=["foreground", "background"])
@pytest.mark.parametrize(("signum", "status", "words"), ENDINGS)
def test_a_stop_signal_in_a_hook_that_blocks_stops_the_command(
    tmp_path: Path, signum: int, status: int, words: str, ctrl_c_ignored: bool
) -> None:
    """The signal stops a hook that blocks, as Ctrl-C does, not as the plugin's failure; so
    it does where Ctrl-C is ignored, as in a job a shell script starts in the background."""
    site = helpers.install_plugin(tmp_path / "site", "blockplug", BLOCKING_HOOK)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    ignoring = (signal.SIGINT,) if ctrl_c_ignored else ()
    env = plugin_env(site, "blockplug")
    with cli_process("tools", cwd=workspace, env=env, ignoring=ignoring) as process:
        _wait_for(workspace / "entered", process)
        process.send_signal(signum)
        out, err = process.communicate(timeout=15)
    assert (process.returncode, out) == (status, ""), err
    # click starts a new line first, as after a ^C a terminal shows.
    assert err.strip() == words.strip(), err


# The same hook, its blocking code run from a string, as a dataclass's or a named tuple's
# methods are made (`exec`), which CPython notes an interrupt leaving as unhandled.
BLOCKING_STRING_CODE = """
from nanobot_core import hookimpl

@hookimpl
def nanobot_tools(ctx):
    exec("import pathlib, time\\npathlib.Path('entered').write_text('yes')\\ntime.sleep(120)")
    return []
"""


@pytest.mark.parametrize(
    ("signum", "status", "words"),
    [*ENDINGS, pytest.param(signal.SIGINT, EXIT_INTERRUPTED, "Interrupted.\n", id="SIGINT")],
)
def test_a_stop_signal_in_code_run_from_a_string_ends_with_its_status(
    tmp_path: Path, signum: int, status: int, words: str
) -> None:
    """Stopped in code that `exec` runs from a string, the command still ends with the signal's
    status and words, not by a SIGINT Python sends itself after its teardown."""
    site = helpers.install_plugin(tmp_path / "site", "execplug", BLOCKING_STRING_CODE)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with cli_process("tools", cwd=workspace, env=plugin_env(site, "execplug")) as process:
        _wait_for(workspace / "entered", process)
        process.send_signal(signum)
        out, err = process.communicate(timeout=15)
    assert (process.returncode, out) == (status, ""), err
    assert err.strip() == words.strip(), err


def test_sighup_ignored_as_nohup_leaves_it_is_left_ignored(tmp_path: Path) -> None:
    """A SIGHUP the parent made ignored (``nohup``) does not stop the command; SIGTERM does."""
    site = helpers.install_plugin(tmp_path / "site", "blockplug", BLOCKING_HOOK)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    env = plugin_env(site, "blockplug")
    with cli_process("tools", cwd=workspace, env=env, ignoring=(signal.SIGHUP,)) as process:
        _wait_for(workspace / "entered", process)
        process.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert process.poll() is None, "the ignored SIGHUP stopped the command"
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=15)
    assert (process.returncode, err.strip()) == (EXIT_TERMINATED, "Terminated."), err


def _wait_for(path: Path, process: subprocess.Popen[str]) -> None:
    """Wait until the plugin in `process` has made `path` (it then waits or blocks)."""
    deadline = time.monotonic() + TIMEOUT
    while not path.exists():
        assert process.poll() is None, process.communicate()[1]
        assert time.monotonic() < deadline, f"{path.name} was never made"
        time.sleep(0.01)


def _can_start_a_pid_namespace() -> bool:
    try:
        done = subprocess.run(
            ["unshare", "--pid", "--fork", "true"], capture_output=True, timeout=TIMEOUT
        )
    except OSError:  # no unshare
        return False
    return done.returncode == 0


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _can_start_a_pid_namespace(),
    reason="needs unshare and the right to start a PID namespace",
)
def test_sigterm_stops_the_command_as_a_containers_first_process(tmp_path: Path) -> None:
    """As the first process of a PID namespace (``ENTRYPOINT ["nanobot-core"]``), where the
    kernel drops a signal nothing handles, SIGTERM from outside stops the command, exit 143."""
    site = helpers.install_plugin(tmp_path / "site", "blockplug", BLOCKING_HOOK)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    command = ["unshare", "--pid", "--fork", sys.executable, "-m", "nanobot_core", "tools"]
    with subprocess.Popen(
        command,
        cwd=workspace,
        env=plugin_env(site, "blockplug"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=restore_stop_signals,
    ) as process:
        first = None
        try:
            _wait_for(workspace / "entered", process)
            children = Path(f"/proc/{process.pid}/task/{process.pid}/children")
            (first,) = map(int, children.read_text(encoding="utf-8").split())
            os.kill(first, signal.SIGTERM)
            _, err = process.communicate(timeout=15)
        finally:
            if process.poll() is None:
                if first is not None:  # the namespace's first process: unshare waits for it
                    os.kill(first, signal.SIGKILL)
                process.kill()
    assert (process.returncode, err.strip()) == (EXIT_TERMINATED, "Terminated."), err
