"""The runner embedded in a host application: its event loop, its threads, its streams."""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nanobot_core.config import Config
from nanobot_core.errors import SessionLockedError
from nanobot_core.governance import Governor, builtin_stages
from nanobot_core.jsonl_store import JsonlSessionStore
from nanobot_core.prompt import PromptBuilder, Section
from nanobot_core.providers.base import ProviderReply
from nanobot_core.runner import Runner, TurnResult
from nanobot_core.sessions import Session
from nanobot_core.tools.executor import Executor
from nanobot_core.tools.registry import ToolRegistry
from tests.helpers import run_python


class Answering:
    """Answers every request with one text, after a short wait that lets other tasks run."""

    name = "answering"

    async def complete(self, messages: Any, tools: Any) -> ProviderReply:
        await asyncio.sleep(0.01)
        return ProviderReply({"role": "assistant", "content": "done"}, finish_reason="stop")


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    with JsonlSessionStore(tmp_path).open("embedded") as opened:
        yield opened


def _runner(session: Session, tmp_path: Path) -> Runner:
    config = Config()
    registry = ToolRegistry()
    return Runner(
        Answering(),
        registry,
        Executor(registry, default_timeout=5.0),
        Governor(builtin_stages(), config=config.governance, workspace=tmp_path),
        PromptBuilder([(Section("only", 1, lambda ctx: "Be brief."), "test")], config=config),
        session,
    )


def test_run_turn_inside_a_running_event_loop_says_to_await_the_async_form(
    session: Session, tmp_path: Path
) -> None:
    """run_turn in a thread whose loop runs (a notebook) fails clearly, leaving nothing behind."""
    runner = _runner(session, tmp_path)

    async def host() -> str:
        with pytest.raises(RuntimeError, match="run_turn_async"):
            runner.run_turn("hello")
        return (await runner.run_turn_async("hello")).answer

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a coroutine never awaited is a RuntimeWarning
        assert asyncio.run(host()) == "done"
        gc.collect()
    assert [m["role"] for m in session.history()] == ["user", "assistant"]


def test_a_second_turn_while_one_runs_on_the_same_runner_is_refused(
    session: Session, tmp_path: Path
) -> None:
    """Two turns at once on one runner would interleave in the session: the second is refused."""
    runner = _runner(session, tmp_path)

    async def host() -> list[Any]:
        return await asyncio.gather(
            runner.run_turn_async("first"), runner.run_turn_async("second"), return_exceptions=True
        )

    first, second = asyncio.run(host())
    assert isinstance(first, TurnResult) and first.answer == "done"
    assert isinstance(second, SessionLockedError)
    assert "another turn of this Runner" in str(second)
    assert [m["role"] for m in session.history()] == ["user", "assistant"]
    assert runner.run_turn("third").answer == "done"  # the runner is free again


def test_a_turn_from_another_thread_while_one_runs_is_refused(
    session: Session, tmp_path: Path
) -> None:
    """A host's worker thread cannot start a turn on a runner whose turn runs elsewhere."""
    runner = _runner(session, tmp_path)
    started = threading.Event()
    release = threading.Event()
    outcome: list[Any] = []

    class Waiting(Answering):
        async def complete(self, messages: Any, tools: Any) -> ProviderReply:
            started.set()
            while not release.is_set():
                await asyncio.sleep(0.01)
            return await super().complete(messages, tools)

    runner.provider = Waiting()
    worker = threading.Thread(target=lambda: outcome.append(runner.run_turn("in a thread")))
    worker.start()
    assert started.wait(10)
    try:
        with pytest.raises(SessionLockedError):
            runner.run_turn("meanwhile")
    finally:
        release.set()
        worker.join(10)
    assert [result.answer for result in outcome] == ["done"]
    assert [m["role"] for m in session.history()] == ["user", "assistant"]


WITHOUT_STREAMS = """
import sys
from nanobot_core._containment import plugin_code
from nanobot_core._logging import get_logger

report = sys.__stderr__
sys.stdout = None  # pythonw, a service: no console
with plugin_code("plugin 'chatty' from chatty 1.0"):
    print("a plugin's print")
print("the host's print")
sys.stderr = None
get_logger("host").warning("a record with nowhere to go")
report.write("ok")
"""


def test_no_stdout_or_stderr_as_under_pythonw_breaks_nothing() -> None:
    """With sys.stdout and sys.stderr None, prints and records go nowhere instead of raising."""
    done = run_python(WITHOUT_STREAMS)
    assert (done.returncode, done.stderr) == (0, "ok")


IN_A_THREAD_AFTER_THE_CLI = """
import threading
from nanobot_core._containment import interrupt_on_sigint
from nanobot_core.tools.executor import run_calls

interrupt_on_sigint()  # as the CLI's main() does, run in-process by a host before

async def turn():
    return "done"

outcome = []
worker = threading.Thread(target=lambda: outcome.append(run_calls(turn())))
worker.start()
worker.join(30)
print(outcome)
"""


def test_a_turn_in_a_thread_runs_after_the_cli_ran_in_the_same_process() -> None:
    """With the CLI's Ctrl-C handler in place, a worker thread's turn runs (no signal is set)."""
    done = run_python(IN_A_THREAD_AFTER_THE_CLI)
    assert done.stdout.strip() == "['done']", done.stderr


def test_content_parts_as_the_user_text_are_refused_storing_nothing(
    session: Session, tmp_path: Path
) -> None:
    """A list of content parts is a TypeError at the turn, not its repr stored as the message."""
    runner = _runner(session, tmp_path)
    with pytest.raises(TypeError, match=r"Runner\.run_turn: user_text must be a str, got list"):
        runner.run_turn([{"type": "text", "text": "hello"}])  # type: ignore[arg-type]
    assert session.history() == []
    assert runner.run_turn("hello").answer == "done"


def test_a_chat_id_that_is_no_text_is_refused_when_the_runner_is_built(
    session: Session, tmp_path: Path
) -> None:
    """A number as chat id (a Telegram id, say) is refused at once, not in the first turn."""
    built = _runner(session, tmp_path)
    parts = (built.provider, built.registry, built.executor, built.governor, built.prompt_builder)
    with pytest.raises(TypeError, match="Runner: chat_id must be a str or None, got int"):
        Runner(*parts, session, chat_id=42)  # type: ignore[arg-type]
