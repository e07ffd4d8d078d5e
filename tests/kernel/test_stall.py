"""The stall watch: plugin code that holds the watched thread too long is named, nothing else."""

from __future__ import annotations

import importlib
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from nanobot_core._stall import StallWatch, plugin_packages, stalled_call
from nanobot_core.kernel.records import PluginInfo, PluginRecord, builtin_info

# A plugin package with two entry-point modules: `hooks` calls into `work`, which waits.
PACKAGE = {
    "__init__.py": "",
    "work.py": """
        def wait_for(event):
            event.wait(30)
    """,
    "hooks.py": """
        from . import work

        def slow_stage(event):
            work.wait_for(event)
    """,
    "other.py": """
        def wait(event):
            event.wait(30)
    """,
}


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An importable package `stallpkg` of `PACKAGE`'s modules."""
    folder = tmp_path / "stallpkg"
    folder.mkdir()
    for name, source in PACKAGE.items():
        (folder / name).write_text(textwrap.dedent(source), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield "stallpkg"
    for name in [m for m in sys.modules if m == "stallpkg" or m.startswith("stallpkg.")]:
        del sys.modules[name]


def _record(name: str, entry_point: str | None = None, obj: Any = None) -> PluginRecord:
    info = PluginInfo(
        name=name,
        source="nanobot.plugins",
        distribution=f"nb-{name}",
        version="1.2",
        entry_point=entry_point,
    )
    return PluginRecord(info, "loaded", obj=obj)


class _Running:
    """`function(event)` on a thread of its own, until `release`."""

    def __init__(self, function: Callable[[threading.Event], None]) -> None:
        self.event = threading.Event()
        self.thread = threading.Thread(target=function, args=(self.event,), daemon=True)
        self.thread.start()

    def frame(self) -> Any:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            frame = sys._current_frames().get(self.thread.ident or -1)
            if frame is not None and frame.f_code.co_name == "wait":
                return frame
            time.sleep(0.01)
        raise AssertionError("the thread never started waiting")

    def release(self) -> None:
        self.event.set()
        self.thread.join(timeout=10)


def test_the_call_is_named_by_its_plugin_and_the_innermost_frame_of_its_code(package: str) -> None:
    """A wait inside a library, under two frames of one plugin: that plugin, where its code is."""
    hooks = importlib.import_module(f"{package}.hooks")
    running = _Running(hooks.slow_stage)
    try:
        packages = plugin_packages([_record("slow", obj=hooks)])
        found = stalled_call(running.frame(), packages)
    finally:
        running.release()
    assert found is not None
    assert found.plugin == "plugin 'slow' from nb-slow 1.2"
    assert found.where == "stallpkg.work.wait_for, line 3"
    assert found.entry.f_code.co_name == "slow_stage"


def test_of_two_plugins_in_one_package_the_one_of_the_nearest_module_is_named(
    package: str,
) -> None:
    """Plugins at ``stallpkg`` and ``stallpkg.other``: code of ``other`` is the second's."""
    other = importlib.import_module(f"{package}.other")
    running = _Running(other.wait)
    try:
        records = [
            _record("first", entry_point="stallpkg"),
            _record("second", entry_point="stallpkg.other:Plugin"),
        ]
        found = stalled_call(running.frame(), plugin_packages(records))
    finally:
        running.release()
    assert found is not None and found.plugin == "plugin 'second' from nb-second 1.2"


def test_code_of_no_plugin_is_never_named(package: str) -> None:
    """A wait in a module no plugin has, or in a built-in plugin's (the core's), finds nothing."""
    hooks = importlib.import_module(f"{package}.hooks")
    running = _Running(hooks.slow_stage)
    try:
        frame = running.frame()
        assert stalled_call(frame, plugin_packages([_record("x", entry_point="elsewhere")])) is None
        builtin = PluginRecord(builtin_info("builtin:tools"), "loaded", obj=hooks)
        assert stalled_call(frame, plugin_packages([builtin])) is None
    finally:
        running.release()


def _watch_events(
    function: Callable[[threading.Event], None],
    hold: float,
    after: float,
    until: Callable[[list[Any]], bool] = lambda logs: True,
) -> Any:
    """The log records of a watch of a thread that runs `function` until `until` holds of the
    records so far (30 s at most), then `hold` seconds more."""
    with capture_logs() as logs:
        running = _Running(function)
        records = [_record("slow", entry_point="stallpkg.hooks:Plugin")]
        with StallWatch(after, lambda: records, thread=running.thread, interval=0.02):
            _wait_until(lambda: until(logs))
            time.sleep(hold)
            running.release()
            time.sleep(0.2)
    return [log for log in logs if log["event"].startswith("plugin code")]


def _wait_until(condition: Callable[[], bool]) -> None:
    """Wait until `condition` holds, up to 30 s (a loaded machine may delay the watch)."""
    deadline = time.monotonic() + 30
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_call_held_past_the_limit_is_warned_of_once_then_its_end(package: str) -> None:
    """Held past a 0.2 s limit: one warning naming it, then one saying it finished."""
    hooks = importlib.import_module(f"{package}.hooks")

    def warned(logs: list[Any]) -> bool:
        return any(log["event"] == "plugin code has not returned" for log in logs)

    # Held until the watch warns, then 0.3 s more: finished at 0.5 s or later, however late.
    events = _watch_events(hooks.slow_stage, hold=0.3, after=0.2, until=warned)
    assert [e["event"] for e in events] == ["plugin code has not returned", "plugin code finished"]
    warned, finished = events
    assert warned["plugin"] == "plugin 'slow' from nb-slow 1.2"
    assert warned["at"] == "stallpkg.work.wait_for, line 3"
    assert warned["log_level"] == "warning" and warned["seconds"] >= 0.2
    assert finished["plugin"] == warned["plugin"] and finished["seconds"] >= 0.5


def test_a_call_shorter_than_the_limit_is_not_mentioned(package: str) -> None:
    """Held 0.2 s against a 2 s limit: nothing is logged."""
    hooks = importlib.import_module(f"{package}.hooks")
    assert _watch_events(hooks.slow_stage, hold=0.2, after=2.0) == []


def test_a_limit_of_zero_starts_no_thread() -> None:
    """``stall_warning = 0`` is off: no watching thread is started."""
    before = threading.active_count()
    with StallWatch(0, list):
        assert threading.active_count() == before


def test_a_start_cut_short_by_an_interrupt_is_stopped_without_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Ctrl-C (or SIGTERM) that lands as the watch's thread is being started leaves a watch
    that stops quietly, as the command's end stops it, not with join's RuntimeError."""
    watch = StallWatch(30, list)

    def interrupted(self: threading.Thread) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        watch.start()
    monkeypatch.undo()
    watch.stop()
    assert _watching_threads() == []


def _watching_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "nanobot-stall-watch"]


def test_a_command_run_in_process_leaves_no_watching_thread_behind(
    nanobot_workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI starts the watch with its plugin manager and stops it when the command ends."""
    from click.testing import CliRunner

    from nanobot_core import cli as cli_module
    from nanobot_core._stall import StallWatch as Watch

    started: list[Watch] = []
    real_start = Watch.start

    def start(self: Watch) -> Watch:
        started.append(self)
        return real_start(self)

    monkeypatch.setattr(Watch, "start", start)
    result = CliRunner().invoke(cli_module.cli, ["tools", "--json"])
    assert result.exit_code == 0, result.output
    assert len(started) == 1 and started[0].after == 30.0
    assert _watching_threads() == []


def test_a_call_held_past_the_limit_is_handed_to_at_limit_once(package: str) -> None:
    """Held past a 0.2 s limit and no warning: `at_limit` hears of it once, named."""
    hooks = importlib.import_module(f"{package}.hooks")
    heard: list[tuple[str, str, float]] = []
    running = _Running(hooks.slow_stage)
    records = [_record("slow", entry_point="stallpkg.hooks:Plugin")]
    with capture_logs() as logs:
        watch = StallWatch(
            0,
            lambda: records,
            limit=0.2,
            at_limit=lambda call, seconds: heard.append((call.plugin, call.where, seconds)),
            thread=running.thread,
            interval=0.02,
        )
        with watch:
            _wait_until(lambda: bool(heard))
            time.sleep(0.3)  # long enough for a second `at_limit`, were one made
            running.release()
            time.sleep(0.1)
    assert [(plugin, where) for plugin, where, _ in heard] == [
        ("plugin 'slow' from nb-slow 1.2", "stallpkg.work.wait_for, line 3")
    ]
    assert heard[0][2] >= 0.2
    assert [log for log in logs if log["event"].startswith("plugin code")] == []


def test_a_call_shorter_than_the_limit_is_not_handed_on(package: str) -> None:
    """Held 0.2 s against a 2 s limit: `at_limit` is never called."""
    hooks = importlib.import_module(f"{package}.hooks")
    heard: list[object] = []
    running = _Running(hooks.slow_stage)
    records = [_record("slow", entry_point="stallpkg.hooks:Plugin")]
    with StallWatch(
        0, lambda: records, limit=2.0, at_limit=heard.append, thread=running.thread, interval=0.02
    ):
        time.sleep(0.2)
        running.release()
    assert heard == []


# A tool that leaves two threads that are not daemons, each running for `seconds`.
_LEAVES_THREADS = """
import threading
import time
from typing import Any

from nanobot_core import Tool, hookimpl


def refresh(seconds: float) -> None:
    time.sleep(seconds)


class Leaves(Tool):
    name = "leaves"
    description = "Starts threads that are not daemons and returns."
    parameters: dict[str, Any] = {
        "type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]
    }

    async def execute(self, seconds: float) -> str:
        threading.Thread(target=refresh, args=(seconds,), name="cache-refresh").start()
        threading.Thread(target=time.sleep, args=(seconds,), name="bare-sleep").start()
        return "left"


@hookimpl
def nanobot_tools(ctx: Any) -> list[Any]:
    return [Leaves()]
"""

_WAITS = "command done; the process waits for a thread that is not a daemon"


def _call_leaves(tmp_path: Path, seconds: float) -> Any:
    from tests.helpers import install_plugin, plugin_env, run_cli

    site = install_plugin(tmp_path / "site", "leaves", _LEAVES_THREADS, version="3.1")
    work = tmp_path / "work"
    work.mkdir()
    env = plugin_env(site, "leaves", NANOBOT_PLUGINS__STALL_WARNING="0.5")
    sent = f'{{"seconds": {seconds}}}'
    return run_cli("call", "leaves", sent, cwd=work, env=env, timeout=60)


def test_threads_a_tool_left_that_hold_the_process_at_exit_are_named(tmp_path: Path) -> None:
    """Once the command is done, a thread the process waits for is named with its plugin and
    where its code is after plugins.stall_warning seconds; the wait was silent."""
    done = _call_leaves(tmp_path, 3)
    assert (done.returncode, done.stdout) == (0, "left\n"), done.stderr
    (own,) = [line for line in done.stderr.splitlines() if "cache-refresh" in line]
    assert _WAITS in own
    assert "plugin=\"plugin 'leaves' from leaves 3.1\"" in own
    assert "at='leaves.refresh, line 10'" in own  # its time.sleep
    (bare,) = [line for line in done.stderr.splitlines() if "bare-sleep" in line]
    assert _WAITS in bare and "at=time.sleep" in bare


def test_threads_that_end_before_the_warning_are_not_mentioned(tmp_path: Path) -> None:
    """A thread that ends soon after the command (a store's last save) is waited for unsaid."""
    done = _call_leaves(tmp_path, 0.05)
    assert (done.returncode, done.stdout) == (0, "left\n"), done.stderr
    assert _WAITS not in done.stderr
